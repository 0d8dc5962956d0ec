/* The Hopper (TMA) KV-cache attention kernel's host side, tried by
 * kvcache_dispatch.cu before the portable kernel. */
#ifndef FLASHC_CUDA_HOPPER_KVCACHE_H
#define FLASHC_CUDA_HOPPER_KVCACHE_H

#include <cuda.h>
#include <cuda_runtime.h>

#include "kvcache_params.h"

/* The K and V tensor maps: (column, cache row, KV head, cache batch or
 * paged block), boxes of 64 columns x box_rows. */
typedef struct flashc_hopper_kvc_maps {
    CUtensorMap k, v;
} flashc_hopper_kvc_maps;

#define FLASHC_HOPPER_KVC_HEAD_DIMS(X) X(64) X(128)

#define FLASHC_HOPPER_KVC_DECLARE_RUN(HEAD_DIM)                                                             \
    cudaError_t flashc_hopper_kvc_run_hdim##HEAD_DIM(const flashc_kvc_params *p, const flashc_hopper_kvc_maps *m, \
                                                     void *stream, int is_bf16, int warps_n);
FLASHC_HOPPER_KVC_HEAD_DIMS(FLASHC_HOPPER_KVC_DECLARE_RUN)
#undef FLASHC_HOPPER_KVC_DECLARE_RUN

/* Launch the attention over the cache with the TMA kernel, or return
 * cudaErrorNotSupported (nothing launched) where it does not apply: not a
 * compute capability 9.0 device, head dims above 128, paged blocks of a
 * size other than 16, 32 or a multiple of 64, paged blocks with
 * cache_leftpad, strides TMA cannot take, or the environment variable
 * FLASHC_CUDA_KVCACHE set to "portable" (which tests use to reach the
 * portable kernel on a Hopper GPU). */
cudaError_t flashc_hopper_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16);

#endif
