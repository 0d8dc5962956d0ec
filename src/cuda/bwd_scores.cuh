/* From one warp's S = Q K^T and dP = dO V^T fragments (layout: fwd_mask.cuh)
 * to the two 16-bit tiles the other GEMMs read from shared memory:
 *
 *   logit  = the forward's rule, same float formulas (softcap, ALiBi), log2 domain
 *   P      = 2^(logit - LSE * log2 e)          0 where hidden, and on rows with LSE = +inf
 *   dropout (the forward's Philox words):  Pd = P / (1 - p) where kept, else 0;
 *                                          dPd = dP / (1 - p) where kept, else 0
 *   dS     = P (dPd - D)  (softcap: times 1 - tanh^2, the derivative of its tanh)
 *
 * Pd goes to sP (the A operand of dV += Pd^T dO), dS to sdS (A of dK and
 * dQ); both [query][key]. The softmax scale is left out of dS and applied
 * once to dK and dQ. */
#ifndef FLASHC_CUDA_BWD_SCORES_CUH
#define FLASHC_CUDA_BWD_SCORES_CUH

#include <math.h>

#include "../core/semantics.h"
#include "bwd_params.h"
#include "fwd_dropout.cuh"
#include "fwd_mask.cuh"
#include "ptx.cuh"

/* lse2 / dsum: this thread's rows (index 2 * i + half: row g + 8 * half of
 * row atom i). sP / sdS: the tiles, of layout LP (smem_tile.cuh); at: the
 * byte offset of this thread's element (row g, column 2 * (lane % 4)) of
 * the warp's tile, from which the others are LP::at steps. GENERAL: the kernel's general variant (ALiBi and any
 * scale; SOFTCAP, DROPOUT: those features, compiled in only where on, so
 * the element loop has no run-time branches). Without GENERAL the logit
 * rule, ALiBi and dropout drop out and P = 2^(S * scale * log2 e - LSE *
 * log2 e) is one FFMA and one EX2 (a positive scale); the plain kernel
 * passes `masked` as a constant, so tiles inside the visible band carry no
 * comparisons. ALiBi runs in every general tile: a zero slope subtracts an
 * exact zero. */
template <typename T, int ROW_ATOMS, int COL_ATOMS, class LP, bool GENERAL, bool SOFTCAP = false,
          bool DROPOUT = false>
static __device__ __forceinline__ void flashc_bwd_scores(const float (&s)[ROW_ATOMS][COL_ATOMS][4],
                                                         const float (&dp)[ROW_ATOMS][COL_ATOMS][4],
                                                         const float (&lse2)[2 * ROW_ATOMS],
                                                         const float (&dsum)[2 * ROW_ATOMS],
                                                         const flashc_fwd_params &p, flashc_tile_pos pos,
                                                         bool masked, float alibi_slope_log2, int batch,
                                                         int head, unsigned char *sP, unsigned char *sdS,
                                                         uint32_t at) {
    static_assert(GENERAL || (!SOFTCAP && !DROPOUT), "softcap and dropout run in the general variant");
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i) {
        int lo[2], hi[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int diag = pos.row0 + 16 * i + 8 * half + pos.shift;
            lo[half] = p.window_left >= 0 ? diag - p.window_left : 0;
            hi[half] = p.window_right >= 0 ? min(diag + p.window_right + 1, pos.sk) : pos.sk;
        }
#pragma unroll
        for (int j = 0; j < COL_ATOMS; ++j) {
            const int col = pos.col0 + 8 * j;
            /* the keep bits of both rows of this atom: one Philox call per
             * four elements (fwd_dropout.cuh) */
            bool keep4[4] = {true, true, true, true};
            if (DROPOUT) flashc_dropout_keep4(p, batch, head, pos.row0 + 16 * i, col, keep4);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int r = 2 * i + half;
                const int row = pos.row0 + 16 * i + 8 * half;
                float pd[2], ds[2];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float x = s[i][j][2 * half + e];
                    float th = 0.0f, logit;
                    if (!GENERAL) {
                        logit = fmaf(x, p.scale_log2, -lse2[r]); /* LSE folded in */
                    } else if (SOFTCAP) {
                        th = flashc_tanh(x * p.softcap_inv_scale);
                        logit = p.softcap_log2 * th;
                    } else {
                        logit = x * p.scale_log2;
                    }
                    if (GENERAL) logit -= alibi_slope_log2 * (float)abs(row + pos.shift - (col + e));
                    if (masked && (col + e < lo[half] || col + e >= hi[half])) logit = -INFINITY;
                    const float prob = flashc_exp2(GENERAL ? logit - lse2[r] : logit);
                    float dpe = dp[i][j][2 * half + e];
                    pd[e] = prob;
                    if (DROPOUT) {
                        const bool kept = keep4[2 * half + e];
                        pd[e] = kept ? prob * p.dropout_rescale : 0.0f;
                        dpe = kept ? dpe * p.dropout_rescale : 0.0f;
                    }
                    ds[e] = prob * (dpe - dsum[r]);
                    if (SOFTCAP) ds[e] *= 1.0f - th * th;
                }
                const uint32_t to = LP::at(at, j, 16 * i + 8 * half);
                *reinterpret_cast<uint32_t *>(sP + to) = flashc_pack2<T>(pd[0], pd[1]);
                *reinterpret_cast<uint32_t *>(sdS + to) = flashc_pack2<T>(ds[0], ds[1]);
            }
        }
    }
}

#endif
