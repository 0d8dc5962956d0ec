/* The split combine: out and LSE of every (sequence, row, head) from the
 * num_splits partials of the attention kernel (each normalised by its own
 * sum, its LSE in the log2 domain, -inf where the split saw no key):
 *   LSE = log2 sum_s 2^lse_s,  out = sum_s 2^(lse_s - LSE) out_s,
 * exact up to float rounding. One CTA per row; the four warps each add a
 * quarter of the splits, lanes taking 4-column chunks, and warp 0 adds the
 * four sums. A decode call's combine is on its critical path after the
 * attention grid ends, so it is one memory latency, not two: each warp
 * issues its first partial rows together with the LSEs and forms LSE
 * itself (every warp the same, from the same loads) while they land. */
#include <math.h>

#include "dependent_launch.cuh"
#include "fwd_params.h"
#include "kvcache_launch.h"
#include "launch_grid.h"
#include "ptx.cuh"

#define FLASHC_KVC_COMBINE_THREADS 128
#define FLASHC_KVC_COMBINE_WARPS (FLASHC_KVC_COMBINE_THREADS / 32)

/* log2 sum_s 2^lse_s over the row's splits (-inf where every split is
 * empty), reduced across the warp: every lane returns it. */
static __device__ __forceinline__ float flashc_kvc_combined_lse2(const flashc_kvc_params &p, int64_t row, int lane) {
    float max_lse = -INFINITY;
    for (int s = lane; s < p.num_splits; s += 32) max_lse = fmaxf(max_lse, p.lse_partial[s * p.partial_rows + row]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, o));
    float sum = 0.0f;
    if (max_lse != -INFINITY)
        for (int s = lane; s < p.num_splits; s += 32) sum += flashc_exp2(p.lse_partial[s * p.partial_rows + row] - max_lse);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    return sum > 0.0f ? max_lse + log2f(sum) : -INFINITY;
}

template <typename T>
__global__ void __launch_bounds__(FLASHC_KVC_COMBINE_THREADS) flashc_kvc_combine_kernel(const flashc_kvc_params p) {
#if __CUDA_ARCH__ >= 900
    /* Launched as a programmatic dependent of the attention kernel (sm_90+):
     * its partials are complete and visible only past this wait. */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    __shared__ float4 s_sum[FLASHC_KVC_COMBINE_WARPS][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = blockIdx.x;
    if (row >= p.partial_rows) return;
    const int head = (int)(row % p.nheads);
    const int r = (int)(row / p.nheads % p.seqlen_q);
    const int b = (int)(row / p.nheads / p.seqlen_q);

    T *out = reinterpret_cast<T *>(p.out) + b * p.o_batch_stride + r * p.o_row_stride + head * p.o_head_stride;
    constexpr int BATCH = 8; /* partial rows in flight per lane */
    float lse2 = -INFINITY;
    for (int c0 = 0; c0 < p.head_dim_v; c0 += 128) {
        const int c = c0 + 4 * lane, c_read = min(c, p.head_dim_v - 4);
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s0 = warp; s0 < p.num_splits; s0 += BATCH * FLASHC_KVC_COMBINE_WARPS) {
            /* loaded unconditionally, so they go out together (with the
             * LSEs below on the first pass) */
            float4 y[BATCH];
            float lse_s[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int s = s0 + u * FLASHC_KVC_COMBINE_WARPS, s_read = min(s, p.num_splits - 1);
                y[u] = *reinterpret_cast<const float4 *>(p.o_partial + (s_read * p.partial_rows + row) * p.head_dim_v +
                                                         c_read);
                lse_s[u] = s < p.num_splits ? p.lse_partial[s_read * p.partial_rows + row] : -INFINITY;
            }
            if (c0 == 0 && s0 == warp) lse2 = flashc_kvc_combined_lse2(p, row, lane);
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                /* an empty split (LSE -inf) wrote no out row: weight 0 and
                 * its values dropped by a select (0 x NaN would be NaN); a
                 * row without a sum (every split empty, or a NaN LSE) is 0 */
                const float w = lse_s[u] != -INFINITY && lse2 != -INFINITY && c < p.head_dim_v
                                    ? flashc_exp2(lse_s[u] - lse2)
                                    : 0.0f;
                const float4 x = w != 0.0f ? y[u] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                o.x += w * x.x, o.y += w * x.y, o.z += w * x.z, o.w += w * x.w;
            }
        }
        s_sum[warp][lane] = o;
        __syncthreads();
        if (warp == 0 && c < p.head_dim_v) {
#pragma unroll
            for (int w = 1; w < FLASHC_KVC_COMBINE_WARPS; ++w) {
                const float4 x = s_sum[w][lane];
                o.x += x.x, o.y += x.y, o.z += x.z, o.w += x.w;
            }
            *reinterpret_cast<uint2 *>(out + c) = make_uint2(flashc_pack2<T>(o.x, o.y), flashc_pack2<T>(o.z, o.w));
        }
        __syncthreads();
    }
    /* thread 0's warp took split 0, so it formed LSE */
    if (p.lse && threadIdx.x == 0)
        p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + r * p.lse_row_stride] =
            lse2 != -INFINITY ? lse2 * (float)FLASHC_LN2 : INFINITY;
}

/* On sm_90+ the combine is a programmatic dependent launch: it is scheduled
 * while the attention kernel's last CTAs run (they trigger it at their
 * start) and waits in the kernel, so the launch latency between the two
 * kernels is hidden; elsewhere an ordinary launch. */
cudaError_t flashc_kvc_combine(const flashc_kvc_params *p, void *stream, int is_bf16) {
    unsigned grid;
    cudaError_t err = flashc_flat_grid(p->partial_rows, 1, 1, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    auto kernel = is_bf16 ? flashc_kvc_combine_kernel<__nv_bfloat16> : flashc_kvc_combine_kernel<__half>;
    return flashc_launch_dependent(kernel, dim3(grid), dim3(FLASHC_KVC_COMBINE_THREADS), 0, (cudaStream_t)stream,
                                   true, *p);
}
