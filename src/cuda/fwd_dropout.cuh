/* Dropout on P tiles held in mma fragments (layout: fwd_mask.cuh). */
#ifndef FLASHC_CUDA_FWD_DROPOUT_CUH
#define FLASHC_CUDA_FWD_DROPOUT_CUH

#include "../core/semantics.h"
#include "fwd_params.h"

/* Dropout on a P tile after it entered the row sums (LSE is pre-dropout):
 * dropped entries become 0; the 1 / (1 - p) rescale is applied once at the
 * end. Words come from the shared Philox rule (semantics.h), so the mask is
 * the CPU backend's bit for bit.
 *
 * One Philox call gives the words of four columns of one row. In an atom
 * a thread holds columns 2*(lane%4) + {0,1} of rows r and r + 8, and its
 * neighbour lane ^ 1 the other two columns of the same group of four, of
 * the same rows: so the pair makes one call each, the even lane for row r
 * and the odd lane for row r + 8, and swaps the two words the other needs
 * (one Philox call per four elements, where a call per row and group made
 * every word twice). col0 includes the lane's column offset. */
/* keep[2 * half + e]: whether element (row + 8 * half, col + e) of this
 * thread is kept (col: its first column, even). */
static __device__ __forceinline__ void flashc_dropout_keep4(const flashc_fwd_params &p, int batch, int head,
                                                            int row, int col, bool (&keep)[4]) {
    const bool odd = (threadIdx.x & 1) != 0; /* columns 2, 3 of the group; computes row + 8 */
    const flashc_philox_u32x4 counter = {(uint32_t)(col >> 2), (uint32_t)(row + (odd ? 8 : 0)),
                                         (uint32_t)batch * (uint32_t)p.nheads + (uint32_t)head,
                                         (uint32_t)p.dropout_offset};
    const flashc_philox_u32x4 w =
        flashc_philox4x32_10(counter, (uint32_t)p.dropout_seed,
                             (uint32_t)(p.dropout_seed >> 32) ^ (uint32_t)(p.dropout_offset >> 32));
    /* own: this row's words of this lane's columns; the other two go to the
     * neighbour, which sends back this lane's columns of the other row. */
    const uint32_t own0 = odd ? w.z : w.x, own1 = odd ? w.w : w.y;
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, odd ? w.x : w.z, 1);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, odd ? w.y : w.w, 1);
    keep[0] = (odd ? got0 : own0) >= p.dropout_threshold;
    keep[1] = (odd ? got1 : own1) >= p.dropout_threshold;
    keep[2] = (odd ? own0 : got0) >= p.dropout_threshold;
    keep[3] = (odd ? own1 : got1) >= p.dropout_threshold;
}

template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_apply_dropout(float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                            const flashc_fwd_params &p, int batch,
                                                            int head, int row0, int col0) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int j = 0; j < COL_ATOMS; ++j) {
            bool keep[4];
            flashc_dropout_keep4(p, batch, head, row0 + 16 * i, col0 + 8 * j, keep);
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (!keep[e]) acc[i][j][e] = 0.0f;
        }
}

#endif
