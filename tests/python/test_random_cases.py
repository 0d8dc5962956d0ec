"""Random problems: every feature drawn together with random sizes, through
flash_attn_func and flash_attn_varlen_func, forward and backward against
the float64 reference. The fixed grids of the other tests take one or two
features at a time on chosen sizes; these draw combinations nobody listed
(GQA with a window and softcap and dropout on a prime length, say) and
sizes that cross several key and query blocks, where the kernels' multi-
block paths and their last partial blocks meet.

Each case is drawn from the test's seed (conftest.seeded), so a failure
names its parameters and reruns the same way; FLASHC_TEST_SEED=N draws
other cases, FLASHC_TEST_FULL=1 more of them."""

import random

import pytest
import torch

from cases import Case, VarlenCase, run_batched, run_varlen
from conftest import FULL, skip_unless_device
from test_kvcache import paged_varlen_case, run_case

# head dims: every compiled configuration of the CUDA kernels (64, 96, 128,
# 192, 256) and sizes between them, padded up to the next one
HEAD_DIMS = [8, 24, 40, 59, 64, 72, 80, 96, 100, 128, 136, 160, 192, 200, 256]
# lengths at and around the kernels' tile sizes (32 - 256 rows / keys)
TILE_EDGES = [31, 32, 33, 63, 64, 65, 127, 128, 129, 191, 255, 256, 257]

CASES = 96 if FULL else 24


def _length(rng: random.Random, longest: int) -> int:
    pick = rng.random()
    if pick < 0.15:
        return rng.randint(1, 4)
    if pick < 0.45:
        return rng.choice([e for e in TILE_EDGES if e <= longest] or [longest])
    return rng.randint(1, longest)


def _features(rng: random.Random, sq: int, sk: int) -> dict:
    """Masks and logit rules, each on with its own chance, any of them
    together."""
    f = {}
    if rng.random() < 0.5:
        f["causal"] = True
    if rng.random() < 0.3:
        # left / right bounds past either length too (-1: unbounded)
        f["window"] = (rng.choice([-1, 0, rng.randint(1, sk + 20)]),
                       rng.choice([-1, 0, rng.randint(1, sq + 20)]))
    if rng.random() < 0.25:
        f["softcap"] = rng.choice([0.5, 5.0, 30.0])
        f["q_scale"] = 2.0
    if rng.random() < 0.25:
        f["alibi"] = rng.choice(["h", "bh"])
    if rng.random() < 0.2:
        f["dropout_p"] = rng.choice([0.1, 0.4])
    if rng.random() < 0.2:
        f["deterministic"] = True
    if rng.random() < 0.15:
        # a negative scale flips which scores are largest
        f["scale"] = rng.choice([0.05, 0.3, -0.1])
    return f


def _heads(rng: random.Random):
    hk = rng.choice([1, 2, 3])
    return hk * rng.choice([1, 2, 4]), hk


def _dtypes(device):
    return [torch.bfloat16, torch.float16] if device == "cuda" else \
        [torch.float64, torch.float32, torch.bfloat16, torch.float16]


def _draw(device, seed):
    """The case's random source and dtype; skips where the device cannot
    run that dtype."""
    rng = random.Random(seed)
    dtype = rng.choice(_dtypes(device))
    skip_unless_device(device, dtype)
    return rng, dtype


def _run(description, run, *args, **kwargs):
    """run(*args, **kwargs), a failure naming the drawn case."""
    try:
        run(*args, **kwargs)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n  case: {description}") from exc


@pytest.mark.parametrize("index", range(CASES))
def test_random_batched(device, seeded, index):
    rng, dtype = _draw(device, seeded)
    # the CPU's reference and kernels are slower: shorter sequences there
    longest = 700 if device == "cuda" else 260
    sq, sk = _length(rng, longest), _length(rng, longest)
    h, hk = _heads(rng)
    case = Case(sq=sq, sk=sk, d=rng.choice(HEAD_DIMS), dtype=dtype, b=rng.randint(1, 3), h=h, hk=hk,
                device=device, **_features(rng, sq, sk))
    _run(case, run_batched, case, return_lse=rng.random() < 0.3)


