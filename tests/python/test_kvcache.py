"""flash_attn_with_kvcache and the paged varlen forward against an
independent float64 reference in PyTorch, on every device flashc runs on.

The reference appends the new rows itself (rotary applied in float64 to the
dtype's values, rounded once), gathers each sequence's keys through
cache_batch_idx / cache_leftpad / the block table, and runs a plain softmax
with the masks written out. The cache is NaN-poisoned wherever no sequence
owns a row (unused paged blocks included): afterwards every element
outside the appended rows must be bit-identical to before, and the output
finite."""
import math

import pytest
import torch

import flashc
from flashc import flash_attn_varlen_func, flash_attn_with_kvcache

from conftest import skip_unless_device

TOLERANCE = {torch.float64: 1e-9, torch.float32: 2e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def rotary_tables(positions, rotary_dim, dtype, device):
    inv = 10000.0 ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]
    return angles.cos().to(dtype).to(device), angles.sin().to(dtype).to(device)


def rotate(x, cos, sin, interleaved):
    """x (..., d) rotated with cos / sin (..., rotary_dim / 2), float64."""
    half = cos.shape[-1]
    x = x.clone()
    if interleaved:
        a, b = x[..., 0:2 * half:2].clone(), x[..., 1:2 * half:2].clone()
        x[..., 0:2 * half:2] = a * cos - b * sin
        x[..., 1:2 * half:2] = b * cos + a * sin
    else:
        a, b = x[..., :half].clone(), x[..., half:2 * half].clone()
        x[..., :half] = a * cos - b * sin
        x[..., half:2 * half] = b * cos + a * sin
    return x


