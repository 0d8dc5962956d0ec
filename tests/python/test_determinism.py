"""Repeatability: the forward is bitwise reproducible; deterministic=True
gives bit-identical gradients run to run (the CPU backend always does), and
the CPU results do not depend on the thread count."""

import pytest
import torch

import flashc
from conftest import skip_unless_device


def _problem(device, varlen, gqa=True):
    h, hk = (6, 2) if gqa else (4, 4)
    if varlen:
        cu_q = torch.tensor([0, 67, 67, 200, 201], dtype=torch.int32, device=device)
        cu_k = torch.tensor([0, 130, 131, 260, 261], dtype=torch.int32, device=device)
        q = torch.randn(201, h, 64, dtype=torch.bfloat16, device=device)
        k, v = (torch.randn(261, hk, 64, dtype=torch.bfloat16, device=device) for _ in range(2))
        call = lambda q, k, v, **kw: flashc.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 133, 130,
                                                                   **kw)
    else:
        q = torch.randn(2, 150, h, 64, dtype=torch.bfloat16, device=device)
        k, v = (torch.randn(2, 170, hk, 64, dtype=torch.bfloat16, device=device)
                for _ in range(2))
        call = flashc.flash_attn_func
    return q, k, v, call


def _run(q, k, v, call, seed, **kw):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    torch.manual_seed(seed)
    out, lse = call(*leaves, return_lse=True, **kw)
    g = torch.Generator(device="cpu").manual_seed(seed)
    dout = torch.randn(out.shape, generator=g).to(out)
    dlse = torch.randn(lse.shape, generator=g).to(lse)
    torch.autograd.backward([out, lse], [dout, dlse])
    return [out, lse] + [t.grad for t in leaves]


def _assert_bitwise(a, b, what):
    for name, x, y in zip(("out", "lse", "dq", "dk", "dv"), a, b):
        assert torch.equal(x, y), f"{name} differs between {what}"


@pytest.mark.parametrize("varlen", [False, True])
@pytest.mark.parametrize("dropout_p", [0.0, 0.2])
def test_deterministic_gradients_are_bitwise_repeatable(device, varlen, dropout_p):
    skip_unless_device(device, torch.bfloat16)
    q, k, v, call = _problem(device, varlen)
    kw = dict(causal=True, dropout_p=dropout_p, deterministic=True, alibi_slopes=None)
    runs = [_run(q, k, v, call, seed=5, **kw) for _ in range(3)]
    _assert_bitwise(runs[0], runs[1], "runs")
    _assert_bitwise(runs[0], runs[2], "runs")


def test_cpu_backend_is_deterministic_without_the_flag():
    q, k, v, call = _problem("cpu", varlen=False)
    a = _run(q, k, v, call, seed=1, window_size=(50, 10))
    b = _run(q, k, v, call, seed=1, window_size=(50, 10))
    _assert_bitwise(a, b, "runs with deterministic=False")


def test_dk_dv_are_stable_without_the_flag(device):
    # flash_attn guarantees bitwise-stable dK/dV even when not deterministic
    # (only dQ may use atomics).
    skip_unless_device(device, torch.bfloat16)
    q, k, v, call = _problem(device, varlen=False)
    runs = [_run(q, k, v, call, seed=2, causal=True) for _ in range(3)]
    for r in runs[1:]:
        assert torch.equal(runs[0][0], r[0]) and torch.equal(runs[0][1], r[1])
        assert torch.equal(runs[0][3], r[3]) and torch.equal(runs[0][4], r[4])


@pytest.mark.parametrize("varlen", [False, True])
def test_cpu_results_do_not_depend_on_thread_count(varlen):
    q, k, v, call = _problem("cpu", varlen)
    saved = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(_run(q, k, v, call, seed=3, causal=True, dropout_p=0.1,
                                deterministic=True))
    finally:
        torch.set_num_threads(saved)
    _assert_bitwise(results[0], results[1], "1 and 2 threads")
    _assert_bitwise(results[0], results[2], "1 and 3 threads")


@pytest.mark.parametrize("sq", [1, 2])
def test_cpu_split_keys_do_not_depend_on_thread_count(sq):
    # a decoding step over a long cache: the CPU forward splits the keys by
    # the shape alone, so the bits stay the same on any number of threads
    # (float32 out: the split and unsplit sums differ in bits that bfloat16
    # rounding would hide); sq 1 takes the whole-rows path, sq 2 the tiles
    q = torch.randn(1, sq, 8, 64)
    k_cache = torch.randn(1, 5000, 2, 64)
    v_cache = torch.randn(1, 5000, 2, 64)
    lens = torch.tensor([4321], dtype=torch.int32)
    saved = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            results.append(flashc.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lens,
                                                          causal=True, return_softmax_lse=True))
    finally:
        torch.set_num_threads(saved)
    for other in results[1:]:
        assert torch.equal(results[0][0], other[0]) and torch.equal(results[0][1], other[1])
