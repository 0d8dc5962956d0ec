/* The portable backward's last partial wave, shared out (bwd_kernel.cuh,
 * TAIL): where every tile costs the same (no mask, no window, not varlen)
 * the grid's tiles run in waves of one per SM, and a last wave of r tiles
 * on S SMs leaves S - r SMs idle for a whole tile (2 - 2.4 % of the
 * backward at 15.5 waves, bench/NOTES.md "what the last partial wave
 * costs"). Instead the main grid stops after its last full wave and S
 * tail CTAs share the last r tiles' iterations (query head x row block)
 * evenly: the tiles laid end to end, r * I iterations, CTA q takes
 * [q L / S, (q + 1) L / S). A CTA's range touches at most two tiles (it is
 * no longer than one), so it runs at most two segments, first the end of
 * one tile, then the start of the next.
 *
 * A tile cut into segments sums their dK / dV in a fixed order: each
 * segment but the last to finish leaves its float32 accumulators in a
 * slot of the workspace and counts itself in the tile's counter; the last
 * adds the slots and its own registers in CTA order and writes dK and dV,
 * so the result is the same whichever finishes last, and no CTA ever
 * waits for another. The segment that starts a tile is its CTA's last one
 * and usually finishes last: it finds every other segment counted and
 * writes no slot of its own.
 *
 * Plain C too: tests/test_bwd_tail.c checks the arithmetic by brute
 * force. */
#ifndef FLASHC_CUDA_BWD_TAIL_H
#define FLASHC_CUDA_BWD_TAIL_H

#include "../core/host_device.h"

typedef struct flashc_bwd_tail {
    long long first; /* the schedule's index of the first tail tile: the main grid's size */
    int tiles;       /* r: tiles in the tail */
    int iters;       /* I: the iterations of each */
    int ctas;        /* S: CTAs sharing them; 0: no tail (the main grid runs every tile) */
} flashc_bwd_tail;

/* A tail CTA's share of the tail tiles' iterations is at least this many
 * (each segment pays a start of about two iterations). */
#define FLASHC_BWD_TAIL_MIN_SHARE 4
/* Costs in iterations: a tile's start (K, V and the first Q / dO loads;
 * also the plan's simulation of the tiles, bwd_workspace.h), and a tail
 * segment's slot written and read back. */
#define FLASHC_BWD_TILE_START 2
#define FLASHC_BWD_TAIL_SLOT 2

/* The tail of `tiles` tiles of `iters` iterations each on `slots` CTA
 * slots (one CTA per SM), or none where it would not end sooner: the last
 * wave of whole tiles costs I + start, a tail CTA its share plus two
 * starts and a slot. */
FLASHC_HD flashc_bwd_tail flashc_bwd_tail_plan(long long tiles, long long iters, int slots) {
    flashc_bwd_tail t;
    t.first = tiles;
    t.tiles = 0;
    t.iters = 0;
    t.ctas = 0;
    if (tiles <= 0 || iters <= 0 || slots <= 0 || iters > 0x7fffffffLL) return t;
    const long long r = tiles % slots;
    if (r == 0) return t;
    const long long total = r * iters;
    long long ctas = slots;
    if (total / ctas < FLASHC_BWD_TAIL_MIN_SHARE) ctas = total / FLASHC_BWD_TAIL_MIN_SHARE;
    if (ctas <= r) return t; /* no tile would be shared */
    const long long share = (total + ctas - 1) / ctas;
    if (share + 2 * FLASHC_BWD_TILE_START + FLASHC_BWD_TAIL_SLOT >= iters + FLASHC_BWD_TILE_START) return t;
    t.first = tiles - r;
    t.tiles = (int)r;
    t.iters = (int)iters;
    t.ctas = (int)ctas;
    return t;
}

/* The first tail iteration (tiles end to end) of CTA q; q = ctas: the end. */
FLASHC_HD long long flashc_bwd_tail_start(flashc_bwd_tail t, long long q) {
    return q * ((long long)t.tiles * t.iters) / t.ctas;
}

/* The CTA whose range holds tail iteration x: the largest q with
 * floor(q L / S) <= x, i.e. q L <= (x + 1) S - 1. */
FLASHC_HD int flashc_bwd_tail_cta_at(flashc_bwd_tail t, long long x) {
    return (int)(((x + 1) * t.ctas - 1) / ((long long)t.tiles * t.iters));
}

/* Segment `which` (0 or 1) of CTA q: tile `tile` (0-based in the tail),
 * iterations [lo, hi) of it. */
typedef struct flashc_bwd_tail_segment {
    int tile, lo, hi;
} flashc_bwd_tail_segment;

/* How many segments CTA q runs: 1 or 2. */
FLASHC_HD int flashc_bwd_tail_segments(flashc_bwd_tail t, int q) {
    const long long s0 = flashc_bwd_tail_start(t, q), s1 = flashc_bwd_tail_start(t, q + 1);
    return (int)((s1 - 1) / t.iters - s0 / t.iters) + 1;
}

FLASHC_HD flashc_bwd_tail_segment flashc_bwd_tail_segment_of(flashc_bwd_tail t, int q, int which) {
    const long long s0 = flashc_bwd_tail_start(t, q), s1 = flashc_bwd_tail_start(t, q + 1);
    const long long tile = s0 / t.iters + which;
    const long long begin = tile * t.iters, end = begin + t.iters;
    flashc_bwd_tail_segment s;
    s.tile = (int)tile;
    s.lo = (int)((s0 > begin ? s0 : begin) - begin);
    s.hi = (int)((s1 < end ? s1 : end) - begin);
    return s;
}

/* The CTAs first..last that run tail tile `tile`'s segments, in iteration
 * order. */
typedef struct flashc_bwd_tail_ctas {
    int first, last;
} flashc_bwd_tail_ctas;

FLASHC_HD flashc_bwd_tail_ctas flashc_bwd_tail_ctas_of(flashc_bwd_tail t, int tile) {
    const long long begin = (long long)tile * t.iters;
    flashc_bwd_tail_ctas c;
    c.first = flashc_bwd_tail_cta_at(t, begin);
    c.last = flashc_bwd_tail_cta_at(t, begin + t.iters - 1);
    return c;
}

/* Where CTA q's segment of tile `tile` leaves its accumulators: distinct
 * for every segment (a later CTA's tiles are never earlier), fewer than
 * ctas + tiles. */
FLASHC_HD int flashc_bwd_tail_slot(int q, int tile) { return q + tile; }

#endif
