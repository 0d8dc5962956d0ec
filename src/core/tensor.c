/* Small public helpers on descriptors and options. */
#include <string.h>

#include "flashc.h"

size_t flashc_dtype_size(flashc_dtype dtype) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return 4;
        case FLASHC_DTYPE_FLOAT16: return 2;
        case FLASHC_DTYPE_BFLOAT16: return 2;
        case FLASHC_DTYPE_FLOAT64: return 8;
        case FLASHC_DTYPE_INT32: return 4;
    }
    return 0;
}

const char *flashc_dtype_name(flashc_dtype dtype) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT32: return "float32";
        case FLASHC_DTYPE_FLOAT16: return "float16";
        case FLASHC_DTYPE_BFLOAT16: return "bfloat16";
        case FLASHC_DTYPE_FLOAT64: return "float64";
        case FLASHC_DTYPE_INT32: return "int32";
    }
    return "unknown";
}

flashc_tensor flashc_tensor_contiguous(void *data, flashc_dtype dtype, flashc_device device,
                                       int rank, const int64_t *shape) {
    flashc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    if (rank < 1 || rank > FLASHC_MAX_RANK || !shape) return t; /* rank 0: rejected later */
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        /* A layout whose strides overflow cannot be described: rank 0. */
        if (__builtin_mul_overflow(stride, shape[i] > 0 ? shape[i] : 1, &stride)) return t;
    }
    t.rank = rank;
    return t;
}

flashc_attention_options flashc_attention_options_default(void) {
    flashc_attention_options o;
    memset(&o, 0, sizeof o);
    o.softmax_scale = 0.0;
    o.window_left = -1;
    o.window_right = -1;
    return o;
}
