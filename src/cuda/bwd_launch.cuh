/* Launching the backward's main kernel for one configuration: two stages
 * of Q / dO where the device's shared memory allows, else one (the plan
 * took a configuration of which one stage fits); one CTA per key-block
 * chunk of a (sequence, kv head, head split) pair, in the order of
 * tile_schedule.h: a pair's CTAs run together and share its Q and dO in
 * L2, and under a mask the longest chunks of an L2 section start first.
 * With a tail (tail_split.h) the grid stops after its last full wave and the
 * tail grid shares out the last tiles: on sm_90+ a programmatic dependent
 * launch, so its CTAs take the SMs as the main grid's last CTAs leave
 * them. Each bwd_hdim*.cu instantiates one configuration. */
#ifndef FLASHC_CUDA_BWD_LAUNCH_CUH
#define FLASHC_CUDA_BWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "backend_shared.h"
#include "bwd_kernel.cuh"
#include "bwd_launch.h"
#include "dependent_launch.cuh"
#include "smem_optin.cuh"

template <typename T, int HEAD_DIM, bool SMALL, bool GENERAL, bool TAIL>
static constexpr auto flashc_bwd_kernel_of() {
    typedef flashc_bwd_config<HEAD_DIM, SMALL> C;
    return flashc_bwd_kernel<T, HEAD_DIM, C::BLOCK_M, C::BLOCK_N, C::WARPS,
                             GENERAL ? C::GENERAL_S_WARPS_M : C::S_WARPS_M, C::KV_WARPS_N, C::Q_WARPS_M, C::DQ_CHUNK,
                             C::DQ_IN_KV, C::SWIZZLE, GENERAL, TAIL>;
}

/* The tail grid: p.tail.ctas CTAs after the main grid, dependent on it
 * where the main grid runs. */
template <typename T, int HEAD_DIM, bool SMALL, bool GENERAL>
static cudaError_t flashc_bwd_launch_tail(const flashc_bwd_params &p, const flashc_tile_schedule &sched, int stages,
                                          int smem, cudaStream_t stream) {
    typedef flashc_bwd_config<HEAD_DIM, SMALL> C;
    auto kernel = flashc_bwd_kernel_of<T, HEAD_DIM, SMALL, GENERAL, true>();
    if (smem > 48 * 1024) {
        static unsigned long long smem_raised;
        cudaError_t err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
        if (err != cudaSuccess) return err;
    }
    return flashc_launch_dependent(kernel, dim3((unsigned)p.tail.ctas), dim3(C::WARPS * 32), (size_t)smem, stream,
                                   p.tail.first > 0, p, sched, stages);
}

template <typename T, int HEAD_DIM, bool SMALL, bool GENERAL>
static cudaError_t flashc_bwd_launch(const flashc_bwd_params &p, cudaStream_t stream) {
    typedef flashc_bwd_config<HEAD_DIM, SMALL> C;
    auto kernel = flashc_bwd_kernel_of<T, HEAD_DIM, SMALL, GENERAL, false>();
    /* the workspace was laid out in the plan's tiles, which this
     * configuration's blocks must divide; anything else would read and
     * write wrong rows */
    if (p.tile_m % C::BLOCK_M != 0 || p.dq_cols != HEAD_DIM) return cudaErrorInvalidValue;
    flashc_tile_schedule sched;
    if (!flashc_bwd_schedule(p, &sched)) return cudaErrorInvalidConfiguration;
    if (sched.tiles == 0) return cudaSuccess;
    /* a tail: the schedule's last tiles, with the workspace's slots (laid
     * out in the plan's block_n x head_dim, this configuration's) */
    if (p.tail.ctas &&
        (GENERAL || p.tail.first + p.tail.tiles != sched.tiles || !p.tail_slots || !p.tail_counts))
        return cudaErrorInvalidValue;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return err;
    const int optin = flashc_cuda_device_smem_optin(device);
    int stages = 2;
    int smem = FLASHC_BWD_SMEM_BYTES(HEAD_DIM, C::BLOCK_M, C::BLOCK_N, C::SWIZZLE, 2);
    if (smem > optin) {
        stages = 1;
        smem = FLASHC_BWD_SMEM_BYTES(HEAD_DIM, C::BLOCK_M, C::BLOCK_N, C::SWIZZLE, 1);
    }
    if (smem > optin) return cudaErrorInvalidConfiguration; /* unreachable: the plan took a configuration that fits */
    if (smem > 48 * 1024) {
        /* per device, the stage count and so the size are fixed */
        static unsigned long long smem_raised;
        err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
        if (err != cudaSuccess) return err;
    }
    const long long main_tiles = p.tail.ctas ? p.tail.first : sched.tiles;
    if (main_tiles > 0) {
        kernel<<<(unsigned)main_tiles, C::WARPS * 32, smem, stream>>>(p, sched, stages);
        err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    /* the general variant has no tail kernel (bwd_workspace.h: the plan
     * takes none for it) */
    if constexpr (!GENERAL)
        if (p.tail.ctas) return flashc_bwd_launch_tail<T, HEAD_DIM, SMALL, GENERAL>(p, sched, stages, smem, stream);
    return cudaSuccess;
}

template <typename T, int HEAD_DIM, bool SMALL>
static cudaError_t flashc_bwd_launch_variant(const flashc_bwd_params &p, cudaStream_t stream, int general) {
    return general ? flashc_bwd_launch<T, HEAD_DIM, SMALL, true>(p, stream)
                   : flashc_bwd_launch<T, HEAD_DIM, SMALL, false>(p, stream);
}

template <typename T, int HEAD_DIM>
static cudaError_t flashc_bwd_launch_config(const flashc_bwd_params &p, cudaStream_t stream, int small,
                                            int general) {
    if constexpr (flashc_bwd_config<HEAD_DIM, true>::COMPILED)
        if (small) return flashc_bwd_launch_variant<T, HEAD_DIM, true>(p, stream, general);
    return small ? cudaErrorInvalidValue : flashc_bwd_launch_variant<T, HEAD_DIM, false>(p, stream, general);
}

#define FLASHC_BWD_DEFINE_RUN(HEAD_DIM)                                                                       \
    cudaError_t flashc_bwd_run_hdim##HEAD_DIM(const flashc_bwd_params *p, void *stream, int is_bf16,        \
                                              int small, int general) {                                     \
        cudaStream_t s = (cudaStream_t)stream;                                                              \
        return is_bf16 ? flashc_bwd_launch_config<__nv_bfloat16, HEAD_DIM>(*p, s, small, general)           \
                       : flashc_bwd_launch_config<__half, HEAD_DIM>(*p, s, small, general);                 \
    }

#endif
