"""torch.autograd.gradcheck in float64 on the CPU for every API function and
feature: finite differences of flashc's own forward against its backward.
Dropout is replayed by reseeding before every call (same mask each time)."""

import pytest
import torch

import flashc

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def one_thread():
    """gradcheck makes hundreds of calls on tiny problems, where thread
    start-up and barriers cost more than the work (on a busy machine, far
    more): run them on one thread. Thread counts are tested elsewhere."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)

F64 = torch.float64


def r(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=F64) * scale).requires_grad_()


def seeded(fn, seed=1234):
    """fn with torch.manual_seed(seed) before each call: the dropout mask is
    the same in every evaluation gradcheck makes."""
    def wrapper(*args):
        torch.manual_seed(seed)
        return fn(*args)
    return wrapper


def outputs(res):
    """The differentiable outputs of an API call: out, and the finite entries
    of lse if returned (+inf rows, which see no key, have no derivative)."""
    if isinstance(res, tuple):
        return res[0], res[1][torch.isfinite(res[1])]
    return res


def check(fn, inputs):
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7, rtol=1e-5,
                                    nondet_tol=0.0, fast_mode=False)


FEATURES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(window_size=(2, 1)),
    "softcap": dict(softcap=0.7),
    "alibi_h": dict(alibi_slopes=torch.tensor([0.3, 0.7])),
    "scale": dict(softmax_scale=0.9),
    "dropout": dict(dropout_p=0.3),
    "dropout_causal_alibi": dict(dropout_p=0.4, causal=True,
                                 alibi_slopes=torch.tensor([[0.2, 0.5], [0.9, 0.1]])),
}


@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("return_lse", [False, True])
def test_func(feature, return_lse):
    kw = dict(FEATURES[feature], return_lse=return_lse)
    q, k, v = r(2, 4, 2, 3), r(2, 5, 2, 3), r(2, 5, 2, 3)
    check(seeded(lambda q, k, v: outputs(flashc.flash_attn_func(q, k, v, **kw))), (q, k, v))


@pytest.mark.parametrize("sq,sk", [(6, 3), (1, 4), (4, 1)])
def test_func_masked_rows_and_gqa(sq, sk):
    # rows that see no key (causal, sq > sk) and GQA (4 query heads on 2)
    q, k, v = r(1, sq, 4, 3), r(1, sk, 2, 3), r(1, sk, 2, 3)
    check(lambda q, k, v: flashc.flash_attn_func(q, k, v, causal=True), (q, k, v))


def test_func_lse_with_masked_rows():
    # LSE of a row that sees no key is +inf: gradcheck on the finite rows
    q, k, v = r(1, 5, 2, 3), r(1, 2, 2, 3), r(1, 2, 2, 3)

    def fn(q, k, v):
        out, lse = flashc.flash_attn_func(q, k, v, causal=True, return_lse=True)
        return out, lse[..., 3:]
    check(fn, (q, k, v))


@pytest.mark.parametrize("feature", ["plain", "causal", "softcap", "dropout"])
def test_qkvpacked(feature):
    kw = dict(FEATURES[feature], return_lse=True)
    qkv = r(2, 4, 3, 2, 3)
    check(seeded(lambda qkv: outputs(flashc.flash_attn_qkvpacked_func(qkv, **kw))), (qkv,))


@pytest.mark.parametrize("feature", ["plain", "window", "alibi_h", "dropout"])
def test_kvpacked(feature):
    kw = FEATURES[feature]
    q, kv = r(2, 3, 2, 3), r(2, 5, 2, 1, 3)          # MQA: one kv head
    check(seeded(lambda q, kv: outputs(flashc.flash_attn_kvpacked_func(q, kv, **kw))), (q, kv))


CU_Q = torch.tensor([0, 3, 3, 7], dtype=torch.int32)     # lengths 3, 0, 4
CU_K = torch.tensor([0, 2, 5, 5], dtype=torch.int32)     # lengths 2, 3, 0


@pytest.mark.parametrize("feature", ["plain", "causal", "softcap", "dropout", "alibi_bh"])
@pytest.mark.parametrize("return_lse", [False, True])
def test_varlen(feature, return_lse):
    kw = dict(FEATURES.get(feature, {}), return_lse=return_lse)
    if feature == "alibi_bh":
        kw["alibi_slopes"] = torch.rand(3, 2)
    q, k, v = r(7, 2, 3), r(5, 1, 3), r(5, 1, 3)

    def fn(q, k, v):
        res = flashc.flash_attn_varlen_func(q, k, v, CU_Q, CU_K, 4, 3, **kw)
        return outputs(res)
    check(seeded(fn), (q, k, v))


@pytest.mark.parametrize("feature", ["plain", "causal", "dropout"])
def test_varlen_qkvpacked(feature):
    kw = FEATURES[feature]
    cu = torch.tensor([0, 4, 5, 8], dtype=torch.int32)
    qkv = r(8, 3, 2, 3)
    check(seeded(lambda qkv: flashc.flash_attn_varlen_qkvpacked_func(qkv, cu, 4, **kw)), (qkv,))


@pytest.mark.parametrize("feature", ["plain", "window", "dropout"])
def test_varlen_kvpacked(feature):
    kw = dict(FEATURES[feature], return_lse=True)
    q, kv = r(7, 2, 3), r(5, 2, 2, 3)
    cu_k = torch.tensor([0, 2, 4, 5], dtype=torch.int32)

    check(seeded(lambda q, kv: outputs(flashc.flash_attn_varlen_kvpacked_func(
        q, kv, CU_Q, cu_k, 4, 2, **kw))), (q, kv))


@pytest.mark.parametrize("parts", [2, 3])
def test_merge_attn_states(parts):
    outs = [r(2, 3, 2, 4) for _ in range(parts)]
    lses = [r(2, 2, 3, scale=2.0) for _ in range(parts)]
    check(lambda *xs: flashc.merge_attn_states(list(xs[:parts]), list(xs[parts:])),
          tuple(outs + lses))


def test_merge_attn_states_varlen_layout_with_an_empty_part():
    outs = [r(5, 2, 3), torch.zeros(5, 2, 3, dtype=F64, requires_grad=True)]
    empty = torch.full((2, 5), float("inf"), dtype=F64)
    lse = r(2, 5)
    check(lambda o0, l0: flashc.merge_attn_states([o0, outs[1]], [l0, empty]), (outs[0], lse))


def test_lower_layer_backward_is_the_gradient():
    # The second derivative is not provided; the first one through the
    # lower-layer ops with an explicit rng_state equals finite differences.
    from flashc.flash_attn_interface import _flash_attn_backward, _flash_attn_forward
    q, k, v = (torch.randn(1, 4, 2, 3, dtype=F64) for _ in range(3))
    torch.manual_seed(9)
    out, lse, _, rng = _flash_attn_forward(q, k, v, 0.25, 0.6, True, -1, -1, 0.0, None, False)
    dout = torch.randn_like(out)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    _flash_attn_backward(dout, q, k, v, out, lse, dq, dk, dv, 0.25, 0.6, True, -1, -1, 0.0, None,
                         False, rng)
    # finite differences of <dout, out(q)> with the same mask
    eps = 1e-6
    for x, g in ((q, dq), (k, dk), (v, dv)):
        idx = (0, 2, 1, 1)
        saved = x[idx].item()
        vals = []
        for delta in (eps, -eps):
            x[idx] = saved + delta
            torch.manual_seed(9)
            o = _flash_attn_forward(q, k, v, 0.25, 0.6, True, -1, -1, 0.0, None, False)[0]
            vals.append((o * dout).sum().item())
        x[idx] = saved
        assert abs((vals[0] - vals[1]) / (2 * eps) - g[idx].item()) < 1e-6
