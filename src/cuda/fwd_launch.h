/* The forward's launch functions, one per compiled head dim (fwd_config.h),
 * plus the auxiliary kernels; called by backend.cu. */
#ifndef FLASHC_CUDA_FWD_LAUNCH_H
#define FLASHC_CUDA_FWD_LAUNCH_H

#include <cuda_runtime.h>

#include "../core/problem.h"
#include "fwd_config.h"
#include "fwd_params.h"

/* Scratch for the forward from the caller's allocator
 * (flashc_attention_forward_allocating), asked for only where the portable
 * kernel shares out its last wave of tiles (fwd_launch.cuh); allocate
 * NULL: never. */
typedef struct flashc_fwd_scratch {
    flashc_workspace_allocator allocate;
    void *context;
    flashc_device device;
} flashc_fwd_scratch;

#define FLASHC_FWD_DECLARE_RUN(HEAD_DIM, BLOCK_M, BLOCK_N, BLOCK_N_GENERAL, BLOCK_N_DROPOUT, WARPS, CTAS_PER_SM, \
                               EARLY_K_LOAD)                                                                \
    cudaError_t flashc_fwd_run_hdim##HEAD_DIM(const flashc_fwd_params *p, const flashc_fwd_scratch *scratch, \
                                              void *stream, int is_bf16, int general);
FLASHC_FWD_CONFIGS(FLASHC_FWD_DECLARE_RUN)
#undef FLASHC_FWD_DECLARE_RUN

/* Runs the forward kernel that fits the problem's head dims. */
cudaError_t flashc_fwd_dispatch(const flashc_fwd_params *p, const flashc_fwd_scratch *scratch, void *stream,
                                int is_bf16, int general);

/* Varlen: packed rows before the first or after the last sequence see no
 * key: out 0, LSE +inf (as on the CPU). */
cudaError_t flashc_fwd_fill_outside_rows(const flashc_fwd_params *p, int is_bf16, void *stream);

/* S_dmask over its whole rounded extent (a testing aid: simple, not fast). */
cudaError_t flashc_fwd_write_dmask(const flashc_fwd_params *p, const flashc_score_tensor *s_dmask,
                                   int is_bf16, void *stream);

#endif
