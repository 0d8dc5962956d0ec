/* Where a sequence's rows live in the backward's per-row workspace buffers
 * (bwd_workspace.h), on the device. Every kernel that reads or writes those
 * buffers goes through this one function with the plan's tile_m (a
 * multiple of the main kernel's BLOCK_M, which the launch checks). */
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

#endif
