/* The rows a KV-cache call writes before it attends, one warp per row: a
 * k_new / v_new row into the cache at cache index cache_seqlens[b] + r
 * (k_new rotated at that position), and a q row rotated at its position.
 * Shared by the append kernel (kvcache_append.cu, before the portable
 * kernel) and the Hopper kernel, whose CTAs write them themselves
 * (params.fused_append, hopper_kvcache_kernel.cuh).
 *
 * A lane takes element pairs i = lane, lane + 32, ... of a row and loads
 * all of them (and their cos / sin) before it stores any: the compiler
 * cannot tell the stores from the loads apart, so a loop that stored as it
 * went paid one memory latency per pair group, several per row, on the
 * path of the attention CTAs that write rows (bench/NOTES.md).
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

/* A lane's pairs of one row, loaded: ITERS pairs (i = lane + 32 * it) of a
 * row of n elements. Pairs below rotary_dim / 2 are rotated at table row
 * `pos` (elements (2i, 2i + 1) when interleaved, else (i, i + rotary_dim /
 * 2)); the others are pairs (2i, 2i + 1) copied as they are. */
template <typename T, int ITERS>
struct flashc_kvc_row_pairs {
    T x0[ITERS], x1[ITERS], c[ITERS], s[ITERS];
    int n, half;
    bool interleaved;

    __device__ __forceinline__ void load(const flashc_kvc_params &p, const T *src, int n_, int64_t pos,
                                         int rotary_dim, int lane) {
        n = n_, half = rotary_dim / 2, interleaved = p.rotary_interleaved;
        const T *cos_row = reinterpret_cast<const T *>(p.rotary_cos) + pos * p.rotary_row_stride;
        const T *sin_row = reinterpret_cast<const T *>(p.rotary_sin) + pos * p.rotary_row_stride;
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            const int i = lane + 32 * it;
            if (i >= n / 2) continue;
            const int a = i < half && !interleaved ? i : 2 * i, b = i < half && !interleaved ? i + half : 2 * i + 1;
            x0[it] = src[a], x1[it] = src[b];
            if (i < half) c[it] = cos_row[i], s[it] = sin_row[i];
        }
    }

    __device__ __forceinline__ void store(T *dst, int lane) const {
#pragma unroll
        for (int it = 0; it < ITERS; ++it) {
            const int i = lane + 32 * it;
            if (i >= n / 2) continue;
            const int a = i < half && !interleaved ? i : 2 * i, b = i < half && !interleaved ? i + half : 2 * i + 1;
            if (i >= half) { /* past rotary_dim (k_new rows need no alignment) */
                dst[a] = x0[it], dst[b] = x1[it];
                continue;
            }
            const double cd = flashc_kvc_widen(c[it]), sd = flashc_kvc_widen(s[it]);
            const double xa = flashc_kvc_widen(x0[it]), xb = flashc_kvc_widen(x1[it]);
            /* no contraction into FMAs: the CPU rounds each product */
            const float ya = (float)__dsub_rn(__dmul_rn(xa, cd), __dmul_rn(xb, sd));
            const float yb = (float)__dadd_rn(__dmul_rn(xb, cd), __dmul_rn(xa, sd));
            const uint32_t packed = flashc_pack2<T>(ya, yb);
            dst[a] = *reinterpret_cast<const T *>(&packed);
            dst[b] = *(reinterpret_cast<const T *>(&packed) + 1);
        }
    }
};

/* Pairs a lane takes in a row of up to max_dim elements. */
#define FLASHC_KVC_ROW_ITERS(max_dim) (((max_dim) / 2 + 31) / 32)

/* Row r of k_new / v_new of (b, head_k) into the cache at cache index
 * append_at + r, k rotated there; head dims up to MAX_DIM. Invalid
 * sequences, and rows whose block-table entry names no block, are not
 * written. */
template <typename T, int MAX_DIM>
static __device__ __forceinline__ void flashc_kvc_append_row(const flashc_kvc_params &p, int b,
                                                             const flashc_kvc_seq &seq, int head_k, int r,
                                                             int lane) {
    if (!seq.valid) return;
    const T *kn = reinterpret_cast<const T *>(p.k_new) + b * p.kn_batch_stride + r * p.kn_row_stride +
                  head_k * p.kn_head_stride;
    const T *vn = reinterpret_cast<const T *>(p.v_new) + b * p.vn_batch_stride + r * p.vn_row_stride +
                  head_k * p.vn_head_stride;
    flashc_kvc_row_pairs<T, FLASHC_KVC_ROW_ITERS(MAX_DIM)> kp, vp;
    kp.load(p, kn, p.head_dim, seq.append_at + r, p.rotary_dim, lane);
    vp.load(p, vn, p.head_dim_v, 0, 0, lane);
    int block, row;
    flashc_kvc_find(p, b, seq, seq.append_at + r, &block, &row);
    if (!flashc_kvc_block_exists(p, block)) return;
    T *k = const_cast<T *>(reinterpret_cast<const T *>(p.k)) + block * p.k_batch_stride + row * p.k_row_stride +
           head_k * p.k_head_stride;
    T *v = const_cast<T *>(reinterpret_cast<const T *>(p.v)) + block * p.v_batch_stride + row * p.v_row_stride +
           head_k * p.v_head_stride;
    kp.store(k, lane);
    vp.store(v, lane);
}

/* Row r of the caller's q of (b, head) loaded for rotation: at cache
 * index cache_seqlens[b] + r, or cache_seqlens[b] for every row
 * (rotary_q_per_row 0: neither causal nor local). Positions past the
 * tables only come from cache_seqlens the host did not check (on the CPU
 * that is an error): clamped, never read beyond. Empty tables leave the
 * row unrotated. */
template <typename T, int ITERS>
static __device__ __forceinline__ void flashc_kvc_load_q_row(const flashc_kvc_params &p, const flashc_kvc_seq &seq,
                                                             int b, int head, int r,
                                                             flashc_kvc_row_pairs<T, ITERS> &pairs, int lane) {
    const T *q = reinterpret_cast<const T *>(p.q_in) + b * p.qi_batch_stride + r * p.qi_row_stride +
                 head * p.qi_head_stride;
    const int64_t pos =
        p.rotary_rows < 1 ? 0 : flashc_kvc_clamp(seq.append_at + (p.rotary_q_per_row ? r : 0), 0, p.rotary_rows - 1);
    pairs.load(p, q, p.head_dim, pos, p.rotary_rows < 1 ? 0 : p.rotary_dim, lane);
}

#endif
