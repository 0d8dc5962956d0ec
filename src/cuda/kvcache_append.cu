/* Before the portable kernel's attention over a KV cache (the Hopper kernel
 * writes the rows itself: params.fused_append), or before the Hopper
 * kernel under FLASHC_CUDA_KVCACHE_APPEND=kernel / serial: k_new / v_new
 * written into the cache at cache indices cache_seqlens[b] + r (k_new
 * rotated at those positions), and q rotated into q_rotated. One warp per
 * row of one head (kvcache_append_rows.cuh). Rows of invalid sequences,
 * and rows whose block-table entry names no block, are not written
 * (kvcache_seq.cuh).
 *
 * On sm_90+ it is a programmatic dependent of the kernel before it (its
 * CTAs wait on the SMs while that one ends) and lets the attention grid
 * start right after its own wait: from then on, everything the attention
 * reads is final except what this kernel writes (the appended rows,
 * q_rotated), so the Hopper attention fills its pipeline with the older
 * cache rows while the append runs (params.early_cache_reads,
 * hopper_kvcache_kernel.cuh). */
#include "dependent_launch.cuh"
#include "kvcache_append_rows.cuh"
#include "kvcache_launch.h"
#include "launch_grid.h"

#define FLASHC_KVC_APPEND_THREADS 128

template <typename T>
__global__ void __launch_bounds__(FLASHC_KVC_APPEND_THREADS) flashc_kvc_append_kernel(const flashc_kvc_params p,
                                                                                       int64_t append_units,
                                                                                       int64_t units) {
#if __CUDA_ARCH__ >= 900
    /* every CTA waits before it triggers (or exits): the attention grid
     * starts only after the kernels before this one have completed */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const int64_t unit = ((int64_t)blockIdx.x * FLASHC_KVC_APPEND_THREADS + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (unit >= units) return;
    if (unit < append_units) { /* k_new / v_new row r of (b, head_k) */
        const int head_k = (int)(unit % p.nheads_k);
        const int r = (int)(unit / p.nheads_k % p.new_rows);
        const int b = (int)(unit / p.nheads_k / p.new_rows);
        flashc_kvc_append_row<T, 256>(p, b, flashc_kvc_sequence(p, b), head_k, r, lane);
        return;
    }
    /* q row r of (b, head), rotated into q_rotated */
    const int64_t u = unit - append_units;
    const int head = (int)(u % p.nheads);
    const int r = (int)(u / p.nheads % p.seqlen_q);
    const int b = (int)(u / p.nheads / p.seqlen_q);
    T *q_rot = reinterpret_cast<T *>(p.q_rotated) + (((int64_t)b * p.seqlen_q + r) * p.nheads + head) * p.head_dim;
    flashc_kvc_row_pairs<T, FLASHC_KVC_ROW_ITERS(256)> pairs;
    flashc_kvc_load_q_row(p, flashc_kvc_sequence(p, b), b, head, r, pairs, lane);
    pairs.store(q_rot, lane);
}

cudaError_t flashc_kvc_append(const flashc_kvc_params *p, void *stream, int is_bf16, int *launched) {
    *launched = 0;
    const int64_t append_units = p->k_new ? (int64_t)p->batch * p->new_rows * p->nheads_k : 0;
    const int64_t q_units = p->rotary_dim ? (int64_t)p->batch * p->seqlen_q * p->nheads : 0;
    const int64_t units = append_units + q_units;
    if (units == 0) return cudaSuccess;
    const int64_t warps_per_cta = FLASHC_KVC_APPEND_THREADS / 32;
    unsigned grid;
    cudaError_t err = flashc_flat_grid((units + warps_per_cta - 1) / warps_per_cta, 1, 1, &grid);
    if (err != cudaSuccess) return err;
    *launched = 1;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        return flashc_launch_dependent(flashc_kvc_append_kernel<__nv_bfloat16>, dim3(grid),
                                       dim3(FLASHC_KVC_APPEND_THREADS), 0, s, true, *p, append_units, units);
    return flashc_launch_dependent(flashc_kvc_append_kernel<__half>, dim3(grid), dim3(FLASHC_KVC_APPEND_THREADS), 0,
                                   s, true, *p, append_units, units);
}
