"""The torch.library operators: opcheck (schema, fake implementation,
mutation annotations, AOT dispatch) and torch.compile(fullgraph=True) of
modules that call each API function, forward and backward equal to eager."""

import pytest
import torch

import flashc
from conftest import skip_unless_device
from flashc.flash_attn_interface import _flash_attn_forward, _flash_attn_varlen_forward

OPS = torch.ops.flashc


def randn(*shape, dtype=torch.bfloat16, device="cpu"):
    return torch.randn(*shape, dtype=torch.float32).to(device=device, dtype=dtype)


def forward_args(device, dtype):
    q, k, v = randn(2, 37, 4, 24, dtype=dtype, device=device), \
        randn(2, 45, 2, 24, dtype=dtype, device=device), randn(2, 45, 2, 24, dtype=dtype,
                                                               device=device)
    slopes = torch.rand(4, device=device)
    return (q, k, v, 0.0, 0.2, True, 7, -1, 1.5, slopes, False)


def varlen_args(device, dtype):
    cu_q = torch.tensor([0, 5, 5, 40], dtype=torch.int32, device=device)
    cu_k = torch.tensor([0, 9, 20, 31], dtype=torch.int32, device=device)
    q = randn(40, 4, 24, dtype=dtype, device=device)
    k, v = randn(31, 2, 24, dtype=dtype, device=device), randn(31, 2, 24, dtype=dtype,
                                                               device=device)
    return (q, k, v, cu_q, cu_k, 35, 11, 0.0, 0.2, True, -1, 3, 0.0, None, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_forward(device, dtype):
    skip_unless_device(device, dtype)
    torch.library.opcheck(OPS._flash_attn_forward.default, forward_args(device, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_varlen_forward(device, dtype):
    skip_unless_device(device, dtype)
    torch.library.opcheck(OPS._flash_attn_varlen_forward.default, varlen_args(device, dtype))


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
@pytest.mark.parametrize("with_dlse", [False, True])
def test_opcheck_backward(device, dropout_p, with_dlse):
    skip_unless_device(device, torch.bfloat16)
    q, k, v, _, scale, causal, wl, wr, cap, slopes, _ = forward_args(device, torch.bfloat16)
    cap = 0.0 if dropout_p else cap
    out, lse, _, rng = _flash_attn_forward(q, k, v, dropout_p, scale, causal, wl, wr, cap,
                                           slopes, False)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    kwargs = dict(dlse=torch.randn_like(lse)) if with_dlse else {}
    torch.library.opcheck(OPS._flash_attn_backward.default,
                          (dout, q, k, v, out, lse, dq, dk, dv, dropout_p, scale, causal, wl,
                           wr, cap, slopes, False, rng), kwargs)


@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_opcheck_varlen_backward(device, dropout_p):
    skip_unless_device(device, torch.bfloat16)
    args = varlen_args(device, torch.bfloat16)
    q, k, v, cu_q, cu_k, mq, mk = args[:7]
    out, lse, _, rng = _flash_attn_varlen_forward(q, k, v, cu_q, cu_k, mq, mk, dropout_p, 0.2,
                                                  True, -1, 3)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    torch.library.opcheck(OPS._flash_attn_varlen_backward.default,
                          (torch.randn_like(out), q, k, v, out, lse, dq, dk, dv, cu_q, cu_k, mq,
                           mk, dropout_p, 0.2, True, -1, 3, 0.0, None, False, rng),
                          dict(dlse=torch.randn_like(lse)))


def test_fake_shapes_follow_flash_attn():
    # Under FakeTensorMode the operators report flash_attn's shapes (S_dmask
    # rounded to 128, softmax_d (b, h, round128(sq)) / (h, total_q + 128 b)).
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 130, 4, 40, dtype=torch.bfloat16)
        k = torch.empty(2, 3, 2, 40, dtype=torch.bfloat16)
        out, lse, sd, rng = OPS._flash_attn_forward(q, k, k, 0.1, 0.2, False, -1, -1, 0.0, None,
                                                    True)
        assert out.shape == q.shape and lse.shape == (2, 4, 130) and lse.dtype == torch.float32
        assert sd.shape == (2, 4, 256, 128) and rng.shape == (2,) and rng.dtype == torch.int64
        d = OPS._flash_attn_backward(out, q, k, k, out, lse, None, None, None, 0.1, 0.2, False,
                                     -1, -1, 0.0, None, False, rng)
        assert d.shape == (2, 4, 256)
        qv = torch.empty(50, 4, 40, dtype=torch.bfloat16)
        cu = torch.empty(4, dtype=torch.int32)
        out, lse, sd, rng = OPS._flash_attn_varlen_forward(qv, qv, qv, cu, cu, 20, 129, 0.1, 0.2,
                                                           False, return_softmax=True)
        assert lse.shape == (4, 50) and sd.shape == (3, 4, 128, 256)
        d = OPS._flash_attn_varlen_backward(out, qv, qv, qv, out, lse, None, None, None, cu, cu,
                                            20, 129, 0.1, 0.2, False, -1, -1, 0.0, None, False,
                                            rng)
        assert d.shape == (4, 50 + 128 * 3)


# ---- torch.compile ------------------------------------------------------------------


class Attention(torch.nn.Module):
    """Calls one flashc API function with fixed keyword arguments."""

    def __init__(self, fn, **kwargs):
        super().__init__()
        self.fn, self.kwargs = fn, kwargs

    def forward(self, *args):
        res = self.fn(*args, **self.kwargs)
        if isinstance(res, tuple):         # (out, lse[, S_dmask]): a loss on both
            return res[0], res[1]
        return res, None


def _batched_inputs(device, packed=None):
    q = randn(2, 33, 4, 40, device=device)
    k, v = randn(2, 33, 2, 40, device=device), randn(2, 33, 2, 40, device=device)
    if packed == "qkv":
        return (torch.stack([q, randn(2, 33, 4, 40, device=device),
                             randn(2, 33, 4, 40, device=device)], dim=2),)
    if packed == "kv":
        return q, torch.stack([k, v], dim=2)
    return q, k, v


def _varlen_inputs(device, packed=None, shared_cu=False):
    cu_q = torch.tensor([0, 7, 7, 30], dtype=torch.int32, device=device)
    cu_k = cu_q if shared_cu else torch.tensor([0, 12, 13, 30], dtype=torch.int32, device=device)
    max_k = 23 if shared_cu else 17
    q = randn(30, 4, 40, device=device)
    if packed == "qkv":
        return randn(30, 3, 4, 40, device=device), cu_q, 23
    k, v = randn(30, 2, 40, device=device), randn(30, 2, 40, device=device)
    if packed == "kv":
        return q, torch.stack([k, v], dim=1), cu_q, cu_k, 23, max_k
    return q, k, v, cu_q, cu_k, 23, max_k


def _varlen_inputs_shared_cu(device, packed=None):
    # self-attention code passes one tensor as cu_seqlens_q and cu_seqlens_k
    return _varlen_inputs(device, packed, shared_cu=True)


COMPILE_CASES = {
    "func": (flashc.flash_attn_func, _batched_inputs, None,
             dict(causal=True, softcap=3.0, alibi_slopes=None)),
    "func_return_lse": (flashc.flash_attn_func, _batched_inputs, None,
                        dict(window_size=(5, 2), return_lse=True)),
    "func_dropout": (flashc.flash_attn_func, _batched_inputs, None,
                     dict(dropout_p=0.2, causal=True, return_attn_probs=True)),
    "kvpacked": (flashc.flash_attn_kvpacked_func, _batched_inputs, "kv", dict(causal=True)),
    "qkvpacked": (flashc.flash_attn_qkvpacked_func, _batched_inputs, "qkv",
                  dict(return_lse=True)),
    "varlen": (flashc.flash_attn_varlen_func, _varlen_inputs, None,
               dict(causal=True, return_lse=True)),
    "varlen_kvpacked": (flashc.flash_attn_varlen_kvpacked_func, _varlen_inputs, "kv",
                        dict(window_size=(3, 3))),
    "varlen_qkvpacked": (flashc.flash_attn_varlen_qkvpacked_func, _varlen_inputs, "qkv",
                         dict(dropout_p=0.1, return_attn_probs=True)),
    "varlen_shared_cu_seqlens": (flashc.flash_attn_varlen_func, _varlen_inputs_shared_cu, None,
                                 dict(causal=True)),
    "varlen_kvpacked_shared_cu_seqlens": (flashc.flash_attn_varlen_kvpacked_func,
                                          _varlen_inputs_shared_cu, "kv", dict()),
}


def _run(module, inputs, seed):
    floating = lambda x: isinstance(x, torch.Tensor) and x.is_floating_point()
    leaves = [x.detach().clone().requires_grad_() if floating(x) else x for x in inputs]
    torch.manual_seed(seed)
    out, lse = module(*leaves)
    loss = (out.float() * torch.linspace(-1, 1, out.shape[-1], device=out.device)).sum()
    if lse is not None:
        loss = loss + (lse * 0.1).sum()
    loss.backward()
    return out, lse, [x.grad for x in leaves if floating(x)]


def _compare_compiled(case, device, backend):
    fn, make_inputs, packed, kwargs = COMPILE_CASES[case]
    torch._dynamo.reset()
    module = Attention(fn, **kwargs)
    inputs = make_inputs(device, packed)
    compiled = torch.compile(module, fullgraph=True, backend=backend)
    eager = _run(module, inputs, seed=11)
    got = _run(compiled, inputs, seed=11)
    assert torch.equal(eager[0], got[0]), f"{case}: compiled out differs from eager"
    if eager[1] is not None:
        assert torch.equal(eager[1], got[1]), f"{case}: compiled lse differs from eager"
    for a, b in zip(eager[2], got[2]):
        assert torch.equal(a, b), f"{case}: compiled gradient differs from eager"


@pytest.mark.parametrize("case", list(COMPILE_CASES))
def test_compile_aot_eager(device, case):
    skip_unless_device(device, torch.bfloat16)
    _compare_compiled(case, device, "aot_eager")


@pytest.mark.parametrize("case", ["func", "varlen"])
def test_compile_inductor(device, case):
    skip_unless_device(device, torch.bfloat16)
    _compare_compiled(case, device, "inductor")


def test_compile_merge_attn_states(device):
    skip_unless_device(device, torch.float32)

    def split_and_merge(q, k, v):
        o1, l1 = flashc.flash_attn_func(q, k[:, :20], v[:, :20], return_lse=True)
        o2, l2 = flashc.flash_attn_func(q, k[:, 20:], v[:, 20:], return_lse=True)
        return flashc.merge_attn_states([o1, o2], [l1, l2])

    q, k, v = (torch.randn(1, s, 2, 16, device=device) for s in (15, 50, 50))
    eager = _run(lambda *a: split_and_merge(*a), (q, k, v), 0)
    torch._dynamo.reset()
    got = _run(torch.compile(split_and_merge, fullgraph=True, backend="aot_eager"), (q, k, v), 0)
    assert torch.equal(eager[0], got[0]) and torch.equal(eager[1], got[1])
    for a, b in zip(eager[2], got[2]):
        assert torch.equal(a, b)
