/* Scores of one S tile held in mma accumulator fragments: the logit rule
 * (softcap, ALiBi) and the mask (sequence end, causal / window bounds).
 *
 * Fragment layout (mma m16n8k16, float32 C): warp w owns tile rows
 * w*ROWS_PER_WARP + 16*i + {g, g+8} (g = lane / 4) for row-atom i, and
 * column-atom j holds columns 8*j + 2*(lane % 4) + {0, 1}; element e of
 * acc[i][j][e] is row g + 8*(e / 2), column 2*(lane % 4) + e % 2. */
#ifndef FLASHC_CUDA_FWD_MASK_CUH
#define FLASHC_CUDA_FWD_MASK_CUH

#include <math.h>

#include "../core/semantics.h"
#include "fwd_params.h"
#include "ptx.cuh"

/* The ALiBi slope of (batch, head) times log2(e); 0 without ALiBi. */
static __device__ __forceinline__ float flashc_alibi_slope_log2(const flashc_fwd_params &p, int batch, int head) {
    return p.alibi_slopes
               ? p.alibi_slopes[batch * p.alibi_batch_stride + head * p.alibi_head_stride] * (float)FLASHC_LOG2E
               : 0.0f;
}

/* Geometry of one (row block, key block) tile in sequence coordinates. */
typedef struct flashc_tile_pos {
    int row0;    /* sequence row of this thread's fragment row g of atom 0 */
    int col0;    /* sequence column of this thread's column 2*(lane%4) of atom 0 */
    int shift;   /* sk - sq: causal / window diagonal offset */
    int sk;
} flashc_tile_pos;

/* Whether any element of the tile of rows [m0, m0 + rows) and columns
 * [n0, n0 + block_n) is hidden: masking runs only on such tiles. */
static __device__ __forceinline__ bool flashc_tile_needs_mask(int m0, int rows, int n0, int block_n,
                                                              int sk, int shift, int window_left,
                                                              int window_right) {
    if (n0 + block_n > sk) return true;
    if (window_left >= 0 && n0 < m0 + rows - 1 + shift - window_left) return true;
    if (window_right >= 0 && n0 + block_n - 1 > m0 + shift + window_right) return true;
    return false;
}

/* Softcap and ALiBi: raw dot products -> logits in the log2 domain. Only the
 * general kernel calls this; the plain one folds scale into the exponent. */
template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_apply_logit_rule(float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                               const flashc_fwd_params &p,
                                                               flashc_tile_pos pos,
                                                               float alibi_slope_log2) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = acc[i][j][e];
                if (p.softcap_inv_scale != 0.0f)
                    x = p.softcap_log2 * flashc_tanh(x * p.softcap_inv_scale);
                else
                    x *= p.scale_log2;
                if (alibi_slope_log2 != 0.0f) {
                    int row = pos.row0 + 16 * i + 8 * (e / 2);
                    int col = pos.col0 + 8 * j + (e % 2);
                    x -= alibi_slope_log2 * (float)abs(row + pos.shift - col);
                }
                acc[i][j][e] = x;
            }
}

/* Hidden entries -> -inf: past the sequence's keys or outside the window. */
template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_apply_mask(float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                         flashc_tile_pos pos, int window_left,
                                                         int window_right) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
            int diag = pos.row0 + 16 * i + 8 * e2 + pos.shift;
            int lo = window_left >= 0 ? diag - window_left : 0;
            int hi = window_right >= 0 ? min(diag + window_right + 1, pos.sk) : pos.sk;
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
                for (int e1 = 0; e1 < 2; ++e1) {
                    int col = pos.col0 + 8 * j + e1;
                    if (col < lo || col >= hi) acc[i][j][2 * e2 + e1] = -INFINITY;
                }
        }
}

#endif
