/* The order of the tiles of the forward and backward kernels, Hopper and
 * portable (one tile, one CTA: a block of query rows of one (batch, head)
 * in the forward, a chunk of key blocks of one (batch, kv head, head
 * split) in the backward): which tile CTA blockIdx.x computes. The
 * hardware starts CTAs in blockIdx order as SMs free up, so this order is
 * the order in which tiles start.
 *
 * Without a causal mask or a window every tile of a pair costs the same:
 * a pair's tiles run together, pair after pair, so the CTAs running at one
 * time share one pair's K and V (forward) or Q and dO (backward) in L2.
 *
 * With a mask, tiles cost more the more of the other side they see (the
 * forward's last row blocks, the backward's first key blocks), and a long
 * tile starting late leaves SMs idle at the end. The pairs are then cut
 * into L2 sections (as many pairs as have the data their tiles share
 * within FLASHC_L2_SECTION_BYTES together), and within a section the
 * tiles go longest first over all its pairs (the
 * longest-processing-time-first rule) while the CTAs running at one time
 * stay within one section's data. */
#ifndef FLASHC_CUDA_TILE_SCHEDULE_H
#define FLASHC_CUDA_TILE_SCHEDULE_H

#include "bwd_params.h"
#include "fwd_params.h"

/* About half the H100 / H200 L2 (50 / 60 MiB). Measured on the H200 for
 * the forward (bench/NOTES.md, h6): 8 MiB gained less at head dim 256, a
 * section of 128 MiB lost up to 19 %. */
#define FLASHC_L2_SECTION_BYTES (32ll << 20)

/* The most CTAs a grid's y or z dimension holds. */
#define FLASHC_GRID_YZ_MAX 65535

/* The data the tiles of one backward pair share (the pair_bytes of
 * flashc_schedule_plan): Q and dO (16-bit) and the float32 dQ rows of its
 * `heads` query heads. */
static constexpr long long flashc_bwd_pair_bytes(long long seqlen_q, long long heads, long long d, long long dv) {
    return seqlen_q * heads * ((d + dv) * 2 + d * 4);
}

/* Whether the tiles of a pair differ in cost: under a causal mask
 * (window_right 0 once folded in) or a window. */
static inline bool flashc_tiles_vary(const flashc_fwd_params &p) {
    return p.window_left >= 0 || p.window_right >= 0;
}

typedef struct flashc_tile_schedule {
    int ranks;    /* tiles per pair, rank 0 the longest under a mask */
    int pairs;    /* the (batch, head) pairs */
    int section;  /* pairs per section */
    int tiles;    /* ranks * pairs */
} flashc_tile_schedule;

/* The schedule of `pairs` pairs of `ranks` tiles each; pair_bytes: the
 * data a pair's tiles share; masked: tiles of a pair differ in cost
 * (flashc_tiles_vary).
 * False when the tile count does not fit a grid. */
static inline bool flashc_schedule_plan(long long ranks, long long pairs, long long pair_bytes, bool masked,
                                        flashc_tile_schedule *s) {
    if (ranks * pairs > 0x7fffffffLL) return false;
    long long section = 1;
    if (masked) {
        section = pair_bytes > 0 ? FLASHC_L2_SECTION_BYTES / pair_bytes : pairs;
        if (section > pairs) section = pairs;
        if (section < 1) section = 1;
    }
    s->ranks = (int)ranks;
    s->pairs = (int)pairs;
    s->section = (int)section;
    s->tiles = (int)(ranks * pairs);
    return true;
}

/* The backward's schedule: nchunks key-block chunks of every (batch, kv
 * head, head split) pair, whose query heads' Q, dO and dQ rows the pair's
 * tiles share. False when the tiles do not fit a grid. */
static inline bool flashc_bwd_schedule(const flashc_bwd_params &p, flashc_tile_schedule *s) {
    const flashc_fwd_params &f = p.fwd;
    const long long heads = (f.nheads / f.nheads_k + p.head_splits - 1) / p.head_splits;
    return flashc_schedule_plan(p.nchunks, (long long)f.nheads_k * f.batch * p.head_splits,
                                flashc_bwd_pair_bytes(f.seqlen_q, heads, f.head_dim, f.head_dim_v),
                                flashc_tiles_vary(f), s);
}

/* The forward's schedule: the row blocks of block_m rows of every (batch,
 * head) pair, which share their K and V (a GQA group's query heads one KV
 * head's, so a pair is counted with its share of them). False when the
 * tiles do not fit a grid. */
static inline bool flashc_fwd_schedule(const flashc_fwd_params &p, long long block_m, flashc_tile_schedule *s) {
    const long long group = p.nheads / p.nheads_k;
    const long long kv_bytes = (long long)p.seqlen_k * (p.head_dim + p.head_dim_v) * 2 / group;
    return flashc_schedule_plan((p.seqlen_q + block_m - 1) / block_m, (long long)p.batch * p.nheads, kv_bytes,
                                flashc_tiles_vary(p), s);
}

#ifdef __CUDACC__
/* Tile t: its rank within its pair and the pair. */
static __device__ __forceinline__ void flashc_schedule_tile(const flashc_tile_schedule &s, int t, int *rank,
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
