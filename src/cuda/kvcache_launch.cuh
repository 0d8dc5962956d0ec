/* Launching the KV-cache attention kernel of one head dim: its three warp
 * layouts x two dtypes, the shared-memory opt-in and the flat grid. Each
 * kvcache_hdim*.cu instantiates one head dim, so they compile in parallel. */
#ifndef FLASHC_CUDA_KVCACHE_LAUNCH_CUH
#define FLASHC_CUDA_KVCACHE_LAUNCH_CUH

#include <cuda_runtime.h>

#include "kvcache_kernel.cuh"
#include "kvcache_launch.h"
#include "launch_grid.h"
#include "smem_optin.cuh"

template <typename T, int HEAD_DIM, int WARPS_N, bool SMALL>
static cudaError_t flashc_kvc_launch(const flashc_kvc_params &p, cudaStream_t stream) {
    typedef flashc_kvc_config<HEAD_DIM, WARPS_N, SMALL> C;
    auto kernel = flashc_kvc_kernel<T, HEAD_DIM, WARPS_N, SMALL>;
    if (C::SMEM_BYTES > 48 * 1024) {
        static unsigned long long smem_raised;
        cudaError_t err = flashc_smem_optin((const void *)kernel, C::SMEM_BYTES, &smem_raised);
        if (err != cudaSuccess) return err;
    }
    const long long m_blocks = ((long long)p.seqlen_q * p.group + C::BLOCK_M - 1) / C::BLOCK_M;
    unsigned grid;
    cudaError_t err = flashc_flat_grid(m_blocks * p.num_splits, p.nheads_k, p.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    kernel<<<grid, FLASHC_KVC_THREADS, C::SMEM_BYTES, stream>>>(p);
    return cudaGetLastError();
}

template <typename T, int HEAD_DIM, bool SMALL>
static cudaError_t flashc_kvc_launch_warps(const flashc_kvc_params &p, cudaStream_t stream, int warps_n) {
    if constexpr (flashc_kvc_config<HEAD_DIM, 4, SMALL>::COMPILED)
        if (warps_n == 4) return flashc_kvc_launch<T, HEAD_DIM, 4, SMALL>(p, stream);
    if constexpr (flashc_kvc_config<HEAD_DIM, 2, SMALL>::COMPILED)
        if (warps_n == 2) return flashc_kvc_launch<T, HEAD_DIM, 2, SMALL>(p, stream);
    if constexpr (flashc_kvc_config<HEAD_DIM, 1, SMALL>::COMPILED)
        if (warps_n == 1) return flashc_kvc_launch<T, HEAD_DIM, 1, SMALL>(p, stream);
    return cudaErrorInvalidValue; /* unreachable: flashc_kvc_layout_of picks compiled ones */
}

template <typename T, int HEAD_DIM>
static cudaError_t flashc_kvc_launch_layout(const flashc_kvc_params &p, cudaStream_t stream, flashc_kvc_layout l) {
    return l.small ? flashc_kvc_launch_warps<T, HEAD_DIM, true>(p, stream, l.warps_n)
                   : flashc_kvc_launch_warps<T, HEAD_DIM, false>(p, stream, l.warps_n);
}

#define FLASHC_KVC_DEFINE_RUN(HEAD_DIM)                                                                       \
    cudaError_t flashc_kvc_run_hdim##HEAD_DIM(const flashc_kvc_params *p, void *stream, int is_bf16,        \
                                              flashc_kvc_layout layout) {                                   \
        cudaStream_t s = (cudaStream_t)stream;                                                              \
        return is_bf16 ? flashc_kvc_launch_layout<__nv_bfloat16, HEAD_DIM>(*p, s, layout)                   \
                       : flashc_kvc_launch_layout<__half, HEAD_DIM>(*p, s, layout);                         \
    }

#endif
