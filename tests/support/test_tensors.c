/* Tensors over poisoned allocations, views, element loops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

const char *test_layout_name(test_layout layout) {
    switch (layout) {
        case TEST_LAYOUT_CONTIGUOUS: return "contiguous";
        case TEST_LAYOUT_PADDED: return "padded";
        case TEST_LAYOUT_HEAD_MAJOR: return "head-major";
        case TEST_LAYOUT_SEQ_MAJOR: return "seq-major";
        case TEST_LAYOUT_PACKED: return "packed";
    }
    return "?";
}

void test_alloc_init(test_alloc *a, size_t size) {
    if (size < 64) size = 64; /* never a zero-byte allocation */
    a->bytes = malloc(size);
    a->size = a->bytes ? size : 0;
    test_alloc_poison(a);
}

void test_alloc_free(test_alloc *a) {
    free(a->bytes);
    a->bytes = NULL;
    a->size = 0;
}

void test_alloc_poison(test_alloc *a) {
    if (a->bytes) memset(a->bytes, 0xFF, a->size);
}

flashc_tensor test_view(test_alloc *a, flashc_dtype dtype, int rank, const int64_t *shape,
                        const int64_t *alloc_shape, const int *perm, const int64_t *origin) {
    flashc_tensor t;
    memset(&t, 0, sizeof t);
    int64_t phys_stride[FLASHC_MAX_RANK];
    int64_t s = 1;
    for (int i = rank - 1; i >= 0; --i) {
        phys_stride[i] = s;
        s *= alloc_shape[i] > 0 ? alloc_shape[i] : 1;
    }
    int64_t start = 0;
    for (int i = 0; i < rank; ++i) start += origin[i] * phys_stride[i];
    t.data = a->bytes + (size_t)start * flashc_dtype_size(dtype);
    t.dtype = dtype;
    t.device.type = FLASHC_DEVICE_CPU;
    t.device.index = 0;
    t.rank = rank;
    for (int i = 0; i < rank; ++i) {
        t.shape[i] = shape[i];
        t.stride[i] = phys_stride[perm[i]];
    }
    return t;
}

flashc_tensor test_tensor_new(test_alloc *a, flashc_dtype dtype, int rank, const int64_t *shape,
                              test_layout layout, int seq_tensor) {
    int64_t alloc_shape[FLASHC_MAX_RANK], origin[FLASHC_MAX_RANK] = {0, 0, 0, 0};
    int perm[FLASHC_MAX_RANK] = {0, 1, 2, 3};
    if (!seq_tensor && (layout == TEST_LAYOUT_HEAD_MAJOR || layout == TEST_LAYOUT_SEQ_MAJOR))
        layout = TEST_LAYOUT_PADDED;
    if (layout == TEST_LAYOUT_SEQ_MAJOR && rank != 4) layout = TEST_LAYOUT_PADDED;
    if (layout == TEST_LAYOUT_PACKED) layout = TEST_LAYOUT_PADDED;
    for (int i = 0; i < rank; ++i) alloc_shape[i] = shape[i];
    if (layout == TEST_LAYOUT_PADDED) {
        for (int i = 0; i < rank; ++i) {
            alloc_shape[i] = shape[i] + (i == rank - 1 ? 3 : 1 + (i & 1));
            origin[i] = 1;
        }
    } else if (layout == TEST_LAYOUT_HEAD_MAJOR) {
        /* logical (b, s, h, d) over memory (b, h, s, d); (t, h, d) over (h, t, d) */
        if (rank == 4) {
            int64_t phys[4] = {shape[0], shape[2], shape[1], shape[3]};
            int p[4] = {0, 2, 1, 3};
            memcpy(alloc_shape, phys, sizeof phys);
            memcpy(perm, p, sizeof p);
        } else if (rank == 3) {
            int64_t phys[3] = {shape[1], shape[0], shape[2]};
            int p[3] = {1, 0, 2};
            memcpy(alloc_shape, phys, sizeof phys);
            memcpy(perm, p, sizeof p);
        }
    } else if (layout == TEST_LAYOUT_SEQ_MAJOR) {
        int64_t phys[4] = {shape[1], shape[0], shape[2], shape[3]};
        int p[4] = {1, 0, 2, 3};
        memcpy(alloc_shape, phys, sizeof phys);
        memcpy(perm, p, sizeof p);
    }
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= alloc_shape[i] > 0 ? alloc_shape[i] : 1;
    test_alloc_init(a, (size_t)n * flashc_dtype_size(dtype));
    return test_view(a, dtype, rank, shape, alloc_shape, perm, origin);
}

int64_t test_numel(const flashc_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; ++i) n *= t->shape[i];
    return n;
}

void test_for_each(const flashc_tensor *t, void (*fn)(const int64_t *index, void *ctx),
                   void *ctx) {
    int64_t index[FLASHC_MAX_RANK] = {0, 0, 0, 0};
    if (test_numel(t) <= 0) return;
    for (;;) {
        fn(index, ctx);
        int r = t->rank - 1;
        while (r >= 0 && ++index[r] == t->shape[r]) index[r--] = 0;
        if (r < 0) return;
    }
}

typedef struct fill_ctx {
    flashc_tensor *t;
    test_rng *rng;
    double scale;
} fill_ctx;

static void fill_one(const int64_t *index, void *ctx) {
    fill_ctx *f = ctx;
    flashc_ref_store(f->t, index, f->scale * test_rng_normal(f->rng));
}

void test_fill_normal(flashc_tensor *t, test_rng *rng, double scale) {
    fill_ctx f = {t, rng, scale};
    test_for_each(t, fill_one, &f);
}

typedef struct mark_ctx {
    const flashc_tensor *t;
    const test_alloc *a;
    unsigned char *mask;
} mark_ctx;

static void mark_one(const int64_t *index, void *ctx) {
    mark_ctx *m = ctx;
    size_t esize = flashc_dtype_size(m->t->dtype);
    unsigned char *p = (unsigned char *)m->t->data + (size_t)flashc_ref_offset(m->t, index) * esize;
    if (p >= m->a->bytes && p + esize <= m->a->bytes + m->a->size)
        memset(m->mask + (p - m->a->bytes), 1, esize);
}

int64_t test_untouched_violations(const test_alloc *a, const flashc_tensor *const *views,
                                  int count) {
    if (!a->bytes) return 0;
    unsigned char *mask = calloc(a->size, 1);
    if (!mask) return -1;
    for (int v = 0; v < count; ++v) {
        mark_ctx m = {views[v], a, mask};
        test_for_each(views[v], mark_one, &m);
    }
    int64_t bad = 0;
    for (size_t i = 0; i < a->size; ++i)
        if (!mask[i] && a->bytes[i] != 0xFF) ++bad;
    free(mask);
    return bad;
}

typedef struct nan_ctx {
    const flashc_tensor *t;
    int64_t count;
} nan_ctx;

static void nan_one(const int64_t *index, void *ctx) {
    nan_ctx *n = ctx;
    if (isnan(flashc_ref_load(n->t, index))) ++n->count;
}

int64_t test_count_nan(const flashc_tensor *t) {
    nan_ctx n = {t, 0};
    test_for_each(t, nan_one, &n);
    return n.count;
}
