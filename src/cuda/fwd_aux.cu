/* The forward's auxiliary kernels: varlen rows outside every sequence, and
 * S_dmask (a testing aid, so written for clarity: one CTA per score row,
 * dot products straight from global memory). */
#include <math.h>

#include "../core/semantics.h"
#include "fwd_launch.h"
#include "fwd_mask.cuh"
#include "fwd_seq.cuh"
#include "ptx.cuh"
#include "launch_grid.h"

#define FLASHC_AUX_THREADS 128

template <typename T>
static __device__ __forceinline__ float flashc_to_float(T x);
template <>
__device__ __forceinline__ float flashc_to_float<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float flashc_to_float<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
static __device__ __forceinline__ T flashc_from_float(float x);
template <>
__device__ __forceinline__ __half flashc_from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 flashc_from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* ---- varlen rows outside every sequence ---------------------------------- */

template <typename T>
__global__ void flashc_fill_outside_rows_kernel(const flashc_fwd_params p) {
    const int64_t first = p.cu_seqlens_q[0], end = p.cu_seqlens_q[p.batch];
    const int64_t items = p.total_q * p.nheads;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < items;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = idx / p.nheads;
        const int head = (int)(idx % p.nheads);
        if (row >= first && row < end) continue;
        T *o = reinterpret_cast<T *>(p.out) + row * p.o_row_stride + head * p.o_head_stride;
        for (int c = 0; c < p.head_dim_v; ++c) o[c] = flashc_from_float<T>(0.0f);
        if (p.lse) p.lse[head * p.lse_head_stride + row * p.lse_row_stride] = INFINITY;
    }
}

cudaError_t flashc_fwd_fill_outside_rows(const flashc_fwd_params *p, int is_bf16, void *stream) {
    const int64_t items = p->total_q * p->nheads;
    if (items == 0) return cudaSuccess;
    int64_t blocks = (items + FLASHC_AUX_THREADS - 1) / FLASHC_AUX_THREADS;
    if (blocks > 1024) blocks = 1024;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_fill_outside_rows_kernel<__nv_bfloat16><<<(unsigned)blocks, FLASHC_AUX_THREADS, 0, s>>>(*p);
    else
        flashc_fill_outside_rows_kernel<__half><<<(unsigned)blocks, FLASHC_AUX_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

/* ---- S_dmask ------------------------------------------------------------- */

/* Logit of (row, col) in the log2 domain, by the same rule and float
 * formulas as the general forward kernel. */
template <typename T>
static __device__ float flashc_dmask_logit(const flashc_fwd_params &p, const float *q_row, const T *k_row,
                                           float alibi_slope_log2, int row, int col, int shift) {
    float dot = 0.0f;
    for (int x = 0; x < p.head_dim; ++x) dot = fmaf(q_row[x], flashc_to_float<T>(k_row[x]), dot);
    float s = p.softcap_inv_scale != 0.0f ? p.softcap_log2 * tanhf(dot * p.softcap_inv_scale)
                                          : dot * p.scale_log2;
    if (alibi_slope_log2 != 0.0f) s -= alibi_slope_log2 * (float)abs(row + shift - col);
    return s;
}

static __device__ float flashc_block_max(float x, float *scratch) {
    for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < FLASHC_AUX_THREADS / 32; ++w) m = fmaxf(m, scratch[w]);
    return m;
}

/* One CTA per (row, head, batch) of S_dmask's extent: exp(s - m) on visible
 * entries (negated where dropout drops them), 0 elsewhere. */
template <typename T>
__global__ void flashc_dmask_kernel(const flashc_fwd_params p, const flashc_score_tensor sd) {
    __shared__ float q_row[256];
    __shared__ float scratch[FLASHC_AUX_THREADS / 32];
    const int row = (int)(blockIdx.x % sd.rows);
    const int head = (int)(blockIdx.x / sd.rows % p.nheads);
    const int batch = (int)(blockIdx.x / sd.rows / p.nheads);
    T *dst = reinterpret_cast<T *>(sd.data) + batch * sd.batch_stride + head * sd.head_stride +
             row * sd.row_stride;
    const flashc_fwd_seq seq = flashc_fwd_sequence(p, batch);
    int64_t lo = 0, hi = 0;
    if (row < seq.sq) flashc_visible_cols(row, seq.sq, seq.sk, p.window_left, p.window_right, &lo, &hi);
    const int shift = seq.sk - seq.sq;
    const int head_k = head / (p.nheads / p.nheads_k);
    const T *k = reinterpret_cast<const T *>(p.k) + batch * p.k_batch_stride + seq.k_start * p.k_row_stride +
                 head_k * p.k_head_stride;
    const float alibi_slope_log2 = flashc_alibi_slope_log2(p, batch, head);
    if (row < seq.sq) {
        const T *q = reinterpret_cast<const T *>(p.q) + batch * p.q_batch_stride +
                     (seq.q_start + row) * p.q_row_stride + head * p.q_head_stride;
        for (int x = threadIdx.x; x < p.head_dim; x += blockDim.x) q_row[x] = flashc_to_float<T>(q[x]);
    }
    __syncthreads();

    float m = -INFINITY;
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x)
        m = fmaxf(m, flashc_dmask_logit<T>(p, q_row, k + c * p.k_row_stride, alibi_slope_log2, row, (int)c, shift));
    m = flashc_block_max(m, scratch);

    for (int64_t c = threadIdx.x; c < sd.cols; c += blockDim.x) {
        float value = 0.0f;
        if (c >= lo && c < hi) {
            float s = flashc_dmask_logit<T>(p, q_row, k + c * p.k_row_stride, alibi_slope_log2, row, (int)c, shift);
            value = flashc_exp2(s - m);
            if (p.dropout_threshold &&
                !flashc_dropout_keep(p.dropout_seed, p.dropout_offset, p.dropout_threshold, batch, p.nheads,
                                     head, row, c))
                value = -value;
        }
        dst[c * sd.col_stride] = flashc_from_float<T>(value);
    }
}

cudaError_t flashc_fwd_write_dmask(const flashc_fwd_params *p, const flashc_score_tensor *s_dmask,
                                   int is_bf16, void *stream) {
    unsigned grid;
    cudaError_t err = flashc_flat_grid(s_dmask->rows, p->nheads, p->batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_dmask_kernel<__nv_bfloat16><<<grid, FLASHC_AUX_THREADS, 0, s>>>(*p, *s_dmask);
    else
        flashc_dmask_kernel<__half><<<grid, FLASHC_AUX_THREADS, 0, s>>>(*p, *s_dmask);
    return cudaGetLastError();
}