class Cache:
    """A cache (contiguous or paged) with per-sequence cache ranges, and the
    mapping of (sequence, cache index) to its physical row."""

    def __init__(self, batch, capacity, hk, d, dv, dtype, device, seqlens, leftpad=None,
                 batch_idx=None, cache_batch=None, block_size=0, spare_blocks=3):
        self.batch, self.capacity, self.block_size = batch, capacity, block_size
        self.seqlens, self.leftpad, self.batch_idx = seqlens, leftpad, batch_idx
        if block_size:
            per_seq = capacity // block_size
            nblocks = batch * per_seq + spare_blocks
            self.block_table = torch.randperm(nblocks)[:batch * per_seq].view(batch, per_seq)
            self.block_table = self.block_table.to(torch.int32)
            outer, rows = nblocks, block_size
        else:
            self.block_table = None
            outer, rows = (cache_batch or batch), capacity
        self.k = torch.full((outer, rows, hk, d), float("nan"), dtype=dtype)
        self.v = torch.full((outer, rows, hk, dv), float("nan"), dtype=dtype)
        for b in range(batch):
            for c in range(self.start(b), int(seqlens[b])):
                o, r = self.where(b, c)
                self.k[o, r] = torch.randn(hk, d).to(dtype)
                self.v[o, r] = torch.randn(hk, dv).to(dtype)
        self.device = device

    def start(self, b):
        return 0 if self.leftpad is None else int(self.leftpad[b])

    def where(self, b, c):
        if self.block_size:
            return int(self.block_table[b, c // self.block_size]), c % self.block_size
        return (b if self.batch_idx is None else int(self.batch_idx[b])), c

    def tensors(self):
        dev = self.device
        return (self.k.to(dev), self.v.to(dev),
                None if self.block_table is None else self.block_table.to(dev))


def masked_logits(s, causal, window, softcap, slopes):
    """Scaled logits s (h, sq, sk), float64: softcap, ALiBi, then the
    causal / window mask (-inf), queries aligned to the last keys."""
    sq, sk = s.shape[-2:]
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq)[:, None]
    j = torch.arange(sk)[None, :]
    diag = i + sk - sq
    if slopes is not None:
        s = s - slopes.double()[:, None, None] * (diag - j).abs()
    visible = torch.ones(sq, sk, dtype=torch.bool)
    right = 0 if causal else window[1]
    if window[0] >= 0:
        visible &= j >= diag - window[0]
    if right >= 0:
        visible &= j <= diag + right
    return s.masked_fill(~visible, -math.inf)


def reference(cache, q, k_new, v_new, cos, sin, interleaved, causal, window, softcap, alibi,
              scale):
    """(out, lse, k_cache, v_cache) expected, float64 except the caches."""
    k_cache, v_cache = cache.k.clone(), cache.v.clone()
    b_count, sq, h, d = q.shape
    hk = k_cache.shape[2]
    s_new = 0 if k_new is None else k_new.shape[1]
    for b in range(b_count):
        for r in range(s_new):
            c = int(cache.seqlens[b]) + r
            o, row = cache.where(b, c)
            kn = k_new[b, r].double()
            if cos is not None:
                kn = rotate(kn, cos[c].double(), sin[c].double(), interleaved)
            k_cache[o, row] = kn.to(k_cache.dtype)
            v_cache[o, row] = v_new[b, r]
    local = (window[0] >= 0 and window[0] < cache.capacity) or (
        window[1] >= 0 and window[1] < cache.capacity)
    out = torch.zeros(b_count, sq, h, v_cache.shape[-1], dtype=torch.float64)
    lse = torch.full((b_count, h, sq), math.inf, dtype=torch.float64)
    for b in range(b_count):
        start, end = cache.start(b), int(cache.seqlens[b]) + s_new
        rows = [cache.where(b, c) for c in range(start, end)]
        K = torch.stack([k_cache[o, r] for o, r in rows]).double() if rows else \
            torch.zeros(0, hk, d, dtype=torch.float64)
        V = torch.stack([v_cache[o, r] for o, r in rows]).double() if rows else \
            torch.zeros(0, hk, v_cache.shape[-1], dtype=torch.float64)
        qb = q[b].double()
        if cos is not None:
            first = int(cache.seqlens[b])
            pos = [first + (i if causal or local else 0) for i in range(sq)]
            qb = rotate(qb, cos[pos].double()[:, None, :], sin[pos].double()[:, None, :],
                        interleaved).to(q.dtype).double()
        group = h // hk
        K, V = K.repeat_interleave(group, dim=1), V.repeat_interleave(group, dim=1)
        s = masked_logits(torch.einsum("qhd,khd->hqk", qb, K) * scale, causal, window, softcap,
                          alibi)
        row_lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)
        out[b] = torch.einsum("hqk,khd->qhd", p, V)
        lse[b] = row_lse
    return out, lse, k_cache, v_cache


