"""flashc behind PyTorch's SDPA (flashc.sdpa): the registration import
flashc makes, activation and restoration, and on a GPU the results of
F.scaled_dot_product_attention and varlen_attn with the implementation
active against flashc called directly, the kernels that run, what falls
back, and a small transformer block trained both ways."""
import contextlib
import importlib.util

import pytest
import torch
import torch.nn.functional as F

import flashc
from flashc import sdpa
from checks import cu_seqlens_from_lengths
from conftest import skip_unless_device

attention = torch.nn.attention
needs_registry = pytest.mark.skipif(not flashc.sdpa_available(),
                                    reason="this torch has no flash-attention registry")


@contextlib.contextmanager
def flashc_active():
    attention.activate_flash_attention_impl("flashc")
    try:
        yield
    finally:
        attention.restore_flash_attention_impl()


def flash_backend():
    return attention.sdpa_kernel(attention.SDPBackend.FLASH_ATTENTION)


# ---- everywhere (CPU CI included) -------------------------------------------------


@needs_registry
def test_import_registers_but_does_not_activate():
    assert sdpa.IMPL_NAME in attention.list_flash_attention_impls()
    assert attention.current_flash_attention_impl() != "flashc"


@needs_registry
def test_activate_and_restore_leave_cpu_sdpa_alone():
    q, k, v = (torch.randn(2, 3, 17, 16) for _ in range(3))
    before = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    with flashc_active():
        assert attention.current_flash_attention_impl() == "flashc"
        assert torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True), before)
        # activating again replaces the first activation
        attention.activate_flash_attention_impl("flashc")
    assert attention.current_flash_attention_impl() is None
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, is_causal=True), before)


def test_without_registry(monkeypatch):
    """On a torch without the registry nothing is registered and the rest of
    the package works as before."""
    monkeypatch.setattr(sdpa, "_REGISTER", None)
    assert not sdpa.available()
    assert not flashc.sdpa_available()
    sdpa._register()  # import flashc's call: a no-op here
    q = torch.randn(1, 9, 2, 8)
    assert flashc.flash_attn_func(q, q, q).shape == q.shape


def test_window_follows_flash_attention_2():
    assert sdpa._window(False, None, None, 100) == (-1, -1)
    assert sdpa._window(True, None, None, 100) == (-1, 0)
    assert sdpa._window(True, 7, None, 100) == (7, 0)
    assert sdpa._window(False, 100, 99, 100) == (-1, 99)  # a bound >= seqlen_k is dropped
    assert sdpa._window(False, 3, 250, 100) == (3, -1)


def test_empty_like_layout_keeps_dimension_order():
    base = torch.empty(2, 7, 3, 40)  # (b, s, h, d) seen as (b, h, s, d)
    query = base.transpose(1, 2)
    out = sdpa._empty_like_layout(query, 24)
    assert out.shape == (2, 3, 7, 24)
    assert out.transpose(1, 2).is_contiguous()
    same = sdpa._empty_like_layout(query, 40)
    assert same.stride() == query.stride()


def test_cpu_tensors_are_not_served():
    q = torch.randn(1, 4, 2, 8, dtype=torch.bfloat16)
    assert sdpa._unsupported((q, q, q), (8, 8), 2, 2) == "not a CUDA tensor"


# ---- on a GPU ------------------------------------------------------------------------


def cuda_inputs(b, h, hk, sq, sk, d, dv=None, dtype=torch.bfloat16):
    """(b, h, s, d) SDPA views of (b, s, h, d) tensors, leaves."""
    q = torch.randn(b, sq, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype).transpose(1, 2)
    v = torch.randn(b, sk, hk, dv or d, device="cuda", dtype=dtype).transpose(1, 2)
    return [t.requires_grad_() for t in (q, k, v)]


def grads_of(out, inputs, dout):
    return torch.autograd.grad(out, inputs, dout)


def assert_grads_match(grads, wanted):
    """dK and dV bit for bit (stable run to run); dQ is summed by atomics."""
    assert torch.equal(grads[1], wanted[1]) and torch.equal(grads[2], wanted[2])
    torch.testing.assert_close(grads[0], wanted[0], atol=2e-2, rtol=2e-2)


def flashc_direct(q, k, v, causal, dropout_p=0.0, deterministic=False):
    """flashc.flash_attn_func on the (b, s, h, d) views of SDPA's tensors."""
    out = flashc.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 dropout_p=dropout_p, causal=causal,
                                 deterministic=deterministic)
    return out.transpose(1, 2)


