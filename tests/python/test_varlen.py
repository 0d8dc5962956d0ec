"""The varlen API (flash_attn_varlen_func and its packed variants): per
sequence lengths, empty sequences, loose max_seqlen, padding masks through
bert_padding, and every feature."""

import pytest
import torch

import flashc
from bert_padding_helpers import padded_reference_out
from cases import VarlenCase, run_varlen
from checks import assert_close, padding_mask, random_lengths
from conftest import skip_unless_device
from flashc.bert_padding import pad_input, unpad_input

LENGTHS = {
    "one": ([37], [53]),
    "equal": ([17, 17, 17], None),
    "mixed": ([1, 64, 65, 30, 128], [129, 63, 7, 30, 2]),
    "empty_q": ([0, 19, 0, 5], [11, 23, 4, 0]),
    "empty_k": ([9, 13, 4], [0, 21, 0]),
    "primes": ([31, 2, 97, 13], [97, 13, 31, 2]),
}

FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(5, 3)),
    "window_left": dict(window=(8, -1), causal=True),
    "softcap": dict(softcap=2.0, q_scale=2.0),
    "alibi_h": dict(alibi="h"),
    "alibi_bh": dict(alibi="bh", causal=True),
    "gqa": dict(h=6, hk=2, causal=True),
    "mqa": dict(h=4, hk=1),
    "dropout": dict(dropout_p=0.25),
}


