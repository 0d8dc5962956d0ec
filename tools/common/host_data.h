/* Host-side data helpers shared by the flashc CLI and the benchmark:
 * element conversion for every flashc dtype, seeded random fills, and
 * contiguous host buffers with their descriptors. */
#ifndef FLASHC_TOOLS_HOST_DATA_H
#define FLASHC_TOOLS_HOST_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "flashc.h"

/* IEEE binary16 and bfloat16, round to nearest even. */
uint16_t flashc_tool_float_to_half(float x);
float flashc_tool_half_to_float(uint16_t h);
uint16_t flashc_tool_float_to_bf16(float x);
float flashc_tool_bf16_to_float(uint16_t b);

/* Element i of a buffer of `dtype`, as double / stored from double (the
 * value is rounded to the dtype). */
double flashc_tool_load(const void *data, flashc_dtype dtype, int64_t i);
void flashc_tool_store(void *data, flashc_dtype dtype, int64_t i, double value);

/* A small seeded generator (splitmix64): reproducible inputs. */
typedef struct flashc_tool_rng {
    uint64_t state;
} flashc_tool_rng;

flashc_tool_rng flashc_tool_rng_seeded(uint64_t seed);
uint64_t flashc_tool_rng_next(flashc_tool_rng *rng);
/* Uniform in [0, 1). */
double flashc_tool_rng_uniform(flashc_tool_rng *rng);
/* Standard normal (Box-Muller). */
double flashc_tool_rng_normal(flashc_tool_rng *rng);

/* Fill n elements with standard-normal values times `scale`, rounded to
 * the dtype. */
void flashc_tool_fill_normal(void *data, flashc_dtype dtype, int64_t n, double scale,
                             flashc_tool_rng *rng);
/* Fill n elements with a quiet NaN (poison before a call). */
void flashc_tool_fill_nan(void *data, flashc_dtype dtype, int64_t n);

/* A contiguous host tensor: its storage and its descriptor. */
typedef struct flashc_tool_buffer {
    void *data;
    size_t bytes;
    flashc_tensor desc;
} flashc_tool_buffer;

/* Allocate (64-byte aligned) a contiguous tensor of `rank` dims. Returns 0
 * on success, -1 when out of memory or the size overflows. Adds the bytes
 * to *allocated_bytes when that is not NULL. */
int flashc_tool_buffer_alloc(flashc_tool_buffer *buf, flashc_dtype dtype, int rank,
                             const int64_t *shape, size_t *allocated_bytes);
void flashc_tool_buffer_free(flashc_tool_buffer *buf);
int64_t flashc_tool_numel(const flashc_tensor *t);

/* Short dtype names used on command lines: fp32 fp16 bf16 fp64 int32.
 * flashc_tool_parse_dtype returns -1 for an unknown name. */
const char *flashc_tool_dtype_name(flashc_dtype dtype);
int flashc_tool_parse_dtype(const char *name, flashc_dtype *dtype);

#endif
