/* Host side of the Hopper backward: whether it applies, its tensor maps,
 * and the choice of head-dim configuration. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hopper_bwd.h"
#include "hopper_host.h"

/* block_m, block_n: the configuration's query rows per step (the Q / dO box
 * rows) and keys per CTA (the K / V box rows). */
static bool make_maps(flashc_hopper_bwd_maps *m, const flashc_bwd_params *p, int is_bf16, int block_m,
                      int block_n) {
    const flashc_fwd_params *f = &p->fwd;
    const bool varlen = f->cu_seqlens_q != nullptr;
    const int batch = varlen ? 1 : f->batch;
    const int64_t rows_q = varlen ? f->total_q : f->seqlen_q, rows_k = varlen ? f->total_k : f->seqlen_k;
    /* TMA coordinates are 32-bit, and a map has no empty dimension (with
     * no rows there is nothing to compute: the portable launch handles it). */
    if (rows_q > INT32_MAX || rows_k > INT32_MAX || rows_q < 1 || rows_k < 1 || batch < 1 || f->nheads < 1 ||
        f->nheads_k < 1 || f->head_dim < 1 || f->head_dim_v < 1)
        return false;
    memset(m, 0, sizeof *m);
    return flashc_hopper_make_map(&m->q, f->q, is_bf16, f->head_dim, rows_q, f->nheads, batch, f->q_row_stride,
                                  f->q_head_stride, f->q_batch_stride, block_m) &&
           flashc_hopper_make_map(&m->dout, p->dout, is_bf16, f->head_dim_v, rows_q, f->nheads, batch,
                                  p->do_row_stride, p->do_head_stride, p->do_batch_stride, block_m) &&
           flashc_hopper_make_map(&m->k, f->k, is_bf16, f->head_dim, rows_k, f->nheads_k, batch, f->k_row_stride,
                                  f->k_head_stride, f->k_batch_stride, block_n) &&
           flashc_hopper_make_map(&m->v, f->v, is_bf16, f->head_dim_v, rows_k, f->nheads_k, batch,
                                  f->v_row_stride, f->v_head_stride, f->v_batch_stride, block_n);
}

static bool forced_portable(void) {
    const char *path = getenv("FLASHC_CUDA_BACKWARD");
    return path && strcmp(path, "portable") == 0;
}

bool flashc_hopper_bwd_applies(const flashc_problem *p) {
    const int64_t d = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
    /* block_m 0: past the largest configuration */
    return !forced_portable() && flashc_hopper_bwd_block_m(d) != 0 && flashc_hopper_device(p->device_index);
}

cudaError_t flashc_hopper_bwd(const flashc_bwd_params *p, void *stream, int is_bf16) {
    if (forced_portable() || !flashc_hopper_current_device()) return cudaErrorNotSupported;
    /* deterministic: only with the ordered additions' plan */
    if (p->deterministic && !p->dq_order) return cudaErrorNotSupported;
    const int d = p->fwd.head_dim > p->fwd.head_dim_v ? p->fwd.head_dim : p->fwd.head_dim_v;
    flashc_hopper_bwd_maps maps;
    /* the workspace was laid out in the plan's tiles; this kernel walks
     * the query rows in blocks of its own BLOCK_M, which must divide them.
     * Ordered dQ additions: one key block per CTA, dq_order per BLOCK_M. */
#define FLASHC_HOPPER_BWD_TRY_CONFIG(HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES)                                  \
    if (d <= HEAD_DIM) {                                                                                 \
        const bool ordered_ok = !p->dq_order || (p->dq_order_rows == BLOCK_M &&                          \
                                                 (int64_t)p->nchunks * BLOCK_N >= p->fwd.seqlen_k);      \
        if (p->tile_m % BLOCK_M != 0 || !ordered_ok || !make_maps(&maps, p, is_bf16, BLOCK_M, BLOCK_N))  \
            return cudaErrorNotSupported;                                                                \
        return flashc_hopper_bwd_run_hdim##HEAD_DIM(p, &maps, stream, is_bf16);                           \
    }
    FLASHC_HOPPER_BWD_CONFIGS(FLASHC_HOPPER_BWD_TRY_CONFIG)
#undef FLASHC_HOPPER_BWD_TRY_CONFIG
    return cudaErrorNotSupported;
}
