/* The order of the Hopper forward's tiles (one tile = one block of query
 * rows of one (batch, head), one CTA): which tile CTA blockIdx.x computes.
 * The hardware starts CTAs in blockIdx order as SMs free up, so this order
 * is the order in which tiles start.
 *
 * Without a causal mask or a window every tile costs the same: row blocks
 * go last to first within one (batch, head), pair after pair, so the CTAs
 * running at one time share one head's K and V in L2.
 *
 * With a mask, a tile's cost grows with its row block (the last rows see
 * the most keys), and a long tile starting late leaves SMs idle at the end.
 * The (batch, head) pairs are then cut into L2 sections (as many pairs as
 * have their K and V within FLASHC_HOPPER_L2_SECTION_BYTES together), and
 * within a section the row blocks go last to first over all its pairs: the
 * longest tiles start first and the shortest fill the end (the
 * longest-processing-time-first rule), while the CTAs running at one time
 * stay within a section's K and V. */
#ifndef FLASHC_CUDA_HOPPER_FWD_SCHEDULE_H
#define FLASHC_CUDA_HOPPER_FWD_SCHEDULE_H

#include <stdint.h>

#include "fwd_params.h"

#ifndef FLASHC_HOPPER_L2_SECTION_BYTES
#define FLASHC_HOPPER_L2_SECTION_BYTES (32ll << 20)
#endif

typedef struct flashc_hopper_fwd_schedule {
    int m_blocks;  /* row blocks per (batch, head) */
    int pairs;     /* (batch, head) pairs: batch * nheads */
    int section;   /* pairs per section */
    int tiles;     /* m_blocks * pairs */
} flashc_hopper_fwd_schedule;

/* The schedule of a problem in tiles of block_m rows; false when the tile
 * count does not fit a grid. */
static inline bool flashc_hopper_fwd_plan(const flashc_fwd_params *p, int block_m, flashc_hopper_fwd_schedule *s) {
    const long long m_blocks = ((long long)p->seqlen_q + block_m - 1) / block_m;
    const long long pairs = (long long)p->batch * p->nheads;
    if (m_blocks * pairs > 0x7fffffffLL) return false;
    long long section = 1;
    if (p->window_left >= 0 || p->window_right >= 0) { /* causal is window_right 0 */
        /* K and V bytes of one query head: its KV head's, shared by the group */
        const long long group = p->nheads_k > 0 ? p->nheads / p->nheads_k : 1;
        const long long kv_bytes = (long long)p->seqlen_k * (p->head_dim + p->head_dim_v) * 2;
        section = kv_bytes > 0 ? FLASHC_HOPPER_L2_SECTION_BYTES * group / kv_bytes : pairs;
        if (section > pairs) section = pairs;
        if (section < 1) section = 1;
    }
    s->m_blocks = (int)m_blocks;
    s->pairs = (int)pairs;
    s->section = (int)section;
    s->tiles = (int)(m_blocks * pairs);
    return true;
}

#ifdef __CUDACC__
/* Tile t: its row block, head and batch. */
static __device__ __forceinline__ void flashc_hopper_fwd_tile(const flashc_hopper_fwd_schedule &s, int nheads, int t,
                                                              int *m_block, int *head, int *batch) {
    const int per_section = s.section * s.m_blocks;
    const int sec = t / per_section, r = t - sec * per_section;
    const int first = sec * s.section;
    const int width = min(s.section, s.pairs - first); /* the last section may be narrower */
    *m_block = s.m_blocks - 1 - r / width;
    const int pair = first + r % width;
    *head = pair % nheads;
    *batch = pair / nheads;
}
#endif

#endif
