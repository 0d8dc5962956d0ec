"""flashc.flash_attn_interface's lower layer (flash_attn's signatures):
_flash_attn_forward / _flash_attn_varlen_forward return
(out, softmax_lse, S_dmask, rng_state); the backwards write into the
caller's dq/dk/dv (poisoned with NaN here: every element must be written)
and return softmax_d."""

import pytest
import torch

import flashc
from checks import assert_close, assert_lse_close, cu_seqlens_from_lengths
from conftest import skip_unless_device
from flashc.flash_attn_interface import (_flash_attn_backward, _flash_attn_forward,
                                         _flash_attn_varlen_backward,
                                         _flash_attn_varlen_forward)
from reference import attention_ref, attention_ref_varlen, round_up


def nan_like(t):
    return torch.full_like(t, float("nan"))


def rows_dot(dout, out):
    return (dout.double() * out.double()).sum(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal,window,dropout_p", [(False, (-1, -1), 0.0),
                                                      (True, (-1, -1), 0.0),
                                                      (False, (6, 1), 0.2),
                                                      (True, (3, -1), 0.3)])
def test_batched_lower_layer(device, dtype, causal, window, dropout_p):
    skip_unless_device(device, dtype)
    b, sq, sk, h, hk, d = 2, 45, 31, 4, 2, 24
    q = torch.randn(b, sq, h, d, dtype=dtype, device=device)
    k, v = (torch.randn(b, sk, hk, d, dtype=dtype, device=device) for _ in range(2))
    slopes = torch.rand(h, device=device)
    scale = 0.3
    out, lse, sd, rng = _flash_attn_forward(q, k, v, dropout_p, scale, causal, window[0],
                                            window[1], 0.0, slopes, dropout_p > 0)
    assert out.shape == q.shape and lse.shape == (b, h, sq) and lse.dtype == torch.float32
    assert rng.shape == (2,) and rng.dtype == torch.int64
    assert sd.shape == ((b, h, round_up(sq, 128), round_up(sk, 128)) if dropout_p > 0 else (0,))
    keep = ~torch.signbit(sd[:, :, :sq, :sk]).cpu() if dropout_p > 0 else None
    qr, kr, vr = (t.cpu().double().requires_grad_() for t in (q, k, v))
    ref = attention_ref(qr, kr, vr, scale, causal, window, 0.0, slopes.cpu(), dropout_p, keep)
    ql, kl, vl = (t.cpu().requires_grad_() for t in (q, k, v))
    lowp = attention_ref(ql, kl, vl, scale, causal, window, 0.0, slopes.cpu(), dropout_p, keep,
                         compute_dtype=dtype)
    assert_close("out", out, ref.out, lowp.out, dtype)
    assert_lse_close("lse", lse, ref.lse)

    dout = torch.randn_like(out)
    dlse = torch.randn_like(lse)
    dq, dk, dv = nan_like(q), nan_like(k), nan_like(v)
    softmax_d = _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, dropout_p, scale,
                                     causal, window[0], window[1], 0.0, slopes, False, rng,
                                     dlse=dlse)
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(g).all(), f"{name}: elements left unwritten (NaN)"
    r = torch.autograd.grad([ref.out, ref.lse], (qr, kr, vr),
                            [dout.cpu().double(), dlse.cpu().double()])
    rl = torch.autograd.grad([lowp.out, lowp.lse], (ql, kl, vl), [dout.cpu(), dlse.cpu().to(dtype)])
    for name, g, e, el in zip(("dq", "dk", "dv"), (dq, dk, dv), r, rl):
        assert_close(name, g, e, el, dtype, backward=True)
    assert softmax_d.shape == (b, h, round_up(sq, 128)) and softmax_d.dtype == torch.float32
    expected_d = rows_dot(dout.cpu(), out.cpu()).transpose(1, 2) - dlse.cpu().double()
    assert torch.allclose(softmax_d[..., :sq].cpu().double(), expected_d, atol=1e-3, rtol=1e-4)
    assert (softmax_d[..., sq:] == 0).all()


