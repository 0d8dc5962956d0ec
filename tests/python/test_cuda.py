"""The CUDA backend against the reference and the CPU backend: for the same
float16/bfloat16 inputs both backends meet the tolerance rule (the CUDA
kernels round P to the input dtype for the tensor-core product, so they do
not agree to the last bit with the CPU backend, which keeps float32), and
the same rng_state draws the same dropout mask, bit for bit. Skipped (with
the reason) where torch sees no GPU or flashc has no CUDA backend."""

import pytest
import torch

import flashc
from checks import (assert_close, assert_lse_close, cu_seqlens_from_lengths,
                    rounded_out_slack)
from conftest import skip_unless_device
from flashc import _kernels, _rng
from flashc.flash_attn_interface import (_flash_attn_backward, _flash_attn_forward,
                                         _flash_attn_varlen_forward)
from reference import attention_ref, attention_ref_varlen

pytestmark = pytest.mark.usefixtures("require_cuda")


@pytest.fixture
def require_cuda():
    skip_unless_device("cuda", torch.bfloat16)


def assert_both_backends_close(name, cuda_result, cpu_result, ref64, ref_lowp, dtype,
                               backward=False):
    """Each backend within the tolerance rule against the float64 reference."""
    assert_close(f"{name} (cuda)", cuda_result.cpu(), ref64, ref_lowp, dtype, backward)
    assert_close(f"{name} (cpu)", cpu_result, ref64, ref_lowp, dtype, backward)


CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window_size=(33, 7)),
    "softcap": dict(softcap=5.0),
    "alibi": dict(alibi=True, causal=True),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [32, 59, 128, 256])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("sq,sk", [(1, 300), (257, 129), (333, 517)])
