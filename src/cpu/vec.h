/* Portable SIMD vectors (GCC/Clang vector extensions) for the CPU kernels.
 * The including variant defines:
 *   FLASHC_CPU_REAL_DOUBLE  0: float lanes (float32 accumulation),
 *                           1: double lanes (float64 accumulation)
 *   FLASHC_CPU_VBYTES       vector width in bytes (64 AVX-512, 32 AVX2, 16)
 * The same source then compiles to zmm, ymm or xmm code (or NEON, or
 * scalar pairs) depending on the target flags of the translation unit. */
#ifndef FLASHC_CPU_VEC_H
#define FLASHC_CPU_VEC_H

#include <math.h>
#include <stdint.h>

#if FLASHC_CPU_REAL_DOUBLE
typedef double real;
typedef int64_t ireal;
#else
typedef float real;
typedef int32_t ireal;
#endif

#define VL ((int)(FLASHC_CPU_VBYTES / sizeof(real)))

typedef real vr __attribute__((vector_size(FLASHC_CPU_VBYTES)));
typedef ireal vi __attribute__((vector_size(FLASHC_CPU_VBYTES)));
/* Unaligned, aliasing-safe views for loads and stores. */
typedef real vr_u __attribute__((vector_size(FLASHC_CPU_VBYTES), aligned(sizeof(real)), may_alias));

#define FC_LOG2E 1.4426950408889634
#define FC_LN2 0.6931471805599453

static inline vr vload(const real *p) { return *(const vr_u *)p; }
static inline void vstore(real *p, vr v) { *(vr_u *)p = v; }
static inline vr vsplat(real x) { return (vr){0} + x; }

static inline vr vmax(vr a, vr b) {
    vi m = a > b;
    return (vr)(((vi)a & m) | ((vi)b & ~m));
}

/* Lanes where m is set take a, the others b. */
static inline vr vselect(vi m, vr a, vr b) { return (vr)(((vi)a & m) | ((vi)b & ~m)); }

static inline real vhmax(vr v) {
    real m = v[0];
    for (int l = 1; l < VL; ++l) m = v[l] > m ? v[l] : m;
    return m;
}

/* Lane v of the result: the sum of acc[v]'s lanes, for v < VL, all at once
 * (acc is overwritten). log2(VL) rounds each fold pairs of vectors into
 * one: every lane of a pair's halves added to its partner lane, the halves
 * of the two vectors side by side. VL - 1 vector adds and twice as many
 * shuffles for VL sums, where summing one vector's lanes in order is VL - 1
 * dependent scalar adds. */
#if FLASHC_CPU_REAL_DOUBLE
#define FC_VL_PP (FLASHC_CPU_VBYTES / 8)
#else
#define FC_VL_PP (FLASHC_CPU_VBYTES / 4)
#endif
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12)
#define FC_FOLD(x, y, ...) (__builtin_shufflevector(x, y, __VA_ARGS__))
#if FC_VL_PP == 16
#define FC_FOLD_ROUNDS(a, n)                                                                                    \
    FC_FOLD_ROUND(a, n, 8, (0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),                            \
                  (8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31));                             \
    FC_FOLD_ROUND(a, n, 4, (0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),                          \
                  (4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));                               \
    FC_FOLD_ROUND(a, n, 2, (0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29),                          \
                  (2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31));                               \
    FC_FOLD_ROUND(a, n, 1, (0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),                         \
                  (1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31))
#elif FC_VL_PP == 8
#define FC_FOLD_ROUNDS(a, n)                                                                                    \
    FC_FOLD_ROUND(a, n, 4, (0, 1, 2, 3, 8, 9, 10, 11), (4, 5, 6, 7, 12, 13, 14, 15));                           \
    FC_FOLD_ROUND(a, n, 2, (0, 1, 4, 5, 8, 9, 12, 13), (2, 3, 6, 7, 10, 11, 14, 15));                           \
    FC_FOLD_ROUND(a, n, 1, (0, 2, 4, 6, 8, 10, 12, 14), (1, 3, 5, 7, 9, 11, 13, 15))
#elif FC_VL_PP == 4
#define FC_FOLD_ROUNDS(a, n)                                                                                    \
    FC_FOLD_ROUND(a, n, 2, (0, 1, 4, 5), (2, 3, 6, 7));                                                         \
    FC_FOLD_ROUND(a, n, 1, (0, 2, 4, 6), (1, 3, 5, 7))
