"""flash_attn_func: forward and backward against the reference over head
dims, sequence lengths, masks, softcap, ALiBi, GQA/MQA and dtypes."""

import pytest
import torch

import flashc

from cases import Case, run_batched
from conftest import FULL, skip_unless_device

HEAD_DIMS = [1, 24, 40, 59, 64, 80, 96, 128, 200, 256]
if FULL:
    HEAD_DIMS += [2, 7, 8, 16, 31, 32, 33, 48, 63, 65, 111, 127, 129, 160, 192, 255]

# seqlen 1, primes, both sides of 64 and 128, sq != sk both ways
SEQLENS = [(1, 1), (1, 37), (37, 1), (2, 3), (17, 17), (63, 64), (64, 63), (65, 65),
           (127, 128), (128, 128), (129, 129), (41, 113), (113, 41), (128, 7)]
if FULL:
    SEQLENS += [(3, 2), (31, 97), (97, 31), (64, 64), (129, 257), (257, 129), (251, 251)]

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("d", HEAD_DIMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(device, d, dtype, causal):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=37, sk=53, d=d, dtype=dtype, h=2, causal=causal, device=device))


@pytest.mark.parametrize("d", [1, 59, 128] if not FULL else HEAD_DIMS)
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims_float16(device, d, causal):
    skip_unless_device(device, torch.float16)
    run_batched(Case(sq=53, sk=37, d=d, dtype=torch.float16, h=2, causal=causal, device=device))


@pytest.mark.parametrize("sq,sk", SEQLENS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_seqlens(device, sq, sk, dtype, causal):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=sq, sk=sk, d=40, dtype=dtype, causal=causal, device=device))


WINDOWS = [(-1, 0), (0, 0), (5, 0), (3, 3), (0, -1), (7, -1), (-1, 2), (16, 4), (0, 9),
           (200, 1), (2, 200)]


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("sq,sk", [(37, 61), (61, 37), (64, 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_windows(device, window, sq, sk, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=sq, sk=sk, d=32, dtype=dtype, h=2, window=window, device=device))


@pytest.mark.parametrize("window", [(4, -1), (4, 4), (0, 7), (-1, -1)])
@pytest.mark.parametrize("sq,sk", [(29, 47), (47, 29)])
def test_causal_with_window(device, window, sq, sk):
    # causal sets the right bound to 0 whatever was given and keeps the left one
    skip_unless_device(device, torch.bfloat16)
    run_batched(Case(sq=sq, sk=sk, d=32, h=2, causal=True, window=window, device=device))


def test_window_bound_beyond_seqlen_is_exact(device):
    # sq > sk + 1: a right bound >= sk still binds (flashc keeps the exact rule
    # where flash_attn would treat it as unbounded); rows 0..sq-sk-right-1 see nothing.
    skip_unless_device(device, torch.bfloat16)
    out = run_batched(Case(sq=40, sk=9, d=16, h=2, window=(-1, 12), device=device))
    assert torch.isposinf(out.lse[:, :, :19]).all() and torch.isfinite(out.lse[:, :, 19:]).all()
    assert (out.out[:, :19] == 0).all()


@pytest.mark.parametrize("softcap", [0.5, 3.0, 30.0])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_softcap(device, softcap, causal, dtype):
    skip_unless_device(device, dtype)
    # q scaled so that scale * q.k reaches tanh's curved range
    run_batched(Case(sq=45, sk=70, d=48, dtype=dtype, causal=causal, softcap=softcap,
                     q_scale=max(1.0, softcap / 2), device=device))


@pytest.mark.parametrize("alibi", ["h", "bh"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_alibi(device, alibi, causal, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=50, sk=77, d=40, dtype=dtype, causal=causal, alibi=alibi,
                     device=device))


@pytest.mark.parametrize("alibi", ["h", "bh"])
@pytest.mark.parametrize("sq,sk", [(77, 50), (33, 33)])
def test_alibi_with_window_and_softcap(device, alibi, sq, sk):
    skip_unless_device(device, torch.bfloat16)
    run_batched(Case(sq=sq, sk=sk, d=24, alibi=alibi, window=(9, 3), softcap=2.0,
                     q_scale=2.0, device=device))


@pytest.mark.parametrize("h,hk", [(4, 1), (6, 2), (8, 4), (6, 3)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gqa_mqa(device, h, hk, causal, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=39, sk=66, d=32, dtype=dtype, h=h, hk=hk, causal=causal,
                     device=device))


# Short queries against longer keys with a group of query heads per kv head:
# the CPU forward packs the group's heads into one row tile when heads x sq
# fit in it (decoding), so row positions, heads, masks and ALiBi slopes are
# taken per packed row. Group sizes that divide 64 and ones that do not;
# sq just under and over what packs the whole group.
PACKED_FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(6, 2)),
    "causal_window": dict(causal=True, window=(9, -1)),
    "alibi_bh": dict(alibi="bh", causal=True),
    "softcap": dict(softcap=2.0, q_scale=2.0),
}


@pytest.mark.parametrize("h,hk", [(8, 1), (6, 2), (12, 2), (32, 8), (16, 1)])
@pytest.mark.parametrize("sq", [1, 3, 9, 21])
@pytest.mark.parametrize("feature", list(PACKED_FEATURES))
def test_gqa_short_queries(device, h, hk, sq, feature):
    skip_unless_device(device, torch.float32)
    run_batched(Case(sq=sq, sk=sq + 70, d=24, dtype=torch.float32, b=2, h=h, hk=hk,
                     device=device, **PACKED_FEATURES[feature]))


# One query token over 16-bit caches: GQA (8 and 6 query rows per head
# group), MHA (one) and MQA (32). The CPU reads bfloat16 rows of whole
# vectors straight into its products four query rows at a time, with one
# row at a time for the rest, up to 8 rows; other head dims, other types
# and more rows go through a staging row.
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("h,hk", [(32, 4), (12, 2), (6, 6), (32, 1)])
@pytest.mark.parametrize("d", [128, 72])
def test_decode_step_low_precision(device, dtype, h, hk, d):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=1, sk=300, d=d, dtype=dtype, b=3, h=h, hk=hk, causal=True,
                     device=device))


