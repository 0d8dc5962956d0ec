/* Dropout on P tiles held in mma fragments (layout: fwd_mask.cuh). */
#ifndef FLASHC_CUDA_FWD_DROPOUT_CUH
#define FLASHC_CUDA_FWD_DROPOUT_CUH

#include "../core/semantics.h"
#include "fwd_params.h"

/* Word `index` (0..3) of a Philox output, without a local array. */
static __device__ __forceinline__ uint32_t flashc_philox_word(flashc_philox_u32x4 w, int index) {
    return index == 0 ? w.x : index == 1 ? w.y : index == 2 ? w.z : w.w;
}

/* Dropout on P tiles in mma fragments. A thread holds, per atom, columns
 * 2 t + {0, 1} (t = lane % 4) of rows r and r + 8; the rule (semantics.h)
 * draws the 16-bit numbers of a row's eight columns of an atom from one
 * Philox call, of which this thread needs word t. So the four lanes of a
 * quad (same rows, the atom's eight columns) split the calls of a row atom
 * four ways, lane t making combo 4 g + t (combo c = 2 j + half: atom j,
 * row r + 8 half), and trade words over three shuffles: one call per
 * eight elements. The mask is the CPU backend's bit for bit. */

/* Bit 4 j + 2 half + e of the result: element (row + 8 half, col0 + 8 j +
 * e) is kept. row: the thread's row in the atom row; col0: its first
 * column (a multiple of 8 plus 2 t). */
template <int COL_ATOMS>
static __device__ __forceinline__ unsigned long long flashc_dropout_keep_row_atom(const flashc_fwd_params &p,
                                                                                  int batch, int head, int row,
                                                                                  int col0) {
    static_assert(COL_ATOMS % 2 == 0 && COL_ATOMS <= 16, "row atoms of whole groups of four calls");
    const int t = threadIdx.x & 3;
    const uint32_t head_index = (uint32_t)batch * (uint32_t)p.nheads + (uint32_t)head;
    const uint32_t key0 = (uint32_t)p.dropout_seed;
    const uint32_t key1 = (uint32_t)(p.dropout_seed >> 32) ^ (uint32_t)(p.dropout_offset >> 32);
    unsigned long long bits = 0;
#pragma unroll
    for (int g = 0; g < COL_ATOMS / 2; ++g) {
        const int combo = 4 * g + t, j = combo >> 1, half = combo & 1;
        const flashc_philox_u32x4 counter = {(uint32_t)((col0 + 8 * j) >> 3), (uint32_t)(row + 8 * half),
                                             head_index, (uint32_t)p.dropout_offset};
        const flashc_philox_u32x4 w = flashc_philox4x32_10(counter, key0, key1);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            /* word t of combo 4 g + (t ^ m), made by lane ^ m */
            const uint32_t word = m == 0 ? flashc_philox_word(w, t)
                                         : __shfl_xor_sync(0xffffffffu, flashc_philox_word(w, t ^ m), m);
            const int from = 4 * g + (t ^ m); /* = 2 j' + half': bits 4 j' + 2 half' + e */
            const unsigned long long pair = (unsigned long long)((word & 0xFFFFu) >= p.dropout_threshold) |
                                            (unsigned long long)((word >> 16) >= p.dropout_threshold) << 1;
            bits |= pair << (2 * from);
        }
    }
    return bits;
}

/* Dropout on a P tile after it entered the row sums (LSE is pre-dropout):
 * dropped entries become 0; the 1 / (1 - p) rescale is applied once at the
 * end. col0 includes the lane's column offset. */
template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_apply_dropout(float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                            const flashc_fwd_params &p, int batch,
                                                            int head, int row0, int col0) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i) {
        const unsigned long long keep = flashc_dropout_keep_row_atom<COL_ATOMS>(p, batch, head, row0 + 16 * i, col0);
#pragma unroll
        for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (!((keep >> (4 * j + e)) & 1)) acc[i][j][e] = 0.0f;
    }
}

#endif
