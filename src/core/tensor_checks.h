/* Checks on one tensor descriptor, each returning a status and naming the
 * tensor in the message. Used by validate.c. */
#ifndef FLASHC_CORE_TENSOR_CHECKS_H
#define FLASHC_CORE_TENSOR_CHECKS_H

#include <stdint.h>

#include "flashc.h"

/* The byte range [begin, end) a tensor's elements touch (empty: begin == end). */
typedef struct flashc_span {
    uintptr_t begin, end;
} flashc_span;

/* rank == expected_rank, every extent >= 0, every stride >= 0, the
 * addressed range does not overflow, data non-NULL unless there are no
 * elements, a known dtype and device type. */
flashc_status flashc_check_tensor(const flashc_tensor *t, const char *name, int expected_rank);

/* The shape equals `expected` (rank already checked). */
flashc_status flashc_check_shape(const flashc_tensor *t, const char *name,
                                 const int64_t *expected);

/* The last dimension is contiguous (stride 1 unless its extent is 1). */
flashc_status flashc_check_last_dim_contiguous(const flashc_tensor *t, const char *name);

/* Every stride is 1 (a 1-d index array read as a plain C array). */
flashc_status flashc_check_dense_1d(const flashc_tensor *t, const char *name);

/* No two elements of an output share memory. */
flashc_status flashc_check_no_self_overlap(const flashc_tensor *t, const char *name);

/* Byte range of the tensor (checked by flashc_check_tensor first). */
flashc_span flashc_tensor_span(const flashc_tensor *t);

/* Number of elements (checked tensor). */
int64_t flashc_tensor_numel(const flashc_tensor *t);

/* "(2, 128, 16, 64)" into buf. */
const char *flashc_format_shape(const int64_t *shape, int rank, char *buf, size_t len);

#endif
