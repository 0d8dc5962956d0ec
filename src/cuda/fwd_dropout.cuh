/* Dropout on P tiles held in mma fragments (layout: fwd_mask.cuh). */
#ifndef FLASHC_CUDA_FWD_DROPOUT_CUH
#define FLASHC_CUDA_FWD_DROPOUT_CUH

#include "../core/semantics.h"
#include "fwd_params.h"

/* Dropout on a P tile after it entered the row sums (LSE is pre-dropout):
 * dropped entries become 0; the 1 / (1 - p) rescale is applied once at the
 * end. Words come from the shared Philox rule (semantics.h), so the mask is
 * the CPU backend's bit for bit. A thread's two columns 2*(lane%4) + {0,1}
 * share one Philox call (same col / 4). */
template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_apply_dropout(float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                            const flashc_fwd_params &p, int batch,
                                                            int head, int row0, int col0) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = row0 + 16 * i + 8 * half;
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j) {
                const int col = col0 + 8 * j;
                flashc_philox_u32x4 w = flashc_dropout_words(p.dropout_seed, p.dropout_offset, batch,
                                                             p.nheads, head, row, col);
                const bool upper = (col & 2) != 0; /* columns 2,3 of the group of 4 */
                uint32_t w0 = upper ? w.z : w.x, w1 = upper ? w.w : w.y;
                if (w0 < p.dropout_threshold) acc[i][j][2 * half] = 0.0f;
                if (w1 < p.dropout_threshold) acc[i][j][2 * half + 1] = 0.0f;
            }
        }
}

#endif
