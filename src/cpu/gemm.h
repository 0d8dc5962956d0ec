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
 * fc_dot_lanes: the dot product of a and b (K elements) as a vector whose
 * lanes sum to it, x < K read as vectors (the last K % VL elements one by
 * one into lane 0, so b may be a tensor's own row, read no further than K). */
static inline vr fc_dot_lanes(const real *a, const real *b, int K) {
    const int kv = K / VL * VL;
    vr acc0 = vsplat(0), acc1 = vsplat(0); /* two chains: half the FMA latency */
    int x = 0;
    for (; x + 2 * VL <= kv; x += 2 * VL) {
        acc0 += vload(a + x) * vload(b + x);
        acc1 += vload(a + x + VL) * vload(b + x + VL);
    }
    if (x < kv) acc0 += vload(a + x) * vload(b + x);
    acc0 += acc1;
    real tail = 0;
    for (x = kv; x < K; ++x) tail += a[x] * b[x];
    acc0[0] += tail;
    return acc0;
}

#if !FLASHC_CPU_REAL_DOUBLE
/* fc_dot_lanes of ROWS rows of a (K apart) against one bfloat16 row b,
 * widened in registers once for all of them (K a multiple of VL): out[i]
 * for row i, the same sums as fc_dot_lanes of the widened row. */
#define FC_DEFINE_DOT_ROWS_BF16(name, ROWS)                                                    \
    static inline void name(const real *a, const uint16_t *b, int K, vr *out) {               \
        vr acc0[ROWS], acc1[ROWS];                                                            \
        for (int i = 0; i < ROWS; ++i) acc0[i] = acc1[i] = vsplat(0);                         \
        int x = 0;                                                                            \
        for (; x + 2 * VL <= K; x += 2 * VL) {                                                \
            const vr b0 = vload_bf16(b + x), b1 = vload_bf16(b + x + VL);                     \
            for (int i = 0; i < ROWS; ++i) {                                                  \
                acc0[i] += vload(a + i * K + x) * b0;                                         \
                acc1[i] += vload(a + i * K + x + VL) * b1;                                    \
            }                                                                                 \
        }                                                                                     \
        if (x < K) {                                                                          \
            const vr b0 = vload_bf16(b + x);                                                  \
            for (int i = 0; i < ROWS; ++i) acc0[i] += vload(a + i * K + x) * b0;              \
        }                                                                                     \
        for (int i = 0; i < ROWS; ++i) out[i] = acc0[i] + acc1[i];                            \
    }
FC_DEFINE_DOT_ROWS_BF16(fc_dot_rows1_bf16, 1)
FC_DEFINE_DOT_ROWS_BF16(fc_dot_rows4_bf16, 4)

/* c[i * ldc + x] += s[k * sk + i] * b[k][x] for keys k < KEYS in order,
 * rows i < ROWS, x < N (a multiple of VL): bfloat16 rows b[k] widened
 * once per vector for every row, the factors in registers, each c vector
 * loaded and stored once for all KEYS (the same fused products, in the
 * same order, as one key at a time). */
#define FC_DEFINE_AXPY_ROWS_BF16(name, ROWS, KEYS)                                                 \
    static inline void name(int N, const real *s, ptrdiff_t sk, const uint16_t *const *b, real *c,  \
                            ptrdiff_t ldc) {                                                       \
        real f[KEYS][ROWS];                                                                        \
        for (int k = 0; k < KEYS; ++k)                                                             \
            for (int i = 0; i < ROWS; ++i) f[k][i] = s[k * sk + i];                                \
        for (int x = 0; x < N; x += VL) {                                                          \
            vr bv[KEYS];                                                                           \
            for (int k = 0; k < KEYS; ++k) bv[k] = vload_bf16(b[k] + x);                           \
            for (int i = 0; i < ROWS; ++i) {                                                       \
                vr o = vload(c + i * ldc + x);                                                     \
                for (int k = 0; k < KEYS; ++k) o += f[k][i] * bv[k];                               \
                vstore(c + i * ldc + x, o);                                                        \
            }                                                                                      \
        }                                                                                          \
    }
FC_DEFINE_AXPY_ROWS_BF16(fc_axpy_rows1_bf16, 1, 1)
FC_DEFINE_AXPY_ROWS_BF16(fc_axpy_rows4_bf16, 4, 1)
FC_DEFINE_AXPY_ROWS_BF16(fc_axpy_rows1_keys4_bf16, 1, 4)
FC_DEFINE_AXPY_ROWS_BF16(fc_axpy_rows4_keys4_bf16, 4, 4)
#endif

/* Dot products whose lanes are summed VL at a time (vhsums): add a
 * product's lanes with fc_dot_batch_add, naming where its sum goes; the
 * sums are stored when VL are pending and by fc_dot_batch_flush. */
typedef struct fc_dot_batch {
    vr acc[VL];
    real *dst[VL];
    int n;
} fc_dot_batch;

static inline void fc_dot_batch_flush(fc_dot_batch *b) {
    if (b->n == 0) return;
    for (int v = b->n; v < VL; ++v) b->acc[v] = vsplat(0);
    const vr sums = vhsums(b->acc);
    for (int v = 0; v < b->n; ++v) *b->dst[v] = sums[v];
    b->n = 0;
}

static inline void fc_dot_batch_add(fc_dot_batch *b, vr lanes, real *dst) {
    b->acc[b->n] = lanes;
    b->dst[b->n] = dst;
    if (++b->n == VL) fc_dot_batch_flush(b);
}

/* fc_dots: C[j * ldc + i] = sum_x A[i * lda + x] * B[j * ldb + x] for i <
 * rows, j < cols: each row of A against each row of B (fc_dot_lanes). */
static void fc_dots(int rows, int cols, int K, const real *A, ptrdiff_t lda, const real *B,
                    ptrdiff_t ldb, real *C, ptrdiff_t ldc) {
    fc_dot_batch batch;
    batch.n = 0;
    for (int j = 0; j < cols; ++j)
        for (int i = 0; i < rows; ++i)
            fc_dot_batch_add(&batch, fc_dot_lanes(A + i * lda, B + j * ldb, K), C + j * ldc + i);
    fc_dot_batch_flush(&batch);
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