@pytest.mark.parametrize("index", range(CASES))
def test_random_varlen(device, seeded, index):
    rng, dtype = _draw(device, seeded)
    longest = 500 if device == "cuda" else 200
    b = rng.randint(1, 5)
    # empty sequences on either side too
    lengths_q = [0 if rng.random() < 0.1 else _length(rng, longest) for _ in range(b)]
    lengths_k = [0 if rng.random() < 0.1 else _length(rng, longest) for _ in range(b)]
    if sum(lengths_q) == 0:
        lengths_q[0] = 1
    h, hk = _heads(rng)
    case = VarlenCase(lengths_q=lengths_q, lengths_k=lengths_k, d=rng.choice(HEAD_DIMS), dtype=dtype,
                      h=h, hk=hk, device=device, extra_max_seqlen=rng.choice([0, 0, 7]),
                      **_features(rng, max(lengths_q), max(lengths_k)))
    _run(case, run_varlen, case, return_lse=rng.random() < 0.3)


# flash_attn_with_kvcache: cache layouts and every argument drawn together
KV_BLOCK_SIZES = [0, 0, 16, 64, 256, 48]   # 0: a contiguous cache


@pytest.mark.parametrize("index", range(CASES))
def test_random_kvcache(device, seeded, index):
    rng, dtype = _draw(device, seeded)
    block_size = rng.choice(KV_BLOCK_SIZES)
    capacity = (rng.randint(1, 12) * block_size) if block_size else rng.randint(1, 1200)
    batch = rng.randint(1, 4)
    sq = rng.choice([1, 1, 1, rng.randint(2, 9)])
    s_new = rng.choice([0, 1, sq, rng.randint(1, 9)])
    s_new = min(s_new, capacity)
    # cached rows before the append, from empty to the last that leaves room
    seqlens = [rng.choice([0, capacity - s_new, rng.randint(0, capacity - s_new)]) for _ in range(batch)]
    leftpad = [rng.randint(0, n) for n in seqlens] if rng.random() < 0.25 else None
    cache_batch = batch_idx = None
    if not block_size and rng.random() < 0.25:   # cache_batch_idx: contiguous caches only
        cache_batch = batch + rng.randint(0, 3)
        batch_idx = rng.sample(range(cache_batch), batch)
    hk = rng.choice([1, 2, 4])
    d = rng.choice([16, 20, 40, 64, 72, 96, 128, 136, 192, 256])
    dv = d if rng.random() < 0.8 else rng.choice([12, 64, 128])
    # rotary needs appended rows (flash_attn's rule too)
    rotary_dim = rng.choice([0, 0, 8, (d // 2) & ~1, d & ~1]) if s_new else 0
    f = _features(rng, sq, capacity)
    kw = dict(dtype=dtype, batch=batch, sq=sq, h=hk * rng.choice([1, 2, 4, 8]), hk=hk, d=d, dv=dv,
              capacity=capacity, seqlens=tuple(seqlens), s_new=s_new, block_size=block_size,
              leftpad=None if leftpad is None else tuple(leftpad),
              batch_idx=None if batch_idx is None else tuple(batch_idx), cache_batch=cache_batch,
              rotary_dim=rotary_dim, interleaved=rng.random() < 0.5, causal=f.get("causal", False),
              window=f.get("window", (-1, -1)), softcap=f.get("softcap", 0.0), alibi="alibi" in f,
              num_splits=rng.choice([0, 0, 1, rng.randint(2, 9)]))
    _run(kw, run_case, device, **kw)


# flash_attn_varlen_func over a paged cache: decode-like query counts (empty
# sequences included) over keys that span many blocks of every size
@pytest.mark.parametrize("index", range(CASES))
def test_random_paged_varlen(device, seeded, index):
    rng, dtype = _draw(device, seeded)
    b = rng.randint(1, 4)
    lens_q = [rng.choice([0, 1, rng.randint(1, 9)]) for _ in range(b)]
    lens_k = [0 if rng.random() < 0.1 else _length(rng, 300) for _ in range(b)]
    h, hk = _heads(rng)
    d = rng.choice(HEAD_DIMS)
    f = _features(rng, max(lens_q), max(lens_k))
    kw = dict(dtype=dtype, lens_q=lens_q, lens_k=lens_k, h=h, hk=hk, d=d,
              dv=d if rng.random() < 0.7 else rng.choice([8, 40, 128]),
              bs=rng.choice(KV_BLOCK_SIZES[2:] + [5]), causal=f.get("causal", False),
              window=f.get("window", (-1, -1)), softcap=f.get("softcap", 0.0), alibi="alibi" in f)
    _run(kw, paged_varlen_case, device, **kw)
