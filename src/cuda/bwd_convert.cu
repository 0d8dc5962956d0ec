/* The backward's last passes: dQ from its float32 accumulator (the slices
 * summed in slice order, times the softmax scale, rounded to the output
 * dtype) over the same tile_m-row tiles as the preprocess; dK and dV from
 * the head splits' partials (Hopper path); and, for varlen problems, zeros
 * on the packed rows no sequence covers (dq, dk, dv) and on keys past
 * seqused_k (dk, dv). */
#include "bwd_launch.h"
#include "bwd_rows.cuh"
#include "ptx.cuh"
#include "launch_grid.h"

#define FLASHC_BWD_CONVERT_THREADS 128

/* Sum of `splits` partials of 4 floats `stride` apart, in split order. */
static __device__ __forceinline__ float4 flashc_sum4(const float *src, int64_t stride, int splits) {
    float4 v = *reinterpret_cast<const float4 *>(src);
    for (int s = 1; s < splits; ++s) {
        const float4 a = *reinterpret_cast<const float4 *>(src + s * stride);
        v.x += a.x, v.y += a.y, v.z += a.z, v.w += a.w;
    }
    return v;
}

/* ... of 8 floats */
static __device__ __forceinline__ void flashc_sum8(const float *src, int64_t stride, int splits, float4 &lo,
                                                   float4 &hi) {
    lo = flashc_sum4(src, stride, splits);
    hi = flashc_sum4(src + 4, stride, splits);
}

template <typename T>
static __device__ __forceinline__ uint4 flashc_pack8(float4 lo, float4 hi, float k) {
    uint4 out;
    out.x = flashc_pack2<T>(lo.x * k, lo.y * k);
    out.y = flashc_pack2<T>(lo.z * k, lo.w * k);
    out.z = flashc_pack2<T>(hi.x * k, hi.y * k);
    out.w = flashc_pack2<T>(hi.z * k, hi.w * k);
    return out;
}

/* Items (8 columns of a row) per thread per round: their loads all issued
 * before the first store, so a thread waits for one round trip per round,
 * not per item. */
#define FLASHC_BWD_CONVERT_UNROLL 4

