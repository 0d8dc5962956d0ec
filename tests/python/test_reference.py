"""The reference itself, checked against PyTorch's scaled_dot_product_attention
and against the worked examples of the semantics (bottom-right alignment)."""

import math

import pytest
import torch
import torch.nn.functional as F

from reference import (alibi_bias, attention_ref, attention_ref_varlen, merge_ref,
                       visible_mask)


def sdpa(q, k, v, mask=None, scale=None, enable_gqa=False):
    """SDPA in float64 with flash_attn's (b, s, h, d) layout."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                         v.transpose(1, 2), attn_mask=mask, scale=scale,
                                         enable_gqa=enable_gqa)
    return out.transpose(1, 2)


def test_causal_examples_from_the_semantics():
    # sq=2, sk=5: rows 11110 / 11111; sq=5, sk=2: 00 / 00 / 00 / 10 / 11.
    assert visible_mask(2, 5, causal=True).int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert visible_mask(5, 2, causal=True).int().tolist() == [[0, 0], [0, 0], [0, 0], [1, 0],
                                                              [1, 1]]


def test_window_rule():
    # sq = sk = 5, window (1, 2): j in [i - 1, i + 2]
    m = visible_mask(5, 5, window_size=(1, 2))
    for i in range(5):
        for j in range(5):
            assert bool(m[i, j]) == (i - 1 <= j <= i + 2)
    # causal keeps the left bound and sets the right one to 0
    assert torch.equal(visible_mask(4, 6, causal=True, window_size=(2, 3)),
                       visible_mask(4, 6, window_size=(2, 0)))
    assert torch.equal(visible_mask(7, 3, causal=True), visible_mask(7, 3, window_size=(-1, 0)))


@pytest.mark.parametrize("sq,sk", [(7, 7), (5, 9), (9, 5)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_sdpa(sq, sk, causal):
    q = torch.randn(2, sq, 3, 16, dtype=torch.float64)
    k = torch.randn(2, sk, 3, 16, dtype=torch.float64)
    v = torch.randn(2, sk, 3, 16, dtype=torch.float64)
    mask = visible_mask(sq, sk, causal=causal)
    res = attention_ref(q, k, v, causal=causal)
    full_rows = mask.any(dim=1)
    expected = sdpa(q, k, v, mask=mask)
    assert torch.allclose(res.out[:, full_rows], expected[:, full_rows], atol=1e-12)
    assert (res.out[:, ~full_rows] == 0).all()
    s = torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(16)
    lse = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1)
    assert torch.allclose(res.lse[..., full_rows], lse[..., full_rows], atol=1e-12)
    assert torch.isposinf(res.lse[..., ~full_rows]).all()


def test_alibi_softcap_gqa_scale_match_sdpa():
    b, sq, sk, h, hk, d = 2, 6, 9, 4, 2, 8
    q = torch.randn(b, sq, h, d, dtype=torch.float64)
    k = torch.randn(b, sk, hk, d, dtype=torch.float64)
    v = torch.randn(b, sk, hk, d, dtype=torch.float64)
    slopes = torch.rand(b, h) + 0.1
    scale, cap = 0.7, 1.5
    res = attention_ref(q, k, v, softmax_scale=scale, softcap=cap, alibi_slopes=slopes,
                        window_size=(3, 1))
    s = torch.einsum("bihd,bjhd->bhij", q, k.repeat_interleave(2, dim=2)) * scale
    s = cap * torch.tanh(s / cap)
    rows, cols = torch.arange(sq)[:, None], torch.arange(sk)[None, :]
    s = s - slopes.double()[:, :, None, None] * (rows + sk - sq - cols).abs()
    s = s.masked_fill(~visible_mask(sq, sk, window_size=(3, 1)), float("-inf"))
    expected = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1),
                            v.repeat_interleave(2, dim=2))
    assert torch.allclose(res.out, expected, atol=1e-12)
    assert torch.allclose(res.lse, torch.logsumexp(s, -1), atol=1e-12)
    # GQA through SDPA's own head grouping
    res2 = attention_ref(q, k, v)
    assert torch.allclose(res2.out, sdpa(q, k, v, enable_gqa=True), atol=1e-12)


def test_alibi_bias_formula():
    bias = alibi_bias(torch.tensor([0.5]), 2, 4, torch.float64)[0]
    # shift = 2: row 0 centred on column 2, row 1 on column 3
    assert bias.tolist() == [[-1.0, -0.5, 0.0, -0.5], [-1.5, -1.0, -0.5, 0.0]]


def test_masked_rows_have_zero_gradient():
    q = torch.randn(1, 6, 2, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 3, 2, 4, dtype=torch.float64, requires_grad=True)
    res = attention_ref(q, k, v, causal=True)    # rows 0..2 see no key
    torch.autograd.backward([res.out, res.lse.masked_fill(torch.isinf(res.lse), 0)],
                            [torch.randn_like(res.out), torch.randn_like(res.lse)])
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[:, :3] == 0).all()


def test_dropout_keep_mask_scales_kept_entries():
    q, k, v = (torch.randn(1, 4, 1, 8, dtype=torch.float64) for _ in range(3))
    keep = torch.rand(1, 1, 4, 4) > 0.3
    res = attention_ref(q, k, v, dropout_p=0.3, keep_mask=keep)
    probs = torch.softmax(torch.einsum("bihd,bjhd->bhij", q, k) / math.sqrt(8), -1)
    expected = torch.einsum("bhij,bjhd->bihd", probs * keep / 0.7, v)
    assert torch.allclose(res.out, expected, atol=1e-12)


def test_varlen_loop_matches_batched():
    # lengths q 3, 0, 5 and k 4, 2, 0
    q = torch.randn(8, 2, 4, dtype=torch.float64)
    k = torch.randn(6, 2, 4, dtype=torch.float64)
    v = torch.randn(6, 2, 4, dtype=torch.float64)
    cu_q = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 4, 6, 6], dtype=torch.int32)
    res = attention_ref_varlen(q, k, v, cu_q, cu_k, causal=True)
    first = attention_ref(q[None, :3], k[None, :4], v[None, :4], causal=True)
    assert torch.allclose(res.out[:3], first.out[0])
    assert (res.out[3:] == 0).all() and torch.isposinf(res.lse[:, 3:]).all()
    assert res.out.shape == (8, 2, 4) and res.lse.shape == (2, 8)


def test_merge_ref_recombines_a_key_split():
    q = torch.randn(2, 5, 3, 8, dtype=torch.float64)
    k = torch.randn(2, 11, 3, 8, dtype=torch.float64)
    v = torch.randn(2, 11, 3, 8, dtype=torch.float64)
    full = attention_ref(q, k, v, causal=True)
    # keys [0, 4) with the right bound kept where it was, keys [4, 11) causal
    head = attention_ref(q, k[:, :4], v[:, :4], window_size=(-1, 7))
    tail = attention_ref(q, k[:, 4:], v[:, 4:], causal=True)
    out, lse = merge_ref([head.out, tail.out], [head.lse, tail.lse])
    assert torch.allclose(out, full.out, atol=1e-12)
    assert torch.allclose(lse, full.lse, atol=1e-12)
