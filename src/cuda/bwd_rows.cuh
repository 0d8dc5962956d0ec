/* Where a sequence's rows live in the backward's workspace buffers
 * (bwd_workspace.h), on the device: the per-row buffers (every kernel that
 * reads or writes them goes through flashc_bwd_ws_row0 with the plan's
 * tile_m, a multiple of the main kernel's BLOCK_M, which the launch
 * checks), and a head split's query heads and dK / dV partials, shared by
 * the portable and the Hopper main kernels. */
#ifndef FLASHC_CUDA_BWD_ROWS_CUH
#define FLASHC_CUDA_BWD_ROWS_CUH

#include "../core/semantics.h"
#include "bwd_params.h"
#include "fwd_seq.cuh"
#include "ptx.cuh"

/* dq_accum's blocked layout (p.dq_blocked, where the portable kernel ran):
 * the 8 x dq_cols floats of each 8-row group as dq_cols / 8 blocks of 64,
 * one per 8-column octet, ordered so that one mma atom's reduction by a
 * warp covers its block: lane l = 4 g + t holds row g, columns 2t, 2t + 1.
 *   pairs (sm_90 code, red.v2):      (g, 2t + e) at 2 l + e
 *   halves (sm_80 code, scalar red): (g, 2t + e) at 32 e + l
 * each reduction instruction then adds 256 (pairs) or 128 contiguous bytes.
 * On the H200 the halves order with scalar reductions runs within 0.5 -
 * 1.6 % of pairs with red.v2, and the pairs order with scalar reductions
 * 12 - 30 % slower (bench/NOTES.md, "the dQ reductions"). The portable
 * kernels and the conversion are compiled for the same architectures,
 * so the device runs the same choice in both. */
#ifndef FLASHC_BWD_DQ_PAIRS /* defined by the build only to test the halves order on an sm_90 part */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FLASHC_BWD_DQ_PAIRS 1
#else
#define FLASHC_BWD_DQ_PAIRS 0
#endif
#endif
/* floats between two lanes' first elements in a block */
#define FLASHC_BWD_DQ_LANE (FLASHC_BWD_DQ_PAIRS ? 2 : 1)

/* Adds a lane's (g, 2t) and (g, 2t + 1) of one atom into its block; at:
 * the block + FLASHC_BWD_DQ_LANE * lane. */
static __device__ __forceinline__ void flashc_bwd_dq_add(float *at, float a, float b) {
#if FLASHC_BWD_DQ_PAIRS
    flashc_red_add2(at, a, b);
#else
    atomicAdd(at, a);
    atomicAdd(at + 32, b);
#endif
}

/* Offsets in one head's dq_accum of the two 4-float pieces that hold the
 * 8 columns of octet o of row `row` (8-row groups counted from the
 * offsets' origin): columns 8 o .. 8 o + 3 and 8 o + 4 .. 8 o + 7, except
 * in the blocked halves order, where they hold the even columns and the odd
 * ones (flashc_bwd_dq_in_order puts them back). */
static __device__ __forceinline__ void flashc_bwd_dq_octet(int64_t row, int octet, int dq_cols, bool blocked,
                                                           int64_t *first, int64_t *second) {
    if (!blocked) {
        *first = row * dq_cols + 8 * octet, *second = *first + 4;
        return;
    }
    const int64_t block = (row / 8) * 8 * dq_cols + 64 * octet;
    const int r = (int)(row % 8);
    if (FLASHC_BWD_DQ_PAIRS)
        *first = block + 8 * r, *second = *first + 4;
    else
        *first = block + 4 * r, *second = *first + 32;
}

/* The two pieces read at flashc_bwd_dq_octet's offsets, as columns
 * 8 o .. 8 o + 3 and 8 o + 4 .. 8 o + 7. */
static __device__ __forceinline__ void flashc_bwd_dq_in_order(bool blocked, float4 &first, float4 &second) {
    if (!blocked || FLASHC_BWD_DQ_PAIRS) return;
    const float4 even = first, odd = second;
    first = make_float4(even.x, odd.x, even.y, odd.y);
    second = make_float4(even.z, odd.z, even.w, odd.w);
}

/* Workspace row of sequence `batch`'s first query row. */
static __device__ __forceinline__ int64_t flashc_bwd_ws_row0(const flashc_bwd_params &p, int batch,
                                                             const flashc_fwd_seq &seq, int tile_m) {
    const int64_t first = p.fwd.cu_seqlens_q ? seq.q_start : (int64_t)batch * p.fwd.seqlen_q;
    return flashc_padded_row_offset(first, batch, tile_m);
}

/* The query heads a CTA walks: its kv head's group, or with head splits
 * (p.head_splits > 1) share `split` of them; the CTA then leaves float32
 * partials of dK and dV for flashc_bwd_combine_dkv to sum. */
typedef struct flashc_bwd_heads {
    int first, count, split;
} flashc_bwd_heads;

static __device__ __forceinline__ flashc_bwd_heads flashc_bwd_heads_of(const flashc_bwd_params &p, int head_k,
                                                                       int split) {
    const int group = p.fwd.nheads / p.fwd.nheads_k;
    const int lo = split * group / p.head_splits, hi = (split + 1) * group / p.head_splits;
    flashc_bwd_heads h;
    h.first = head_k * group + lo;
    h.count = hi - lo;
    h.split = split;
    return h;
}

/* Split `split`'s dK (unscaled) and dV partials of kv head head_k, from
 * key n0 of sequence `batch` on: key r's row at dk + r * dk_stride (rows
 * of the packed keys, bwd_params.h). */
typedef struct flashc_bwd_parts {
    float *dk, *dv;
    int64_t dk_stride, dv_stride;
} flashc_bwd_parts;

static __device__ __forceinline__ flashc_bwd_parts flashc_bwd_parts_of(const flashc_bwd_params &p, int batch,
                                                                       const flashc_fwd_seq &seq, int n0, int split,
                                                                       int head_k) {
    const int64_t row0 = (p.fwd.cu_seqlens_q ? 0 : (int64_t)batch * p.fwd.seqlen_k) + seq.k_start + n0;
    const int64_t part_row0 = ((int64_t)split * p.part_rows + row0) * p.fwd.nheads_k + head_k;
    flashc_bwd_parts parts;
    parts.dk = p.dk_part + part_row0 * p.fwd.head_dim;
    parts.dv = p.dv_part + part_row0 * p.fwd.head_dim_v;
    parts.dk_stride = (int64_t)p.fwd.nheads_k * p.fwd.head_dim;
    parts.dv_stride = (int64_t)p.fwd.nheads_k * p.fwd.head_dim_v;
    return parts;
}

#endif
