/* Launching one Hopper backward configuration (hopper_bwd_config.h): the
 * four kernels of a head dim (float16 / bfloat16 x plain / general), the
 * shared-memory opt-in and the grid: one CTA per (key-block chunk, kv head,
 * sequence), in the order of tile_schedule.h. Each hopper_bwd_hdim*.cu
 * instantiates one head dim. */
#ifndef FLASHC_CUDA_HOPPER_BWD_LAUNCH_CUH
#define FLASHC_CUDA_HOPPER_BWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "hopper_bwd.h"
#include "hopper_bwd_config.h"
#include "hopper_bwd_kernel.cuh"
#include "tile_schedule.h"
#include "smem_optin.cuh"

template <typename T, int HEAD_DIM, bool GENERAL, int QK_COLS, int V_COLS>
static cudaError_t flashc_hopper_bwd_launch(const flashc_bwd_params &p, const flashc_hopper_bwd_maps &maps,
                                            cudaStream_t stream) {
    constexpr int BLOCK_N = flashc_hopper_bwd_block_n(HEAD_DIM);
    static_assert(QK_COLS % 64 == 0 && V_COLS % 64 == 0 && QK_COLS <= HEAD_DIM && V_COLS <= HEAD_DIM,
                  "whole 64-column blocks of the configuration's");
    auto kernel = flashc_hopper_bwd_kernel<T, HEAD_DIM, BLOCK_N, GENERAL, QK_COLS, V_COLS>;
    constexpr int smem = flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N>::BYTES;
    static unsigned long long smem_raised;
    cudaError_t err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
    if (err != cudaSuccess) return err;
    /* tiles: key-block chunks of (batch, kv head, head split) pairs, which
     * share their query heads' Q, dO and float32 dQ rows */
    flashc_tile_schedule sched;
    if (!flashc_bwd_schedule(p, &sched)) return cudaErrorInvalidConfiguration;
    if (sched.tiles == 0) return cudaSuccess;
    kernel<<<sched.tiles, FLASHC_HOPPER_BWD_THREADS, smem, stream>>>(maps, p, sched);
    return cudaGetLastError();
}

/* The four kernels of a configuration whose products stop after QK_COLS
 * columns of Q / K and V_COLS of V / dO (d, dv rounded up to 64; the
 * loads skip the rest). general: softcap or dropout (the scores' slower
 * path). */
#define FLASHC_HOPPER_BWD_DEFINE_RUN_COLS(NAME, HEAD_DIM, QK_COLS, V_COLS)                                        \
    cudaError_t NAME(const flashc_bwd_params *p, const flashc_hopper_bwd_maps *m, void *stream, int is_bf16) {   \
        cudaStream_t s = (cudaStream_t)stream;                                                                 \
        const bool general = p->fwd.softcap_inv_scale != 0.0f || p->fwd.dropout_threshold != 0u;               \
        if (is_bf16)                                                                                           \
            return general ? flashc_hopper_bwd_launch<__nv_bfloat16, HEAD_DIM, true, QK_COLS, V_COLS>(*p, *m, s) \
                           : flashc_hopper_bwd_launch<__nv_bfloat16, HEAD_DIM, false, QK_COLS, V_COLS>(*p, *m, s); \
        return general ? flashc_hopper_bwd_launch<__half, HEAD_DIM, true, QK_COLS, V_COLS>(*p, *m, s)            \
                       : flashc_hopper_bwd_launch<__half, HEAD_DIM, false, QK_COLS, V_COLS>(*p, *m, s);          \
    }
#define FLASHC_HOPPER_BWD_DEFINE_RUN(HEAD_DIM) \
    FLASHC_HOPPER_BWD_DEFINE_RUN_COLS(flashc_hopper_bwd_run_hdim##HEAD_DIM, HEAD_DIM, HEAD_DIM, HEAD_DIM)

#endif
