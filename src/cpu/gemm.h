/* The register-blocked micro-kernel every matrix product of the CPU
 * kernels goes through:
 *
 *   C[r][c] (+)= sum_x A[r*sar + x*sax] * B[x*ldb + c]
 *
 * r < M (a multiple of FLASHC_CPU_MR), c < N (a multiple of the vector
 * length VL), x < K. A's strides are free, so A may be read transposed
 * (a score tile stored column-major) at no cost: its elements are only
 * broadcast. B and C rows are read as vectors. The MR x NV register tile of
 * accumulators stays in registers over the whole K loop.
 * Needs vec.h; the variant defines FLASHC_CPU_MR and FLASHC_CPU_NV. */
#ifndef FLASHC_CPU_GEMM_H
#define FLASHC_CPU_GEMM_H

#include <stddef.h>

#define MR FLASHC_CPU_MR

#define FC_DEFINE_MICRO(name, NVX)                                                        \
    static inline void name(int K, const real *A, ptrdiff_t sar, ptrdiff_t sax,         \
                            const real *B, ptrdiff_t ldb, real *C, ptrdiff_t ldc,       \
                            int accumulate) {                                           \
        vr acc[MR][NVX];                                                                \
        if (accumulate) {                                                               \
            for (int r = 0; r < MR; ++r)                                                \
                for (int v = 0; v < NVX; ++v) acc[r][v] = vload(C + r * ldc + v * VL);  \
        } else {                                                                        \
            for (int r = 0; r < MR; ++r)                                                \
                for (int v = 0; v < NVX; ++v) acc[r][v] = vsplat(0);                    \
        }                                                                               \
        for (int x = 0; x < K; ++x) {                                                   \
            vr b[NVX];                                                                  \
            for (int v = 0; v < NVX; ++v) b[v] = vload(B + x * ldb + v * VL);           \
            const real *a = A + x * sax;                                                \
            for (int r = 0; r < MR; ++r) {                                              \
                real s = a[r * sar];                                                    \
                for (int v = 0; v < NVX; ++v) acc[r][v] += s * b[v];                    \
            }                                                                           \
        }                                                                               \
        for (int r = 0; r < MR; ++r)                                                    \
            for (int v = 0; v < NVX; ++v) vstore(C + r * ldc + v * VL, acc[r][v]);      \
    }

FC_DEFINE_MICRO(fc_micro_wide, FLASHC_CPU_NV)
FC_DEFINE_MICRO(fc_micro_one, 1)

static void fc_gemm(int M, int N, int K, const real *A, ptrdiff_t sar, ptrdiff_t sax,
                    const real *B, ptrdiff_t ldb, real *C, ptrdiff_t ldc, int accumulate) {
    int c = 0;
    for (; c + FLASHC_CPU_NV * VL <= N; c += FLASHC_CPU_NV * VL)
        for (int r = 0; r < M; r += MR)
            fc_micro_wide(K, A + r * sar, sar, sax, B + c, ldb, C + r * ldc + c, ldc, accumulate);
    for (; c < N; c += VL)
        for (int r = 0; r < M; r += MR)
            fc_micro_one(K, A + r * sar, sar, sax, B + c, ldb, C + r * ldc + c, ldc, accumulate);
}

#endif
