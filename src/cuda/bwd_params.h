/* What the backward kernels receive: the forward's parameter block (inputs,
 * shapes, varlen, logit rule, masks, dropout: the backward replays exactly
 * the forward's scores) plus dO, dLSE, the gradients and the workspace.
 * Filled once on the host by backend.cu. */
#ifndef FLASHC_CUDA_BWD_PARAMS_H
#define FLASHC_CUDA_BWD_PARAMS_H

#include <stdint.h>

#include "tail_split.h"
#include "fwd_params.h"

typedef struct flashc_bwd_params {
    flashc_fwd_params fwd;          /* q, k, v, out, lse (read only here) */

    const void *dout;
    int64_t do_batch_stride, do_row_stride, do_head_stride;
    const float *dlse;              /* NULL: no gradient flows into LSE */
    int64_t dlse_batch_stride, dlse_head_stride, dlse_row_stride;
    void *dq, *dk, *dv;
    int64_t dq_batch_stride, dq_row_stride, dq_head_stride;
    int64_t dk_batch_stride, dk_row_stride, dk_head_stride;
    int64_t dv_batch_stride, dv_row_stride, dv_head_stride;

    float scale;                    /* softmax scale: dK and dQ are scaled once, at the end */

    /* Workspace (bwd_workspace.h): per-row buffers of ws_rows rows per
     * head, laid out with flashc_padded_row_offset(first row, b, tile_m). */
    float *lse2;                    /* [nheads][ws_rows] LSE * log2(e); +inf on padding rows */
    float *dsum;                    /* [nheads][ws_rows] D = rowsum(dO * O) - dLSE; 0 on padding */
    float *dq_accum;                /* [dq_slices][nheads][ws_rows][dq_cols], unscaled dQ */
    int64_t ws_rows;
    int dq_cols;                    /* dq_accum's row: the plan's head_dim (bwd_workspace.h) */
    int dq_blocked;                 /* dq_accum's layout, as the main kernel that ran adds into it:
                                       0 rows of dq_cols floats (the Hopper kernel); 1 (the
                                       portable kernel) each 8-row group's 8 x dq_cols floats in
                                       8 x 8 blocks, one per mma atom (bwd_rows.cuh). Set by
                                       flashc_bwd_dispatch. */
    int64_t dq_slice_stride;        /* floats between two slices */
    int dq_slices;
    int tile_m;                     /* the m-block of the main kernel: every kernel's row tile */

    /* Key blocks: CTA c of a (sequence, kv head) owns key blocks c,
     * c + nchunks, ... Deterministic: CTA c accumulates dQ in slice c
     * (nobody else writes it); otherwise nchunks is the number of key
     * blocks (one each) and every CTA adds into slice 0 with atomics. */
    int nchunks;
    int deterministic;
    /* Deterministic on the Hopper path (else NULL): per query block of
     * dq_order_rows rows, the key blocks that have added into its dQ rows
     * (zeroed by the preprocess); nchunks covers every key block. */
    int *dq_order;
    int dq_order_rows;
    /* CTAs per (key block, kv head), each walking a share of
     * the group's query heads; above 1 they write float32 partials of dK
     * (unscaled) and dV, [head_splits][part_rows][nheads_k][head_dim or
     * head_dim_v], part_rows the packed key rows (batch * seqlen_k, or
     * total_k), which flashc_bwd_combine_dkv sums in split order. */
    int head_splits;
    float *dk_part, *dv_part;
    int64_t part_rows;
    /* The portable kernel's last partial wave, shared by tail CTAs
     * (tail_split.h; tail.ctas 0: none): the slots of the segments' float32
     * dV and dK accumulators, [ctas + tiles][2][BLOCK_N][HEAD_DIM] in the
     * kernel's fragment order, and per tail tile the count of segments
     * done (zeroed by the preprocess). */
    flashc_tail tail;
    float *tail_slots;
    int *tail_counts;
} flashc_bwd_params;

#endif
