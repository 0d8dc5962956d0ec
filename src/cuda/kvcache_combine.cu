/* The split combine: out and LSE of every (sequence, row, head) from the
 * num_splits partials of the attention kernel (each normalised by its own
 * sum, its LSE in the log2 domain, -inf where the split saw no key):
 *   LSE = log2 sum_s 2^lse_s,  out = sum_s 2^(lse_s - LSE) out_s,
 * exact up to float rounding. One warp per row; the lanes take the splits
 * for the LSE and 4-column chunks for out. */
#include <math.h>

#include "fwd_params.h"
#include "kvcache_launch.h"
#include "launch_grid.h"
#include "ptx.cuh"

#define FLASHC_KVC_COMBINE_THREADS 128
#define FLASHC_KVC_COMBINE_WARPS (FLASHC_KVC_COMBINE_THREADS / 32)

template <typename T>
__global__ void __launch_bounds__(FLASHC_KVC_COMBINE_THREADS) flashc_kvc_combine_kernel(const flashc_kvc_params p) {
    __shared__ float s_weight[FLASHC_KVC_COMBINE_WARPS][FLASHC_KVC_MAX_SPLITS];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row = (int64_t)blockIdx.x * FLASHC_KVC_COMBINE_WARPS + warp;
    if (row >= p.partial_rows) return;
    const int head = (int)(row % p.nheads);
    const int r = (int)(row / p.nheads % p.seqlen_q);
    const int b = (int)(row / p.nheads / p.seqlen_q);

    float max_lse = -INFINITY;
    for (int s = lane; s < p.num_splits; s += 32) max_lse = fmaxf(max_lse, p.lse_partial[s * p.partial_rows + row]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, o));
    float sum = 0.0f;
    if (max_lse != -INFINITY)
        for (int s = lane; s < p.num_splits; s += 32) sum += flashc_exp2(p.lse_partial[s * p.partial_rows + row] - max_lse);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float lse2 = max_lse + log2f(sum); /* only where sum > 0 */
    for (int s = lane; s < p.num_splits; s += 32)
        s_weight[warp][s] = sum > 0.0f ? flashc_exp2(p.lse_partial[s * p.partial_rows + row] - lse2) : 0.0f;
    __syncwarp();

    T *out = reinterpret_cast<T *>(p.out) + b * p.o_batch_stride + r * p.o_row_stride + head * p.o_head_stride;
    for (int c = 4 * lane; c < p.head_dim_v; c += 128) {
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s = 0; s < p.num_splits; ++s) {
            const float w = s_weight[warp][s];
            if (w == 0.0f) continue; /* empty splits hold no out rows worth reading */
            const float4 x = *reinterpret_cast<const float4 *>(p.o_partial + (s * p.partial_rows + row) * p.head_dim_v + c);
            o.x += w * x.x, o.y += w * x.y, o.z += w * x.z, o.w += w * x.w;
        }
        *reinterpret_cast<uint2 *>(out + c) = make_uint2(flashc_pack2<T>(o.x, o.y), flashc_pack2<T>(o.z, o.w));
    }
    if (p.lse && lane == 0)
        p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + r * p.lse_row_stride] =
            sum > 0.0f ? lse2 * (float)FLASHC_LN2 : INFINITY;
}

cudaError_t flashc_kvc_combine(const flashc_kvc_params *p, void *stream, int is_bf16) {
    unsigned grid;
    cudaError_t err = flashc_flat_grid((p->partial_rows + FLASHC_KVC_COMBINE_WARPS - 1) / FLASHC_KVC_COMBINE_WARPS,
                                       1, 1, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_kvc_combine_kernel<__nv_bfloat16><<<grid, FLASHC_KVC_COMBINE_THREADS, 0, s>>>(*p);
    else
        flashc_kvc_combine_kernel<__half><<<grid, FLASHC_KVC_COMBINE_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}
