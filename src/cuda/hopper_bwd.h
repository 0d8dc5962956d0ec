/* The Hopper backward main kernel (sm_90a: TMA + wgmma), called by
 * bwd_dispatch.cu before the portable kernel. It shares the preprocess,
 * the dQ conversion and the workspace layout with the portable path. */
#ifndef FLASHC_CUDA_HOPPER_BWD_H
#define FLASHC_CUDA_HOPPER_BWD_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "../core/problem.h"
#include "bwd_params.h"
#include "hopper_bwd_config.h"

/* Tensor maps of q, k, v and dout: dims (head dim, rows, heads, batch),
 * boxes of 64 columns x the tile's rows, 128-byte swizzle (hopper_bwd.cu). */
typedef struct flashc_hopper_bwd_maps {
    CUtensorMap q, k, v, dout;
} flashc_hopper_bwd_maps;

#define FLASHC_HOPPER_BWD_DECLARE_RUN(HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES)                                       \
    cudaError_t flashc_hopper_bwd_run_hdim##HEAD_DIM(const flashc_bwd_params *p, const flashc_hopper_bwd_maps *m, \
                                                     void *stream, int is_bf16);
FLASHC_HOPPER_BWD_CONFIGS(FLASHC_HOPPER_BWD_DECLARE_RUN)
#undef FLASHC_HOPPER_BWD_DECLARE_RUN
/* The 256 configuration's kernels for narrower d / dv (hopper_bwd_hdim256.cu
 * chooses). */
cudaError_t flashc_hopper_bwd_run_hdim192x128(const flashc_bwd_params *p, const flashc_hopper_bwd_maps *m,
                                              void *stream, int is_bf16);
cudaError_t flashc_hopper_bwd_run_hdim192x192(const flashc_bwd_params *p, const flashc_hopper_bwd_maps *m,
                                              void *stream, int is_bf16);

/* Whether the Hopper kernel will run problem p, as far as the plan needs
 * to know (bwd_workspace.h): p's device is compute capability 9.0,
 * max(d, dv) <= 256, and the environment variable FLASHC_CUDA_BACKWARD is
 * not "portable" (which tests use to reach the portable kernel on a Hopper
 * GPU). */
bool flashc_hopper_bwd_applies(const flashc_problem *p);

/* Runs the backward's main kernel on the Hopper path when it applies: as
 * above, the workspace tile is a multiple of the configuration's BLOCK_M,
 * the tensors suit TMA, and a deterministic plan was made for this path
 * (p->dq_order). Returns cudaErrorNotSupported, having done nothing, when
 * it does not apply. */
cudaError_t flashc_hopper_bwd(const flashc_bwd_params *p, void *stream, int is_bf16);

#endif
