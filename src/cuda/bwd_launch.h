/* The backward's launch functions, called by backend.cu: the preprocess,
 * the main kernel of each compiled head dim (bwd_config.h), the dQ
 * conversion and the varlen rows no sequence covers. */
#ifndef FLASHC_CUDA_BWD_LAUNCH_H
#define FLASHC_CUDA_BWD_LAUNCH_H

#include <cuda_runtime.h>

#include "bwd_config.h"
#include "bwd_params.h"

/* small: the SMALL configuration of the head dim (bwd_config.h); general:
 * the kernel's general variant (softcap, ALiBi, dropout, negative scales),
 * by the forward's rule (backend.cu). */
#define FLASHC_BWD_DECLARE_RUN(HEAD_DIM)                                                                   \
    cudaError_t flashc_bwd_run_hdim##HEAD_DIM(const flashc_bwd_params *p, void *stream, int is_bf16, int small, \
                                              int general);
FLASHC_BWD_HEAD_DIMS(FLASHC_BWD_DECLARE_RUN)
#undef FLASHC_BWD_DECLARE_RUN

/* D = rowsum(dO * O) - dLSE and LSE * log2(e) of every row in p->tile_m-row
 * tiles (+inf / 0 on the tiles' rows past the sequence), and zeros in every
 * dQ slice over the same tiles. */
cudaError_t flashc_bwd_preprocess(const flashc_bwd_params *p, int is_bf16, void *stream);

/* The main kernel of the configuration with this HEAD_DIM (its SMALL one
 * when small; its general variant when general); *dq_blocked: the layout
 * it left dq_accum in (bwd_params.h), for the conversion. */
cudaError_t flashc_bwd_dispatch(const flashc_bwd_params *p, void *stream, int is_bf16, int head_dim_config,
                                int small, int general, int *dq_blocked);

/* dq = scale * (sum of the dQ slices, in slice order), in the output dtype. */
cudaError_t flashc_bwd_convert_dq(const flashc_bwd_params *p, int is_bf16, void *stream);

/* dk = scale * (sum of the head splits' partials), dv = their sum, in split
 * order, on every key of every sequence (p->head_splits > 1). */
cudaError_t flashc_bwd_combine_dkv(const flashc_bwd_params *p, int is_bf16, void *stream);

/* Varlen: dq rows outside every sequence, dk / dv rows outside every
 * sequence or past seqused_k get zeros. */
cudaError_t flashc_bwd_zero_unused_rows(const flashc_bwd_params *p, int is_bf16, void *stream);

#endif
