"""return_lse=True: the LSE is returned and differentiable (dLSE enters the
backward as D_i = rowsum(dO_i * O_i) - dLSE_i); merge_attn_states combines
attention over disjoint key sets exactly, gradients included."""

import pytest
import torch

import flashc
from cases import Case, VarlenCase, run_batched, run_varlen
from checks import assert_close, assert_lse_close
from conftest import skip_unless_device
from reference import attention_ref, merge_ref

FEATURES = {
    "plain": dict(),
    "causal_empty_rows": dict(causal=True),          # sq > sk: rows that see nothing
    "window": dict(window=(3, 5)),
    "softcap": dict(softcap=2.5, q_scale=2.0),
    "alibi": dict(alibi="bh"),
    "gqa": dict(h=6, hk=3, causal=True),
    "dropout": dict(dropout_p=0.3),
}


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_return_lse_with_dlse(device, feature, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=58, sk=41, d=40, dtype=dtype, device=device, **FEATURES[feature]),
                return_lse=True)


@pytest.mark.parametrize("api", ["kvpacked", "qkvpacked"])
def test_return_lse_packed(device, api):
    skip_unless_device(device, torch.bfloat16)
    run_batched(Case(sq=44, sk=44, d=32, causal=True, device=device), api=api, return_lse=True)


@pytest.mark.parametrize("api", ["varlen", "varlen_kvpacked", "varlen_qkvpacked"])
@pytest.mark.parametrize("feature", ["plain", "causal_empty_rows", "alibi", "dropout"])
def test_return_lse_varlen(device, api, feature):
    skip_unless_device(device, torch.bfloat16)
    lq = [12, 0, 40, 7]
    lk = lq if api == "varlen_qkvpacked" else [5, 9, 40, 0]
    run_varlen(VarlenCase(lengths_q=lq, lengths_k=lk, d=32, device=device,
                          **FEATURES[feature]), api=api, return_lse=True)


def test_lse_gradient_alone(device):
    # A loss on the LSE only: dO = 0, so the gradient comes from dLSE alone.
    skip_unless_device(device, torch.float32)
    q, k, v = (torch.randn(2, 23, 2, 16, device=device, requires_grad=True) for _ in range(3))
    out, lse = flashc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    w = torch.randn_like(lse)
    dq, dk, dv = torch.autograd.grad((lse * w).sum(), (q, k, v))
    q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    ref = attention_ref(q64, k64, v64, causal=True)
    rq, rk, rv = torch.autograd.grad((ref.lse * w.cpu().double()).sum(), (q64, k64, v64),
                                     allow_unused=True)
    assert_close("dq", dq, rq, None, torch.float32, backward=True)
    assert_close("dk", dk, rk, None, torch.float32, backward=True)
    assert (dv == 0).all(), "the LSE does not depend on v"


def test_lse_from_return_attn_probs_is_differentiable(device):
    skip_unless_device(device, torch.float32)
    q, k, v = (torch.randn(1, 17, 2, 8, device=device, requires_grad=True) for _ in range(3))
    out, lse, _ = flashc.flash_attn_func(q, k, v, return_attn_probs=True)
    out2, lse2 = flashc.flash_attn_func(q, k, v, return_lse=True)
    w = torch.randn_like(lse)
    g1 = torch.autograd.grad((lse * w).sum() + out.sum(), (q, k))
    g2 = torch.autograd.grad((lse2 * w).sum() + out2.sum(), (q, k))
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


