/* The Hopper forward (sm_90a: TMA + wgmma), called by fwd_dispatch.cu
 * before the portable kernel. */
#ifndef FLASHC_CUDA_HOPPER_FWD_H
#define FLASHC_CUDA_HOPPER_FWD_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "fwd_params.h"
#include "hopper_fwd_config.h"

/* Tensor maps of q, k and v: dims (head dim, rows, heads, batch), boxes of
 * 64 columns x the tile's rows, 128-byte swizzle (hopper_fwd.cu). */
typedef struct flashc_hopper_fwd_maps {
    CUtensorMap q, k, v;
} flashc_hopper_fwd_maps;

#define FLASHC_HOPPER_FWD_DECLARE_RUN(DQK, DV, CONSUMERS, BLOCK_N, BLOCK_N_GENERAL, OVERLAP, PINGPONG)              \
    cudaError_t flashc_hopper_fwd_run_##DQK##x##DV(const flashc_fwd_params *p, const flashc_hopper_fwd_maps *m, \
                                                   void *stream, int is_bf16, int general);
FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_FWD_DECLARE_RUN)
#undef FLASHC_HOPPER_FWD_DECLARE_RUN

/* Runs the forward on the Hopper path when it applies: the current device
 * is compute capability 9.0, the tensors suit TMA, and the environment
 * variable FLASHC_CUDA_FORWARD is not "portable" (which tests use to
 * reach the portable kernel on a Hopper GPU). Returns cudaErrorNotSupported,
 * having done nothing, when it does not apply. */
cudaError_t flashc_hopper_fwd(const flashc_fwd_params *p, void *stream, int is_bf16, int general);

#endif