SHAPES = [  # b, h, hk, sq, sk, d, dv, causal
    (2, 4, 4, 128, 128, 64, 64, True),
    (1, 8, 2, 200, 200, 128, 128, True),     # GQA, lengths on no tile boundary
    (3, 2, 2, 77, 301, 64, 64, False),       # sq != sk
    (1, 4, 1, 1, 513, 128, 128, False),      # one query token, MQA
    (2, 2, 2, 96, 96, 40, 40, True),         # head dim SDPA pads to 48
    (1, 2, 2, 64, 64, 256, 256, False),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@needs_registry
def test_sdpa_matches_flashc(shape, dtype):
    skip_unless_device("cuda")
    b, h, hk, sq, sk, d, dv, causal = shape
    q, k, v = cuda_inputs(b, h, hk, sq, sk, d, dv, dtype)
    gqa = dict(enable_gqa=True) if h != hk else {}
    sdpa.fallback_counts(reset=True)
    with flashc_active(), flash_backend():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)
        dout = torch.randn_like(out)
        dq, dk, dv_ = grads_of(out, (q, k, v), dout)
    assert sdpa.fallback_counts() == {}, "flashc served every call"
    want = flashc_direct(q, k, v, causal)
    wq, wk, wv = grads_of(want, (q, k, v), dout)
    assert torch.equal(out, want)
    assert_grads_match((dq, dk, dv_), (wq, wk, wv))
    # and both against PyTorch's math backend in float32
    with attention.sdpa_kernel(attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal,
                                             **gqa)
    torch.testing.assert_close(out.float(), ref, atol=2e-2, rtol=2e-2)


@needs_registry
def test_sdpa_deterministic_mode_is_bitwise_reproducible():
    skip_unless_device("cuda")
    q, k, v = cuda_inputs(2, 4, 4, 300, 300, 128)
    dout = torch.randn_like(q)
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with flashc_active(), flash_backend():
            runs = [grads_of(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v),
                             dout) for _ in range(3)]
    finally:
        torch.use_deterministic_algorithms(False)
    for other in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], other))


@needs_registry
def test_sdpa_dropout_is_flashc_dropout():
    """The same generator state gives the same mask as flashc's own call;
    the backward replays it."""
    skip_unless_device("cuda")
    q, k, v = cuda_inputs(2, 4, 4, 150, 150, 64)
    dout = torch.randn_like(q)
    sdpa.fallback_counts(reset=True)
    torch.manual_seed(5)
    with flashc_active(), flash_backend():
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3, is_causal=True)
        grads = grads_of(out, (q, k, v), dout)
    assert sdpa.fallback_counts() == {}
    torch.manual_seed(5)
    want = flashc_direct(q, k, v, True, dropout_p=0.3)
    wgrads = grads_of(want, (q, k, v), dout)
    assert torch.equal(out, want)
    assert_grads_match(grads, wgrads)


@needs_registry
def test_sdpa_under_torch_compile():
    """A compiled function's SDPA calls run flashc's kernels too (inductor
    calls the operators at run time): the eager results, bit for bit for
    out, dK and dV."""
    skip_unless_device("cuda")
    q, k, v = cuda_inputs(2, 4, 4, 200, 200, 64)
    dout = torch.randn_like(q)

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out, torch.autograd.grad(out, (q, k, v), dout)

    sdpa.fallback_counts(reset=True)
    with flashc_active(), flash_backend():
        want, wgrads = step(q, k, v)
        torch._dynamo.reset()
        got, grads = torch.compile(step)(q, k, v)
    assert sdpa.fallback_counts() == {}
    assert torch.equal(got, want)
    assert_grads_match(grads, wgrads)


@needs_registry
def test_profiler_shows_flashc_kernels():
    skip_unless_device("cuda")
    from torch.profiler import ProfilerActivity, profile
    q, k, v = cuda_inputs(2, 4, 4, 256, 256, 128)
    with flashc_active(), flash_backend():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
            torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages()]
    assert any("flashc" in n and "fwd" in n for n in names), names
    assert any("flashc" in n and "bwd" in n for n in names), names
    assert not any("flash_fwd" in n or "flash_bwd" in n for n in names), names


@needs_registry
def test_unserved_calls_fall_back_to_pytorch():
    """return_debug_mask, and the backward of a dropout forward that
    PyTorch's kernel ran, go to PyTorch's kernels: their results, not
    flashc's. (PyTorch's SDPA kernel calls _flash_attention_forward /
    _backward in turn, which fall back as well.)"""
    skip_unless_device("cuda")
    q, k, v = cuda_inputs(1, 2, 2, 128, 128, 64)
    op = torch.ops.aten._scaled_dot_product_flash_attention
    torch.manual_seed(3)
    want = op(q, k, v, 0.2, True, True)  # PyTorch takes return_debug_mask with dropout only
    dout = torch.randn_like(want[0])
    wgrads = grads_of(want[0], (q, k, v), dout)
    sdpa.fallback_counts(reset=True)
    with flashc_active():
        torch.manual_seed(3)
        got = op(q, k, v, 0.2, True, True)
        grads = grads_of(got[0], (q, k, v), dout)
    counts = sdpa.fallback_counts()
    assert set(counts) == {"return_debug_mask", "dropout forward by PyTorch's kernel"}, counts
    assert torch.equal(got[0], want[0]) and torch.equal(got[-1], want[-1])
    assert_grads_match(grads, wgrads)