def run_case(device, dtype=torch.bfloat16, batch=3, sq=1, h=8, hk=2, d=64, dv=64,
             capacity=96, seqlens=(17, 0, 80), s_new=1, block_size=0, leftpad=None,
             batch_idx=None, cache_batch=None, rotary_dim=0, interleaved=True, causal=False,
             window=(-1, -1), softcap=0.0, alibi=False, num_splits=0, seqlens_as=None):
    skip_unless_device(device, dtype)
    seqlens_t = torch.tensor(seqlens[:batch], dtype=torch.int32)
    leftpad_t = None if leftpad is None else torch.tensor(leftpad[:batch], dtype=torch.int32)
    idx_t = None if batch_idx is None else torch.tensor(batch_idx[:batch], dtype=torch.int32)
    cache = Cache(batch, capacity, hk, d, dv, dtype, device, seqlens_t, leftpad_t, idx_t,
                  cache_batch, block_size)
    q = torch.randn(batch, sq, h, d).to(dtype)
    k_new = torch.randn(batch, s_new, hk, d).to(dtype) if s_new else None
    v_new = torch.randn(batch, s_new, hk, dv).to(dtype) if s_new else None
    cos = sin = None
    if rotary_dim:
        cos, sin = rotary_tables(capacity + sq, rotary_dim, dtype, "cpu")
    slopes = (torch.rand(h) * 0.3) if alibi else None
    scale = d ** -0.5
    ref_out, ref_lse, ref_k, ref_v = reference(cache, q, k_new, v_new, cos, sin, interleaved,
                                               causal, window, softcap, slopes, scale)
    k_cache, v_cache, block_table = cache.tensors()
    dev = lambda t: None if t is None else t.to(device)
    cache_seqlens = dev(seqlens_t) if seqlens_as is None else seqlens_as
    out, lse = flash_attn_with_kvcache(
        dev(q), k_cache, v_cache, dev(k_new), dev(v_new), dev(cos), dev(sin),
        cache_seqlens=cache_seqlens, cache_batch_idx=dev(idx_t), cache_leftpad=dev(leftpad_t),
        block_table=block_table, causal=causal, window_size=window, softcap=softcap,
        rotary_interleaved=interleaved, alibi_slopes=dev(slopes), num_splits=num_splits,
        return_softmax_lse=True)
    tol = TOLERANCE[dtype]
    assert out.shape == (batch, sq, h, dv) and out.dtype == dtype
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double().cpu(), ref_out, atol=tol, rtol=0)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    torch.testing.assert_close(lse.double().cpu()[finite], ref_lse[finite], atol=4 * tol, rtol=0)
    # The cache: appended rows as the reference (one rounding may differ),
    # everything else bit-identical, NaN poison included.
    appended = torch.zeros(cache.k.shape[:2], dtype=torch.bool)
    for b in range(batch):
        for r in range(s_new):
            appended[cache.where(b, int(seqlens_t[b]) + r)] = True
    for got, want in ((k_cache.cpu(), ref_k), (v_cache.cpu(), ref_v)):
        assert torch.equal(bits(got[~appended]), bits(want[~appended]))
        torch.testing.assert_close(got[appended].double(), want[appended].double(),
                                   atol=1e-12, rtol=2 ** -7)
    return out, lse


def bits(t):
    """t's elements as integers of the same width (NaN compares equal)."""
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_append_one(device, dtype):
    run_case(device, dtype)


def test_decode_without_append(device):
    run_case(device, s_new=0)


def test_cache_seqlens_as_int_and_absent(device):
    run_case(device, seqlens=(40, 40, 40), s_new=2, seqlens_as=40)
    run_case(device, seqlens=(96, 96, 96), s_new=0, seqlens_as=None, sq=3, causal=True)


def test_cache_seqlens_zero_and_at_capacity(device):
    run_case(device, seqlens=(0, 95, 91), s_new=1)
    run_case(device, seqlens=(0, 92, 5), s_new=4, sq=4, causal=True)


@pytest.mark.parametrize("hk", [8, 1])
def test_mha_and_mqa(device, hk):
    run_case(device, h=8, hk=hk, sq=2, s_new=2, causal=True)


@pytest.mark.parametrize("mask", ["causal", "window", "softcap_alibi"])
def test_masks_prefill(device, mask):
    kw = dict(sq=7, s_new=7, seqlens=(17, 0, 60))
    if mask == "causal":
        kw.update(causal=True)
    elif mask == "window":
        kw.update(window=(9, 2))
    else:
        kw.update(softcap=3.0, alibi=True, causal=True)
    run_case(device, **kw)


def test_more_queries_than_new_rows(device):
    run_case(device, sq=12, s_new=3, causal=True, seqlens=(20, 5, 60))


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_rotary(device, interleaved, causal):
    run_case(device, rotary_dim=32, interleaved=interleaved, causal=causal, sq=3, s_new=3,
             seqlens=(17, 0, 60))


def test_rotary_queries_past_the_capacity(device):
    """Under a causal mask q rows sit at cache_seqlens + r, which can pass
    the cache's capacity when sq > seqlen_new: the tables' rows count, not
    the capacity."""
    run_case(device, rotary_dim=32, causal=True, sq=8, s_new=1, seqlens=(17, 0, 95))


