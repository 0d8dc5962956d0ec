#include "tensor_checks.h"

#include <stdio.h>

#include "error.h"

/* Extents and strides beyond this are rejected: it keeps every offset
 * product below 2^62 bytes, so no index arithmetic in a backend overflows. */
#define FLASHC_MAX_EXTENT (INT64_C(1) << 40)

const char *flashc_format_shape(const int64_t *shape, int rank, char *buf, size_t len) {
    size_t used = 0;
    used += (size_t)snprintf(buf + used, len - used, "(");
    for (int i = 0; i < rank && used < len; ++i)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                                 (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, ")");
    return buf;
}

static int known_dtype(flashc_dtype d) { return flashc_dtype_size(d) != 0; }

static int known_device(flashc_device_type t) {
    return t == FLASHC_DEVICE_CPU || t == FLASHC_DEVICE_CUDA;
}

int64_t flashc_tensor_numel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; ++i) n *= t->shape[i];
    return n;
}

flashc_status flashc_check_tensor(const flashc_tensor *t, const char *name, int expected_rank) {
    if (!t) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: tensor descriptor is NULL", name);
    if (!known_dtype(t->dtype))
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: unknown dtype %d", name, (int)t->dtype);
    if (!known_device(t->device.type))
        return flashc_fail(FLASHC_ERROR_DEVICE, "%s: unknown device type %d", name,
                           (int)t->device.type);
    if (t->device.index < 0)
        return flashc_fail(FLASHC_ERROR_DEVICE, "%s: negative device index %d", name,
                           t->device.index);
    if (t->rank != expected_rank)
        return flashc_fail(FLASHC_ERROR_RANK, "%s: expected rank %d, got %d", name,
                           expected_rank, t->rank);
    int64_t numel = 1;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] < 0 || t->shape[i] > FLASHC_MAX_EXTENT)
            return flashc_fail(FLASHC_ERROR_SHAPE, "%s: extent %lld of dim %d is out of range",
                               name, (long long)t->shape[i], i);
        if (t->stride[i] < 0)
            return flashc_fail(FLASHC_ERROR_STRIDE, "%s: negative stride %lld in dim %d", name,
                               (long long)t->stride[i], i);
        if (t->stride[i] > FLASHC_MAX_EXTENT)
            return flashc_fail(FLASHC_ERROR_STRIDE, "%s: stride %lld in dim %d is out of range",
                               name, (long long)t->stride[i], i);
        if (numel && __builtin_mul_overflow(numel, t->shape[i], &numel))
            return flashc_fail(FLASHC_ERROR_SHAPE, "%s: element count overflows", name);
    }
    int64_t last = 0; /* offset of the last element, in elements */
    for (int i = 0; i < t->rank; ++i) {
        int64_t term;
        if (t->shape[i] == 0) break;
        if (__builtin_mul_overflow(t->stride[i], t->shape[i] - 1, &term) ||
            __builtin_add_overflow(last, term, &last) || last > FLASHC_MAX_EXTENT * 16)
            return flashc_fail(FLASHC_ERROR_SHAPE, "%s: addressed range overflows", name);
    }
    if (numel > 0 && !t->data)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: data is NULL", name);
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_shape(const flashc_tensor *t, const char *name,
                                 const int64_t *expected) {
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] != expected[i]) {
            char got[96], want[96];
            return flashc_fail(FLASHC_ERROR_SHAPE, "%s: expected shape %s, got %s", name,
                               flashc_format_shape(expected, t->rank, want, sizeof want),
                               flashc_format_shape(t->shape, t->rank, got, sizeof got));
        }
    }
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_last_dim_contiguous(const flashc_tensor *t, const char *name) {
    int last = t->rank - 1;
    if (t->shape[last] > 1 && t->stride[last] != 1)
        return flashc_fail(FLASHC_ERROR_STRIDE,
                           "%s: the last (head) dimension must be contiguous (stride 1), got "
                           "stride %lld",
                           name, (long long)t->stride[last]);
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_dense_1d(const flashc_tensor *t, const char *name) {
    if (t->shape[0] > 1 && t->stride[0] != 1)
        return flashc_fail(FLASHC_ERROR_STRIDE, "%s: must be contiguous (stride 1), got %lld",
                           name, (long long)t->stride[0]);
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_no_self_overlap(const flashc_tensor *t, const char *name) {
    /* Sort the dims of extent > 1 by stride; each stride must step over the
     * whole block spanned by the smaller ones. */
    int idx[FLASHC_MAX_RANK], n = 0;
    for (int i = 0; i < t->rank; ++i) {
        if (t->shape[i] == 0) return FLASHC_SUCCESS; /* no elements */
        if (t->shape[i] > 1) idx[n++] = i;
    }
    for (int a = 1; a < n; ++a)
        for (int b = a; b > 0 && t->stride[idx[b]] < t->stride[idx[b - 1]]; --b) {
            int tmp = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = tmp;
        }
    int64_t covered = 0; /* largest offset reachable by the smaller dims */
    for (int a = 0; a < n; ++a) {
        int i = idx[a];
        if (t->stride[i] <= covered)
            return flashc_fail(FLASHC_ERROR_STRIDE,
                               "%s: output strides overlap (dim %d, stride %lld): distinct "
                               "elements would share memory",
                               name, i, (long long)t->stride[i]);
        covered += t->stride[i] * (t->shape[i] - 1);
    }
    return FLASHC_SUCCESS;
}

flashc_span flashc_tensor_span(const flashc_tensor *t) {
    flashc_span s = {(uintptr_t)t->data, (uintptr_t)t->data};
    if (flashc_tensor_numel(t) == 0) return s;
    int64_t last = 0;
    for (int i = 0; i < t->rank; ++i) last += t->stride[i] * (t->shape[i] - 1);
    s.end = s.begin + (uintptr_t)((last + 1) * (int64_t)flashc_dtype_size(t->dtype));
    return s;
}