@needs_registry
@pytest.mark.skipif(importlib.util.find_spec("torch.nn.attention.varlen") is None,
                    reason="no torch.nn.attention.varlen")
def test_varlen_attn_matches_flashc():
    skip_unless_device("cuda")
    import inspect
    from torch.nn.attention.varlen import varlen_attn
    # causal is window_size=(-1, 0) in torch 2.11, is_causal=True later
    causal = (dict(is_causal=True) if "is_causal" in inspect.signature(varlen_attn).parameters
              else dict(window_size=(-1, 0)))
    lengths = [37, 1, 128, 90]
    cu = cu_seqlens_from_lengths(lengths, "cuda")
    total, h, d = sum(lengths), 4, 64
    q, k, v = (torch.randn(total, h, d, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    sdpa.fallback_counts(reset=True)
    with flashc_active():
        out = varlen_attn(q, k, v, cu, cu, max(lengths), max(lengths), **causal)
        dout = torch.randn_like(out)
        grads = grads_of(out, (q, k, v), dout)
    assert sdpa.fallback_counts() == {}
    want = flashc.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths),
                                         causal=True)
    wgrads = grads_of(want, (q, k, v), dout)
    assert torch.equal(out, want)
    assert_grads_match(grads, wgrads)


@needs_registry
def test_flash_attention_operators_with_window_and_alibi():
    """aten::_flash_attention_forward / _backward (dense), as PyTorch's own
    callers use them: a window, ALiBi slopes, GQA; against flashc directly
    with FlashAttention-2's window rule (a bound >= seqlen_k is dropped)."""
    skip_unless_device("cuda")
    b, sq, sk, h, hk, d = 2, 150, 150, 4, 2, 64
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, sk, hk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    slopes = torch.rand(h, device="cuda")
    fwd = torch.ops.aten._flash_attention_forward
    bwd = torch.ops.aten._flash_attention_backward
    sdpa.fallback_counts(reset=True)
    with flashc_active():
        out, lse, rng, unused, _ = fwd(q, k, v, None, None, sq, sk, 0.0, True, False, scale=0.2,
                                       window_size_left=40, window_size_right=None,
                                       alibi_slopes=slopes)
        dout = torch.randn_like(out)
        dq, dk, dv = bwd(dout, q, k, v, out, lse, None, None, sq, sk, 0.0, True, rng, unused,
                         scale=0.2, window_size_left=40, window_size_right=None)
    assert sdpa.fallback_counts() == {}
    want, want_lse = flashc.flash_attn_func(q, k, v, softmax_scale=0.2, causal=True,
                                            window_size=(40, 0), alibi_slopes=slopes,
                                            return_lse=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    # (the operator's backward has no ALiBi argument: compare that part without it)
    with flashc_active():
        out, lse, rng, unused, _ = fwd(q, k, v, None, None, sq, sk, 0.0, True, False, scale=0.2,
                                       window_size_left=400, window_size_right=None)
        grads = bwd(dout, q, k, v, out, lse, None, None, sq, sk, 0.0, True, rng, unused,
                    scale=0.2, window_size_left=400, window_size_right=None)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = flashc.flash_attn_func(*leaves, softmax_scale=0.2, causal=True)
    assert torch.equal(out, ref.detach())
    wgrads = torch.autograd.grad(ref, leaves, dout)
    assert_grads_match(grads, wgrads)
    assert all(torch.isfinite(g).all() for g in (dq, dk, dv))


class Block(torch.nn.Module):
    """A pre-norm transformer block that attends through SDPA."""

    def __init__(self, width=256, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, -1).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


def train_losses(active, steps=30):
    torch.manual_seed(0)
    model = torch.nn.Sequential(Block(), Block()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.randn(4, 192, 256, device="cuda")
    target = torch.randn(4, 192, 256, device="cuda")
    losses = []
    context = flashc_active() if active else contextlib.nullcontext()
    with context, flash_backend():
        for _ in range(steps):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.mse_loss(model(data).float(), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses


@needs_registry
def test_small_block_trains_the_same():
    skip_unless_device("cuda")
    sdpa.fallback_counts(reset=True)
    with_flashc = train_losses(True)
    assert sdpa.fallback_counts() == {}
    without = train_losses(False)
    assert with_flashc[-1] < 0.9 * with_flashc[0], "the loss went down"
    for a, b in zip(with_flashc, without):
        assert abs(a - b) <= 0.02 * abs(b) + 1e-3, (with_flashc, without)
