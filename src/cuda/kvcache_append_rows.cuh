/* The rows a KV-cache call writes before it attends, one warp per row: a
 * k_new / v_new row into the cache at cache index cache_seqlens[b] + r
 * (k_new rotated at that position), and a q row rotated at its position.
 * Shared by the append kernel (kvcache_append.cu, before the portable
 * kernel) and the Hopper kernel, whose CTAs write them themselves
 * (params.fused_append, hopper_kvcache_kernel.cuh).
 *
 * Rotary is computed as the CPU backend does it (in double, rounded to
 * float, then to the dtype), so every path writes the same bits. */
#ifndef FLASHC_CUDA_KVCACHE_APPEND_ROWS_CUH
#define FLASHC_CUDA_KVCACHE_APPEND_ROWS_CUH

#include "kvcache_params.h"
#include "kvcache_seq.cuh"
#include "ptx.cuh"

static __device__ __forceinline__ double flashc_kvc_widen(__half x) { return (double)__half2float(x); }
static __device__ __forceinline__ double flashc_kvc_widen(__nv_bfloat16 x) { return (double)__bfloat162float(x); }

/* Row `src` (n elements) rotated at table row `pos` into `dst` (global or
 * shared memory): pairs (2i, 2i + 1) when interleaved, else (i, i +
 * rotary_dim / 2); the elements past rotary_dim copied (all of them at
 * rotary_dim 0). Pair index i runs over the lanes. */
template <typename T>
static __device__ void flashc_kvc_rotate_row(const flashc_kvc_params &p, const T *src, T *dst, int n, int64_t pos,
                                             int rotary_dim, int lane) {
    const int half = rotary_dim / 2;
    const T *cos_row = reinterpret_cast<const T *>(p.rotary_cos) + pos * p.rotary_row_stride;
    const T *sin_row = reinterpret_cast<const T *>(p.rotary_sin) + pos * p.rotary_row_stride;
    for (int i = lane; i < n / 2; i += 32) {
        if (i >= half) { /* elements 2i, 2i + 1 lie past rotary_dim (k_new rows need no alignment) */
            dst[2 * i] = src[2 * i];
            dst[2 * i + 1] = src[2 * i + 1];
            continue;
        }
        const int a = p.rotary_interleaved ? 2 * i : i, b = p.rotary_interleaved ? 2 * i + 1 : i + half;
        const double c = flashc_kvc_widen(cos_row[i]), s = flashc_kvc_widen(sin_row[i]);
        const double xa = flashc_kvc_widen(src[a]), xb = flashc_kvc_widen(src[b]);
        /* no contraction into FMAs: the CPU rounds each product */
        const float ya = (float)__dsub_rn(__dmul_rn(xa, c), __dmul_rn(xb, s));
        const float yb = (float)__dadd_rn(__dmul_rn(xb, c), __dmul_rn(xa, s));
        const uint32_t packed = flashc_pack2<T>(ya, yb);
        dst[a] = *reinterpret_cast<const T *>(&packed);
        dst[b] = *(reinterpret_cast<const T *>(&packed) + 1);
    }
}

/* Row r of k_new / v_new of (b, head_k) into the cache at cache index
 * append_at + r, k rotated there. Invalid sequences, and rows whose
 * block-table entry names no block, are not written. */
template <typename T>
static __device__ void flashc_kvc_append_row(const flashc_kvc_params &p, int b, const flashc_kvc_seq &seq,
                                             int head_k, int r, int lane) {
    if (!seq.valid) return;
    int block, row;
    flashc_kvc_find(p, b, seq, seq.append_at + r, &block, &row);
    if (!flashc_kvc_block_exists(p, block)) return;
    const T *kn = reinterpret_cast<const T *>(p.k_new) + b * p.kn_batch_stride + r * p.kn_row_stride +
                  head_k * p.kn_head_stride;
    const T *vn = reinterpret_cast<const T *>(p.v_new) + b * p.vn_batch_stride + r * p.vn_row_stride +
                  head_k * p.vn_head_stride;
    T *k = const_cast<T *>(reinterpret_cast<const T *>(p.k)) + block * p.k_batch_stride + row * p.k_row_stride +
           head_k * p.k_head_stride;
    T *v = const_cast<T *>(reinterpret_cast<const T *>(p.v)) + block * p.v_batch_stride + row * p.v_row_stride +
           head_k * p.v_head_stride;
    flashc_kvc_rotate_row(p, kn, k, p.head_dim, seq.append_at + r, p.rotary_dim, lane);
    flashc_kvc_rotate_row(p, vn, v, p.head_dim_v, 0, 0, lane);
}

/* Row r of the caller's q of (b, head) rotated into `dst`: at cache index
 * cache_seqlens[b] + r, or cache_seqlens[b] for every row
 * (rotary_q_per_row 0: neither causal nor local). Positions past the
 * tables only come from cache_seqlens the host did not check (on the CPU
 * that is an error): clamped, never read beyond. Empty tables leave the
 * row unrotated. */
template <typename T>
static __device__ void flashc_kvc_rotate_q_row(const flashc_kvc_params &p, const flashc_kvc_seq &seq, int b,
                                               int head, int r, T *dst, int lane) {
    const T *q = reinterpret_cast<const T *>(p.q_in) + b * p.qi_batch_stride + r * p.qi_row_stride +
                 head * p.qi_head_stride;
    const int64_t pos =
        p.rotary_rows < 1 ? 0 : flashc_kvc_clamp(seq.append_at + (p.rotary_q_per_row ? r : 0), 0, p.rotary_rows - 1);
    flashc_kvc_rotate_row(p, q, dst, p.head_dim, pos, p.rotary_rows < 1 ? 0 : p.rotary_dim, lane);
}

#endif
