/* The online softmax over S tiles in mma fragments. Each row is spread over
 * the 4 lanes of a quad (lane / 4 equal): row maxima are combined with two
 * xor-shuffles per tile, row sums only once at the end.
 *
 * Scores arrive in "score units"; score_to_log2 converts them to the log2
 * domain (scale * log2(e) for raw dot products, 1 for logits the general
 * kernel already converted), so p = 2^(s * score_to_log2 - m) is one FFMA
 * and one EX2 per element. */
#ifndef FLASHC_CUDA_FWD_SOFTMAX_CUH
#define FLASHC_CUDA_FWD_SOFTMAX_CUH

#include <math.h>

#include "ptx.cuh"

static __device__ __forceinline__ float flashc_quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

static __device__ __forceinline__ float flashc_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/* A row's reference maximum is raised only when a new score exceeds it by
 * more than this (log2 domain): p = 2^(s - m_ref) then stays <= 2^8, exact
 * in float32 and in the 16-bit P, and the rescale of O (a multiply per
 * accumulator) is skipped on most tiles. LSE uses the same m_ref, so the
 * result does not depend on when rescales happened. */
#define FLASHC_RESCALE_THRESHOLD_LOG2 8.0f

/* Running state of this thread's 2 * ROW_ATOMS rows (index 2*i + half). */
template <int ROW_ATOMS>
struct flashc_softmax_state {
    float row_max[2 * ROW_ATOMS];  /* reference maximum m_ref, log2 domain; -inf while nothing is visible */
    float row_sum[2 * ROW_ATOMS];  /* this thread's partial sum of p */
};

/* A row tile's start: O = 0, nothing seen (max -inf, sum 0). */
template <int ROW_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_softmax_start(float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4],
                                                            flashc_softmax_state<ROW_ATOMS> &st) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int d = 0; d < OUT_ATOMS; ++d)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc_o[i][d][e] = 0.0f;
#pragma unroll
    for (int r = 0; r < 2 * ROW_ATOMS; ++r) {
        st.row_max[r] = -INFINITY;
        st.row_sum[r] = 0.0f;
    }
}

/* Raise each row's reference maximum where a new score exceeds it by more
 * than the threshold, rescaling the row's sum. alpha[r] is the factor its O
 * accumulators owe (1 where the maximum stays): applied here when
 * RESCALE_O (a branch the warp skips when none of its rows moved), or later
 * by flashc_rescale_o, which lets the Hopper kernel wait until the P V of
 * the previous block has finished. */
template <bool RESCALE_O, int ROW_ATOMS, int COL_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_softmax_raise_max(flashc_softmax_state<ROW_ATOMS> &st,
                                                                const float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                                float score_to_log2, float (&alpha)[2 * ROW_ATOMS],
                                                                float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4]) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = 2 * i + half;
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
                tile_max = fmaxf(tile_max, fmaxf(acc[i][j][2 * half], acc[i][j][2 * half + 1]));
            const float new_max = flashc_quad_max(tile_max) * score_to_log2;
            alpha[r] = 1.0f;
            if (new_max > st.row_max[r] + FLASHC_RESCALE_THRESHOLD_LOG2) {
                alpha[r] = flashc_exp2(st.row_max[r] - new_max);
                st.row_max[r] = new_max;
                st.row_sum[r] *= alpha[r];
                if (RESCALE_O) {
#pragma unroll
                    for (int d = 0; d < OUT_ATOMS; ++d) {
                        acc_o[i][d][2 * half] *= alpha[r];
                        acc_o[i][d][2 * half + 1] *= alpha[r];
                    }
                }
            }
        }
}

/* O rows times alpha (deferred rescale), skipped per row where alpha is 1. */
template <int ROW_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_rescale_o(float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4],
                                                        const float (&alpha)[2 * ROW_ATOMS]) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half)
            if (alpha[2 * i + half] != 1.0f) {
#pragma unroll
                for (int d = 0; d < OUT_ATOMS; ++d) {
                    acc_o[i][d][2 * half] *= alpha[2 * i + half];
                    acc_o[i][d][2 * half + 1] *= alpha[2 * i + half];
                }
            }
}

/* acc <- p = 2^(s * score_to_log2 - m) (float32), added to the row sums. A
 * row with nothing visible so far keeps -inf and exponentiates against 0,
 * giving p = 0 and no NaN. */
template <int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_softmax_exponentiate(flashc_softmax_state<ROW_ATOMS> &st,
                                                                   float (&acc)[ROW_ATOMS][COL_ATOMS][4],
                                                                   float score_to_log2) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = 2 * i + half;
            const float base = st.row_max[r] == -INFINITY ? 0.0f : st.row_max[r];
            float sum = st.row_sum[r];
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float pe = flashc_exp2(fmaf(acc[i][j][2 * half + e], score_to_log2, -base));
                    acc[i][j][2 * half + e] = pe;
                    sum += pe;
                }
            st.row_sum[r] = sum;
        }
}

/* Fold one S tile into the running state: raise maxima (rescaling O and
 * the sums where they moved), then acc <- p. */
template <int ROW_ATOMS, int COL_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_softmax_update(
    flashc_softmax_state<ROW_ATOMS> &st, float (&acc)[ROW_ATOMS][COL_ATOMS][4],
    float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4], float score_to_log2) {
    float alpha[2 * ROW_ATOMS];
    flashc_softmax_raise_max<true>(st, acc, score_to_log2, alpha, acc_o);
    flashc_softmax_exponentiate(st, acc, score_to_log2);
}

#endif