def test_rotary_full_head_dim_and_window(device):
    run_case(device, rotary_dim=64, interleaved=False, window=(8, 0), sq=2, s_new=2)


@pytest.mark.parametrize("block_size", [16, 64, 256, 5])
def test_paged(device, block_size):
    capacity = 512 if block_size == 256 else 320 if block_size == 64 else 160
    run_case(device, block_size=block_size, capacity=capacity, seqlens=(17, 0, 150),
             s_new=3, sq=3, causal=True)


def test_paged_rotary_leftpad(device):
    run_case(device, block_size=16, capacity=128, leftpad=(3, 0, 40), seqlens=(17, 0, 90),
             rotary_dim=16, s_new=1)


def test_batch_index_and_leftpad(device):
    run_case(device, cache_batch=5, batch_idx=(4, 0, 2), leftpad=(5, 0, 80), seqlens=(17, 0, 80),
             s_new=2, sq=2, causal=True)


def test_splits_agree(device):
    """Split and unsplit keys give the same result (within rounding)."""
    torch.manual_seed(1)
    base, base_lse = run_case(device, batch=1, seqlens=(900,), capacity=1024, num_splits=1)
    for splits in (4, 1000):  # more than there are key blocks, and than 128
        torch.manual_seed(1)
        split, split_lse = run_case(device, batch=1, seqlens=(900,), capacity=1024,
                                    num_splits=splits)
        torch.testing.assert_close(split.float(), base.float(), atol=2e-2, rtol=0)
        torch.testing.assert_close(split_lse, base_lse, atol=1e-3, rtol=0)


def test_head_dims_not_multiple_of_eight(device):
    run_case(device, d=20, dv=12, rotary_dim=8, s_new=2, sq=2, causal=True)


def test_long_cache_decode(device):
    run_case(device, batch=2, capacity=4096, seqlens=(4000, 1234), s_new=1, h=16, hk=4,
             d=128, dv=128)


@pytest.mark.parametrize("num_splits", [0, 3])
def test_no_queries_over_a_long_cache(device, num_splits):
    """A batch of 0 sequences, or 0 queries each, over a cache of many key
    tiles: empty results (the CPU's split count once divided by zero)."""
    skip_unless_device(device, torch.bfloat16)
    kw = dict(device=device, dtype=torch.bfloat16)
    kc, vc = torch.randn(2, 600, 2, 64, **kw), torch.randn(2, 600, 2, 64, **kw)
    before = kc.clone()
    for batch, sq in ((0, 1), (2, 0)):
        q = torch.randn(batch, sq, 4, 64, **kw)
        out, lse = flash_attn_with_kvcache(q, kc, vc, cache_seqlens=500, num_splits=num_splits,
                                           return_softmax_lse=True)
        assert out.shape == (batch, sq, 4, 64) and lse.shape == (batch, 4, sq)
    assert torch.equal(kc, before)


