"""Quick checks of the flashc package as a whole: it imports, its version is
the C library's, its ctypes structs match the C header, each of the six
API functions computes forward and backward on the CPU as a plain PyTorch
reference does, softmax_lse is differentiable, merge_attn_states merges
exactly, errors map to the documented exceptions, the four operators pass
torch.library.opcheck and torch.compile(fullgraph=True) matches eager."""

import ctypes
import importlib.metadata
import math
import pathlib
import re
import shutil
import subprocess

import pytest
import torch

import flashc
from flashc import _cabi, _library
from flashc.flash_attn_interface import (
    _flash_attn_backward,
    _flash_attn_forward,
    _flash_attn_varlen_backward,
    _flash_attn_varlen_forward,
    _wrapped_flash_attn_backward,
    _wrapped_flash_attn_forward,
    _wrapped_flash_attn_varlen_backward,
    _wrapped_flash_attn_varlen_forward,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


# ---- a plain PyTorch reference (float64) ---------------------------------------


def reference_attention(q, k, v, causal=False, scale=None):
    """out (b, sq, h, dv) and lse (b, h, sq) of q (b, sq, h, d) over k, v
    (b, sk, hk, d), causal aligned to the bottom-right corner."""
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    k = k.repeat_interleave(h // hk, dim=2)
    v = v.repeat_interleave(h // hk, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if causal:
        row = torch.arange(sq).unsqueeze(1)
        col = torch.arange(sk).unsqueeze(0)
        s = s.masked_fill(col > row + sk - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1))
    return torch.einsum("bhqk,bkhd->bqhd", p, v), lse


def reference_varlen(q, k, v, cu_q, cu_k, causal=False):
    outs, lses = [], []
    for i in range(len(cu_q) - 1):
        qs = q[cu_q[i]:cu_q[i + 1]].unsqueeze(0)
        ks, vs = k[cu_k[i]:cu_k[i + 1]].unsqueeze(0), v[cu_k[i]:cu_k[i + 1]].unsqueeze(0)
        o, l = reference_attention(qs, ks, vs, causal)
        outs.append(o[0])
        lses.append(l[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


def leaves(*tensors):
    return [t.detach().clone().requires_grad_(True) for t in tensors]


def grads(outputs_and_weights, inputs):
    loss = sum((o * w).sum() for o, w in outputs_and_weights)
    return torch.autograd.grad(loss, inputs)


def rand(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype)


def assert_close(a, b, what, tol=1e-9):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    if a.numel() == 0:
        return
    err = (a.double() - b.double()).abs().max().item()
    assert err <= tol, f"{what}: max error {err:.3g} > {tol:.3g}"


# ---- import, version, ABI --------------------------------------------------------


def test_version_matches_the_c_library_and_cmake_project():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    project_version = re.search(r"project\(flashc\s+VERSION\s+([0-9.]+)", cmake).group(1)
    assert flashc.__version__ == _library.lib.flashc_version().decode() == project_version
    try:
        installed = importlib.metadata.version("flashc")
    except importlib.metadata.PackageNotFoundError:
        installed = None  # run from the source tree (FLASHC_LIBRARY)
    if installed is not None and pathlib.Path(flashc.__file__).is_relative_to(
            pathlib.Path(importlib.metadata.distribution("flashc").locate_file(""))):
        assert installed == flashc.__version__


def test_the_library_is_found_where_documented():
    path = pathlib.Path(flashc.library_path)
    assert path.is_file()
    import os
    if not os.environ.get("FLASHC_LIBRARY"):
        # the wheel's copy, next to the package's modules
        assert path.parent == pathlib.Path(flashc.__file__).parent


_C_STRUCTS = {
    "flashc_device": _cabi.Device,
    "flashc_tensor": _cabi.Tensor,
    "flashc_attention_options": _cabi.AttentionOptions,
    "flashc_varlen": _cabi.Varlen,
    "flashc_forward_args": _cabi.ForwardArgs,
    "flashc_backward_args": _cabi.BackwardArgs,
    "flashc_kvcache_args": _cabi.KvcacheArgs,
}


def test_ctypes_layout_matches_the_c_header(tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to read the header's layout")
    lines = []
    for c_name, cls in _C_STRUCTS.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{c_name}.{field} %zu\\n", offsetof({c_name}, {field}));')
    for code, name in _cabi.STATUS_NAMES.items():
        lines.append(f'printf("{name} %d\\n", (int){name});')
    source = tmp_path / "layout.c"
    source.write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"flashc.h\"\n"
                      "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    subprocess.run([compiler, f"-I{ROOT / 'include'}", str(source), "-o",
                    str(tmp_path / "layout")], check=True)
    c_values = dict(line.rsplit(" ", 1) for line in
                    subprocess.run([str(tmp_path / "layout")], check=True, capture_output=True,
                                   text=True).stdout.splitlines())
    for c_name, cls in _C_STRUCTS.items():
        assert int(c_values[c_name]) == ctypes.sizeof(cls), c_name
        for field, _ in cls._fields_:
            assert int(c_values[f"{c_name}.{field}"]) == getattr(cls, field).offset, \
                f"{c_name}.{field}"
    for code, name in _cabi.STATUS_NAMES.items():
        assert int(c_values[name]) == code, name


# ---- the six API functions against the reference ---------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_func(causal):
    q, k, v = leaves(rand(2, 7, 4, 20), rand(2, 11, 2, 20), rand(2, 11, 2, 20))
    dout = rand(2, 7, 4, 20)
    out = flashc.flash_attn_func(q, k, v, causal=causal)
    ref, _ = reference_attention(q, k, v, causal)
    assert_close(out, ref, "out")
    for g, r, name in zip(grads([(out, dout)], (q, k, v)), grads([(ref, dout)], (q, k, v)),
                          "qkv"):
        assert_close(g, r, f"d{name}")


def test_flash_attn_qkvpacked_func():
    (qkv,) = leaves(rand(2, 9, 3, 2, 13))
    dout = rand(2, 9, 2, 13)
    out = flashc.flash_attn_qkvpacked_func(qkv, causal=True)
    ref, _ = reference_attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], causal=True)
    assert_close(out, ref, "out")
    assert_close(grads([(out, dout)], [qkv])[0], grads([(ref, dout)], [qkv])[0], "dqkv")


def test_flash_attn_kvpacked_func():
    q, kv = leaves(rand(1, 5, 4, 16), rand(1, 12, 2, 1, 16))
    dout = rand(1, 5, 4, 16)
    out = flashc.flash_attn_kvpacked_func(q, kv)
    ref, _ = reference_attention(q, kv[:, :, 0], kv[:, :, 1])
    assert_close(out, ref, "out")
    for g, r, name in zip(grads([(out, dout)], (q, kv)), grads([(ref, dout)], (q, kv)),
                          ("q", "kv")):
        assert_close(g, r, f"d{name}")


CU_Q = [0, 3, 3, 10]
CU_K = [0, 5, 6, 14]


def _cu(values):
    return torch.tensor(values, dtype=torch.int32)


def test_flash_attn_varlen_func():
    q, k, v = leaves(rand(10, 4, 24), rand(14, 2, 24), rand(14, 2, 24))
    dout = rand(10, 4, 24)
    out = flashc.flash_attn_varlen_func(q, k, v, _cu(CU_Q), _cu(CU_K), 7, 8, causal=True)
    ref, _ = reference_varlen(q, k, v, CU_Q, CU_K, causal=True)
    assert_close(out, ref, "out")
    for g, r, name in zip(grads([(out, dout)], (q, k, v)), grads([(ref, dout)], (q, k, v)),
                          "qkv"):
        assert_close(g, r, f"d{name}")


def test_flash_attn_varlen_qkvpacked_func():
    (qkv,) = leaves(rand(10, 3, 2, 8))
    dout = rand(10, 2, 8)
    out = flashc.flash_attn_varlen_qkvpacked_func(qkv, _cu(CU_Q), 7)
    ref, _ = reference_varlen(qkv[:, 0], qkv[:, 1], qkv[:, 2], CU_Q, CU_Q)
    assert_close(out, ref, "out")
    assert_close(grads([(out, dout)], [qkv])[0], grads([(ref, dout)], [qkv])[0], "dqkv")


def test_flash_attn_varlen_kvpacked_func():
    q, kv = leaves(rand(10, 2, 8), rand(14, 2, 2, 8))
    dout = rand(10, 2, 8)
    out = flashc.flash_attn_varlen_kvpacked_func(q, kv, _cu(CU_Q), _cu(CU_K), 7, 8)
    ref, _ = reference_varlen(q, kv[:, 0], kv[:, 1], CU_Q, CU_K)
    assert_close(out, ref, "out")
    for g, r, name in zip(grads([(out, dout)], (q, kv)), grads([(ref, dout)], (q, kv)),
                          ("q", "kv")):
        assert_close(g, r, f"d{name}")


def test_bfloat16_within_low_precision_tolerance():
    q, k, v = rand(2, 33, 2, 64), rand(2, 40, 2, 64), rand(2, 40, 2, 64)
    ref, _ = reference_attention(q, k, v, causal=True)
    low = [t.to(torch.bfloat16) for t in (q, k, v)]
    torch_low, _ = reference_attention(*[t.float() for t in low], causal=True)
    out = flashc.flash_attn_func(*low, causal=True)
    assert out.dtype == torch.bfloat16
    # flashc's error at most twice a plain computation's in low precision, plus epsilon
    torch_err = (torch_low.to(torch.bfloat16).double() - ref).abs().max().item()
    assert (out.double() - ref).abs().max().item() <= 2 * torch_err + 1e-3


# ---- softmax_lse: returned, differentiable ---------------------------------------


def test_return_lse_is_differentiable():
    q, k, v = leaves(rand(2, 6, 2, 16), rand(2, 9, 2, 16), rand(2, 9, 2, 16))
    dout, dlse = rand(2, 6, 2, 16), rand(2, 2, 6)
    out, lse = flashc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    ref_out, ref_lse = reference_attention(q, k, v, causal=True)
    assert lse.dtype == torch.float64 and lse.shape == (2, 2, 6)
    assert_close(lse, ref_lse, "lse")
    got = grads([(out, dout), (lse, dlse)], (q, k, v))
    want = grads([(ref_out, dout), (ref_lse, dlse)], (q, k, v))
    for g, r, name in zip(got, want, "qkv"):
        assert_close(g, r, f"d{name}")
    # the LSE alone (no gradient reaches out)
    _, lse = flashc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    _, ref_lse = reference_attention(q, k, v, causal=True)
    got = grads([(lse, dlse)], (q, k, v))
    want = grads([(ref_lse, dlse)], (q, k))  # the LSE does not depend on v
    for g, r, name in zip(got, want, "qk"):
        assert_close(g, r, f"d{name} (lse only)")
    assert torch.count_nonzero(got[2]) == 0


def test_return_attn_probs_shapes():
    q = rand(1, 5, 2, 8)
    out, lse, s_dmask = flashc.flash_attn_func(q, q, q, return_attn_probs=True)
    assert s_dmask.shape == (0,)
    out, lse, s_dmask = flashc.flash_attn_func(q, q, q, dropout_p=0.2, return_attn_probs=True)
    assert s_dmask.shape == (1, 2, 128, 128) and s_dmask.dtype == q.dtype
    assert lse.shape == (1, 2, 5)


# ---- merge_attn_states -------------------------------------------------------------


def test_merge_attn_states_is_exact_with_gradients():
    q, k, v = leaves(rand(2, 8, 2, 16), rand(2, 12, 2, 16), rand(2, 12, 2, 16))
    dout, dlse = rand(2, 8, 2, 16), rand(2, 2, 8)
    o1, l1 = flashc.flash_attn_func(q, k[:, :5], v[:, :5], return_lse=True)
    o2, l2 = flashc.flash_attn_func(q, k[:, 5:], v[:, 5:], return_lse=True)
    out, lse = flashc.merge_attn_states([o1, o2], [l1, l2])
    ref_out, ref_lse = reference_attention(q, k, v)
    assert_close(out, ref_out, "merged out")
    assert_close(lse, ref_lse, "merged lse")
    got = grads([(out, dout), (lse, dlse)], (q, k, v))
    want = grads([(ref_out, dout), (ref_lse, dlse)], (q, k, v))
    for g, r, name in zip(got, want, "qkv"):
        assert_close(g, r, f"d{name} through the merge")


def test_merge_attn_states_masked_parts_and_rows():
    # varlen layout: outs (total, h, d), lses (h, total)
    o1, o2 = leaves(rand(4, 2, 8), rand(4, 2, 8))
    l1, l2 = leaves(rand(2, 4), rand(2, 4))
    inf = float("inf")
    with torch.no_grad():
        l1[0, 1] = inf      # part 1 saw nothing on this row: part 2 alone
        o1[1, 0] = 0.0
        l1[1, 2] = inf      # neither part saw anything on this row
        l2[1, 2] = inf
        o1[2, 1] = 0.0
        o2[2, 1] = 0.0
    out, lse = flashc.merge_attn_states([o1, o2], [l1, l2])
    assert torch.equal(out[1, 0], o2[1, 0]) and lse[0, 1] == l2[0, 1]
    assert torch.equal(out[2, 1], torch.zeros(8, dtype=out.dtype)) and lse[1, 2] == inf
    loss = (out * rand(4, 2, 8)).sum() + (torch.where(torch.isinf(lse), 0, lse) * rand(2, 4)).sum()
    for g in torch.autograd.grad(loss, (o1, o2, l1, l2)):
        assert torch.isfinite(g).all()


# ---- errors ------------------------------------------------------------------------


def test_library_status_becomes_a_named_exception():
    q = rand(2, 5, 4, 16)
    with pytest.raises(flashc.FlashcValueError) as info:
        flashc.flash_attn_func(q, q, q, window_size=(-3, -1))
    err = info.value
    assert isinstance(err, flashc.FlashcError) and isinstance(err, ValueError)
    assert isinstance(err, RuntimeError)
    assert err.status_name == "FLASHC_ERROR_WINDOW" and err.status == _cabi.ERROR_WINDOW
    assert "window_left" in err.message and str(err).startswith("FLASHC_ERROR_WINDOW: ")
    with pytest.raises(flashc.FlashcTypeError, match=r"\bk\b"):
        flashc.flash_attn_func(q, q.float(), q)
    with pytest.raises(flashc.FlashcValueError, match="block_table"):  # one block of 4 keys
        flashc.flash_attn_varlen_func(q[0], q.unsqueeze(2)[0], q.unsqueeze(2)[0], _cu([0, 5]),
                                      _cu([0, 5]), 5, 5, block_table=_cu([[0]]))
    with pytest.raises(NotImplementedError, match="leftpad_k"):
        _flash_attn_varlen_forward(q[0], q[0], q[0], _cu([0, 5]), _cu([0, 5]), 5, 5, 0.0, 0.25,
                                   False, leftpad_k=_cu([0]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_cuda_without_cuda_backend_is_a_clear_error_else_backward_runs():
    q = torch.randn(1, 8, 2, 16, device="cuda", dtype=torch.float16, requires_grad=True)
    if not flashc.cuda_available():
        with pytest.raises(flashc.FlashcUnsupportedError, match=r"\bq\b.*CUDA"):
            flashc.flash_attn_func(q, q, q)
        return
    out = flashc.flash_attn_func(q, q, q)
    out.sum().backward()
    assert torch.isfinite(q.grad).all()


def _cuda_forward_available():
    return torch.cuda.is_available() and flashc.cuda_available()


@pytest.mark.skipif(not _cuda_forward_available(), reason="no CUDA device or no CUDA backend")
def test_cuda_forward_matches_cpu_with_head_dim_padding():
    # d = 20 and 13 are not multiples of 8: padded for the CUDA backend and
    # sliced back; the default scale is that of the original d.
    cpu = [rand(2, 37, 4, 20, dtype=torch.float32), rand(2, 45, 2, 20, dtype=torch.float32),
           rand(2, 45, 2, 20, dtype=torch.float32)]
    gpu = [t.to("cuda", torch.float16) for t in cpu]
    out, lse = flashc.flash_attn_func(*gpu, causal=True, return_lse=True)
    want_out, want_lse = flashc.flash_attn_func(*[t.cpu().float() for t in gpu], causal=True,
                                                return_lse=True)
    assert out.shape == (2, 37, 4, 20) and out.device.type == "cuda"
    assert_close(out.float().cpu(), want_out, "out (cuda vs cpu)", tol=2e-3)
    assert_close(lse.cpu(), want_lse, "lse (cuda vs cpu)", tol=1e-3)
    qkv = rand(10, 3, 2, 13, dtype=torch.float32).to("cuda", torch.bfloat16)
    out = flashc.flash_attn_varlen_qkvpacked_func(qkv, _cu(CU_Q).cuda(), 7, causal=True)
    want = flashc.flash_attn_varlen_qkvpacked_func(qkv.cpu().float(), _cu(CU_Q), 7, causal=True)
    assert_close(out.float().cpu(), want, "varlen out (cuda vs cpu)", tol=2e-2)


@pytest.mark.skipif(not _cuda_forward_available(), reason="no CUDA device or no CUDA backend")
def test_cuda_dropout_draws_from_the_cuda_generator():
    q = torch.randn(1, 64, 2, 32, device="cuda", dtype=torch.float16)
    torch.manual_seed(7)
    a = _flash_attn_forward(q, q, q, 0.3, 0.2, False, -1, -1, 0.0, None, False)
    b = _flash_attn_forward(q, q, q, 0.3, 0.2, False, -1, -1, 0.0, None, False)
    torch.manual_seed(7)
    c = _flash_attn_forward(q, q, q, 0.3, 0.2, False, -1, -1, 0.0, None, False)
    assert a[3].device.type == "cuda" and a[3].dtype == torch.int64 and a[3].shape == (2,)
    assert torch.equal(a[0], c[0]) and torch.equal(a[3], c[3])
    assert not torch.equal(a[0], b[0]) and not torch.equal(a[3], b[3])


@pytest.mark.skipif(not _cuda_forward_available(), reason="no CUDA device or no CUDA backend")
def test_cuda_forward_compiles_fullgraph():
    q = torch.randn(2, 33, 4, 64, device="cuda", dtype=torch.bfloat16)
    fn = lambda q: flashc.flash_attn_func(q, q, q, causal=True, return_lse=True)
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(q)
        want = fn(q)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# ---- torch.library: opcheck ----------------------------------------------------------


def _opcheck(op, args, kwargs=None, dropout=False):
    # With dropout every call draws a new mask, so eager and compiled runs
    # of the same arguments differ: the value-comparing utility is left out.
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    if not dropout:
        utils += ("test_aot_dispatch_dynamic",)
    torch.library.opcheck(op, args, kwargs, test_utils=utils)


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_opcheck_batched(dropout_p):
    q, k, v = rand(2, 5, 4, 8, dtype=torch.float32), rand(2, 7, 2, 8, dtype=torch.float32), \
        rand(2, 7, 2, 8, dtype=torch.float32)
    _opcheck(_wrapped_flash_attn_forward,
             (q, k, v, dropout_p, 0.3, True, -1, -1, 0.0, None, True), dropout=dropout_p > 0)
    out, lse, _, rng = _flash_attn_forward(q, k, v, dropout_p, 0.3, True, -1, -1, 0.0, None,
                                           False)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _opcheck(_wrapped_flash_attn_backward,
             (torch.randn_like(out), q, k, v, out, lse, dq, dk, dv, dropout_p, 0.3, True, -1, -1,
              0.0, None, False),
             dict(rng_state=rng, dlse=torch.randn_like(lse)))


@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_opcheck_varlen(dropout_p):
    q, k, v = rand(10, 4, 8, dtype=torch.float32), rand(14, 2, 8, dtype=torch.float32), \
        rand(14, 2, 8, dtype=torch.float32)
    cu_q, cu_k = _cu(CU_Q), _cu(CU_K)
    _opcheck(_wrapped_flash_attn_varlen_forward,
             (q, k, v, cu_q, cu_k, 7, 8, dropout_p, 0.3, True), dict(return_softmax=True),
             dropout=dropout_p > 0)
    out, lse, _, rng = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, 7, 8, dropout_p, 0.3,
                                                  True)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _opcheck(_wrapped_flash_attn_varlen_backward,
             (torch.randn_like(out), q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, 7, 8, dropout_p,
              0.3, True, -1, -1, 0.0, None, False),
             dict(rng_state=rng, dlse=torch.randn_like(lse)))


def test_softmax_d_layouts():
    q, k, v = rand(10, 2, 8), rand(14, 2, 8), rand(14, 2, 8)
    cu_q, cu_k = _cu(CU_Q), _cu(CU_K)
    out, lse, _, _ = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, 7, 8, 0.0, 0.3, False)
    dout, dlse = torch.randn_like(out), torch.randn_like(lse)
    d = _flash_attn_varlen_backward(dout, q, k, v, out, lse, None, None, None, cu_q, cu_k, 7, 8,
                                    0.0, 0.3, False, -1, -1, 0.0, None, False, dlse=dlse)
    assert d.shape == (2, 10 + 128 * 3) and d.dtype == torch.float64
    want = (dout * out).sum(-1).t() - dlse
    for i in range(3):
        rows = slice(CU_Q[i], CU_Q[i + 1])
        assert_close(d[:, CU_Q[i] + 128 * i:CU_Q[i + 1] + 128 * i], want[:, rows],
                     f"softmax_d of sequence {i}")
    q, k, v = rand(2, 5, 2, 8), rand(2, 7, 2, 8), rand(2, 7, 2, 8)
    out, lse, _, _ = _flash_attn_forward(q, k, v, 0.0, 0.3, False, -1, -1, 0.0, None, False)
    dout = torch.randn_like(out)
    d = _flash_attn_backward(dout, q, k, v, out, lse, None, None, None, 0.0, 0.3, False, -1, -1,
                             0.0, None, False)
    assert d.shape == (2, 2, 128)
    assert_close(d[..., :5], (dout * out).sum(-1).transpose(1, 2), "softmax_d")
    assert torch.count_nonzero(d[..., 5:]) == 0


# ---- torch.compile(fullgraph=True) ----------------------------------------------------

_B, _S, _H, _D = 2, 9, 2, 16


def _compile_case(name):
    """(function of the leaves, leaves) for each API function."""
    f32 = dict(dtype=torch.float32)
    cu, cu_k = _cu(CU_Q), _cu(CU_K)
    if name == "func":
        return (lambda q, k, v: flashc.flash_attn_func(q, k, v, causal=True, return_lse=True),
                [rand(_B, _S, _H, _D, **f32), rand(_B, 11, 1, _D, **f32),
                 rand(_B, 11, 1, _D, **f32)])
    if name == "func_one_tensor":  # the same tensor as q, k and v
        return (lambda x: flashc.flash_attn_func(x, x, x, causal=True),
                [rand(_B, _S, _H, _D, **f32)])
    if name == "qkvpacked":
        return (lambda qkv: flashc.flash_attn_qkvpacked_func(qkv, window_size=(3, 1)),
                [rand(_B, _S, 3, _H, _D, **f32)])
    if name == "kvpacked":
        return (lambda q, kv: flashc.flash_attn_kvpacked_func(q, kv, softcap=2.0),
                [rand(_B, _S, _H, _D, **f32), rand(_B, 11, 2, _H, _D, **f32)])
    if name == "varlen":
        return (lambda q, k, v: flashc.flash_attn_varlen_func(q, k, v, cu, cu_k, 7, 8,
                                                              causal=True, return_lse=True),
                [rand(10, _H, _D, **f32), rand(14, _H, _D, **f32), rand(14, _H, _D, **f32)])
    if name == "varlen_qkvpacked":
        return (lambda qkv: flashc.flash_attn_varlen_qkvpacked_func(qkv, cu, 7),
                [rand(10, 3, _H, _D, **f32)])
    assert name == "varlen_kvpacked"
    return (lambda q, kv: flashc.flash_attn_varlen_kvpacked_func(q, kv, cu, cu_k, 7, 8),
            [rand(10, _H, _D, **f32), rand(14, 2, _H, _D, **f32)])


def _loss(result):
    if isinstance(result, tuple):
        out, lse = result
        return (out * out).sum() + (lse * torch.linspace(0.5, 1.5, lse.numel()).view_as(lse)).sum()
    return (result * result).sum()


@pytest.mark.parametrize("name", ["func", "func_one_tensor", "qkvpacked", "kvpacked", "varlen",
                                  "varlen_qkvpacked", "varlen_kvpacked"])
def test_compile_fullgraph_matches_eager(name):
    fn, inputs = _compile_case(name)
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    eager_leaves, compiled_leaves = leaves(*inputs), leaves(*inputs)
    eager_loss = _loss(fn(*eager_leaves))
    compiled_loss = _loss(compiled(*compiled_leaves))
    assert_close(compiled_loss, eager_loss, "loss", tol=1e-5)
    for e, c in zip(torch.autograd.grad(eager_loss, eager_leaves),
                    torch.autograd.grad(compiled_loss, compiled_leaves)):
        assert_close(c, e, "gradient", tol=1e-5)


def test_no_grad_saves_nothing_and_grad_mode_is_passed_in():
    q = rand(1, 4, 2, 8).requires_grad_(True)
    with torch.no_grad():
        out = flashc.flash_attn_func(q, q, q)
    assert out.grad_fn is None and not out.requires_grad
    out = flashc.flash_attn_func(q, q, q)
    assert out.grad_fn is not None
    assert not math.isnan(out.sum().item())


def test_compile_inductor_keeps_gradient_buffers_apart():
    # q, k, v of one shape in two layers: PyTorch 2.4's inductor merged
    # equal-shaped empty gradient buffers into one (wrong dK / dV).
    def two_layers(q1, k1, v1, q2, k2, v2):
        o1 = flashc.flash_attn_func(q1, k1, v1, causal=True)
        o2 = flashc.flash_attn_func(q2, k2, v2)
        return (o1 * torch.linspace(-1, 1, _D)).sum() + (o2 * o2).sum()

    inputs = [rand(_B, _S, _H, _D, dtype=torch.float32) for _ in range(6)]
    torch._dynamo.reset()
    compiled = torch.compile(two_layers, fullgraph=True, backend="inductor")
    eager_leaves, compiled_leaves = leaves(*inputs), leaves(*inputs)
    eager = torch.autograd.grad(two_layers(*eager_leaves), eager_leaves)
    got = torch.autograd.grad(compiled(*compiled_leaves), compiled_leaves)
    for name, e, c in zip(["dq1", "dk1", "dv1", "dq2", "dk2", "dv2"], eager, got):
        assert_close(c, e, name, tol=1e-5)
