/* The KV-cache attention's choice of kernel: the Hopper (TMA) kernel where
 * it applies (hopper_kvcache.h), else the portable kernel of the smallest
 * compiled head dim that holds d and dv; the warp layout of the rows per
 * KV head (kvcache_config.h). */
#include "backend_shared.h"
#include "hopper_kvcache.h"
#include "kvcache_launch.h"

/* The smallest compiled head dim that holds d and dv. */
static int head_dim_config(int head_dim, int head_dim_v) {
    const int d = head_dim > head_dim_v ? head_dim : head_dim_v;
#define FLASHC_KVC_FIRST(HEAD_DIM) \
    if (d <= HEAD_DIM) return HEAD_DIM;
    FLASHC_KVC_HEAD_DIMS(FLASHC_KVC_FIRST)
#undef FLASHC_KVC_FIRST
    return 0; /* unreachable: validation caps head dims at 256 */
}

flashc_kvc_tile flashc_kvc_tile_of(int head_dim, int head_dim_v, long long rows_per_head, int optin) {
    const int config = head_dim_config(head_dim, head_dim_v);
    const flashc_kvc_layout l = flashc_kvc_layout_of(config, rows_per_head, optin);
    flashc_kvc_tile t = {0, 0, 0};
#define FLASHC_KVC_TILE_OF(D, WN, BN, S, SM)                                         \
    if (config == D && l.warps_n == WN && l.small == SM) {                          \
        t.block_m = flashc_kvc_config<D, WN, SM>::BLOCK_M;                          \
        t.block_n = BN;                                                             \
        t.smem_bytes = flashc_kvc_config<D, WN, SM>::SMEM_BYTES;                    \
    }
    FLASHC_KVC_CONFIGS(FLASHC_KVC_TILE_OF)
#undef FLASHC_KVC_TILE_OF
    return t;
}

cudaError_t flashc_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16) {
    const cudaError_t hopper = flashc_hopper_kvc_attention(p, stream, is_bf16);
    if (hopper != cudaErrorNotSupported) return hopper;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const int config = head_dim_config(p->head_dim, p->head_dim_v);
    const flashc_kvc_layout layout =
        flashc_kvc_layout_of(config, (long long)p->seqlen_q * p->group, flashc_cuda_device_smem_optin(device));
    if (layout.warps_n == 0) return cudaErrorInvalidConfiguration; /* no tile fits the device's shared memory */
#define FLASHC_KVC_TRY(HEAD_DIM) \
    if (config == HEAD_DIM) return flashc_kvc_run_hdim##HEAD_DIM(p, stream, is_bf16, layout);
    FLASHC_KVC_HEAD_DIMS(FLASHC_KVC_TRY)
#undef FLASHC_KVC_TRY
    return cudaErrorInvalidValue; /* unreachable: validation caps head dims at 256 */
}
