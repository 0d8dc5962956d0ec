/* A last partial wave of equal tiles, shared out over every CTA slot (the
 * portable backward, bwd_kernel.cuh TAIL, and the portable forward,
 * fwd_kernel.cuh TAIL). Where every tile costs the same (no mask, no
 * window, not varlen) the grid's tiles run in waves, and a last wave of r
 * tiles on S slots leaves S - r slots idle for a whole tile (2 - 2.8 % of
 * the portable kernels' time on the standard grid, bench/NOTES.md "what
 * the last partial wave costs"). Instead the main grid stops after its
 * last full wave and S tail CTAs share the last r tiles' iterations (the
 * backward's query head x row block, the forward's key blocks) evenly:
 * the tiles laid end to end, r * I iterations, CTA q takes
 * [q L / S, (q + 1) L / S). A CTA's range touches at most two tiles (it is
 * no longer than one), so it runs at most two segments, first the end of
 * one tile, then the start of the next.
 *
 * A tile cut into segments combines them in a fixed order: each segment
 * but the last to finish leaves its float32 accumulators in a slot of the
 * workspace and counts itself in the tile's counter; the last combines the
 * slots and its own registers in CTA order (the backward sums dK / dV, the
 * forward rescales the partial O and row sums to a common maximum) and
 * writes the result, so it is the same whichever finishes last, and no
 * CTA ever waits for another. The segment that starts a tile is its CTA's
 * last one and usually finishes last: it finds every other segment counted
 * and writes no slot of its own.
 *
 * Plain C too: tests/test_tail_split.c checks the arithmetic by brute
 * force. */
#ifndef FLASHC_CUDA_TAIL_SPLIT_H
#define FLASHC_CUDA_TAIL_SPLIT_H

#include "../core/host_device.h"

typedef struct flashc_tail {
    long long first; /* the schedule's index of the first tail tile: the main grid's size */
    int tiles;       /* r: tiles in the tail */
    int iters;       /* I: the iterations of each */
    int ctas;        /* S: CTAs sharing them; 0: no tail (the main grid runs every tile) */
} flashc_tail;

/* A tail CTA's share of the tail tiles' iterations is at least this many
 * (each segment pays a start). */
#define FLASHC_TAIL_MIN_SHARE 4

/* The tail of `tiles` tiles of `iters` iterations each on `slots` CTA
 * slots (the CTAs the device runs at once), or none where it would not end
 * sooner: the last wave of whole tiles costs I + start, a tail CTA its
 * share plus two starts and a slot (`start`, `slot`: the kernel's costs of
 * a tile's start and of a segment's slot written and read back, in
 * iterations). */
FLASHC_HD flashc_tail flashc_tail_plan(long long tiles, long long iters, int slots, int start, int slot) {
    flashc_tail t;
    t.first = tiles;
    t.tiles = 0;
    t.iters = 0;
    t.ctas = 0;
    if (tiles <= 0 || iters <= 0 || slots <= 0 || iters > 0x7fffffffLL) return t;
    const long long r = tiles % slots;
    if (r == 0) return t;
    const long long total = r * iters;
    long long ctas = slots;
    if (total / ctas < FLASHC_TAIL_MIN_SHARE) ctas = total / FLASHC_TAIL_MIN_SHARE;
    if (ctas <= r) return t; /* no tile would be shared */
    const long long share = (total + ctas - 1) / ctas;
    if (share + 2 * start + slot >= iters + start) return t;
    t.first = tiles - r;
    t.tiles = (int)r;
    t.iters = (int)iters;
    t.ctas = (int)ctas;
    return t;
}

/* The first tail iteration (tiles end to end) of CTA q; q = ctas: the end. */
FLASHC_HD long long flashc_tail_start(flashc_tail t, long long q) {
    return q * ((long long)t.tiles * t.iters) / t.ctas;
}

/* The CTA whose range holds tail iteration x: the largest q with
 * floor(q L / S) <= x, i.e. q L <= (x + 1) S - 1. */