def test_forward_matches_cpu_backend(dtype, d, case, sq, sk):
    kw = dict(CASES[case])
    b, h, hk = 2, 6, 2
    q = torch.randn(b, sq, h, d, dtype=dtype)
    k, v = (torch.randn(b, sk, hk, d, dtype=dtype) for _ in range(2))
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = torch.rand(b, h)
    cpu_out, cpu_lse = flashc.flash_attn_func(q, k, v, return_lse=True, **kw)
    cuda_kw = {n: (x.cuda() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    out, lse = flashc.flash_attn_func(q.cuda(), k.cuda(), v.cuda(), return_lse=True, **cuda_kw)
    assert out.is_cuda and lse.is_cuda
    ref_kw = dict(causal=kw.get("causal", False), window_size=kw.get("window_size", (-1, -1)),
                  softcap=kw.get("softcap", 0.0), alibi_slopes=kw.get("alibi_slopes"))
    ref64 = attention_ref(q, k, v, **ref_kw)
    lowp = attention_ref(q, k, v, **ref_kw, compute_dtype=dtype)
    assert_both_backends_close("out", out, cpu_out, ref64.out, lowp.out, dtype)
    assert_lse_close("lse (cuda)", lse.cpu(), ref64.lse)
    assert_lse_close("lse (cuda vs cpu)", lse.cpu(), cpu_lse.double())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_varlen_forward_matches_cpu_backend(dtype):
    lq, lk = [1, 0, 129, 77, 300], [64, 5, 0, 200, 299]
    cu_q, cu_k = cu_seqlens_from_lengths(lq), cu_seqlens_from_lengths(lk)
    q = torch.randn(sum(lq), 8, 64, dtype=dtype)
    k, v = (torch.randn(sum(lk), 2, 64, dtype=dtype) for _ in range(2))
    args = (max(lq), max(lk))
    cpu_out, cpu_lse = flashc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, *args, causal=True,
                                                     return_lse=True)
    out, lse = flashc.flash_attn_varlen_func(q.cuda(), k.cuda(), v.cuda(), cu_q.cuda(),
                                             cu_k.cuda(), *args, causal=True, return_lse=True)
    ref64 = attention_ref_varlen(q, k, v, cu_q, cu_k, causal=True)
    lowp = attention_ref_varlen(q, k, v, cu_q, cu_k, causal=True, compute_dtype=dtype)
    assert_both_backends_close("out", out, cpu_out, ref64.out, lowp.out, dtype)
    assert_lse_close("lse", lse.cpu(), ref64.lse)


def _cpu_forward_with_rng(q, k, v, rng_state, dropout_p, **kw):
    """The CPU backend's forward with a given (seed, offset): the package's
    kernel call, since the public forward draws its own."""
    seed, offset = _rng.replay(rng_state.cpu())
    b, sq, h, d = q.shape
    sk = k.shape[1]
    out = torch.empty_like(q)
    lse = torch.empty(b, h, sq, dtype=torch.float32)
    r = lambda x: (x + 127) // 128 * 128
    s_dmask = torch.empty(b, h, r(sq), r(sk), dtype=q.dtype)
    _kernels.forward(q, k, v, out, lse, s_dmask, softmax_scale=d ** -0.5,
                     causal=kw.get("causal", False), window_left=-1, window_right=-1,
                     softcap=0.0, alibi_slopes=None, dropout_p=dropout_p, seed=seed,
                     offset=offset)
    return out, lse, s_dmask


@pytest.mark.parametrize("sq,sk", [(128, 128), (77, 300), (300, 77)])
def test_dropout_mask_matches_cpu_backend_bit_for_bit(sq, sk):
    dtype, p = torch.bfloat16, 0.3
    q = torch.randn(2, sq, 4, 64, dtype=dtype)
    k, v = (torch.randn(2, sk, 4, 64, dtype=dtype) for _ in range(2))
    out, lse, sd, rng = _flash_attn_forward(q.cuda(), k.cuda(), v.cuda(), p, 64 ** -0.5, True,
                                            -1, -1, 0.0, None, True)
    cpu_out, cpu_lse, cpu_sd = _cpu_forward_with_rng(q, k, v, rng, p, causal=True)
    assert torch.equal(torch.signbit(sd.cpu()), torch.signbit(cpu_sd)), \
        "CUDA and CPU draw different dropout masks for the same rng_state"
    keep = ~torch.signbit(cpu_sd[:, :, :sq, :sk])
    ref64 = attention_ref(q, k, v, causal=True, dropout_p=p, keep_mask=keep)
    lowp = attention_ref(q, k, v, causal=True, dropout_p=p, keep_mask=keep, compute_dtype=dtype)
    assert_both_backends_close("out", out, cpu_out, ref64.out, lowp.out, dtype)
    assert (sd.cpu().double() - cpu_sd.double()).abs().max() <= 2.0 ** -7


def test_varlen_dropout_mask_matches_cpu_backend():
    lq, lk = [40, 0, 130], [90, 3, 129]
    cu_q, cu_k = cu_seqlens_from_lengths(lq), cu_seqlens_from_lengths(lk)
    q = torch.randn(sum(lq), 4, 32, dtype=torch.float16)
    k, v = (torch.randn(sum(lk), 4, 32, dtype=torch.float16) for _ in range(2))
    out, lse, sd, rng = _flash_attn_varlen_forward(q.cuda(), k.cuda(), v.cuda(), cu_q.cuda(),
                                                   cu_k.cuda(), 130, 129, 0.2, 0.2, False,
                                                   return_softmax=True)
    seed, offset = _rng.replay(rng.cpu())
    cpu_sd = torch.empty(sd.shape, dtype=sd.dtype)
    cpu_out, cpu_lse = torch.empty_like(q), torch.empty(4, sum(lq))
    _kernels.forward(q, k, v, cpu_out, cpu_lse, cpu_sd, softmax_scale=0.2, causal=False,
                     window_left=-1, window_right=-1, softcap=0.0, alibi_slopes=None,
                     dropout_p=0.2, seed=seed, offset=offset, cu_seqlens_q=cu_q,
                     cu_seqlens_k=cu_k, max_seqlen_q=130, max_seqlen_k=129)
    assert torch.equal(torch.signbit(sd.cpu()), torch.signbit(cpu_sd))
    keep = ~torch.signbit(cpu_sd)
    ref64 = attention_ref_varlen(q, k, v, cu_q, cu_k, softmax_scale=0.2, dropout_p=0.2,
                                 keep_mask=keep)
    lowp = attention_ref_varlen(q, k, v, cu_q, cu_k, softmax_scale=0.2, dropout_p=0.2,
                                keep_mask=keep, compute_dtype=torch.float16)
    assert_both_backends_close("out", out, cpu_out, ref64.out, lowp.out, torch.float16)


def test_cuda_generator_drives_dropout():
    q = torch.randn(1, 64, 2, 32, dtype=torch.bfloat16, device="cuda")
    torch.cuda.manual_seed(3)
    a = flashc.flash_attn_func(q, q, q, dropout_p=0.5, return_attn_probs=True)[2]
    b = flashc.flash_attn_func(q, q, q, dropout_p=0.5, return_attn_probs=True)[2]
    torch.cuda.manual_seed(3)
    c = flashc.flash_attn_func(q, q, q, dropout_p=0.5, return_attn_probs=True)[2]
    assert torch.equal(a, c) and not torch.equal(torch.signbit(a), torch.signbit(b))


def test_non_default_stream():
    q, k, v = (torch.randn(2, 200, 4, 64, dtype=torch.bfloat16, device="cuda") for _ in range(3))
    expected = flashc.flash_attn_func(q, k, v, causal=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = flashc.flash_attn_func(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", list(CASES) + ["dropout"])
def test_backward_matches_cpu_backend(dtype, case):
    kw = dict(CASES.get(case, {}))
    b, sq, sk, h, hk, d = 2, 133, 190, 4, 2, 64
    q = torch.randn(b, sq, h, d, dtype=dtype)
    k, v = (torch.randn(b, sk, hk, d, dtype=dtype) for _ in range(2))
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = torch.rand(h)
    p = 0.25 if case == "dropout" else 0.0
    # the CUDA forward's out, lse and rng_state go to both backends' backward
    cuda_kw = {n: (x.cuda() if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    out, lse, _, rng = _flash_attn_forward(q.cuda(), k.cuda(), v.cuda(), p, d ** -0.5,
                                           kw.get("causal", False),
                                           *kw.get("window_size", (-1, -1)),
                                           kw.get("softcap", 0.0),
                                           cuda_kw.get("alibi_slopes"), False)
    dout = torch.randn(out.shape, dtype=dtype)
    dlse = torch.randn(lse.shape)
    dq, dk, dv = (torch.empty(t.shape, dtype=dtype, device="cuda") for t in (q, k, v))
    _flash_attn_backward(
        dout.cuda(), q.cuda(), k.cuda(), v.cuda(), out, lse, dq, dk, dv, p, d ** -0.5,
        kw.get("causal", False), *kw.get("window_size", (-1, -1)), kw.get("softcap", 0.0),
        cuda_kw.get("alibi_slopes"), False, rng, dlse=dlse.cuda())
    # the CPU backend on the same inputs, outputs and rng_state
    cq, ck, cv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _flash_attn_backward(dout, q, k, v, out.cpu(), lse.cpu(), cq, ck, cv, p, d ** -0.5,
                         kw.get("causal", False), *kw.get("window_size", (-1, -1)),
                         kw.get("softcap", 0.0), kw.get("alibi_slopes"), False, rng.cpu(),
                         dlse=dlse)
    # the reference, with the dropout mask the CPU backend draws for rng_state
    keep = None
    if p > 0:
        sd = _cpu_forward_with_rng(q, k, v, rng, p, causal=kw.get("causal", False))[2]
        keep = ~torch.signbit(sd[:, :, :sq, :sk])
    ref_kw = dict(causal=kw.get("causal", False), window_size=kw.get("window_size", (-1, -1)),
                  softcap=kw.get("softcap", 0.0), alibi_slopes=kw.get("alibi_slopes"),
                  dropout_p=p, keep_mask=keep)
    leaves64 = [t.double().requires_grad_() for t in (q, k, v)]
    leaves_lo = [t.clone().requires_grad_() for t in (q, k, v)]
    r64 = attention_ref(*leaves64, **ref_kw)
    rlo = attention_ref(*leaves_lo, **ref_kw, compute_dtype=dtype)
    slack = rounded_out_slack(r64.lse, dict(zip(("dq", "dk", "dv"), leaves64)), dout, out,
                              r64.out)
    torch.autograd.backward([r64.out, r64.lse], [dout.double(), dlse.double()])
    torch.autograd.backward([rlo.out, rlo.lse], [dout, dlse.to(dtype)])
    for name, a, e, l64, llo in zip(("dq", "dk", "dv"), (dq, dk, dv), (cq, ck, cv), leaves64,
                                    leaves_lo):
        assert_close(f"{name} (cuda)", a.cpu(), l64.grad, llo.grad, dtype, True, slack[name])
        assert_close(f"{name} (cpu)", e, l64.grad, llo.grad, dtype, True, slack[name])