# A few row tiles over many keys: the CPU forward splits each tile's key
# range into tasks and combines them through their LSEs (the number of
# splits from the shape alone). Key counts around multiples of the split
# size, masks that leave some splits empty, GQA and MHA.
@pytest.mark.parametrize("h,hk", [(8, 2), (2, 2)])
@pytest.mark.parametrize("sq,sk", [(1, 1025), (3, 2100), (40, 1600)])
@pytest.mark.parametrize("feature", list(PACKED_FEATURES))
def test_few_queries_many_keys(device, h, hk, sq, sk, feature):
    skip_unless_device(device, torch.float32)
    run_batched(Case(sq=sq, sk=sk, d=40, dtype=torch.float32, b=1, h=h, hk=hk,
                     device=device, **PACKED_FEATURES[feature]))


@pytest.mark.parametrize("window", [(-1, -1), (100, 0)])
def test_dropout_over_many_keys_agrees_with_its_probabilities(device, window):
    # S_dmask asks for an unsplit forward, its absence lets the CPU split the
    # keys: the same seed draws the same mask either way
    skip_unless_device(device, torch.bfloat16)
    q = torch.randn(1, 2, 8, 64, device=device, dtype=torch.bfloat16)
    k = torch.randn(1, 3000, 2, 64, device=device, dtype=torch.bfloat16)
    v = torch.randn(1, 3000, 2, 64, device=device, dtype=torch.bfloat16)
    kwargs = dict(dropout_p=0.3, causal=True, window_size=window)
    torch.manual_seed(7)
    whole, lse_whole, s_dmask = flashc.flash_attn_func(q, k, v, return_attn_probs=True, **kwargs)
    torch.manual_seed(7)
    split = flashc.flash_attn_func(q, k, v, **kwargs)
    assert s_dmask is not None and s_dmask.shape[-1] >= 3000
    torch.testing.assert_close(split.float(), whole.float(), atol=2e-2, rtol=0)
    torch.testing.assert_close(split, whole, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("scale", [0.05, 0.5, 2.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_scale(device, scale, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=33, sk=65, d=64, dtype=dtype, scale=scale, device=device))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_features_together(device, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=71, sk=130, d=80, dtype=dtype, b=3, h=6, hk=2, causal=True,
                     window=(40, 0), softcap=4.0, alibi="bh", scale=0.2, q_scale=3.0,
                     device=device))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_all_rows_masked(device, dtype):
    # sq > sk with a causal mask and a zero-width window: rows of out 0, LSE
    # +inf and gradients without NaN.
    skip_unless_device(device, dtype)
    res = run_batched(Case(sq=20, sk=3, d=16, dtype=dtype, h=2, causal=True, window=(0, 0),
                           device=device))
    assert (res.out[:, :17] == 0).all() and torch.isposinf(res.lse[..., :17]).all()
    for g in res.grads.values():
        assert torch.isfinite(g).all()
    assert (res.grads["q"][:, :17] == 0).all()


def test_large_logits_do_not_overflow(device):
    # scores far beyond float16/bfloat16 exp range: online softmax must rescale
    skip_unless_device(device, torch.bfloat16)
    res = run_batched(Case(sq=70, sk=130, d=64, q_scale=30.0, device=device))
    assert torch.isfinite(res.out).all() and torch.isfinite(res.lse).all()


def test_default_returns_only_out(device):
    skip_unless_device(device, torch.bfloat16)
    import flashc
    q = torch.randn(1, 9, 2, 16, dtype=torch.bfloat16, device=device)
    out = flashc.flash_attn_func(q, q, q)
    assert isinstance(out, torch.Tensor) and out.shape == q.shape


def test_no_grad_and_inference_mode(device):
    skip_unless_device(device, torch.bfloat16)
    import flashc
    q, k, v = (torch.randn(2, 11, 2, 16, dtype=torch.bfloat16, device=device,
                           requires_grad=True) for _ in range(3))
    with torch.no_grad():
        a = flashc.flash_attn_func(q, k, v, causal=True)
    with torch.inference_mode():
        b = flashc.flash_attn_func(q, k, v, causal=True)
    c = flashc.flash_attn_func(q, k, v, causal=True)
    assert not a.requires_grad and not b.requires_grad and c.requires_grad
    assert torch.equal(a, b) and torch.equal(a, c.detach())


def test_noncontiguous_inputs(device):
    # Strided views (every other token, heads transposed in memory) are
    # accepted; a stride(-1) != 1 tensor is copied (flash_attn's maybe_contiguous).
    skip_unless_device(device, torch.bfloat16)
    import flashc
    from reference import attention_ref
    base_q = torch.randn(2, 34, 3, 32, dtype=torch.bfloat16, device=device)
    q = base_q[:, ::2]                                               # token stride 2
    k = torch.randn(2, 3, 21, 32, dtype=torch.bfloat16, device=device).transpose(1, 2)
    v = torch.randn(2, 21, 3, 64, dtype=torch.bfloat16, device=device)[..., ::2]  # stride(-1) 2
    assert not q.is_contiguous() and not k.is_contiguous() and v.stride(-1) == 2
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    dout = torch.randn(2, 17, 3, 32, dtype=torch.bfloat16, device=device)
    dout_strided = torch.empty(2, 17, 6, 32, dtype=torch.bfloat16, device=device)[:, :, ::2]
    dout_strided.copy_(dout)                                         # head stride 64
    out = flashc.flash_attn_func(*leaves, causal=True)
    out.backward(dout_strided)
    expected = [leaf_.detach().contiguous().requires_grad_() for leaf_ in leaves]
    ref = flashc.flash_attn_func(*expected, causal=True)
    ref.backward(dout.contiguous())
    assert torch.equal(out, ref)
    for a, b in zip(leaves, expected):
        assert torch.equal(a.grad, b.grad)
    r64 = attention_ref(*(t.detach().cpu().double() for t in (q, k, v)), causal=True)
    assert (out.cpu().double() - r64.out).abs().max() < 0.05


def test_value_head_dim_differs(device):
    # flashc's kernels take a value head dim dv != d (flash_attn requires d == dv)
    skip_unless_device(device, torch.bfloat16)
    import flashc
    from checks import assert_close, rounded_out_slack
    from reference import attention_ref
    q = torch.randn(2, 29, 4, 24, dtype=torch.bfloat16, device=device, requires_grad=True)
    k = torch.randn(2, 41, 2, 24, dtype=torch.bfloat16, device=device, requires_grad=True)
    v = torch.randn(2, 41, 2, 40, dtype=torch.bfloat16, device=device, requires_grad=True)
    out = flashc.flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 29, 4, 40)
    dout = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    r64 = [t.detach().cpu().double().requires_grad_() for t in (q, k, v)]
    rlo = [t.detach().cpu().requires_grad_() for t in (q, k, v)]
    ref, low = attention_ref(*r64, causal=True), attention_ref(*rlo, causal=True,
                                                              compute_dtype=torch.bfloat16)
    assert_close("out", out, ref.out, low.out, torch.bfloat16)
    slack = rounded_out_slack(ref.lse, dict(zip("qkv", r64)), dout, out, ref.out)
    g64 = torch.autograd.grad(ref.out, r64, dout.cpu().double())
    glo = torch.autograd.grad(low.out, rlo, dout.cpu())
    for name, a, e, l in zip("qkv", grads, g64, glo):
        assert_close(f"d{name}", a, e, l, torch.bfloat16, backward=True, slack=slack[name])


@pytest.mark.parametrize("shape", ["no_keys", "no_queries", "no_batch"])
def test_empty_extents(device, shape):
    # sk = 0: every row sees nothing (out 0, LSE +inf, zero gradients);
    # sq = 0 and b = 0: empty results and gradients, including a backward
    # whose dout is an expanded (stride 0) view, as out.sum() gives.
    skip_unless_device(device, torch.bfloat16)
    import flashc
    b, sq, sk = {"no_keys": (2, 5, 0), "no_queries": (2, 0, 5), "no_batch": (0, 5, 5)}[shape]
    q = torch.randn(b, sq, 2, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(b, sk, 2, 8, device=device, dtype=torch.bfloat16, requires_grad=True)
            for _ in range(2))
    out, lse = flashc.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and lse.shape == (b, 2, sq)
    assert (out == 0).all() and torch.isposinf(lse).all()
    out.sum().backward()
    for t in (q, k, v):
        assert t.grad is not None and t.grad.shape == t.shape and (t.grad == 0).all()
