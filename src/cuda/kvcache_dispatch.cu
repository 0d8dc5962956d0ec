/* The KV-cache attention's choice of kernel: the Hopper (TMA) kernel where
 * it applies (hopper_kvcache.h), else the portable kernel of the smallest
 * compiled head dim that holds d and dv; the warp layout of the rows per
 * KV head (kvcache_config.h). */
#include "hopper_kvcache.h"
#include "kvcache_launch.h"

flashc_kvc_tile flashc_kvc_tile_of(int head_dim, int head_dim_v, long long rows_per_head) {
    const int d = head_dim > head_dim_v ? head_dim : head_dim_v;
    const int warps_n = flashc_kvc_warps_n(rows_per_head);
    flashc_kvc_tile t = {0, 0, 0};
#define FLASHC_KVC_TILE_OF(D, WN, BN, S)                                                   \
    if (t.block_m == 0 && d <= D && warps_n == WN) {                                      \
        t.block_m = flashc_kvc_config<D, WN>::BLOCK_M;                                    \
        t.block_n = BN;                                                                   \
        t.smem_bytes = flashc_kvc_config<D, WN>::SMEM_BYTES;                              \
    }
    FLASHC_KVC_CONFIGS(FLASHC_KVC_TILE_OF)
#undef FLASHC_KVC_TILE_OF
    return t;
}

cudaError_t flashc_kvc_attention(const flashc_kvc_params *p, void *stream, int is_bf16) {
    const cudaError_t hopper = flashc_hopper_kvc_attention(p, stream, is_bf16);
    if (hopper != cudaErrorNotSupported) return hopper;
    const int d = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
    const int warps_n = flashc_kvc_warps_n((long long)p->seqlen_q * p->group);
#define FLASHC_KVC_TRY(HEAD_DIM) \
    if (d <= HEAD_DIM) return flashc_kvc_run_hdim##HEAD_DIM(p, stream, is_bf16, warps_n);
    FLASHC_KVC_HEAD_DIMS(FLASHC_KVC_TRY)
#undef FLASHC_KVC_TRY
    return cudaErrorInvalidValue; /* unreachable: validation caps head dims at 256 */
}
