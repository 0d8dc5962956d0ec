/* The order of the Hopper kernels' tiles (one tile, one CTA: a block of
 * query rows of one (batch, head) in the forward, a chunk of key blocks of
 * one (batch, kv head) in the backward): which tile CTA blockIdx.x
 * computes. The hardware starts CTAs in blockIdx order as SMs free up, so
 * this order is the order in which tiles start.
 *
 * Without a causal mask or a window every tile of a pair costs the same:
 * a pair's tiles run together, pair after pair, so the CTAs running at one
 * time share one pair's K and V (forward) or Q and dO (backward) in L2.
 *
 * With a mask, tiles cost more the more of the other side they see (the
 * forward's last row blocks, the backward's first key blocks), and a long
 * tile starting late leaves SMs idle at the end. The pairs are then cut
 * into L2 sections (as many pairs as have the data their tiles share
 * within FLASHC_HOPPER_L2_SECTION_BYTES together), and within a section the
 * tiles go longest first over all its pairs (the
 * longest-processing-time-first rule) while the CTAs running at one time
 * stay within one section's data. */
#ifndef FLASHC_CUDA_HOPPER_SCHEDULE_H
#define FLASHC_CUDA_HOPPER_SCHEDULE_H

#include "fwd_params.h"

/* About half the H100 / H200 L2 (50 / 60 MiB). Measured on the H200 for
 * the forward (bench/NOTES.md, h6): 8 MiB gained less at head dim 256, a
 * section of 128 MiB lost up to 19 %. */
#define FLASHC_HOPPER_L2_SECTION_BYTES (32ll << 20)

/* Whether the tiles of a pair differ in cost: under a causal mask
 * (window_right 0 once folded in) or a window. */
static inline bool flashc_hopper_tiles_vary(const flashc_fwd_params &p) {
    return p.window_left >= 0 || p.window_right >= 0;
}

typedef struct flashc_hopper_schedule {
    int ranks;    /* tiles per pair, rank 0 the longest under a mask */
    int pairs;    /* the (batch, head) pairs */
    int section;  /* pairs per section */
    int tiles;    /* ranks * pairs */
} flashc_hopper_schedule;

/* The schedule of `pairs` pairs of `ranks` tiles each; pair_bytes: the
 * data a pair's tiles share; masked: tiles of a pair differ in cost
 * (flashc_hopper_tiles_vary).
 * False when the tile count does not fit a grid. */
static inline bool flashc_hopper_plan(long long ranks, long long pairs, long long pair_bytes, bool masked,
                                      flashc_hopper_schedule *s) {
    if (ranks * pairs > 0x7fffffffLL) return false;
    long long section = 1;
    if (masked) {
        section = pair_bytes > 0 ? FLASHC_HOPPER_L2_SECTION_BYTES / pair_bytes : pairs;
        if (section > pairs) section = pairs;
        if (section < 1) section = 1;
    }
    s->ranks = (int)ranks;
    s->pairs = (int)pairs;
    s->section = (int)section;
    s->tiles = (int)(ranks * pairs);
    return true;
}

#ifdef __CUDACC__
/* Tile t: its rank within its pair and the pair. */
static __device__ __forceinline__ void flashc_hopper_tile(const flashc_hopper_schedule &s, int t, int *rank,
                                                          int *pair) {
    const int per_section = s.section * s.ranks;
    const int sec = t / per_section, r = t - sec * per_section;
    const int first = sec * s.section;
    const int width = min(s.section, s.pairs - first); /* the last section may be narrower */
    *rank = r / width;
    *pair = first + r % width;
}
#endif

#endif