def _split_attention(q, k, v, split, causal, return_lse=True):
    """Attention over keys [0, split) and [split, sk) such that merging the two
    gives the full (optionally causal) attention: the first part keeps the
    full problem's right bound as a window, the second is causal itself."""
    sq, sk = q.shape[1], k.shape[1]
    right = (sk - split) if causal else -1
    head = flashc.flash_attn_func(q, k[:, :split], v[:, :split], window_size=(-1, right),
                                  return_lse=return_lse)
    tail = flashc.flash_attn_func(q, k[:, split:], v[:, split:], causal=causal,
                                  return_lse=return_lse)
    return head, tail


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_merge_of_a_key_split_equals_full_attention(device, causal, dtype):
    skip_unless_device(device, dtype)
    b, sq, sk, h, d, split = 2, 37, 70, 3, 32, 50
    q, k, v = (torch.randn(b, s, h, d, dtype=dtype, device=device, requires_grad=True)
               for s in (sq, sk, sk))
    (o1, l1), (o2, l2) = _split_attention(q, k, v, split, causal)
    if causal:   # rows whose causal bound is left of `split` see nothing in the tail
        assert torch.isposinf(l2[..., :split - (sk - sq)]).all()
    out, lse = flashc.merge_attn_states([o1, o2], [l1, l2])
    full_out, full_lse = flashc.flash_attn_func(q, k, v, causal=causal, return_lse=True)

    ref = attention_ref(*(t.detach().cpu().double() for t in (q, k, v)), causal=causal)
    lowp = attention_ref(*(t.detach().cpu() for t in (q, k, v)), causal=causal,
                         compute_dtype=dtype)
    assert out.dtype == dtype and out.shape == q.shape and lse.shape == (b, h, sq)
    assert_close("merged out", out, ref.out, lowp.out, dtype)
    assert_lse_close("merged lse", lse, ref.lse)

    # Gradients through both partial attentions and the merge (dLSE of each
    # part is nonzero) equal those of the full attention.
    dout, dlse = torch.randn_like(out), torch.randn_like(lse)
    g_split = torch.autograd.grad([out, lse], (q, k, v), [dout, dlse])
    g_full = torch.autograd.grad([full_out, full_lse], (q, k, v), [dout, dlse])
    q64, k64, v64 = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    r = attention_ref(q64, k64, v64, causal=causal)
    g_ref = torch.autograd.grad([r.out, r.lse], (q64, k64, v64),
                                [dout.cpu().double(), dlse.cpu().double()])
    for name, a, f, e in zip("qkv", g_split, g_full, g_ref):
        assert torch.isfinite(a).all()
        # the split path adds one rounding of the partial outputs to the
        # full path's error: compare both with the reference
        err_split = (a.cpu().double() - e).abs().max().item()
        err_full = (f.cpu().double() - e).abs().max().item()
        scale = e.abs().max().item()
        assert err_split <= 4 * err_full + 1e-3 * scale, (name, err_split, err_full)


def test_merge_with_empty_parts(device):
    # A part that saw no key (out 0, LSE +inf) gets weight 0; if every part
    # is empty the result is out 0, LSE +inf, and no gradient is NaN.
    skip_unless_device(device, torch.float32)
    o = torch.randn(1, 5, 2, 8, device=device, requires_grad=True)
    lse = torch.randn(1, 2, 5, device=device).requires_grad_()
    empty_o = torch.zeros(1, 5, 2, 8, device=device, requires_grad=True)
    empty_l = torch.full((1, 2, 5), float("inf"), device=device, requires_grad=True)
    m_out, m_lse = flashc.merge_attn_states([o, empty_o], [lse, empty_l])
    assert torch.allclose(m_out, o) and torch.allclose(m_lse, lse)
    e_out, e_lse = flashc.merge_attn_states([empty_o, empty_o], [empty_l, empty_l])
    assert (e_out == 0).all() and torch.isposinf(e_lse).all()
    (m_out.sum() + m_lse.sum() + e_out.sum()).backward()
    for t in (o, lse, empty_o, empty_l):
        assert t.grad is not None and torch.isfinite(t.grad).all()


@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_merge_matches_reference_formula(parts):
    b, s, h, d = 2, 9, 3, 6
    outs = [torch.randn(b, s, h, d, dtype=torch.float64) for _ in range(parts)]
    lses = [torch.randn(b, h, s, dtype=torch.float64) * 3 for _ in range(parts)]
    lses[0][0, 0, :4] = float("inf")          # some rows of one part are empty
    out, lse = flashc.merge_attn_states(outs, lses)
    e_out, e_lse = merge_ref(outs, lses)
    assert torch.allclose(out.double(), e_out, atol=1e-12)
    assert torch.allclose(lse.double(), e_lse, atol=1e-12)


def test_merge_varlen_layout(device):
    # varlen layout: out (total, h, d), lse (h, total)
    skip_unless_device(device, torch.float32)
    outs = [torch.randn(19, 2, 8, device=device) for _ in range(2)]
    lses = [torch.randn(2, 19, device=device) for _ in range(2)]
    out, lse = flashc.merge_attn_states(outs, lses)
    e_out, e_lse = merge_ref([o.cpu().double() for o in outs], [l.cpu().double() for l in lses])
    assert out.shape == (19, 2, 8) and lse.shape == (2, 19)
    assert torch.allclose(out.cpu().double(), e_out, atol=1e-5)
    assert torch.allclose(lse.cpu().double(), e_lse, atol=1e-5)