def test_errors_write_nothing(device):
    skip_unless_device(device, torch.bfloat16)
    q = torch.randn(2, 1, 4, 64, device=device, dtype=torch.bfloat16)
    kc = torch.randn(2, 32, 2, 64, device=device, dtype=torch.bfloat16)
    vc = kc.clone()
    k = torch.randn(2, 1, 2, 64, device=device, dtype=torch.bfloat16)
    before = kc.clone()
    with pytest.raises(flashc.FlashcError, match="cache_seqlens"):
        flash_attn_with_kvcache(q, kc, vc, k, k, cache_seqlens=None)
    with pytest.raises(flashc.FlashcError, match="rotary_cos"):
        cos, sin = rotary_tables(8, 16, torch.bfloat16, device)  # fewer rows than the cache
        flash_attn_with_kvcache(q, kc, vc, k, k, cos, sin, cache_seqlens=3)
    with pytest.raises(flashc.FlashcError, match="cache_batch_idx"):
        flash_attn_with_kvcache(q, kc, vc, cache_batch_idx=torch.zeros(2, dtype=torch.int32,
                                                                        device=device),
                                block_table=torch.zeros(2, 1, dtype=torch.int32, device=device))
    with pytest.raises(flashc.FlashcError, match="k_cache"):
        flash_attn_with_kvcache(q, kc.float(), vc, k, k, cache_seqlens=3)
    with pytest.raises(TypeError, match="k_cache"):
        flash_attn_with_kvcache(q, None, vc)
    with pytest.raises(TypeError, match="cache_leftpad"):
        flash_attn_with_kvcache(q, kc, vc, cache_leftpad=[0, 0])
    # named as flash_attn_with_kvcache names them (k / v, torch dtypes)
    with pytest.raises(ValueError, match="^FLASHC_ERROR_ARGUMENT: v: is None while k is given"):
        flash_attn_with_kvcache(q, kc, vc, k, cache_seqlens=3)
    with pytest.raises(TypeError, match="^FLASHC_ERROR_DTYPE: v: dtype torch.float16 differs"):
        flash_attn_with_kvcache(q, kc, vc, k, k.half(), cache_seqlens=3)
    with pytest.raises(ValueError, match=r"^FLASHC_ERROR_SHAPE: k: expected shape \(2, 1, 2, 64\)"):
        flash_attn_with_kvcache(q, kc, vc, k[:, :, :1], k, cache_seqlens=3)
    if device == "cpu":  # contents are checked on the CPU
        with pytest.raises(flashc.FlashcError, match="cache_seqlens"):
            flash_attn_with_kvcache(q, kc, vc, k, k, cache_seqlens=32)  # 32 + 1 > 32
    assert torch.equal(kc, before) and torch.equal(vc, before)
    paged = kc.view(8, 8, 2, 64)
    table = torch.arange(8, dtype=torch.int32, device=device).view(2, 4)
    with pytest.raises(flashc.FlashcError, match="cache_seqlens|block_table"):
        flash_attn_with_kvcache(q, paged, paged.clone(), k, k, cache_seqlens=32,
                                block_table=table)
    assert torch.equal(kc, before)
    # exactly at capacity is accepted
    out = flash_attn_with_kvcache(q, paged, paged.clone(), k, k, cache_seqlens=31,
                                  block_table=table)
    assert torch.isfinite(out).all()
    assert torch.equal(paged[3, 7], k[0, 0]) and torch.equal(paged[7, 7], k[1, 0])


