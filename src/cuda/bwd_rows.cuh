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
