/* Launching one forward configuration: the four kernels of a head dim
 * (float16 / bfloat16 x plain / general), the shared-memory opt-in, and the
 * grid of the tile schedule. Each fwd_hdim*.cu instantiates one
 * configuration, so the head dims compile in parallel. */
#ifndef FLASHC_CUDA_FWD_LAUNCH_CUH
#define FLASHC_CUDA_FWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "fwd_kernel.cuh"
#include "fwd_launch.h"
#include "smem_optin.cuh"
#include "tile_schedule.h"

/* The grid of the tile schedule (fwd_kernel.cuh, flashc_fwd_find_row_block):
 * (pairs per section, row blocks, sections), sections of more than one
 * pair only under a mask, widened where the pairs would need more than the
 * FLASHC_GRID_YZ_MAX sections a grid may have. Past FLASHC_GRID_YZ_MAX row
 * blocks (sequences of millions of queries) the row blocks take x and the
 * pairs y and z: pair after pair, as the schedule runs without a mask.
 * False when the problem does not fit a grid. */
static inline bool flashc_fwd_grid(const flashc_fwd_params &p, int block_m, dim3 *grid) {
    flashc_tile_schedule s;
    if (!flashc_fwd_schedule(p, block_m, &s)) return false;
    if (s.tiles == 0) {
        *grid = dim3(0, 0, 0);
        return true;
    }
    if (s.ranks > FLASHC_GRID_YZ_MAX) {
        const long long y = s.pairs < FLASHC_GRID_YZ_MAX ? s.pairs : FLASHC_GRID_YZ_MAX;
        *grid = dim3((unsigned)s.ranks, (unsigned)y, (unsigned)((s.pairs + y - 1) / y));
        return true; /* ranks * pairs < 2^31: z <= y */
    }
    long long width = s.section; /* >= 1 */
    if ((s.pairs + width - 1) / width > FLASHC_GRID_YZ_MAX)
        width = (s.pairs + FLASHC_GRID_YZ_MAX - 1) / FLASHC_GRID_YZ_MAX;
    *grid = dim3((unsigned)width, (unsigned)s.ranks, (unsigned)((s.pairs + width - 1) / width));
    return true;
}

template <typename T, int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int CTAS_PER_SM, bool EARLY_K_LOAD,
          bool GENERAL>
static cudaError_t flashc_fwd_launch(const flashc_fwd_params &p, cudaStream_t stream) {
    auto kernel = flashc_fwd_kernel<T, HEAD_DIM, BLOCK_M, BLOCK_N, WARPS, CTAS_PER_SM, EARLY_K_LOAD, GENERAL>;
    constexpr int smem = flashc_fwd_smem_bytes<T, HEAD_DIM, BLOCK_M, BLOCK_N>();
    if (smem > 48 * 1024) {
        static unsigned long long smem_raised;
        cudaError_t err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
        if (err != cudaSuccess) return err;
    }
    dim3 grid;
    if (!flashc_fwd_grid(p, BLOCK_M, &grid)) return cudaErrorInvalidConfiguration;
    if (grid.x == 0) return cudaSuccess;
    kernel<<<grid, WARPS * 32, smem, stream>>>(p);
    return cudaGetLastError();
}

template <typename T, int HEAD_DIM, bool GENERAL>
static cudaError_t flashc_fwd_launch_config(const flashc_fwd_params &p, cudaStream_t stream) {
    typedef flashc_fwd_config<HEAD_DIM> C;
    constexpr int BLOCK_N = GENERAL ? C::BLOCK_N_GENERAL : C::BLOCK_N;
    return flashc_fwd_launch<T, HEAD_DIM, C::BLOCK_M, BLOCK_N, C::WARPS, C::CTAS_PER_SM, C::EARLY_K_LOAD, GENERAL>(
        p, stream);
}

/* The run function of one head dim: picks dtype and variant. */
#define FLASHC_FWD_DEFINE_RUN(HEAD_DIM)                                                                 \
    cudaError_t flashc_fwd_run_hdim##HEAD_DIM(const flashc_fwd_params *p, void *stream, int is_bf16,    \
                                              int general) {                                            \
        cudaStream_t s = (cudaStream_t)stream;                                                          \
        if (is_bf16)                                                                                    \
            return general ? flashc_fwd_launch_config<__nv_bfloat16, HEAD_DIM, true>(*p, s)             \
                           : flashc_fwd_launch_config<__nv_bfloat16, HEAD_DIM, false>(*p, s);           \
        return general ? flashc_fwd_launch_config<__half, HEAD_DIM, true>(*p, s)                        \
                       : flashc_fwd_launch_config<__half, HEAD_DIM, false>(*p, s);                      \
    }

#endif
