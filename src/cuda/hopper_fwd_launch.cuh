/* Launching one Hopper forward configuration (hopper_fwd_config.h): the
 * four kernels of a pair of head dims (float16 / bfloat16 x plain /
 * general), the shared-memory opt-in and the grid (one CTA per tile, in
 * the order of tile_schedule.h). Each
 * hopper_fwd_hdim*.cu instantiates one pair. */
#ifndef FLASHC_CUDA_HOPPER_FWD_LAUNCH_CUH
#define FLASHC_CUDA_HOPPER_FWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "hopper_fwd.h"
#include "hopper_fwd_config.h"
#include "hopper_fwd_kernel.cuh"
#include "smem_optin.cuh"
#include "tile_schedule.h"

template <typename T, int D_QK, int D_V, bool GENERAL>
static cudaError_t flashc_hopper_fwd_launch(const flashc_fwd_params &p, const flashc_hopper_fwd_maps &maps,
                                            cudaStream_t stream) {
    typedef flashc_hopper_fwd_config<D_QK, D_V> C;
    constexpr int BLOCK_N = GENERAL ? C::BLOCK_N_GENERAL : C::BLOCK_N;
    auto kernel = flashc_hopper_fwd_kernel<T, D_QK, D_V, BLOCK_N, GENERAL>;
    constexpr int smem = flashc_hopper_fwd_smem<D_QK, D_V, BLOCK_N>::BYTES;
    static unsigned long long smem_raised;
    cudaError_t err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
    if (err != cudaSuccess) return err;
    flashc_tile_schedule sched;
    if (!flashc_fwd_schedule(p, C::BLOCK_M, &sched)) return cudaErrorInvalidConfiguration;
    if (sched.tiles == 0) return cudaSuccess;
    kernel<<<sched.tiles, C::THREADS, smem, stream>>>(maps, p, sched);
    return cudaGetLastError();
}

#define FLASHC_HOPPER_FWD_DEFINE_RUN(DQK, DV)                                                                   \
    cudaError_t flashc_hopper_fwd_run_##DQK##x##DV(const flashc_fwd_params *p, const flashc_hopper_fwd_maps *m,   \
                                                   void *stream, int is_bf16, int general) {                    \
        cudaStream_t s = (cudaStream_t)stream;                                                                 \
        if (is_bf16)                                                                                           \
            return general ? flashc_hopper_fwd_launch<__nv_bfloat16, DQK, DV, true>(*p, *m, s)                  \
                           : flashc_hopper_fwd_launch<__nv_bfloat16, DQK, DV, false>(*p, *m, s);                \
        return general ? flashc_hopper_fwd_launch<__half, DQK, DV, true>(*p, *m, s)                             \
                       : flashc_hopper_fwd_launch<__half, DQK, DV, false>(*p, *m, s);                           \
    }

#endif
