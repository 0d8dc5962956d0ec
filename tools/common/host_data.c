#include "host_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint16_t flashc_tool_float_to_half(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    uint32_t sign = (f >> 16) & 0x8000u;
    uint32_t exp = (f >> 23) & 0xFFu;
    uint32_t mant = f & 0x7FFFFFu;
    if (exp == 0xFFu) return (uint16_t)(sign | 0x7C00u | (mant ? 0x200u : 0u));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7C00u);
    if (e <= 0) {
        /* Subnormal half (or zero): shift the full mantissa into place. */
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half_mant = mant >> shift;
        uint32_t rest = mant & ((1u << shift) - 1u);
        uint32_t halfway = 1u << (shift - 1);
        if (rest > halfway || (rest == halfway && (half_mant & 1u))) half_mant++;
        return (uint16_t)(sign | half_mant);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++; /* may carry into exp */
    return (uint16_t)half;
}

float flashc_tool_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t f;
    if (exp == 0) {
        if (mant == 0) {
            f = sign;
        } else {
            /* Subnormal: normalise. */
            int e = -1;
            do {
                mant <<= 1;
                e++;
            } while (!(mant & 0x400u));
            f = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        f = sign | 0x7F800000u | (mant << 13);
    } else {
        f = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float x;
    memcpy(&x, &f, 4);
    return x;
}

uint16_t flashc_tool_float_to_bf16(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((f >> 16) | 0x40u); /* NaN */
    f += 0x7FFFu + ((f >> 16) & 1u);
    return (uint16_t)(f >> 16);
}

float flashc_tool_bf16_to_float(uint16_t b) {
    uint32_t f = (uint32_t)b << 16;
    float x;
    memcpy(&x, &f, 4);
    return x;
}

double flashc_tool_load(const void *data, flashc_dtype dtype, int64_t i) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return ((const float *)data)[i];
        case FLASHC_DTYPE_FLOAT16: return flashc_tool_half_to_float(((const uint16_t *)data)[i]);
        case FLASHC_DTYPE_BFLOAT16: return flashc_tool_bf16_to_float(((const uint16_t *)data)[i]);
        case FLASHC_DTYPE_FLOAT64: return ((const double *)data)[i];
        case FLASHC_DTYPE_INT32: return ((const int32_t *)data)[i];
    }
    return NAN;
}

void flashc_tool_store(void *data, flashc_dtype dtype, int64_t i, double value) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: ((float *)data)[i] = (float)value; break;
        case FLASHC_DTYPE_FLOAT16: ((uint16_t *)data)[i] = flashc_tool_float_to_half((float)value); break;
        case FLASHC_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = flashc_tool_float_to_bf16((float)value); break;
        case FLASHC_DTYPE_FLOAT64: ((double *)data)[i] = value; break;
        case FLASHC_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)value; break;
    }
}

flashc_tool_rng flashc_tool_rng_seeded(uint64_t seed) {
    flashc_tool_rng r;
    r.state = seed ^ 0x9E3779B97F4A7C15ull;
    return r;
}

uint64_t flashc_tool_rng_next(flashc_tool_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double flashc_tool_rng_uniform(flashc_tool_rng *rng) {
    return (double)(flashc_tool_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double flashc_tool_rng_normal(flashc_tool_rng *rng) {
    double u1 = flashc_tool_rng_uniform(rng);
    double u2 = flashc_tool_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void flashc_tool_fill_normal(void *data, flashc_dtype dtype, int64_t n, double scale,
                             flashc_tool_rng *rng) {
    for (int64_t i = 0; i < n; ++i)
        flashc_tool_store(data, dtype, i, scale * flashc_tool_rng_normal(rng));
}

void flashc_tool_fill_nan(void *data, flashc_dtype dtype, int64_t n) {
    for (int64_t i = 0; i < n; ++i) flashc_tool_store(data, dtype, i, NAN);
}

int64_t flashc_tool_numel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; ++i) n *= t->shape[i];
    return n;
}

int flashc_tool_buffer_alloc(flashc_tool_buffer *buf, flashc_dtype dtype, int rank,
                             const int64_t *shape, size_t *allocated_bytes) {
    memset(buf, 0, sizeof *buf);
    size_t elems = 1;
    for (int i = 0; i < rank; ++i) {
        if (shape[i] < 0) return -1;
        if (shape[i] > 0 && elems > SIZE_MAX / 64 / (size_t)shape[i]) return -1;
        elems *= (size_t)shape[i];
    }
    size_t bytes = elems * flashc_dtype_size(dtype);
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (!p) return -1;
    buf->data = p;
    buf->bytes = bytes;
    flashc_device cpu = {FLASHC_DEVICE_CPU, 0};
    buf->desc = flashc_tensor_contiguous(p, dtype, cpu, rank, shape);
    if (allocated_bytes) *allocated_bytes += bytes;
    return 0;
}

void flashc_tool_buffer_free(flashc_tool_buffer *buf) {
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}

const char *flashc_tool_dtype_name(flashc_dtype dtype) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return "fp32";
        case FLASHC_DTYPE_FLOAT16: return "fp16";
        case FLASHC_DTYPE_BFLOAT16: return "bf16";
        case FLASHC_DTYPE_FLOAT64: return "fp64";
        case FLASHC_DTYPE_INT32: return "int32";
    }
    return "?";
}

int flashc_tool_parse_dtype(const char *name, flashc_dtype *dtype) {
    static const struct {
        const char *name;
        flashc_dtype dtype;
    } names[] = {
        {"fp32", FLASHC_DTYPE_FLOAT32},     {"float32", FLASHC_DTYPE_FLOAT32},
        {"fp16", FLASHC_DTYPE_FLOAT16},     {"float16", FLASHC_DTYPE_FLOAT16},
        {"bf16", FLASHC_DTYPE_BFLOAT16},    {"bfloat16", FLASHC_DTYPE_BFLOAT16},
        {"fp64", FLASHC_DTYPE_FLOAT64},     {"float64", FLASHC_DTYPE_FLOAT64},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        if (strcmp(name, names[i].name) == 0) {
            *dtype = names[i].dtype;
            return 0;
        }
    }
    return -1;
}
