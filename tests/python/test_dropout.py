"""Dropout: the mask recovered from S_dmask reproduces out and gradients, the
drop rate is p, torch.manual_seed makes it repeatable, successive calls draw
new masks."""

import pytest
import torch

import flashc
from cases import Case, run_batched
from checks import assert_lse_close
from conftest import skip_unless_device
from reference import visible_mask

FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(7, 2)),
    "alibi": dict(alibi="h", causal=True),
    "gqa": dict(h=6, hk=2),
    "scale": dict(scale=0.3),
    "softcap": dict(softcap=3.0, q_scale=2.0),
}


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_dropout_matches_reference(device, p, feature):
    skip_unless_device(device, torch.bfloat16)
    run_batched(Case(sq=61, sk=97, d=32, dropout_p=p, device=device, **FEATURES[feature]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("sq,sk", [(1, 129), (129, 1), (128, 128), (65, 63)])
def test_dropout_dtypes_and_shapes(device, dtype, sq, sk):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=sq, sk=sk, d=24, dtype=dtype, causal=sq > sk, dropout_p=0.3,
                     device=device))


def test_dropout_with_return_lse(device):
    skip_unless_device(device, torch.bfloat16)
    # LSE is pre-dropout, and with return_lse the mask is the one of a
    # same-seed call that returns S_dmask.
    b, s, h, d, p = 2, 50, 3, 32, 0.4
    q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device=device) for _ in range(3))
    torch.manual_seed(1234)
    out_a, lse_a, sd = flashc.flash_attn_func(q, k, v, dropout_p=p, return_attn_probs=True)
    torch.manual_seed(1234)
    out_b, lse_b = flashc.flash_attn_func(q, k, v, dropout_p=p, return_lse=True)
    torch.manual_seed(1234)
    out_c = flashc.flash_attn_func(q, k, v, dropout_p=p)
    lse_nodrop = flashc.flash_attn_func(q, k, v, return_lse=True)[1]
    assert torch.equal(out_a, out_b) and torch.equal(out_a, out_c)
    assert torch.equal(lse_a, lse_b)
    # the same value as without dropout (a kernel variant may round differently)
    assert_lse_close("lse with dropout", lse_a.cpu(), lse_nodrop.cpu().double())
    assert sd.shape == (b, h, 128, 128)


@pytest.mark.parametrize("p", [0.17, 0.5, 0.83])
def test_drop_rate(device, p):
    skip_unless_device(device, torch.bfloat16)
    b, sq, sk, h = 2, 100, 120, 4
    q, k, v = (torch.randn(b, s, h, 16, dtype=torch.bfloat16, device=device)
               for s in (sq, sk, sk))
    _, _, sd = flashc.flash_attn_func(q, k, v, dropout_p=p, causal=True, return_attn_probs=True)
    vis = visible_mask(sq, sk, causal=True).to(device)
    dropped = torch.signbit(sd[:, :, :sq, :sk])[:, :, vis]
    n = dropped.numel()
    rate = dropped.float().mean().item()
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(rate - p) < 6 * sigma, f"drop rate {rate:.4f} for p={p} ({n} entries)"
    # masks of different batch entries and heads are not copies of each other
    per_head = torch.signbit(sd[:, :, :sq, :sk]).flatten(0, 1)
    for i in range(1, per_head.shape[0]):
        assert not torch.equal(per_head[0], per_head[i])


def test_manual_seed_repeats_and_successive_calls_differ(device):
    skip_unless_device(device, torch.bfloat16)
    q, k, v = (torch.randn(2, 70, 2, 32, dtype=torch.bfloat16, device=device, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)

    def run():
        out, lse, sd = flashc.flash_attn_func(q, k, v, dropout_p=0.3, causal=True,
                                              return_attn_probs=True)
        grads = torch.autograd.grad(out, (q, k, v), dout)
        return out, sd, grads

    torch.manual_seed(77)
    a = run()
    torch.manual_seed(77)
    b = run()
    c = run()
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for x, y in zip(a[2], b[2]):
        assert torch.equal(x, y)
    assert not torch.equal(torch.signbit(b[1]), torch.signbit(c[1])), \
        "two successive calls drew the same dropout mask"
    assert not torch.equal(b[0], c[0])


def test_rng_state_of_the_lower_layer(device):
    skip_unless_device(device, torch.bfloat16)
    from flashc.flash_attn_interface import _flash_attn_forward
    q = torch.randn(1, 40, 2, 16, dtype=torch.bfloat16, device=device)
    args = (q, q, q, 0.5, 0.25, False, -1, -1, 0.0, None, True)
    torch.manual_seed(5)
    out1, lse1, sd1, rng1 = _flash_attn_forward(*args)
    out2, lse2, sd2, rng2 = _flash_attn_forward(*args)
    torch.manual_seed(5)
    out3, lse3, sd3, rng3 = _flash_attn_forward(*args)
    for r in (rng1, rng2, rng3):
        assert r.shape == (2,) and r.dtype == torch.int64
    assert torch.equal(rng1, rng3) and not torch.equal(rng1, rng2)
    assert torch.equal(sd1, sd3) and torch.equal(out1, out3)
    assert not torch.equal(torch.signbit(sd1), torch.signbit(sd2))


def test_backward_replays_the_forward_mask_after_other_rng_use(device):
    # The backward regenerates the mask from the saved rng_state, not from
    # the generator's current state: drawing random numbers between forward
    # and backward changes nothing.
    skip_unless_device(device, torch.bfloat16)
    q, k, v = (torch.randn(2, 45, 2, 32, dtype=torch.bfloat16, device=device, requires_grad=True)
               for _ in range(3))
    dout = torch.randn_like(q)
    torch.manual_seed(3)
    out = flashc.flash_attn_func(q, k, v, dropout_p=0.4)
    g1 = torch.autograd.grad(out, (q, k, v), dout)
    torch.manual_seed(3)
    out = flashc.flash_attn_func(q, k, v, dropout_p=0.4)
    torch.rand(1000, device=device)
    flashc.flash_attn_func(q, k, v, dropout_p=0.4)      # another dropout call in between
    g2 = torch.autograd.grad(out, (q, k, v), dout)
    for a, b in zip(g1, g2):
        assert torch.equal(a, b)


def test_no_dropout_gives_empty_sdmask(device):
    skip_unless_device(device, torch.bfloat16)
    q = torch.randn(1, 9, 2, 16, dtype=torch.bfloat16, device=device)
    out, lse, sd = flashc.flash_attn_func(q, q, q, return_attn_probs=True)
    assert sd.numel() == 0
    torch.manual_seed(0)
    a = torch.rand(3, device=device)
    torch.manual_seed(0)
    flashc.flash_attn_func(q, q, q)
    assert torch.equal(torch.rand(3, device=device), a), "a call without dropout consumed random numbers"
