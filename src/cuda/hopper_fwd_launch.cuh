/* Launching one Hopper forward configuration (hopper_fwd_config.h): the
 * kernels of a head dim (float16 / bfloat16), the shared-memory opt-in and the flat grid. Each hopper_fwd_hdim*.cu
 * instantiates one head dim. */
#ifndef FLASHC_CUDA_HOPPER_FWD_LAUNCH_CUH
#define FLASHC_CUDA_HOPPER_FWD_LAUNCH_CUH

#include <cuda_runtime.h>

#include "hopper_fwd.h"
#include "hopper_fwd_config.h"
#include "hopper_fwd_kernel.cuh"
#include "smem_optin.cuh"

template <typename T, int HEAD_DIM, bool GENERAL>
static cudaError_t flashc_hopper_fwd_launch(const flashc_fwd_params &p, const flashc_hopper_fwd_maps &maps,
                                            cudaStream_t stream) {
    constexpr int BLOCK_N = flashc_hopper_fwd_config<HEAD_DIM>::BLOCK_N;
    auto kernel = flashc_hopper_fwd_kernel<T, HEAD_DIM, BLOCK_N, GENERAL>;
    constexpr int smem = flashc_hopper_fwd_smem<HEAD_DIM, BLOCK_N>::BYTES;
    static unsigned long long smem_raised;
    cudaError_t err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
    if (err != cudaSuccess) return err;
    const long long m_blocks = (p.seqlen_q + FLASHC_HOPPER_BLOCK_M - 1) / FLASHC_HOPPER_BLOCK_M;
    const long long blocks = m_blocks * p.nheads * p.batch;
    if (blocks == 0) return cudaSuccess;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    kernel<<<(unsigned)blocks, FLASHC_HOPPER_THREADS, smem, stream>>>(maps, p);
    return cudaGetLastError();
}

/* Plain kernels only: the general variant (softcap, ALiBi, dropout) spills
 * at every head dim with these tiles (ptxas -v), so those problems take the
 * portable kernel (flashc_hopper_fwd declines them). */
#define FLASHC_HOPPER_FWD_DEFINE_RUN(HEAD_DIM)                                                                  \
    cudaError_t flashc_hopper_fwd_run_hdim##HEAD_DIM(const flashc_fwd_params *p, const flashc_hopper_fwd_maps *m, \
                                                     void *stream, int is_bf16) {                               \
        cudaStream_t s = (cudaStream_t)stream;                                                                 \
        return is_bf16 ? flashc_hopper_fwd_launch<__nv_bfloat16, HEAD_DIM, false>(*p, *m, s)                    \
                       : flashc_hopper_fwd_launch<__half, HEAD_DIM, false>(*p, *m, s);                          \
    }

#endif