def test_backward_matches_autograd_bitwise(device):
    # The autograd Function and the lower layer run the same kernels.
    skip_unless_device(device, torch.bfloat16)
    q, k, v = (torch.randn(2, 50, 2, 40, dtype=torch.bfloat16, device=device, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    out = flashc.flash_attn_func(q, k, v, causal=True, softcap=5.0)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    out2, lse, _, rng = _flash_attn_forward(q.detach(), k.detach(), v.detach(), 0.0,
                                            40 ** -0.5, True, -1, -1, 5.0, None, False)
    assert torch.equal(out, out2)
    bufs = [nan_like(t.detach()) for t in (q, k, v)]
    _flash_attn_backward(dout, q.detach(), k.detach(), v.detach(), out2, lse, *bufs, 0.0,
                         40 ** -0.5, True, -1, -1, 5.0, None, False, rng)
    for a, b in zip(grads, bufs):
        assert torch.equal(a, b)


def test_backward_into_strided_views(device):
    # dq/dk/dv as views into one packed buffer (as the packed functions do):
    # their elements are written, the rest of the buffer is not touched.
    skip_unless_device(device, torch.bfloat16)
    b, s, h, d = 2, 37, 3, 32
    qkv = torch.randn(b, s, 3, h, d, dtype=torch.bfloat16, device=device)
    q, k, v = qkv.unbind(2)
    out, lse, _, rng = _flash_attn_forward(q, k, v, 0.0, d ** -0.5, True, -1, -1, 0.0, None, False)
    dout = torch.randn_like(out)
    buf = torch.full((b, s, 4, h, d), float("nan"), dtype=torch.bfloat16, device=device)
    buf[:, :, 3] = 7.0
    dq, dk, dv = buf[:, :, 0], buf[:, :, 1], buf[:, :, 2]
    _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.0, d ** -0.5, True, -1, -1, 0.0,
                         None, False, rng)
    assert torch.isfinite(buf[:, :, :3]).all() and (buf[:, :, 3] == 7.0).all()
    cq, ck, cv = (torch.empty_like(t) for t in (q, k, v))
    _flash_attn_backward(dout, q.contiguous(), k.contiguous(), v.contiguous(), out, lse, cq, ck, cv,
                         0.0, d ** -0.5, True, -1, -1, 0.0, None, False, rng)
    assert torch.equal(dq, cq) and torch.equal(dk, ck) and torch.equal(dv, cv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dropout_p", [0.0, 0.25])
def test_varlen_lower_layer(device, dtype, dropout_p):
    skip_unless_device(device, dtype)
    lq, lk = [13, 0, 70, 1, 5], [20, 4, 70, 0, 9]
    h, hk, d = 4, 2, 40
    cu_q, cu_k = cu_seqlens_from_lengths(lq, device), cu_seqlens_from_lengths(lk, device)
    tq, tk = sum(lq), sum(lk)
    q = torch.randn(tq, h, d, dtype=dtype, device=device)
    k, v = (torch.randn(tk, hk, d, dtype=dtype, device=device) for _ in range(2))
    slopes = torch.rand(len(lq), h, device=device)
    out, lse, sd, rng = _flash_attn_varlen_forward(
        q, k, v, cu_q, cu_k, max(lq), max(lk), dropout_p, d ** -0.5, True,
        window_size_left=-1, window_size_right=-1, softcap=0.0, alibi_slopes=slopes,
        return_softmax=dropout_p > 0)
    assert lse.shape == (h, tq)
    keep = ~torch.signbit(sd).cpu() if dropout_p > 0 else None
    qr, kr, vr = (t.cpu().double().requires_grad_() for t in (q, k, v))
    ref = attention_ref_varlen(qr, kr, vr, cu_q.cpu(), cu_k.cpu(), causal=True,
                               alibi_slopes=slopes.cpu(), dropout_p=dropout_p, keep_mask=keep)
    lowp = attention_ref_varlen(q.cpu(), k.cpu(), v.cpu(), cu_q.cpu(), cu_k.cpu(), causal=True,
                                alibi_slopes=slopes.cpu(), dropout_p=dropout_p, keep_mask=keep,
                                compute_dtype=dtype)
    assert_close("out", out, ref.out, lowp.out, dtype)
    assert_lse_close("lse", lse, ref.lse)

    dout, dlse = torch.randn_like(out), torch.randn_like(lse)
    dq, dk, dv = nan_like(q), nan_like(k), nan_like(v)
    softmax_d = _flash_attn_varlen_backward(
        dout, q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, max(lq), max(lk), dropout_p,
        d ** -0.5, True, -1, -1, 0.0, slopes, False, rng, dlse=dlse)
    for name, g in (("dq", dq), ("dk", dk), ("dv", dv)):
        assert torch.isfinite(g).all(), f"{name}: elements left unwritten (NaN)"
    r = torch.autograd.grad([ref.out, ref.lse], (qr, kr, vr),
                            [dout.cpu().double(), dlse.cpu().double()])
    for name, g, e in zip(("dq", "dk", "dv"), (dq, dk, dv), r):
        tol = 1e-3 if dtype == torch.float32 else 0.05
        assert (g.cpu().double() - e).abs().max() <= tol * max(1.0, e.abs().max().item()), name
    # flash_attn's layout: (h, total_q + 128 * b), sequence i from cu_q[i] + 128 * i
    b = len(lq)
    assert softmax_d.shape == (h, tq + 128 * b)
    expected_d = rows_dot(dout.cpu(), out.cpu()).transpose(0, 1) - dlse.cpu().double()
    placed = torch.zeros(h, tq + 128 * b, dtype=torch.float64)
    for i in range(b):
        a, e = int(cu_q[i]), int(cu_q[i + 1])
        placed[:, a + 128 * i:e + 128 * i] = expected_d[:, a:e]
    assert torch.allclose(softmax_d.cpu().double(), placed, atol=1e-3, rtol=1e-4)


def test_forward_nan_poisoned_outputs_are_fully_written(device):
    # The forward allocates its outputs; run it on memory the caching
    # allocator recycles after filling it with NaN, with masked rows and
    # dropout, and check every element of out / lse / S_dmask.
    skip_unless_device(device, torch.bfloat16)
    for _ in range(3):
        junk = torch.full((1 << 20,), float("nan"), device=device)
        del junk
        q = torch.randn(2, 70, 2, 24, dtype=torch.bfloat16, device=device)
        k = torch.randn(2, 30, 2, 24, dtype=torch.bfloat16, device=device)
        out, lse, sd, _ = _flash_attn_forward(q, k, k, 0.3, 0.2, True, 5, -1, 0.0, None, True)
        assert not torch.isnan(out).any() and not torch.isnan(lse).any()
        assert not torch.isnan(sd).any()


def test_varlen_backward_gap_rows_written(device):
    # Packed rows outside every sequence (before the first, after the last)
    # get zero gradients even in NaN-filled buffers.
    skip_unless_device(device, torch.float32)
    h, d = 2, 16
    q, k, v = (torch.randn(30, h, d, device=device) for _ in range(3))
    cu = torch.tensor([3, 10, 10, 22], dtype=torch.int32, device=device)
    out, lse, _, rng = _flash_attn_varlen_forward(q, k, v, cu, cu, 12, 12, 0.0, 0.25, False)
    assert (out[:3] == 0).all() and (out[22:] == 0).all()
    assert torch.isposinf(lse[:, :3]).all() and torch.isposinf(lse[:, 22:]).all()
    dq, dk, dv = nan_like(q), nan_like(k), nan_like(v)
    _flash_attn_varlen_backward(torch.randn_like(out), q, k, v, out, lse, dq, dk, dv, cu, cu,
                                12, 12, 0.0, 0.25, False, -1, -1, 0.0, None, False, rng)
    for g in (dq, dk, dv):
        assert torch.isfinite(g).all()
        assert (g[:3] == 0).all() and (g[22:] == 0).all()


def test_wrapped_ops_are_torch_ops():
    from flashc import flash_attn_interface as fai
    assert fai._wrapped_flash_attn_forward is torch.ops.flashc._flash_attn_forward
    assert fai._wrapped_flash_attn_backward is torch.ops.flashc._flash_attn_backward
    assert fai._wrapped_flash_attn_varlen_forward is torch.ops.flashc._flash_attn_varlen_forward
    assert fai._wrapped_flash_attn_varlen_backward is torch.ops.flashc._flash_attn_varlen_backward
    for name in ("FlashAttnFunc", "FlashAttnQKVPackedFunc", "FlashAttnKVPackedFunc",
                 "FlashAttnVarlenFunc", "FlashAttnVarlenQKVPackedFunc",
                 "FlashAttnVarlenKVPackedFunc"):
        assert issubclass(getattr(fai, name), torch.autograd.Function), name


def test_paged_forward_has_no_backward():
    """A paged (block_table) forward runs; its backward raises, naming
    block_table, as flash_attn has none."""
    q = torch.randn(8, 2, 16, requires_grad=True)
    cache = torch.randn(3, 4, 2, 16)
    cu = torch.tensor([0, 8], dtype=torch.int32)
    table = torch.tensor([[2, 0]], dtype=torch.int32)
    out = flashc.flash_attn_varlen_func(q, cache, cache, cu, cu, 8, 8, block_table=table)
    with pytest.raises(NotImplementedError, match="block_table"):
        out.sum().backward()
    out, lse, _, _ = _flash_attn_varlen_forward(q.detach(), cache, cache, cu, cu, 8, 8, 0.0,
                                                0.25, False, block_table=table)
    assert out.shape == (8, 2, 16) and torch.isfinite(out).all()


def _grads(tensors):
    return [t.grad for t in tensors]


@pytest.mark.parametrize("name", ["FlashAttnFunc", "FlashAttnQKVPackedFunc",
                                  "FlashAttnKVPackedFunc", "FlashAttnVarlenFunc",
                                  "FlashAttnVarlenQKVPackedFunc", "FlashAttnVarlenKVPackedFunc"])
def test_functions_applied_with_flash_attns_arguments(device, name):
    """The six flash_attn-named Functions, applied with flash_attn's argument
    lists as code written for flash_attn applies them, give the public
    functions' results bit for bit (those apply flashc's own Function with
    the arguments grouped), outputs, softmax_lse and gradients, with ALiBi
    and return_lse."""
    from flashc import flash_attn_interface as fai
    dtype = torch.float16 if device == "cuda" else torch.float32
    skip_unless_device(device, dtype)
    h, d, s = 4, 16, 23
    slopes = torch.rand(h, device=device)
    cu = torch.tensor([0, 9, 9, 2 * s], dtype=torch.int32, device=device)
    if "Varlen" in name:
        shape = {"FlashAttnVarlenFunc": (2 * s, h, d), "FlashAttnVarlenQKVPackedFunc":
                 (2 * s, 3, h, d), "FlashAttnVarlenKVPackedFunc": (2 * s, 2, h, d)}[name]
    else:
        shape = {"FlashAttnFunc": (2, s, h, d), "FlashAttnQKVPackedFunc": (2, s, 3, h, d),
                 "FlashAttnKVPackedFunc": (2, s, 2, h, d)}[name]
    first = torch.randn(shape, dtype=dtype, device=device)
    inputs = {"FlashAttnFunc": lambda: [first, torch.randn_like(first), torch.randn_like(first)],
              "FlashAttnVarlenFunc": lambda: [first, torch.randn_like(first),
                                              torch.randn_like(first)],
              "FlashAttnKVPackedFunc": lambda: [first[:, :, 0], first],
              "FlashAttnVarlenKVPackedFunc": lambda: [first[:, 0], first]}.get(
                  name, lambda: [first])()
    inputs = [t.detach().clone() for t in inputs]

    def run(apply_named):
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        fn = getattr(fai, name)
        public = {"FlashAttnFunc": flashc.flash_attn_func,
                  "FlashAttnQKVPackedFunc": flashc.flash_attn_qkvpacked_func,
                  "FlashAttnKVPackedFunc": flashc.flash_attn_kvpacked_func,
                  "FlashAttnVarlenFunc": flashc.flash_attn_varlen_func,
                  "FlashAttnVarlenQKVPackedFunc": flashc.flash_attn_varlen_qkvpacked_func,
                  "FlashAttnVarlenKVPackedFunc": flashc.flash_attn_varlen_kvpacked_func}[name]
        varlen = "Varlen" in name
        if apply_named:
            base = (0.0, 0.3, True, (5, -1), 0.0, slopes, False)  # dropout_p .. deterministic
            tail = (False, True, torch.is_grad_enabled())  # return_softmax, return_lse, grad mode
            if not varlen:
                args = (*base, *tail)
            elif name == "FlashAttnVarlenQKVPackedFunc":
                args = (cu, 2 * s, *base, *tail)
            elif name == "FlashAttnVarlenFunc":  # (block_table before return_lse)
                args = (cu, cu, 2 * s, 2 * s, *base, False, None, *tail[1:])
            else:
                args = (cu, cu, 2 * s, 2 * s, *base, *tail)
            out, lse, _ = fn.apply(*leaves, *args)
        else:
            kwargs = dict(dropout_p=0.0, softmax_scale=0.3, causal=True, window_size=(5, -1),
                          alibi_slopes=slopes, return_lse=True)
            if name == "FlashAttnVarlenQKVPackedFunc":
                out, lse = public(*leaves, cu, 2 * s, **kwargs)
            elif varlen:
                out, lse = public(*leaves, cu, cu, 2 * s, 2 * s, **kwargs)
            else:
                out, lse = public(*leaves, **kwargs)
        (out.double().sum() + lse[torch.isfinite(lse)].double().sum()).backward()
        return out.detach(), lse.detach(), _grads(leaves)

    out_a, lse_a, grads_a = run(False)
    out_b, lse_b, grads_b = run(True)
    assert torch.equal(out_a, out_b)
    assert torch.equal(lse_a, lse_b)
    for a, b in zip(grads_a, grads_b):
        assert a is not None and torch.isfinite(a).all() and torch.equal(a, b)