@pytest.mark.parametrize("lengths", list(LENGTHS))
@pytest.mark.parametrize("feature", list(FEATURES))
def test_varlen_features(device, lengths, feature):
    skip_unless_device(device, torch.bfloat16)
    lq, lk = LENGTHS[lengths]
    run_varlen(VarlenCase(lengths_q=lq, lengths_k=lk, d=24, device=device,
                          **FEATURES[feature]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("feature", ["causal", "alibi_bh", "gqa", "dropout", "softcap"])
def test_varlen_dtypes(device, dtype, feature):
    skip_unless_device(device, dtype)
    lq, lk = LENGTHS["mixed"]
    run_varlen(VarlenCase(lengths_q=lq, lengths_k=lk, d=40, dtype=dtype, device=device,
                          **FEATURES[feature]))


@pytest.mark.parametrize("feature", ["plain", "causal", "window", "alibi_bh"])
def test_varlen_gqa_short_queries(device, feature):
    # a few queries per sequence (one empty) over longer keys, a group of 4:
    # the CPU forward packs the group's heads per row position (max_seqlen_q
    # decides how many)
    skip_unless_device(device, torch.float32)
    run_varlen(VarlenCase(lengths_q=[1, 4, 0, 7, 2], lengths_k=[33, 9, 5, 70, 2], d=40,
                          dtype=torch.float32, h=8, hk=2, device=device, **FEATURES[feature]))


@pytest.mark.parametrize("feature", ["plain", "causal", "window_left", "alibi_bh", "softcap"])
def test_varlen_few_queries_many_keys(device, feature):
    # few row tiles, keys long enough that the CPU forward splits them
    # (split ranges per sequence: some short, one empty, one without keys)
    skip_unless_device(device, torch.float32)
    run_varlen(VarlenCase(lengths_q=[1, 3, 0, 2, 1], lengths_k=[1500, 20, 700, 2300, 0], d=32,
                          dtype=torch.float32, h=4, hk=2, device=device, **FEATURES[feature]))


@pytest.mark.parametrize("d", [1, 59, 96, 200, 256])
def test_varlen_head_dims(device, d):
    skip_unless_device(device, torch.bfloat16)
    run_varlen(VarlenCase(lengths_q=[3, 40, 0, 17], lengths_k=[50, 1, 9, 17], d=d, h=2,
                          causal=True, device=device))


@pytest.mark.parametrize("extra", [1, 100])
def test_loose_max_seqlen(device, extra):
    # max_seqlen may exceed the longest sequence; S_dmask follows max_seqlen.
    skip_unless_device(device, torch.bfloat16)
    run_varlen(VarlenCase(lengths_q=[5, 33, 12], lengths_k=[40, 7, 12], d=16, causal=True,
                          dropout_p=0.1, extra_max_seqlen=extra, device=device))


@pytest.mark.parametrize("feature", ["plain", "causal", "window", "alibi_bh", "dropout"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_qkvpacked(device, feature, dtype):
    skip_unless_device(device, dtype)
    run_varlen(VarlenCase(lengths_q=[23, 0, 64, 9], d=32, dtype=dtype, device=device,
                          **FEATURES[feature]), api="varlen_qkvpacked")


@pytest.mark.parametrize("feature", ["plain", "causal", "gqa", "alibi_h", "dropout"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_varlen_kvpacked(device, feature, dtype):
    skip_unless_device(device, dtype)
    lq, lk = LENGTHS["empty_q"]
    run_varlen(VarlenCase(lengths_q=lq, lengths_k=lk, d=32, dtype=dtype, device=device,
                          **FEATURES[feature]), api="varlen_kvpacked")


@pytest.mark.parametrize("mode", ["right", "left", "random"])
@pytest.mark.parametrize("causal", [False, True])
def test_padding_masks_through_bert_padding(device, mode, causal):
    # The usual training path: padded batch -> unpad_input -> varlen attention
    # -> pad_input. Padded positions come back 0; real positions match the
    # reference; gradients reach the padded inputs only at real positions.
    skip_unless_device(device, torch.bfloat16)
    b, s, h, d = 4, 45, 3, 32
    lengths = random_lengths(b, s, allow_empty=True)
    lengths[0] = 0                                   # one empty sequence
    mask = padding_mask(lengths, s, mode).to(device)
    x = torch.randn(b, s, 3, h, d, dtype=torch.bfloat16, device=device, requires_grad=True)
    qkv_unpad, indices, cu_seqlens, max_seqlen, used = unpad_input(x.flatten(2), mask)[:5]
    assert cu_seqlens.dtype == torch.int32 and int(max_seqlen) == int(lengths.max())
    qkv_unpad = qkv_unpad.view(-1, 3, h, d)
    out_unpad = flashc.flash_attn_varlen_qkvpacked_func(qkv_unpad, cu_seqlens, int(max_seqlen),
                                                        causal=causal)
    out = pad_input(out_unpad.flatten(1), indices, b, s).view(b, s, h, d)
    assert (out[~mask] == 0).all()
    ref64, ref_lo = padded_reference_out(x.detach(), mask, causal)
    assert_close("out", out, ref64, ref_lo, torch.bfloat16)
    out.backward(torch.randn_like(out))
    assert (x.grad[~mask] == 0).all()
    assert torch.isfinite(x.grad).all()


def test_unpadded_rows_beyond_the_last_sequence(device):
    # cu_seqlens that do not cover every packed row: the uncovered rows are
    # written as rows that see no key (out 0, LSE +inf, zero gradient).
    skip_unless_device(device, torch.bfloat16)
    q, k, v = (torch.randn(20, 2, 16, dtype=torch.bfloat16, device=device, requires_grad=True)
               for _ in range(3))
    cu = torch.tensor([0, 7, 15], dtype=torch.int32, device=device)
    out, lse, _ = flashc.flash_attn_varlen_func(q, k, v, cu, cu, 8, 8, return_attn_probs=True)
    assert (out[15:] == 0).all() and torch.isposinf(lse[:, 15:]).all()
    out.backward(torch.randn_like(out))
    assert (q.grad[15:] == 0).all() and (k.grad[15:] == 0).all() and (v.grad[15:] == 0).all()
    assert torch.isfinite(q.grad).all()


def test_varlen_equals_batched_for_equal_lengths(device):
    skip_unless_device(device, torch.bfloat16)
    b, s, h, d = 3, 41, 2, 48
    q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device=device) for _ in range(3))
    cu = torch.arange(0, (b + 1) * s, s, dtype=torch.int32, device=device)
    kw = dict(causal=True, window_size=(10, 0), alibi_slopes=torch.rand(b, h, device=device))
    batched = flashc.flash_attn_func(q, k, v, **kw)
    varlen = flashc.flash_attn_varlen_func(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1),
                                           cu, cu, s, s, **kw)
    assert torch.equal(batched.flatten(0, 1), varlen)


def test_varlen_back_to_back_reuses_memory(device):
    # Several varlen runs in a row on recycled allocations (the caching
    # allocator hands back dirty memory): results must not depend on it.
    skip_unless_device(device, torch.bfloat16)
    for lengths in ([65, 1, 130, 7], [128, 0, 3], [1, 1, 255]):
        run_varlen(VarlenCase(lengths_q=lengths, lengths_k=lengths[::-1], d=64, h=2,
                              causal=True, device=device))


@pytest.mark.parametrize("lengths_k", [[3, 3], [300, 200]])
def test_all_query_sequences_empty(device, lengths_k):
    # total_q = 0: an empty output, zero dK/dV, also when dout is an
    # expanded (stride 0) view as out.sum() gives; keys of one tile and of
    # many (where the forward would split them).
    skip_unless_device(device, torch.bfloat16)
    total_k = sum(lengths_k)
    q = torch.randn(0, 2, 8, dtype=torch.bfloat16, device=device, requires_grad=True)
    k = torch.randn(total_k, 2, 8, dtype=torch.bfloat16, device=device, requires_grad=True)
    cu_q = torch.tensor([0, 0, 0], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, lengths_k[0], total_k], dtype=torch.int32, device=device)
    out = flashc.flash_attn_varlen_func(q, k, k, cu_q, cu_k, 0, max(lengths_k))
    assert out.shape == (0, 2, 8)
    out.sum().backward()
    assert k.grad.shape == k.shape and (k.grad == 0).all()
