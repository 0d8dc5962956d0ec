/* Rows of float16 / bfloat16 / float32 / float64 elements to and from the
 * kernels' `real` (float or double): widening on load, round-to-nearest-even
 * on store. Portable bit code, with the F16C instructions where the
 * variant's target flags provide them. Needs vec.h (`real`). */
#ifndef FLASHC_CPU_CONVERT_H
#define FLASHC_CPU_CONVERT_H

#include <stdint.h>
#include <string.h>

#include "flashc.h"

#if defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

static inline float fc_bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t fc_float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fc_bf16_to_float(uint16_t h) { return fc_bits_to_float((uint32_t)h << 16); }

static inline uint16_t fc_float_to_bf16(float f) {
    uint32_t u = fc_float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float fc_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return fc_bits_to_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        float f = (float)mant * 0x1p-24f; /* zero or subnormal */
        return sign ? -f : f;
    }
    return fc_bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t fc_float_to_half(float f) {
    uint32_t u = fc_float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);          /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);         /* rounds to inf */
    if (a < 0x38800000u) {                                           /* subnormal half */
        /* Adding 0.5 (2^-1) aligns the mantissa so the FPU's own rounding
         * to nearest-even leaves the half subnormal bits at the bottom. */
        float t = fc_bits_to_float(a) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(fc_float_to_bits(t) - 0x3f000000u));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return (uint16_t)(sign | (uint16_t)(a >> 13));
}

#if !FLASHC_CPU_REAL_DOUBLE
/* VL bfloat16 elements widened to float lanes (a bfloat16 is a float's top
 * half): in registers, for products that read a row once. */
typedef uint16_t vbf16_u __attribute__((vector_size(FLASHC_CPU_VBYTES / 2), aligned(2), may_alias));
static inline vr vload_bf16(const uint16_t *p) {
#if defined(__AVX512F__) && FLASHC_CPU_VBYTES == 64
    /* one zero-extending load (gcc splits the generic form into halves) */
    return (vr)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16);
#elif defined(__AVX2__) && FLASHC_CPU_VBYTES == 32
    return (vr)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16);
#else
    return (vr)(__builtin_convertvector(*(const vbf16_u *)p, vi) << 16);
#endif
}
#endif

/* dst[x] = scale * src[x], x < n, src of `dtype`. */
static inline void fc_load_row(real *dst, const void *src, flashc_dtype dtype, int64_t n,
                               real scale) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: {
            const float *s = (const float *)src;
            for (int64_t x = 0; x < n; ++x) dst[x] = scale * (real)s[x];
            break;
        }
        case FLASHC_DTYPE_FLOAT64: {
            const double *s = (const double *)src;
            for (int64_t x = 0; x < n; ++x) dst[x] = scale * (real)s[x];
            break;
        }
        case FLASHC_DTYPE_BFLOAT16: {
            const uint16_t *s = (const uint16_t *)src;
            for (int64_t x = 0; x < n; ++x) dst[x] = scale * (real)fc_bf16_to_float(s[x]);
            break;
        }
        case FLASHC_DTYPE_FLOAT16: {
            const uint16_t *s = (const uint16_t *)src;
            int64_t x = 0;
#if defined(__F16C__)
            for (; x + 8 <= n; x += 8) {
                float tmp[8];
                _mm256_storeu_ps(tmp, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + x))));
                for (int l = 0; l < 8; ++l) dst[x + l] = scale * (real)tmp[l];
            }
#endif
            for (; x < n; ++x) dst[x] = scale * (real)fc_half_to_float(s[x]);
            break;
        }
        default:
            break;
    }
}

/* Element `index` of a `dtype` array, widened. */
static inline real fc_load_one(const void *src, flashc_dtype dtype, int64_t index) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return (real)((const float *)src)[index];
        case FLASHC_DTYPE_FLOAT64: return (real)((const double *)src)[index];
        case FLASHC_DTYPE_BFLOAT16: return (real)fc_bf16_to_float(((const uint16_t *)src)[index]);
        case FLASHC_DTYPE_FLOAT16: return (real)fc_half_to_float(((const uint16_t *)src)[index]);
        default: return 0;
    }
}

/* dst[x] = scale * src[x] rounded to `dtype` (nearest even), x < n. */
static inline void fc_store_row(void *dst, flashc_dtype dtype, const real *src, int64_t n,
                                real scale) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: {
            float *d = (float *)dst;
            for (int64_t x = 0; x < n; ++x) d[x] = (float)(scale * src[x]);
            break;
        }
        case FLASHC_DTYPE_FLOAT64: {
            double *d = (double *)dst;
            for (int64_t x = 0; x < n; ++x) d[x] = (double)(scale * src[x]);
            break;
        }
        case FLASHC_DTYPE_BFLOAT16: {
            uint16_t *d = (uint16_t *)dst;
            for (int64_t x = 0; x < n; ++x) d[x] = fc_float_to_bf16((float)(scale * src[x]));
            break;
        }
        case FLASHC_DTYPE_FLOAT16: {
            uint16_t *d = (uint16_t *)dst;
            int64_t x = 0;
#if defined(__F16C__)
            for (; x + 8 <= n; x += 8) {
                float tmp[8];
                for (int l = 0; l < 8; ++l) tmp[l] = (float)(scale * src[x + l]);
                _mm_storeu_si128((__m128i *)(d + x),
                                 _mm256_cvtps_ph(_mm256_loadu_ps(tmp), _MM_FROUND_TO_NEAREST_INT));
            }
#endif
            for (; x < n; ++x) d[x] = fc_float_to_half((float)(scale * src[x]));
            break;
        }
        default:
            break;
    }
}

static inline void fc_store_one(void *dst, flashc_dtype dtype, int64_t index, real value) {
    fc_store_row((char *)dst + index * (int64_t)flashc_dtype_size(dtype), dtype, &value, 1, 1);
}

#endif
