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

/* The products of a tile of few rows (a decoding step's one or few
 * queries), where fc_gemm would compute a whole vector of rows for each:
 * the row dimension here is a loop, the vectors run along the head dim.
 *
 * fc_dots: C[j * ldc + i] = sum_x A[i * lda + x] * B[j * ldb + x] for i <
 * rows, j < cols: each row of A against each row of B, x < K read as
 * vectors (the last K % VL elements one by one, so B may be a tensor's own
 * rows, read no further than K). */
static void fc_dots(int rows, int cols, int K, const real *A, ptrdiff_t lda, const real *B,
                    ptrdiff_t ldb, real *C, ptrdiff_t ldc) {
    const int kv = K / VL * VL;
    for (int j = 0; j < cols; ++j) {
        const real *b = B + j * ldb;
        for (int i = 0; i < rows; ++i) {
            const real *a = A + i * lda;
            vr acc0 = vsplat(0), acc1 = vsplat(0); /* two chains: half the FMA latency */
            int x = 0;
            for (; x + 2 * VL <= kv; x += 2 * VL) {
                acc0 += vload(a + x) * vload(b + x);
                acc1 += vload(a + x + VL) * vload(b + x + VL);
            }
            if (x < kv) acc0 += vload(a + x) * vload(b + x);
            acc0 += acc1;
            real sum = 0;
            for (int l = 0; l < VL; ++l) sum += acc0[l];
            for (x = kv; x < K; ++x) sum += a[x] * b[x];
            C[j * ldc + i] = sum;
        }
    }
}

/* C[i * ldc + c] += sum_x A[i * sar + x * sax] * B[x * ldb + c] for i < rows,
 * c < N (a multiple of VL), x < K: fc_gemm's product for any row count,
 * one row at a time with up to eight vectors of C in registers. */
static void fc_rows_times_panel(int rows, int N, int K, const real *A, ptrdiff_t sar, ptrdiff_t sax,
                                const real *B, ptrdiff_t ldb, real *C, ptrdiff_t ldc) {
    enum { W = 8 };
    for (int i = 0; i < rows; ++i) {
        real *c = C + i * ldc;
        const real *a = A + i * sar;
        int c0 = 0;
        for (; c0 + W * VL <= N; c0 += W * VL) {
            vr acc[W];
            for (int v = 0; v < W; ++v) acc[v] = vload(c + c0 + v * VL);
            for (int x = 0; x < K; ++x) {
                const real s = a[x * sax];
                const real *b = B + x * ldb + c0;
                for (int v = 0; v < W; ++v) acc[v] += s * vload(b + v * VL);
            }
            for (int v = 0; v < W; ++v) vstore(c + c0 + v * VL, acc[v]);
        }
        for (; c0 < N; c0 += VL) {
            vr acc = vload(c + c0);
            for (int x = 0; x < K; ++x) acc += a[x * sax] * vload(B + x * ldb + c0);
            vstore(c + c0, acc);
        }
    }
}

#endif
