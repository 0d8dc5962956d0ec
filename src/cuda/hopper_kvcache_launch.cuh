/* Launching the Hopper KV-cache kernel of one head dim: its three warp
 * layouts x two dtypes, the shared-memory opt-in and the portable kernel's
 * flat grid. Each hopper_kvcache_hdim*.cu instantiates one head dim. */
#ifndef FLASHC_CUDA_HOPPER_KVCACHE_LAUNCH_CUH
#define FLASHC_CUDA_HOPPER_KVCACHE_LAUNCH_CUH

#include <cuda_runtime.h>

#include "dependent_launch.cuh"
#include "hopper_kvcache.h"
#include "hopper_kvcache_kernel.cuh"
#include "launch_grid.h"
#include "smem_optin.cuh"

template <typename T, int HEAD_DIM, int WARPS_N, bool APPEND>
static cudaError_t flashc_hopper_kvc_launch_instance(const flashc_kvc_params &p, const flashc_hopper_kvc_maps &m,
                                                     cudaStream_t stream) {
    typedef flashc_hopper_kvc_config<HEAD_DIM, WARPS_N> H;
    auto kernel = flashc_hopper_kvc_kernel<T, HEAD_DIM, WARPS_N, APPEND>;
    static unsigned long long smem_raised;
    cudaError_t err = flashc_smem_optin((const void *)kernel, H::SMEM_BYTES, &smem_raised);
    if (err != cudaSuccess) return err;
    const long long m_blocks = ((long long)p.seqlen_q * p.group + H::P::BLOCK_M - 1) / H::P::BLOCK_M;
    unsigned grid;
    err = flashc_flat_grid(m_blocks * p.num_splits, p.nheads_k, p.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    /* a programmatic dependent of the kernel before it (the append, or the
     * previous layer's): its CTAs are scheduled while that one's last run */
    return flashc_launch_dependent(kernel, dim3(grid), dim3(H::P::THREADS), H::SMEM_BYTES, stream, true, p, m.k, m.v);
}

template <typename T, int HEAD_DIM, int WARPS_N>
static cudaError_t flashc_hopper_kvc_launch(const flashc_kvc_params &p, const flashc_hopper_kvc_maps &m,
                                            cudaStream_t stream) {
    if constexpr (!flashc_hopper_kvc_config<HEAD_DIM, WARPS_N>::WHOLE_BOXES) {
        return cudaErrorNotSupported; /* 32-key steps (head dim 256 beyond 16 rows): the portable kernel's */
    } else {
        if (p.early_cache_reads || p.fused_append)
            return flashc_hopper_kvc_launch_instance<T, HEAD_DIM, WARPS_N, true>(p, m, stream);
        return flashc_hopper_kvc_launch_instance<T, HEAD_DIM, WARPS_N, false>(p, m, stream);
    }
}

/* The launch of warp layout warps_n (kvcache_config.h's keys: the tiles
 * compiled at this head dim). */
template <typename T, int HEAD_DIM>
static cudaError_t flashc_hopper_kvc_run(const flashc_kvc_params &p, const flashc_hopper_kvc_maps &m,
                                         cudaStream_t s, int warps_n) {
    if constexpr (flashc_kvc_config<HEAD_DIM, 8>::COMPILED)
        if (warps_n == 8) return flashc_hopper_kvc_launch<T, HEAD_DIM, 8>(p, m, s);
    if constexpr (flashc_kvc_config<HEAD_DIM, FLASHC_KVC_TALL_LONG>::COMPILED)
        if (warps_n == FLASHC_KVC_TALL_LONG) return flashc_hopper_kvc_launch<T, HEAD_DIM, FLASHC_KVC_TALL_LONG>(p, m, s);
    if constexpr (flashc_kvc_config<HEAD_DIM, FLASHC_KVC_TALL>::COMPILED)
        if (warps_n == FLASHC_KVC_TALL) return flashc_hopper_kvc_launch<T, HEAD_DIM, FLASHC_KVC_TALL>(p, m, s);
    if (warps_n == 4) return flashc_hopper_kvc_launch<T, HEAD_DIM, 4>(p, m, s);
    if (warps_n == 2) return flashc_hopper_kvc_launch<T, HEAD_DIM, 2>(p, m, s);
    return flashc_hopper_kvc_launch<T, HEAD_DIM, 1>(p, m, s);
}

#define FLASHC_HOPPER_KVC_DEFINE_RUN(HEAD_DIM)                                                                  \
    cudaError_t flashc_hopper_kvc_run_hdim##HEAD_DIM(const flashc_kvc_params *p, const flashc_hopper_kvc_maps *m, \
                                                     void *stream, int is_bf16, int warps_n) {                  \
        cudaStream_t s = (cudaStream_t)stream;                                                                  \
        if (is_bf16) return flashc_hopper_kvc_run<__nv_bfloat16, HEAD_DIM>(*p, *m, s, warps_n);                 \
        return flashc_hopper_kvc_run<__half, HEAD_DIM>(*p, *m, s, warps_n);                                      \
    }

#endif
