"""flash_attn_qkvpacked_func and flash_attn_kvpacked_func: results and
gradients that land in the packed tensors."""

import pytest
import torch

import flashc
from cases import Case, run_batched
from conftest import skip_unless_device

FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window=(6, 2)),
    "softcap": dict(softcap=2.0, q_scale=2.0),
    "alibi": dict(alibi="bh", causal=True),
    "dropout": dict(dropout_p=0.2),
}


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qkvpacked(device, feature, dtype):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=67, sk=67, d=40, dtype=dtype, device=device, **FEATURES[feature]),
                api="qkvpacked")


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("sq,sk,h,hk", [(45, 90, 4, 4), (90, 45, 6, 2)])
def test_kvpacked(device, feature, dtype, sq, sk, h, hk):
    skip_unless_device(device, dtype)
    run_batched(Case(sq=sq, sk=sk, h=h, hk=hk, d=24, dtype=dtype, device=device,
                     **FEATURES[feature]), api="kvpacked")


def test_packed_gradients_equal_unpacked(device):
    # The same problem through the three batched entry points gives the same
    # bits: the packed variants differ only in where the data lives.
    skip_unless_device(device, torch.bfloat16)
    q, k, v = (torch.randn(2, 33, 4, 56, dtype=torch.bfloat16, device=device) for _ in range(3))
    dout = torch.randn_like(q)
    kw = dict(causal=True, softcap=3.0)

    qkv = torch.stack([q, k, v], dim=2).requires_grad_()
    flashc.flash_attn_qkvpacked_func(qkv, **kw).backward(dout)
    q1, kv = q.clone().requires_grad_(), torch.stack([k, v], dim=2).requires_grad_()
    flashc.flash_attn_kvpacked_func(q1, kv, **kw).backward(dout)
    q2, k2, v2 = (t.clone().requires_grad_() for t in (q, k, v))
    flashc.flash_attn_func(q2, k2, v2, **kw).backward(dout)

    assert qkv.grad.shape == qkv.shape and kv.grad.shape == kv.shape
    for i, t in enumerate((q2, k2, v2)):
        assert torch.equal(qkv.grad[:, :, i], t.grad)
    assert torch.equal(q1.grad, q2.grad)
    assert torch.equal(kv.grad[:, :, 0], k2.grad) and torch.equal(kv.grad[:, :, 1], v2.grad)


def test_packed_views_of_a_larger_buffer(device):
    # qkv as a view into a wider buffer (a fused projection's output): the
    # gradient flows back into the right slice of the buffer, zero elsewhere.
    skip_unless_device(device, torch.bfloat16)
    buf = torch.randn(2, 29, 4 * 3 * 32 + 8, dtype=torch.bfloat16, device=device,
                      requires_grad=True)
    qkv = buf[..., :4 * 3 * 32].view(2, 29, 3, 4, 32)
    out = flashc.flash_attn_qkvpacked_func(qkv, causal=True)
    out.sum().backward()
    assert (buf.grad[..., 4 * 3 * 32:] == 0).all()
    q, k, v = (qkv[:, :, i].detach().clone().requires_grad_() for i in range(3))
    flashc.flash_attn_func(q, k, v, causal=True).sum().backward()
    grad = buf.grad[..., :4 * 3 * 32].view(2, 29, 3, 4, 32)
    assert torch.equal(grad[:, :, 0], q.grad) and torch.equal(grad[:, :, 1], k.grad)
    assert torch.equal(grad[:, :, 2], v.grad)