template <typename T>
__global__ void __launch_bounds__(FLASHC_BWD_CONVERT_THREADS) flashc_bwd_convert_dq_kernel(const flashc_bwd_params p) {
    const int tile_m = p.tile_m;
    const int m_blocks = (p.fwd.seqlen_q + tile_m - 1) / tile_m;
    const int m_block = (int)(blockIdx.x % m_blocks);
    const int head = (int)(blockIdx.x / m_blocks % p.fwd.nheads);
    const int batch = (int)(blockIdx.x / m_blocks / p.fwd.nheads);
    const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
    const int m0 = m_block * tile_m;
    if (m0 >= seq.sq) return;
    const int rows = min(tile_m, seq.sq - m0);
    const int64_t ws_row = flashc_bwd_ws_row0(p, batch, seq, tile_m) + m0;
    const float *acc = p.dq_accum + (head * p.ws_rows + ws_row) * p.dq_cols; /* an 8-row group's start */
    const int octets = p.fwd.head_dim / 8;
    /* item idx: 8 columns of one row, numbered in the order of dq_accum's
     * layout (bwd_rows.cuh) so that consecutive threads read consecutive
     * floats: blocked, the 8 rows of a block, then the group's blocks; else
     * a row's octets */
    const bool blocked = p.dq_blocked != 0;
    const int items = blocked ? (rows + 7) / 8 * 8 * octets : rows * octets;
    T *dq = reinterpret_cast<T *>(p.dq) + batch * p.dq_batch_stride + (seq.q_start + m0) * p.dq_row_stride +
            head * p.dq_head_stride;
    constexpr int U = FLASHC_BWD_CONVERT_UNROLL;
    for (int base = threadIdx.x; base < items; base += U * FLASHC_BWD_CONVERT_THREADS) {
        float4 lo[U], hi[U];
        int row[U], octet[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int idx = base + u * FLASHC_BWD_CONVERT_THREADS;
            row[u] = blocked ? 8 * (idx / (8 * octets)) + idx % 8 : idx / octets;
            octet[u] = blocked ? idx / 8 % octets : idx % octets;
            if (idx >= items) row[u] = rows; /* none */
            if (row[u] < rows) {
                int64_t first, second;
                flashc_bwd_dq_octet(row[u], octet[u], p.dq_cols, blocked, &first, &second);
                lo[u] = flashc_sum4(acc + first, p.dq_slice_stride, p.dq_slices);
                hi[u] = flashc_sum4(acc + second, p.dq_slice_stride, p.dq_slices);
                flashc_bwd_dq_in_order(blocked, lo[u], hi[u]);
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (row[u] < rows)
                *reinterpret_cast<uint4 *>(dq + (int64_t)row[u] * p.dq_row_stride + 8 * octet[u]) =
                    flashc_pack8<T>(lo[u], hi[u], p.scale);
    }
}

cudaError_t flashc_bwd_convert_dq(const flashc_bwd_params *p, int is_bf16, void *stream) {
    unsigned grid;
    cudaError_t err = flashc_flat_grid((p->fwd.seqlen_q + p->tile_m - 1) / p->tile_m, p->fwd.nheads, p->fwd.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_bwd_convert_dq_kernel<__nv_bfloat16><<<grid, FLASHC_BWD_CONVERT_THREADS, 0, s>>>(*p);
    else
        flashc_bwd_convert_dq_kernel<__half><<<grid, FLASHC_BWD_CONVERT_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

/* ---- dK and dV from the head splits' partials ----------------------------- */

#define FLASHC_BWD_COMBINE_KEYS 64

/* One CTA per (64 keys, kv head, sequence): the keys the main kernel
 * covered (those of the sequence), every column of dK and dV. */
template <typename T>
__global__ void __launch_bounds__(FLASHC_BWD_CONVERT_THREADS) flashc_bwd_combine_dkv_kernel(const flashc_bwd_params p) {
    const int k_blocks = (p.fwd.seqlen_k + FLASHC_BWD_COMBINE_KEYS - 1) / FLASHC_BWD_COMBINE_KEYS;
    const int k_block = (int)(blockIdx.x % k_blocks);
    const int head_k = (int)(blockIdx.x / k_blocks % p.fwd.nheads_k);
    const int batch = (int)(blockIdx.x / k_blocks / p.fwd.nheads_k);
    const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
    const int n0 = k_block * FLASHC_BWD_COMBINE_KEYS;
    if (n0 >= seq.sk) return;
    const int keys = min(FLASHC_BWD_COMBINE_KEYS, seq.sk - n0);
    const int64_t row0 = (p.fwd.cu_seqlens_q ? 0 : (int64_t)batch * p.fwd.seqlen_k) + seq.k_start + n0;
    const int hk = p.fwd.nheads_k, d = p.fwd.head_dim, dv = p.fwd.head_dim_v;
    const int k_oct = d / 8, items = keys * (k_oct + dv / 8);
    for (int idx = threadIdx.x; idx < items; idx += FLASHC_BWD_CONVERT_THREADS) {
        const bool is_k = idx < keys * k_oct;
        const int width = is_k ? d : dv, rest = is_k ? idx : idx - keys * k_oct;
        const int r = rest / (width / 8), c = 8 * (rest % (width / 8));
        const int64_t part_row = (row0 + r) * hk + head_k;
        float4 lo, hi;
        flashc_sum8((is_k ? p.dk_part : p.dv_part) + part_row * width + c, p.part_rows * hk * width, p.head_splits,
                    lo, hi);
        if (is_k) {
            T *dst = reinterpret_cast<T *>(p.dk) + batch * p.dk_batch_stride + (seq.k_start + n0 + r) * p.dk_row_stride +
                     head_k * p.dk_head_stride + c;
            *reinterpret_cast<uint4 *>(dst) = flashc_pack8<T>(lo, hi, p.scale);
        } else {
            T *dst = reinterpret_cast<T *>(p.dv) + batch * p.dv_batch_stride + (seq.k_start + n0 + r) * p.dv_row_stride +
                     head_k * p.dv_head_stride + c;
            *reinterpret_cast<uint4 *>(dst) = flashc_pack8<T>(lo, hi, 1.0f);
        }
    }
}

cudaError_t flashc_bwd_combine_dkv(const flashc_bwd_params *p, int is_bf16, void *stream) {
    unsigned grid;
    cudaError_t err = flashc_flat_grid((p->fwd.seqlen_k + FLASHC_BWD_COMBINE_KEYS - 1) / FLASHC_BWD_COMBINE_KEYS,
                                       p->fwd.nheads_k, p->fwd.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_bwd_combine_dkv_kernel<__nv_bfloat16><<<grid, FLASHC_BWD_CONVERT_THREADS, 0, s>>>(*p);
    else
        flashc_bwd_combine_dkv_kernel<__half><<<grid, FLASHC_BWD_CONVERT_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

/* ---- varlen rows no sequence covers --------------------------------------- */

/* Zeros on packed rows [r0, r1) of one gradient, all heads, `width`
 * elements each (a multiple of 8: 16-byte stores). */
static __device__ void flashc_zero_rows(unsigned char *base, int64_t row_stride, int64_t head_stride, int heads,
                                        int width, int64_t r0, int64_t r1, int elem_bytes) {
    const int octets = width / 8;
    const int64_t items = (r1 - r0) * heads * octets;
    for (int64_t idx = threadIdx.x; idx < items; idx += FLASHC_BWD_CONVERT_THREADS) {
        const int64_t row = r0 + idx / (heads * octets);
        const int head = (int)(idx / octets % heads), c = 8 * (int)(idx % octets);
        *reinterpret_cast<uint4 *>(base + (row * row_stride + head * head_stride + c) * elem_bytes) =
            make_uint4(0u, 0u, 0u, 0u);
    }
}

/* blockIdx.x = b + 1 for b in [-1, batch]: the rows before the first
 * sequence (b = -1), after sequence b's used keys (dk, dv), after the last
 * sequence (b = batch). blockIdx.y: 0 dq, 1 dk, 2 dv. */
__global__ void __launch_bounds__(FLASHC_BWD_CONVERT_THREADS) flashc_bwd_zero_unused_kernel(const flashc_bwd_params p,
                                                                                            int elem_bytes) {
    const int b = (int)blockIdx.x - 1;
    const int which = (int)blockIdx.y;
    const bool queries = which == 0;
    const int32_t *cu = queries ? p.fwd.cu_seqlens_q : p.fwd.cu_seqlens_k;
    const int64_t total = queries ? p.fwd.total_q : p.fwd.total_k;
    int64_t r0, r1;
    if (b < 0) {
        r0 = 0;
        r1 = flashc_clamp64(cu[0], 0, total);
    } else if (b == p.fwd.batch) {
        r0 = flashc_clamp64(cu[p.fwd.batch], 0, total);
        r1 = total;
    } else {
        if (queries) return; /* every query row of a sequence gets its dq */
        const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, b);
        r0 = seq.k_start + seq.sk;
        r1 = flashc_clamp64(cu[b + 1], seq.k_start, total);
    }
    if (r1 <= r0) return;
    if (which == 0)
        flashc_zero_rows((unsigned char *)p.dq, p.dq_row_stride, p.dq_head_stride, p.fwd.nheads, p.fwd.head_dim, r0,
                         r1, elem_bytes);
    else if (which == 1)
        flashc_zero_rows((unsigned char *)p.dk, p.dk_row_stride, p.dk_head_stride, p.fwd.nheads_k, p.fwd.head_dim,
                         r0, r1, elem_bytes);
    else
        flashc_zero_rows((unsigned char *)p.dv, p.dv_row_stride, p.dv_head_stride, p.fwd.nheads_k,
                         p.fwd.head_dim_v, r0, r1, elem_bytes);
}

cudaError_t flashc_bwd_zero_unused_rows(const flashc_bwd_params *p, int is_bf16, void *stream) {
    (void)is_bf16; /* both 16-bit: only the element size matters */
    if (!p->fwd.cu_seqlens_q) return cudaSuccess;
    dim3 grid((unsigned)(p->fwd.batch + 2), 3);
    flashc_bwd_zero_unused_kernel<<<grid, FLASHC_BWD_CONVERT_THREADS, 0, (cudaStream_t)stream>>>(*p, 2);
    return cudaGetLastError();
}
