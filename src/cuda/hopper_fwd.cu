/* Host side of the Hopper forward: whether it applies, its tensor maps,
 * and the choice of head-dim configuration. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hopper_fwd.h"
#include "hopper_host.h"

static bool make_maps(flashc_hopper_fwd_maps *m, const flashc_fwd_params *p, int is_bf16, int block_m,
                      int block_n) {
    const bool varlen = p->cu_seqlens_q != nullptr;
    const int batch = varlen ? 1 : p->batch;
    const int64_t rows_q = varlen ? p->total_q : p->seqlen_q, rows_k = varlen ? p->total_k : p->seqlen_k;
    /* TMA coordinates are 32-bit, and a map has no empty dimension (with
     * no rows at all there is nothing to load: the portable kernel writes
     * the empty rows). */
    if (rows_q > INT32_MAX || rows_k > INT32_MAX || rows_q < 1 || rows_k < 1 || batch < 1 || p->nheads < 1 ||
        p->nheads_k < 1 || p->head_dim < 1 || p->head_dim_v < 1)
        return false;
    memset(m, 0, sizeof *m);
    return flashc_hopper_make_map(&m->q, p->q, is_bf16, p->head_dim, rows_q, p->nheads, batch, p->q_row_stride,
                                  p->q_head_stride, p->q_batch_stride, block_m) &&
           flashc_hopper_make_map(&m->k, p->k, is_bf16, p->head_dim, rows_k, p->nheads_k, batch, p->k_row_stride,
                                  p->k_head_stride, p->k_batch_stride, block_n) &&
           flashc_hopper_make_map(&m->v, p->v, is_bf16, p->head_dim_v, rows_k, p->nheads_k, batch,
                                  p->v_row_stride, p->v_head_stride, p->v_batch_stride, block_n);
}

static bool forced_portable(void) {
    const char *path = getenv("FLASHC_CUDA_FORWARD");
    return path && strcmp(path, "portable") == 0;
}

cudaError_t flashc_hopper_fwd(const flashc_fwd_params *p, void *stream, int is_bf16, int general) {
    if (forced_portable() || !flashc_hopper_current_device()) return cudaErrorNotSupported;
    flashc_hopper_fwd_maps maps;
#define FLASHC_HOPPER_TRY_CONFIG(DQK, DV, CONSUMERS, BLOCK_N, BLOCK_N_GENERAL, OVERLAP, PINGPONG)          \
    if (p->head_dim <= DQK && p->head_dim_v <= DV) {                                                      \
        if (!make_maps(&maps, p, is_bf16, 64 * CONSUMERS, general ? BLOCK_N_GENERAL : BLOCK_N))            \
            return cudaErrorNotSupported;                                                                 \
        return flashc_hopper_fwd_run_##DQK##x##DV(p, &maps, stream, is_bf16, general);                   \
    }
    FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_TRY_CONFIG)
#undef FLASHC_HOPPER_TRY_CONFIG
    return cudaErrorNotSupported;
}