FLASHC_HD int flashc_tail_cta_at(flashc_tail t, long long x) {
    return (int)(((x + 1) * t.ctas - 1) / ((long long)t.tiles * t.iters));
}

/* Segment `which` (0 or 1) of CTA q: tile `tile` (0-based in the tail),
 * iterations [lo, hi) of it. */
typedef struct flashc_tail_segment {
    int tile, lo, hi;
} flashc_tail_segment;

/* How many segments CTA q runs: 1 or 2. */
FLASHC_HD int flashc_tail_segments(flashc_tail t, int q) {
    const long long s0 = flashc_tail_start(t, q), s1 = flashc_tail_start(t, q + 1);
    return (int)((s1 - 1) / t.iters - s0 / t.iters) + 1;
}

FLASHC_HD flashc_tail_segment flashc_tail_segment_of(flashc_tail t, int q, int which) {
    const long long s0 = flashc_tail_start(t, q), s1 = flashc_tail_start(t, q + 1);
    const long long tile = s0 / t.iters + which;
    const long long begin = tile * t.iters, end = begin + t.iters;
    flashc_tail_segment s;
    s.tile = (int)tile;
    s.lo = (int)((s0 > begin ? s0 : begin) - begin);
    s.hi = (int)((s1 < end ? s1 : end) - begin);
    return s;
}

/* The CTAs first..last that run tail tile `tile`'s segments, in iteration
 * order. */
typedef struct flashc_tail_ctas {
    int first, last;
} flashc_tail_ctas;

FLASHC_HD flashc_tail_ctas flashc_tail_ctas_of(flashc_tail t, int tile) {
    const long long begin = (long long)tile * t.iters;
    flashc_tail_ctas c;
    c.first = flashc_tail_cta_at(t, begin);
    c.last = flashc_tail_cta_at(t, begin + t.iters - 1);
    return c;
}

/* Where CTA q's segment of tile `tile` leaves its accumulators: distinct
 * for every segment (a later CTA's tiles are never earlier), fewer than
 * ctas + tiles. */
FLASHC_HD int flashc_tail_slot(int q, int tile) { return q + tile; }

#ifdef __CUDACC__
#include "ptx.cuh"

/* A slot holds SLOT_FLOAT4 float4 per thread, thread-major (float4 k of
 * thread x at k * THREADS + x), so both its stores and loads coalesce:
 * this thread's first float4 in CTA q's slot of tile `tile`. */
template <int THREADS, int SLOT_FLOAT4>
static __device__ __forceinline__ float4 *flashc_tail_slot_at(float *slots, int q, int tile) {
    return reinterpret_cast<float4 *>(slots) + (int64_t)flashc_tail_slot(q, tile) * SLOT_FLOAT4 * THREADS +
           threadIdx.x;
}

/* A tail segment's end, for tile `tile` run by more than one CTA: true
 * when this CTA is the last of its segments to finish (every other one's
 * slot then written and visible), false when another will finish it, this
 * one's accumulators left in its slot by write_slot(float4 *mine), which
 * stores float4 k at mine + k * THREADS. Called by every thread. */
template <int THREADS, int SLOT_FLOAT4, class WriteSlot>
static __device__ __forceinline__ bool flashc_tail_arrive(const flashc_tail &t, float *slots, int *counts, int tile,
                                                          WriteSlot write_slot) {
    const flashc_tail_ctas ctas = flashc_tail_ctas_of(t, tile);
    const int others = ctas.last - ctas.first; /* the segments to wait for */
    int *count = counts + tile;
    /* every other segment already counted: this one is the last, and
     * needs no slot (the usual case of a tile's first segment) */
    int last = 0;
    if (threadIdx.x == 0) last = flashc_ld_acquire_gpu(count) == others;
    if (!__syncthreads_or(last)) {
        write_slot(flashc_tail_slot_at<THREADS, SLOT_FLOAT4>(slots, blockIdx.x, tile));
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(count, 1) == others;
        if (!__syncthreads_or(last)) return false;
    }
    __threadfence();
    return true;
}
#endif

#endif
