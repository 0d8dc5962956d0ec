/* The CUDA backward's plan (which configuration, how key blocks are dealt
 * to CTAs) and its workspace layout, shared by the size query and the
 * launch so both always agree:
 *
 *   lse2      [nheads][ws_rows]                    float32  LSE * log2(e)
 *   dsum      [nheads][ws_rows]                    float32  D = rowsum(dO * O) - dLSE
 *   dq_accum  [dq_slices][nheads][ws_rows][d]      float32  dQ before the scale
 *   dq_order  [nheads][ws_rows / dq_order_rows]    int32    deterministic on the Hopper path only:
 *                                                           per query block, the key blocks that
 *                                                           have added into its dQ rows
 *
 * ws_rows = flashc_padded_rows(total_q, batch, tile_m): sequence b's rows
 * start at flashc_padded_row_offset(first row of b, b, tile_m) (batched
 * problems: first row b * seqlen_q), so the tile_m-row tiles of one
 * sequence never reach the next one's rows. tile_m is the largest BLOCK_M
 * of the main kernels that may run the problem (the portable configuration
 * the plan picks and the Hopper one of the same head dim, both powers of
 * two, so each divides it), and is passed to every kernel that touches
 * these buffers: the preprocess and the dQ conversion walk tile_m-row
 * tiles, a main kernel its own BLOCK_M-row blocks inside them. */
#ifndef FLASHC_CUDA_BWD_WORKSPACE_H
#define FLASHC_CUDA_BWD_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/problem.h"
#include "../core/semantics.h"
#include "bwd_config.h"
#include "hopper_bwd_config.h"

/* Deterministic mode on the Hopper path: one key block per CTA and one
 * accumulator, the CTAs' additions into a query block's dQ rows in a
 * fixed order (hopper_bwd_kernel.cuh), dq_order counting them.
 *
 * Deterministic mode on the portable path: aim for about this many CTAs (two per SM of an
 * H100 / H200), each owning every nchunks-th key block of its (sequence,
 * kv head) and its own dQ slice; at most this many bytes of slices (2 GiB:
 * one head-dim-256 problem of batch 1, 8 heads, 16k rows still gets 16
 * slices, 128 CTAs: the Hopper kernel's one wave; with 1 GiB it ran on 64
 * SMs at half the speed). */
#define FLASHC_BWD_DET_TARGET_CTAS 264
#define FLASHC_BWD_DET_SLICES_CAP ((int64_t)2 << 30)

typedef struct flashc_bwd_plan {
    int head_dim;       /* the configuration's HEAD_DIM */
    int tile_m;         /* the workspace's row tile: a multiple of every main kernel's BLOCK_M */
    int block_n;        /* its BLOCK_N */
    int64_t key_blocks; /* ceil(seqlen_k / block_n), seqlen_k the bound on every sequence */
    int nchunks;        /* key-block stride per CTA (= key_blocks unless deterministic) */
    int dq_slices;      /* 1, or nchunks when deterministic on the portable path */
    int dq_order_rows;  /* deterministic on the Hopper path: query rows per dq_order entry (its
                           BLOCK_M); else 0 */
} flashc_bwd_plan;

typedef struct flashc_bwd_layout {
    int64_t ws_rows;
    int64_t dq_slice_stride; /* floats */
    int64_t dq_order_entries;
    size_t lse2_offset, dsum_offset, dq_offset, dq_order_offset, bytes;
} flashc_bwd_layout;

static inline size_t flashc_bwd_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* hopper: the Hopper kernel will run the problem (flashc_hopper_bwd_applies). */
static inline flashc_bwd_plan flashc_bwd_plan_of(const flashc_problem *p, bool hopper) {
    flashc_bwd_plan plan = {0, 0, 0, 0, 1, 1, 0};
    const int64_t d = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
#define FLASHC_BWD_PICK(D, BM, BN, W, SWM, KVWN, QWM, DQC)                                   \
    if (plan.head_dim == 0 && d <= D) {                                                       \
        plan.head_dim = D;                                                                    \
        plan.tile_m = BM > flashc_hopper_bwd_block_m(D) ? BM : flashc_hopper_bwd_block_m(D);    \
        plan.block_n = BN;                                                                    \
    }
    FLASHC_BWD_CONFIGS(FLASHC_BWD_PICK)
#undef FLASHC_BWD_PICK
    if (plan.head_dim == 0) return plan; /* unreachable: validation caps head dims at 256 */
    plan.key_blocks = (p->seqlen_k + plan.block_n - 1) / plan.block_n;
    int64_t chunks = plan.key_blocks > 0 ? plan.key_blocks : 1;
    if (p->deterministic && hopper) {
        const int block_n = flashc_hopper_bwd_block_n(d);
        chunks = (p->seqlen_k + block_n - 1) / block_n;
        if (chunks < 1) chunks = 1;
        plan.dq_order_rows = flashc_hopper_bwd_block_m(d);
    } else if (p->deterministic) {
        const int64_t units = p->batch * p->nheads_k > 0 ? p->batch * p->nheads_k : 1;
        int64_t want = (FLASHC_BWD_DET_TARGET_CTAS + units - 1) / units;
        if (want < chunks) chunks = want;
        const int64_t rows = flashc_padded_rows(p->total_q, p->batch, plan.tile_m);
        const int64_t slice_bytes = p->nheads * rows * p->head_dim * (int64_t)sizeof(float);
        if (slice_bytes > 0 && chunks * slice_bytes > FLASHC_BWD_DET_SLICES_CAP)
            chunks = FLASHC_BWD_DET_SLICES_CAP / slice_bytes;
        if (chunks < 1) chunks = 1;
        plan.dq_slices = (int)chunks;
    }
    /* the grid holds nchunks * batch * nheads_k CTAs, checked at launch */
    plan.nchunks = chunks > 0x7fffffff ? 0x7fffffff : (int)chunks;
    return plan;
}

static inline flashc_bwd_layout flashc_bwd_layout_of(const flashc_problem *p, const flashc_bwd_plan *plan) {
    flashc_bwd_layout L;
    L.ws_rows = flashc_padded_rows(p->total_q, p->batch, plan->tile_m);
    const size_t per_head_rows = (size_t)(p->nheads * L.ws_rows) * sizeof(float);
    L.dq_slice_stride = p->nheads * L.ws_rows * p->head_dim;
    L.lse2_offset = 0;
    L.dsum_offset = flashc_bwd_align256(per_head_rows);
    L.dq_offset = L.dsum_offset + flashc_bwd_align256(per_head_rows);
    L.dq_order_offset = L.dq_offset +
                        flashc_bwd_align256((size_t)plan->dq_slices * (size_t)L.dq_slice_stride * sizeof(float));
    L.dq_order_entries = plan->dq_order_rows ? p->nheads * L.ws_rows / plan->dq_order_rows : 0;
    L.bytes = L.dq_order_offset + flashc_bwd_align256((size_t)L.dq_order_entries * sizeof(int32_t));
    return L;
}

#endif
