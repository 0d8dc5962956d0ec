/* The KV-cache kernels' launch functions, called by kvcache_backend.cu:
 * the attention kernel of each compiled head dim (kvcache_hdim*.cu), the
 * append with rotary (kvcache_append.cu), the split combine
 * (kvcache_combine.cu). Each launches on `stream` and returns the launch
 * error. */
#ifndef FLASHC_CUDA_KVCACHE_LAUNCH_H
#define FLASHC_CUDA_KVCACHE_LAUNCH_H

#include <cuda_runtime.h>

#include "kvcache_config.h"
#include "kvcache_params.h"

#define FLASHC_KVC_DECLARE_RUN(HEAD_DIM)                                                               \
    cudaError_t flashc_kvc_run_hdim##HEAD_DIM(const flashc_kvc_params *p, void *stream, int is_bf16, \
                                              flashc_kvc_layout layout);
FLASHC_KVC_HEAD_DIMS(FLASHC_KVC_DECLARE_RUN)
#undef FLASHC_KVC_DECLARE_RUN

/* The attention kernel's tile for these head dims and rows per KV head on
 * a device whose CTAs may opt in to `optin` bytes of shared memory (for
 * the split heuristic on the host); block_m 0 where none fits. */
typedef struct flashc_kvc_tile {
    int block_m, block_n, smem_bytes;
} flashc_kvc_tile;
flashc_kvc_tile flashc_kvc_tile_of(int head_dim, int head_dim_v, long long rows_per_head, int optin);

/* The attention over the cache: the kernel of the smallest compiled head
 * dim that holds d and dv, with the warp layout of the rows per KV head. */
cudaError_t flashc_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16);

/* k_new / v_new into the cache (k_new rotated) and q rotated into
 * q_rotated, as the params ask; *launched 1 where that took a kernel. */
cudaError_t flashc_kvc_append(const flashc_kvc_params *p, void *stream, int is_bf16, int *launched);

/* out and LSE from the num_splits partials. */
cudaError_t flashc_kvc_combine(const flashc_kvc_params *p, void *stream, int is_bf16);

#endif