#endif
#endif
#define FC_UNPAREN(...) __VA_ARGS__
/* one round: n vectors of VL / (2 * half) blocks -> n / 2 vectors */
#define FC_FOLD_ROUND(a, n, half, lo, hi)                                        \
    do {                                                                         \
        for (int v = 0; v < (n) / 2; ++v)                                        \
            a[v] = FC_FOLD(a[2 * v], a[2 * v + 1], FC_UNPAREN lo) +              \
                   FC_FOLD(a[2 * v], a[2 * v + 1], FC_UNPAREN hi);               \
        (n) /= 2;                                                                \
    } while (0)

static inline vr vhsums(vr *acc) {
#if defined(FC_FOLD_ROUNDS)
    int n = VL;
    FC_FOLD_ROUNDS(acc, n);
    return acc[0];
#else
    vr r;
    for (int v = 0; v < VL; ++v) {
        real sum = 0;
        for (int l = 0; l < VL; ++l) sum += acc[v][l];
        r[v] = sum;
    }
    return r;
#endif
}

/* 2^x. Inputs below -126 (and -inf) give exactly 0, NaN gives NaN. The float version is a
 * degree-7 polynomial after range reduction (relative error ~1e-7); the
 * double version defers to libm so float64 results stay exact enough for
 * gradient checks. */
static inline vr vexp2(vr x) {
#if FLASHC_CPU_REAL_DOUBLE
    vr r;
    for (int l = 0; l < VL; ++l) r[l] = exp2(x[l]);
    return r;
#else
    vr in = x;
    vi live = x >= -126.0f;
    x = vmax(x, vsplat(-126.0f));
    x = vselect(x > 127.0f, vsplat(127.0f), x);
    vr n = (x + 12582912.0f) - 12582912.0f; /* round to nearest integer */
    vr f = x - n;                           /* [-0.5, 0.5] */
    /* Taylor coefficients of 2^f = e^(f ln 2). */
    vr p = vsplat(1.5252733804059841e-05f);
    p = p * f + 1.5403530393381610e-04f;
    p = p * f + 1.3333558146428443e-03f;
    p = p * f + 9.6181291076284772e-03f;
    p = p * f + 5.5504108664821580e-02f;
    p = p * f + 2.4022650695910071e-01f;
    p = p * f + 6.9314718055994531e-01f;
    p = p * f + 1.0f;
    vi e = (__builtin_convertvector(n, vi) + 127) << 23;
    vr r = (vr)((vi)(p * (vr)e) & live);
    return vselect(in != in, in, r); /* NaN stays NaN */
#endif
}

/* tanh, lane by lane. float: an odd polynomial below |x| = 0.3 (where the
 * exp form would cancel), 1 - 2 / (e^(2|x|) + 1) above, sign restored;
 * relative error below ~5e-7. double: libm. */
static inline vr vtanh(vr x) {
#if FLASHC_CPU_REAL_DOUBLE
    vr r;
    for (int l = 0; l < VL; ++l) r[l] = tanh(x[l]);
    return r;
#else
    const vi sign_bit = (vi){0} + (ireal)0x80000000u;
    vi sign = (vi)x & sign_bit;
    vr a = (vr)((vi)x & ~sign_bit);
    vr a2 = a * a;
    vr small = vsplat(62.0f / 2835.0f);
    small = small * a2 - 17.0f / 315.0f;
    small = small * a2 + 2.0f / 15.0f;
    small = small * a2 - 1.0f / 3.0f;
    small = (small * a2 + 1.0f) * a;
    vr e = vexp2(a * (real)(2.0 * FC_LOG2E));
    vr big = 1.0f - 2.0f / (e + 1.0f);
    vr r = vselect(a < 0.3f, small, big);
    return (vr)((vi)r | sign);
#endif
}

static inline real sexp2(real x) {
#if FLASHC_CPU_REAL_DOUBLE
    return exp2(x);
#else
    return exp2f(x);
#endif
}

static inline real slog2(real x) {
#if FLASHC_CPU_REAL_DOUBLE
    return log2(x);
#else
    return log2f(x);
#endif
}

#endif