def paged_varlen_case(device, dtype, lens_q, lens_k, h=4, hk=2, d=64, dv=64, bs=16,
                      causal=True, window=(-1, -1), softcap=0.0, alibi=False):
    """flash_attn_varlen_func over a paged cache (blocks in random order,
    spare ones NaN) against the reference gathered through the table."""
    skip_unless_device(device, dtype)
    batch = len(lens_q)
    per_seq = max(1, max(-(-n // bs) for n in lens_k))
    nblocks = batch * per_seq + 2
    k = torch.randn(nblocks, bs, hk, d).to(dtype)
    v = torch.randn(nblocks, bs, hk, dv).to(dtype)
    table = torch.randperm(nblocks)[:batch * per_seq].view(batch, per_seq).to(torch.int32)
    unused = torch.ones(nblocks, dtype=torch.bool)
    unused[table.flatten().long()] = False
    k[unused], v[unused] = float("nan"), float("nan")
    q = torch.randn(sum(lens_q), h, d).to(dtype)
    cu_q = torch.tensor([0] + lens_q, dtype=torch.int32).cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, dtype=torch.int32).cumsum(0).to(torch.int32)
    slopes = torch.rand(h) * 0.3 if alibi else None
    dev = lambda t: None if t is None else t.to(device)
    out = flash_attn_varlen_func(dev(q), dev(k), dev(v), dev(cu_q), dev(cu_k), max(lens_q),
                                 max(lens_k), causal=causal, window_size=window,
                                 softcap=softcap, alibi_slopes=dev(slopes),
                                 block_table=dev(table)).cpu()
    assert out.shape == (sum(lens_q), h, dv) and torch.isfinite(out).all()
    for b in range(batch):
        sq, sk = lens_q[b], lens_k[b]
        if sq == 0:
            continue
        rows = [(int(table[b, j // bs]), j % bs) for j in range(sk)]
        keys = torch.stack([k[o, r] for o, r in rows]) if rows else torch.zeros(0, hk, d)
        vals = torch.stack([v[o, r] for o, r in rows]) if rows else torch.zeros(0, hk, dv)
        keys = keys.double().repeat_interleave(h // hk, 1)
        vals = vals.double().repeat_interleave(h // hk, 1)
        s = torch.einsum("qhd,khd->hqk", q[cu_q[b]:cu_q[b + 1]].double(), keys) * d ** -0.5
        s = masked_logits(s, causal, window, softcap, slopes)
        p = torch.exp(s - torch.logsumexp(s, -1, keepdim=True)).nan_to_num(0.0)
        ref = torch.einsum("hqk,khd->qhd", p, vals)
        torch.testing.assert_close(out[cu_q[b]:cu_q[b + 1]].double(), ref,
                                   atol=TOLERANCE[dtype], rtol=0)


def test_paged_varlen_forward(device):
    paged_varlen_case(device, torch.bfloat16, [3, 0, 9], [40, 7, 100])


def test_torch_compile_sees_the_cache_mutation(device):
    skip_unless_device(device, torch.bfloat16)
    q = torch.randn(2, 1, 4, 64, device=device, dtype=torch.bfloat16)
    kc = torch.zeros(2, 16, 2, 64, device=device, dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    k = torch.randn(2, 1, 2, 64, device=device, dtype=torch.bfloat16)
    lens = torch.tensor([3, 7], dtype=torch.int32, device=device)

    def step(q, kc, vc, k, lens):
        out = flash_attn_with_kvcache(q, kc, vc, k, k, cache_seqlens=lens)
        return out, kc.sum()  # reads the cache after the call

    eager_kc, eager_vc = kc.clone(), vc.clone()
    want, want_sum = step(q, eager_kc, eager_vc, k, lens)
    got, got_sum = torch.compile(step, fullgraph=True)(q, kc, vc, k, lens)
    assert torch.equal(kc, eager_kc) and torch.equal(vc, eager_vc)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_sum, want_sum)


def test_cuda_graph_capture_and_replay():
    skip_unless_device("cuda", torch.bfloat16)
    dev, dt = "cuda", torch.bfloat16
    q = torch.randn(4, 1, 8, 128, device=dev, dtype=dt)
    kc = torch.randn(4, 2048, 2, 128, device=dev, dtype=dt)
    vc = torch.randn_like(kc)
    k = torch.randn(4, 1, 2, 128, device=dev, dtype=dt)
    lens = torch.tensor([100, 2000, 7, 1500], dtype=torch.int32, device=dev)
    ref_kc, ref_vc = kc.clone(), vc.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, on copies
        flash_attn_with_kvcache(q, kc.clone(), vc.clone(), k, k, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = flash_attn_with_kvcache(q, kc, vc, k, k, cache_seqlens=lens)
    for step in range(3):
        q.copy_(torch.randn_like(q))
        k.copy_(torch.randn_like(k))
        lens.add_(1)
        graph.replay()
        ref_out = flash_attn_with_kvcache(q, ref_kc, ref_vc, k, k, cache_seqlens=lens)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, ref_out)
        assert torch.equal(kc, ref_kc) and torch.equal(vc, ref_vc)
