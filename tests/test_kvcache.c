/* Attention over a KV cache (flashc_attention_kvcache) and the paged
 * varlen forward, on the CPU, against the reference: the test appends the
 * new rows and applies rotary itself (in double, rounded like the library
 * rounds), gathers every sequence's keys into plain varlen tensors and
 * runs flashc_ref_forward on them. The cache is NaN-poisoned outside the
 * rows a sequence owns, and unused paged blocks too: after the call every
 * cache element outside the appended rows must be bit-identical to before
 * (so nothing was written there) and the output finite (so no poisoned
 * row was read). Error cases check the status and that nothing changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashc_reference.h"
#include "test_support.h"

#define KV_MAX_BATCH 6

typedef struct kv_case {
    const char *name;
    flashc_dtype dtype;
    int64_t batch, sq, h, hk, d, dv;
    int64_t capacity;     /* cache indices per sequence */
    int64_t block_size;   /* 0: contiguous cache */
    int64_t cache_batch;  /* contiguous: batches of the cache (>= batch without batch_idx) */
    int64_t s_new;        /* rows appended (0: no k_new / v_new) */
    int with_seqlens, with_leftpad, with_batch_idx;
    int32_t seqlens[KV_MAX_BATCH], leftpad[KV_MAX_BATCH], batch_idx[KV_MAX_BATCH];
    int64_t rotary_dim;
    int interleaved;
    int alibi;
    flashc_attention_options options;
} kv_case;

/* One tensor of the call: its descriptor over a malloc'd buffer. */
typedef struct buffer {
    flashc_tensor t;
    size_t bytes;
} buffer;

static buffer buffer_new(flashc_dtype dtype, int rank, const int64_t *shape) {
    buffer b;
    int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    b.bytes = (size_t)(n > 0 ? n : 1) * flashc_dtype_size(dtype);
    flashc_device cpu = {FLASHC_DEVICE_CPU, 0};
    b.t = flashc_tensor_contiguous(malloc(b.bytes), dtype, cpu, rank, shape);
    memset(b.t.data, 0xFF, b.bytes);
    return b;
}

static void buffer_free(buffer *b) { free(b->t.data); }

static double at4(const flashc_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t i[4] = {a, b, c, d};
    return flashc_ref_load(t, i);
}

static void set4(flashc_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d, double v) {
    int64_t i[4] = {a, b, c, d};
    flashc_ref_store(t, i, v);
}

typedef struct kv_run {
    const kv_case *c;
    int64_t num_blocks, blocks_per_seq;
    buffer q, k_cache, v_cache, k_new, v_new, cos, sin, out, lse, alibi;
    buffer seqlens, leftpad, batch_idx, block_table;
    unsigned char *k_before, *v_before;
} kv_run;

static int64_t run_seqlen(const kv_run *r, int64_t b) {
    return r->c->with_seqlens ? r->c->seqlens[b] : r->c->capacity;
}
static int64_t run_leftpad(const kv_run *r, int64_t b) {
    return r->c->with_leftpad ? r->c->leftpad[b] : 0;
}

/* (block or cache batch, row) of cache index c of sequence b. */
static void cache_row(const kv_run *r, int64_t b, int64_t c, int64_t *outer, int64_t *row) {
    if (r->c->block_size) {
        int64_t idx[2] = {b, c / r->c->block_size};
        *outer = (int64_t)flashc_ref_load(&r->block_table.t, idx);
        *row = c % r->c->block_size;
    } else {
        *outer = r->c->with_batch_idx ? r->c->batch_idx[b] : b;
        *row = c;
    }
}

static void rotate(const kv_run *r, const double *x, double *y, int64_t n, int64_t pos) {
    const kv_case *c = r->c;
    for (int64_t i = 0; i < n; ++i) y[i] = x[i];
    int64_t half = c->rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        int64_t idx[2] = {pos, i};
        double cs = flashc_ref_load(&r->cos.t, idx), sn = flashc_ref_load(&r->sin.t, idx);
        int64_t a = c->interleaved ? 2 * i : i, bb = c->interleaved ? 2 * i + 1 : i + half;
        y[a] = flashc_ref_round(c->dtype, x[a] * cs - x[bb] * sn);
        y[bb] = flashc_ref_round(c->dtype, x[bb] * cs + x[a] * sn);
    }
}

static void run_init(kv_run *r, const kv_case *c, uint64_t seed) {
    memset(r, 0, sizeof *r);
    r->c = c;
    test_rng rng;
    test_rng_init(&rng, seed);
    int64_t q_shape[4] = {c->batch, c->sq, c->h, c->d};
    r->q = buffer_new(c->dtype, 4, q_shape);
    test_fill_normal(&r->q.t, &rng, 1.0);
    int64_t outer, rows;
    if (c->block_size) {
        r->blocks_per_seq = c->capacity / c->block_size;
        r->num_blocks = c->batch * r->blocks_per_seq + 3; /* three never used */
        outer = r->num_blocks;
        rows = c->block_size;
        int64_t bt_shape[2] = {c->batch, r->blocks_per_seq};
        r->block_table = buffer_new(FLASHC_DTYPE_INT32, 2, bt_shape);
        /* A shuffled assignment of blocks; entries past a sequence's keys
         * point nowhere (-1) to show they are never read. */
        int64_t total = c->batch * r->blocks_per_seq;
        int64_t *perm = malloc(sizeof(int64_t) * (size_t)r->num_blocks);
        for (int64_t i = 0; i < r->num_blocks; ++i) perm[i] = i;
        for (int64_t i = r->num_blocks - 1; i > 0; --i) {
            int64_t j = test_rng_int(&rng, 0, i), t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
        for (int64_t i = 0; i < total; ++i) {
            int64_t b = i / r->blocks_per_seq, blk = i % r->blocks_per_seq;
            int64_t end = run_seqlen(r, b) + c->s_new;
            int64_t idx[2] = {b, blk};
            flashc_ref_store(&r->block_table.t, idx, blk * c->block_size < end ? (double)perm[i] : -1.0);
        }
        free(perm);
    } else {
        outer = c->cache_batch;
        rows = c->capacity;
    }
    int64_t k_shape[4] = {outer, rows, c->hk, c->d}, v_shape[4] = {outer, rows, c->hk, c->dv};
    r->k_cache = buffer_new(c->dtype, 4, k_shape);
    r->v_cache = buffer_new(c->dtype, 4, v_shape);
    /* NaN everywhere, then values in the rows sequences own. */
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t hh = 0; hh < c->hk; ++hh) {
                for (int64_t x = 0; x < c->d; ++x) set4(&r->k_cache.t, o, i, hh, x, NAN);
                for (int64_t x = 0; x < c->dv; ++x) set4(&r->v_cache.t, o, i, hh, x, NAN);
            }
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t ci = run_leftpad(r, b); ci < run_seqlen(r, b); ++ci) {
            int64_t o, row;
            cache_row(r, b, ci, &o, &row);
            for (int64_t hh = 0; hh < c->hk; ++hh) {
                for (int64_t x = 0; x < c->d; ++x) set4(&r->k_cache.t, o, row, hh, x, test_rng_normal(&rng));
                for (int64_t x = 0; x < c->dv; ++x) set4(&r->v_cache.t, o, row, hh, x, test_rng_normal(&rng));
            }
        }
    if (c->s_new) {
        int64_t kn[4] = {c->batch, c->s_new, c->hk, c->d}, vn[4] = {c->batch, c->s_new, c->hk, c->dv};
        r->k_new = buffer_new(c->dtype, 4, kn);
        r->v_new = buffer_new(c->dtype, 4, vn);
        test_fill_normal(&r->k_new.t, &rng, 1.0);
        test_fill_normal(&r->v_new.t, &rng, 1.0);
    }
    if (c->rotary_dim) {
        int64_t ro = c->capacity + c->sq, shape[2] = {ro, c->rotary_dim / 2};
        r->cos = buffer_new(c->dtype, 2, shape);
        r->sin = buffer_new(c->dtype, 2, shape);
        for (int64_t pos = 0; pos < ro; ++pos)
            for (int64_t i = 0; i < c->rotary_dim / 2; ++i) {
                double theta = (double)pos * pow(10000.0, -2.0 * (double)i / (double)c->rotary_dim);
                int64_t idx[2] = {pos, i};
                flashc_ref_store(&r->cos.t, idx, cos(theta));
                flashc_ref_store(&r->sin.t, idx, sin(theta));
            }
    }
    int64_t bshape[1] = {c->batch};
    r->seqlens = buffer_new(FLASHC_DTYPE_INT32, 1, bshape);
    r->leftpad = buffer_new(FLASHC_DTYPE_INT32, 1, bshape);
    r->batch_idx = buffer_new(FLASHC_DTYPE_INT32, 1, bshape);
    for (int64_t b = 0; b < c->batch; ++b) {
        ((int32_t *)r->seqlens.t.data)[b] = c->seqlens[b];
        ((int32_t *)r->leftpad.t.data)[b] = c->leftpad[b];
        ((int32_t *)r->batch_idx.t.data)[b] = c->batch_idx[b];
    }
    int64_t o_shape[4] = {c->batch, c->sq, c->h, c->dv}, l_shape[3] = {c->batch, c->h, c->sq};
    r->out = buffer_new(c->dtype, 4, o_shape);
    r->lse = buffer_new(c->dtype == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32, 3,
                        l_shape);
    int64_t a_shape[1] = {c->h};
    r->alibi = buffer_new(FLASHC_DTYPE_FLOAT32, 1, a_shape);
    for (int64_t hh = 0; hh < c->h; ++hh) ((float *)r->alibi.t.data)[hh] = 0.3f / (float)(hh + 1);
    r->k_before = malloc(r->k_cache.bytes);
    r->v_before = malloc(r->v_cache.bytes);
    memcpy(r->k_before, r->k_cache.t.data, r->k_cache.bytes);
    memcpy(r->v_before, r->v_cache.t.data, r->v_cache.bytes);
}

static void run_free(kv_run *r) {
    buffer *all[] = {&r->q, &r->k_cache, &r->v_cache, &r->k_new, &r->v_new, &r->cos, &r->sin,
                     &r->out, &r->lse, &r->alibi, &r->seqlens, &r->leftpad, &r->batch_idx,
                     &r->block_table};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]->t.data) buffer_free(all[i]);
    free(r->k_before);
    free(r->v_before);
}

static flashc_kvcache_args run_args(kv_run *r) {
    const kv_case *c = r->c;
    flashc_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = &r->q.t;
    a.k_cache = &r->k_cache.t;
    a.v_cache = &r->v_cache.t;
    if (c->s_new) {
        a.k_new = &r->k_new.t;
        a.v_new = &r->v_new.t;
    }
    if (c->with_seqlens) a.cache_seqlens = &r->seqlens.t;
    if (c->with_leftpad) a.cache_leftpad = &r->leftpad.t;
    if (c->with_batch_idx) a.cache_batch_idx = &r->batch_idx.t;
    if (c->block_size) a.block_table = &r->block_table.t;
    if (c->rotary_dim) {
        a.rotary_cos = &r->cos.t;
        a.rotary_sin = &r->sin.t;
        a.rotary_interleaved = c->interleaved;
    }
    a.out = &r->out.t;
    a.lse = &r->lse.t;
    a.options = c->options;
    if (c->alibi) a.options.alibi_slopes = &r->alibi.t;
    return a;
}

static int cache_unchanged(const kv_run *r) {
    return memcmp(r->k_before, r->k_cache.t.data, r->k_cache.bytes) == 0 &&
           memcmp(r->v_before, r->v_cache.t.data, r->v_cache.bytes) == 0;
}

static double tolerance(flashc_dtype dtype) {
    switch (dtype) {
        case FLASHC_DTYPE_FLOAT64: return 1e-10;
        case FLASHC_DTYPE_FLOAT32: return 2e-5;
        case FLASHC_DTYPE_FLOAT16: return 4e-3;
        default: return 3e-2;
    }
}

/* The appended rows as the test computes them: (b, r, head, x). */
static double expected_new(const kv_run *r, int is_v, int64_t b, int64_t row, int64_t hh, int64_t x) {
    const kv_case *c = r->c;
    int64_t n = is_v ? c->dv : c->d;
    double src[FLASHC_MAX_HEAD_DIM], dst[FLASHC_MAX_HEAD_DIM];
    for (int64_t i = 0; i < n; ++i) src[i] = at4(is_v ? &r->v_new.t : &r->k_new.t, b, row, hh, i);
    if (is_v || !c->rotary_dim) return src[x];
    rotate(r, src, dst, n, c->seqlens[b] + row);
    return dst[x];
}

/* Checks one call of a case: the cache afterwards, then out and LSE
 * against the reference over the gathered keys. Returns failures. */
static int check_case(const kv_case *c, uint64_t seed) {
    kv_run r;
    run_init(&r, c, seed);
    flashc_kvcache_args a = run_args(&r);
    int failures = 0;
    flashc_status st = flashc_attention_kvcache(&a);
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL %s: status %d: %s\n", c->name, (int)st, flashc_last_error_message());
        run_free(&r);
        return 1;
    }
    double tol = tolerance(c->dtype);

    /* The cache: appended rows hold the new values, everything else is
     * bit-identical to before (poison included). */
    size_t ke = flashc_dtype_size(c->dtype);
    unsigned char *k_expect = malloc(r.k_cache.bytes), *v_expect = malloc(r.v_cache.bytes);
    memcpy(k_expect, r.k_before, r.k_cache.bytes);
    memcpy(v_expect, r.v_before, r.v_cache.bytes);
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t row = 0; row < c->s_new; ++row) {
            int64_t o, cr;
            cache_row(&r, b, c->seqlens[b] + row, &o, &cr);
            for (int64_t hh = 0; hh < c->hk; ++hh)
                for (int is_v = 0; is_v < 2; ++is_v) {
                    flashc_tensor *t = is_v ? &r.v_cache.t : &r.k_cache.t;
                    int64_t n = is_v ? c->dv : c->d;
                    for (int64_t x = 0; x < n; ++x) {
                        int64_t idx[4] = {o, cr, hh, x};
                        double want = expected_new(&r, is_v, b, row, hh, x);
                        double got = flashc_ref_load(t, idx);
                        if (!(fabs(got - want) <= 1e-12 + ldexp(fabs(want), c->dtype == FLASHC_DTYPE_FLOAT64 ? -50 : -7))) {
                            if (failures++ < 3)
                                fprintf(stderr, "FAIL %s: %s_cache (%lld, %lld, %lld, %lld) = %g, want %g\n",
                                        c->name, is_v ? "v" : "k", (long long)o, (long long)cr,
                                        (long long)hh, (long long)x, got, want);
                        }
                        /* Take the library's bytes for the comparison below. */
                        memcpy((is_v ? v_expect : k_expect) + flashc_ref_offset(t, idx) * ke,
                               (unsigned char *)t->data + flashc_ref_offset(t, idx) * ke, ke);
                    }
                }
        }
    if (memcmp(k_expect, r.k_cache.t.data, r.k_cache.bytes) ||
        memcmp(v_expect, r.v_cache.t.data, r.v_cache.bytes)) {
        fprintf(stderr, "FAIL %s: the cache changed outside the appended rows\n", c->name);
        ++failures;
    }
    free(k_expect);
    free(v_expect);

    /* The keys each sequence sees, gathered into plain varlen tensors
     * (float64), and q rotated as the library must have. */
    int64_t total_k = 0, ks[KV_MAX_BATCH];
    for (int64_t b = 0; b < c->batch; ++b) {
        ks[b] = run_seqlen(&r, b) + c->s_new - run_leftpad(&r, b);
        total_k += ks[b];
    }
    int64_t qs[3] = {c->batch * c->sq, c->h, c->d}, kshape[3] = {total_k, c->hk, c->d},
            vshape[3] = {total_k, c->hk, c->dv}, cu_shape[1] = {c->batch + 1};
    buffer Q = buffer_new(FLASHC_DTYPE_FLOAT64, 3, qs), K = buffer_new(FLASHC_DTYPE_FLOAT64, 3, kshape),
           V = buffer_new(FLASHC_DTYPE_FLOAT64, 3, vshape), cq = buffer_new(FLASHC_DTYPE_INT32, 1, cu_shape),
           ck = buffer_new(FLASHC_DTYPE_INT32, 1, cu_shape);
    int64_t k0 = 0;
    ((int32_t *)cq.t.data)[0] = ((int32_t *)ck.t.data)[0] = 0;
    int local = (c->options.window_left >= 0 && c->options.window_left < c->capacity) ||
                (c->options.window_right >= 0 && c->options.window_right < c->capacity);
    for (int64_t b = 0; b < c->batch; ++b) {
        for (int64_t i = 0; i < c->sq; ++i)
            for (int64_t hh = 0; hh < c->h; ++hh) {
                double src[FLASHC_MAX_HEAD_DIM], dst[FLASHC_MAX_HEAD_DIM];
                for (int64_t x = 0; x < c->d; ++x) src[x] = at4(&r.q.t, b, i, hh, x);
                if (c->rotary_dim)
                    rotate(&r, src, dst, c->d, c->seqlens[b] + (c->options.causal || local ? i : 0));
                else
                    memcpy(dst, src, sizeof(double) * (size_t)c->d);
                for (int64_t x = 0; x < c->d; ++x) {
                    int64_t idx[3] = {b * c->sq + i, hh, x};
                    flashc_ref_store(&Q.t, idx, dst[x]);
                }
            }
        for (int64_t j = 0; j < ks[b]; ++j) {
            int64_t ci = run_leftpad(&r, b) + j, o, cr;
            cache_row(&r, b, ci, &o, &cr);
            for (int64_t hh = 0; hh < c->hk; ++hh) {
                for (int64_t x = 0; x < c->d; ++x) {
                    int64_t idx[3] = {k0 + j, hh, x};
                    flashc_ref_store(&K.t, idx, at4(&r.k_cache.t, o, cr, hh, x));
                }
                for (int64_t x = 0; x < c->dv; ++x) {
                    int64_t idx[3] = {k0 + j, hh, x};
                    flashc_ref_store(&V.t, idx, at4(&r.v_cache.t, o, cr, hh, x));
                }
            }
        }
        k0 += ks[b];
        ((int32_t *)cq.t.data)[b + 1] = (int32_t)((b + 1) * c->sq);
        ((int32_t *)ck.t.data)[b + 1] = (int32_t)k0;
    }
    flashc_forward_args ref;
    memset(&ref, 0, sizeof ref);
    ref.q = &Q.t;
    ref.k = &K.t;
    ref.v = &V.t;
    ref.varlen.cu_seqlens_q = &cq.t;
    ref.varlen.cu_seqlens_k = &ck.t;
    ref.varlen.max_seqlen_q = c->sq;
    ref.varlen.max_seqlen_k = c->capacity;
    ref.options = a.options;
    double *o_ref = malloc(sizeof(double) * (size_t)(c->sq * c->dv + 1));
    double *l_ref = malloc(sizeof(double) * (size_t)(c->sq + 1));
    double worst = 0;
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t hh = 0; hh < c->h; ++hh) {
            if (flashc_ref_forward(&ref, b, hh, o_ref, l_ref, NULL) != 0) {
                fprintf(stderr, "FAIL %s: the reference could not run\n", c->name);
                ++failures;
                continue;
            }
            for (int64_t i = 0; i < c->sq; ++i) {
                int64_t li[3] = {b, hh, i};
                double lse = flashc_ref_load(&r.lse.t, li);
                if (isinf(l_ref[i]) ? lse != l_ref[i] : !(fabs(lse - l_ref[i]) <= tol * 4)) {
                    if (failures++ < 3)
                        fprintf(stderr, "FAIL %s: lse (%lld, %lld, %lld) = %g, reference %g\n", c->name,
                                (long long)b, (long long)hh, (long long)i, lse, l_ref[i]);
                }
                for (int64_t x = 0; x < c->dv; ++x) {
                    double got = at4(&r.out.t, b, i, hh, x), want = o_ref[i * c->dv + x];
                    double err = fabs(got - want);
                    if (!(err <= tol)) {
                        if (failures++ < 3)
                            fprintf(stderr, "FAIL %s: out (%lld, %lld, %lld, %lld) = %g, reference %g\n",
                                    c->name, (long long)b, (long long)i, (long long)hh, (long long)x,
                                    got, want);
                    } else if (err > worst) {
                        worst = err;
                    }
                }
            }
        }
    if (test_verbose()) fprintf(stderr, "%s: max out error %.3g\n", c->name, worst);
    free(o_ref);
    free(l_ref);
    buffer_free(&Q);
    buffer_free(&K);
    buffer_free(&V);
    buffer_free(&cq);
    buffer_free(&ck);
    run_free(&r);
    return failures;
}

static kv_case base_case(const char *name, flashc_dtype dtype) {
    kv_case c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.dtype = dtype;
    c.batch = 3;
    c.sq = 1;
    c.h = 4;
    c.hk = 2;
    c.d = 24;
    c.dv = 16;
    c.capacity = 40;
    c.cache_batch = 3;
    c.with_seqlens = 1;
    int32_t lens[KV_MAX_BATCH] = {7, 0, 33, 12, 39, 1};
    for (int i = 0; i < KV_MAX_BATCH; ++i) {
        c.seqlens[i] = lens[i];
        c.batch_idx[i] = i;
    }
    c.options = flashc_attention_options_default();
    return c;
}

static void run_all(const char *group, kv_case *cases, int n) {
    int failures = 0;
    for (int i = 0; i < n; ++i) failures += check_case(&cases[i], test_seed(cases[i].name, (uint64_t)i));
    fprintf(stderr, "%s: %d cases, %d failures\n", group, n, failures);
    assert_int_equal(failures, 0);
}

/* Decode and prefill over a contiguous cache: every mask option, GQA and
 * MQA, appends of one and several rows, lengths 0 and at capacity. */
static void contiguous_cache(void **state) {
    (void)state;
    kv_case cs[32];
    int n = 0;
    flashc_dtype dts[2] = {FLASHC_DTYPE_FLOAT64, FLASHC_DTYPE_BFLOAT16};
    for (int di = 0; di < 2; ++di) {
        kv_case c = base_case("decode, no append", dts[di]);
        cs[n++] = c;
        c = base_case("decode, append 1", dts[di]);
        c.s_new = 1;
        cs[n++] = c;
        c = base_case("append 5, causal, sq 5", dts[di]);
        c.s_new = 5; c.sq = 5; c.options.causal = 1; c.seqlens[2] = 35; /* 35 + 5 = capacity */
        cs[n++] = c;
        c = base_case("sq 9 > s_new 3, causal, MQA", dts[di]);
        c.s_new = 3; c.sq = 9; c.options.causal = 1; c.hk = 1; c.seqlens[2] = 30;
        cs[n++] = c;
        c = base_case("window, softcap, alibi", dts[di]);
        c.s_new = 2; c.sq = 3; c.options.window_left = 6; c.options.window_right = 1;
        c.options.softcap = 2.5; c.alibi = 1; c.seqlens[2] = 30;
        cs[n++] = c;
        c = base_case("no cache_seqlens: the whole capacity", dts[di]);
        c.with_seqlens = 0; c.sq = 4;
        cs[n++] = c;
    }
    kv_case c = base_case("at capacity, scale", FLASHC_DTYPE_FLOAT32);
    c.seqlens[0] = 40; c.seqlens[1] = 40; c.seqlens[2] = 40; c.options.softmax_scale = 0.3;
    cs[n++] = c;
    c = base_case("float16, head dims 64 / 40", FLASHC_DTYPE_FLOAT16);
    c.d = 64; c.dv = 40; c.s_new = 2; c.sq = 2; c.seqlens[2] = 20;
    cs[n++] = c;
    /* bfloat16 rows of whole vectors: the CPU widens them in registers,
     * four query rows and four keys at a time, the rest one by one (key
     * counts 7 and 33 leave remainders) */
    c = base_case("bf16 decode, head dim 128, 4 query rows per group", FLASHC_DTYPE_BFLOAT16);
    c.h = 8; c.d = 128; c.dv = 128;
    cs[n++] = c;
    c = base_case("bf16 decode, head dim 128, 6 query rows per group, append 1", FLASHC_DTYPE_BFLOAT16);
    c.h = 12; c.d = 128; c.dv = 128; c.s_new = 1;
    cs[n++] = c;
    c = base_case("bf16 decode, head dim 64, 8 query rows per group, causal", FLASHC_DTYPE_BFLOAT16);
    c.h = 16; c.d = 64; c.dv = 64; c.options.causal = 1;
    cs[n++] = c;
    run_all("contiguous cache", cs, n);
}

/* cache_batch_idx (a permutation into a larger cache) and cache_leftpad. */
static void batch_index_and_leftpad(void **state) {
    (void)state;
    kv_case cs[8];
    int n = 0;
    kv_case c = base_case("cache_batch_idx", FLASHC_DTYPE_FLOAT64);
    c.cache_batch = 5; c.with_batch_idx = 1; c.batch_idx[0] = 4; c.batch_idx[1] = 0; c.batch_idx[2] = 2;
    c.s_new = 2; c.seqlens[2] = 20;
    cs[n++] = c;
    c = base_case("cache_leftpad, causal, append", FLASHC_DTYPE_FLOAT64);
    c.with_leftpad = 1; c.leftpad[0] = 3; c.leftpad[1] = 0; c.leftpad[2] = 33; /* leftpad == seqlens */
    c.s_new = 3; c.sq = 3; c.options.causal = 1; c.seqlens[2] = 33;
    cs[n++] = c;
    c = base_case("leftpad, batch_idx, window, bf16", FLASHC_DTYPE_BFLOAT16);
    c.cache_batch = 4; c.with_batch_idx = 1; c.batch_idx[0] = 3; c.batch_idx[1] = 1; c.batch_idx[2] = 0;
    c.with_leftpad = 1; c.leftpad[0] = 2; c.leftpad[1] = 0; c.leftpad[2] = 10;
    c.options.window_left = 4; c.options.window_right = 0; c.s_new = 1;
    cs[n++] = c;
    run_all("cache_batch_idx and cache_leftpad", cs, n);
}

/* Rotary, interleaved and half-split, on the appended keys and on q at the
 * positions flash_attn uses (per row under a mask, else the first). */
static void rotary(void **state) {
    (void)state;
    kv_case cs[8];
    int n = 0;
    for (int inter = 0; inter < 2; ++inter) {
        kv_case c = base_case(inter ? "rotary interleaved, causal" : "rotary half-split, causal",
                              FLASHC_DTYPE_FLOAT64);
        c.rotary_dim = 16; c.interleaved = inter; c.s_new = 3; c.sq = 3; c.options.causal = 1;
        c.seqlens[2] = 30;
        cs[n++] = c;
        c = base_case(inter ? "rotary interleaved, no mask" : "rotary half-split, no mask",
                      FLASHC_DTYPE_FLOAT64);
        c.rotary_dim = 24; c.interleaved = inter; c.s_new = 2; c.sq = 4; c.seqlens[2] = 30;
        cs[n++] = c;
        c = base_case(inter ? "rotary interleaved, paged, bf16" : "rotary half-split, paged, bf16",
                      FLASHC_DTYPE_BFLOAT16);
        c.rotary_dim = 8; c.interleaved = inter; c.s_new = 1; c.block_size = 8;
        cs[n++] = c;
    }
    run_all("rotary", cs, n);
}

/* A paged cache: blocks of 1, 8, 16 and 24 (shuffled, three unused and
 * poisoned), appends across block boundaries. */
static void paged_cache(void **state) {
    (void)state;
    kv_case cs[12];
    int n = 0;
    int64_t sizes[4] = {1, 8, 16, 24};
    for (int i = 0; i < 4; ++i) {
        kv_case c = base_case("paged", FLASHC_DTYPE_FLOAT64);
        c.block_size = sizes[i]; c.capacity = 48; c.s_new = 4; c.sq = 4; c.options.causal = 1;
        c.seqlens[0] = 5; c.seqlens[2] = 36; /* appends cross blocks */
        cs[n++] = c;
    }
    kv_case c = base_case("paged, leftpad, alibi, softcap", FLASHC_DTYPE_FLOAT32);
    c.block_size = 8; c.with_leftpad = 1; c.leftpad[0] = 3; c.leftpad[2] = 9; c.alibi = 1;
    c.options.softcap = 1.5; c.s_new = 1;
    cs[n++] = c;
    c = base_case("paged, no append, bf16 GQA 4", FLASHC_DTYPE_BFLOAT16);
    c.block_size = 16; c.capacity = 48; c.h = 8; c.hk = 2; c.d = 64; c.dv = 64;
    cs[n++] = c;
    run_all("paged cache", cs, n);
}

/* Caches long enough that the CPU forward splits each row tile's keys into
 * tasks (and combines them through their LSEs): decode and a few queries,
 * masks that leave splits empty, paged, MQA. */
static void long_cache(void **state) {
    (void)state;
    kv_case cs[8];
    int n = 0;
    kv_case c = base_case("long cache, decode, bf16", FLASHC_DTYPE_BFLOAT16);
    c.capacity = 2000; c.seqlens[0] = 1999; c.seqlens[1] = 0; c.seqlens[2] = 1203;
    cs[n++] = c;
    c = base_case("long cache, append 3, causal, window", FLASHC_DTYPE_FLOAT64);
    c.capacity = 2100; c.seqlens[0] = 2097; c.seqlens[1] = 64; c.seqlens[2] = 1500;
    c.s_new = 3; c.sq = 3; c.options.causal = 1; c.options.window_left = 700;
    cs[n++] = c;
    c = base_case("long cache, paged 16, alibi, softcap", FLASHC_DTYPE_FLOAT32);
    c.capacity = 1600; c.block_size = 16; c.seqlens[0] = 1600; c.seqlens[1] = 17; c.seqlens[2] = 999;
    c.alibi = 1; c.options.softcap = 3.0; c.s_new = 0;
    cs[n++] = c;
    c = base_case("long cache, MQA, float32", FLASHC_DTYPE_FLOAT32);
    c.capacity = 3000; c.hk = 1; c.seqlens[0] = 2999; c.seqlens[1] = 1; c.seqlens[2] = 2048;
    c.s_new = 1;
    cs[n++] = c;
    run_all("long cache", cs, n);
}

/* Every rejected argument: the status, a message naming it, nothing
 * written (cache and out untouched). */
static void errors(void **state) {
    (void)state;
    int failures = 0;
    for (int which = 0; which < 14; ++which) {
        kv_case c = base_case("errors", FLASHC_DTYPE_FLOAT32);
        c.s_new = 2;
        c.seqlens[2] = 30;
        if (which == 6 || which == 7) c.block_size = 8;
        kv_run r;
        run_init(&r, &c, 7 + (uint64_t)which);
        flashc_kvcache_args a = run_args(&r);
        unsigned char *out_before = malloc(r.out.bytes);
        memcpy(out_before, r.out.t.data, r.out.bytes);
        const char *expect = NULL;
        int64_t short_shape[2] = {20, 4};
        buffer short_cos = buffer_new(FLASHC_DTYPE_FLOAT32, 2, short_shape);
        switch (which) {
            case 0: ((int32_t *)r.seqlens.t.data)[1] = 39; expect = "cache_seqlens"; break; /* 39 + 2 > 40 */
            case 1: ((int32_t *)r.seqlens.t.data)[0] = -1; expect = "cache_seqlens"; break;
            case 2: a.cache_leftpad = &r.leftpad.t; ((int32_t *)r.leftpad.t.data)[0] = 8;
                    ((int32_t *)r.leftpad.t.data)[1] = 0; ((int32_t *)r.leftpad.t.data)[2] = 0;
                    expect = "cache_leftpad"; break; /* 8 > seqlens 7 */
            case 3: a.cache_batch_idx = &r.batch_idx.t; ((int32_t *)r.batch_idx.t.data)[1] = 3;
                    expect = "cache_batch_idx"; break;
            case 4: a.cache_seqlens = NULL; expect = "cache_seqlens"; break;
            case 5: a.v_new = NULL; expect = "v_new"; break;
            case 6: ((int32_t *)r.block_table.t.data)[0] = (int32_t)r.num_blocks; expect = "block_table"; break;
            case 7: a.cache_batch_idx = &r.batch_idx.t; expect = "cache_batch_idx"; break;
            case 8: a.options.dropout_p = 0.1; expect = "dropout_p"; break;
            case 9: a.k_new = NULL; a.v_new = NULL; a.rotary_cos = &short_cos.t; a.rotary_sin = &short_cos.t;
                    expect = "rotary_cos"; break; /* rotary without an append */
            case 10: a.rotary_cos = &short_cos.t; a.rotary_sin = &short_cos.t; expect = "rotary_cos"; break;
            case 11: a.num_splits = -1; expect = "num_splits"; break;
            case 12: r.k_new.t.dtype = FLASHC_DTYPE_FLOAT16; expect = "k_new"; break;
            case 13: a.out = &r.k_new.t; expect = "out"; break;
        }
        flashc_status st = flashc_attention_kvcache(&a);
        const char *msg = flashc_last_error_message();
        if (st == FLASHC_SUCCESS || strncmp(msg, expect, strlen(expect)) != 0 || !cache_unchanged(&r) ||
            memcmp(out_before, r.out.t.data, r.out.bytes) != 0) {
            fprintf(stderr, "FAIL error case %d: status %d, message \"%s\" (want \"%s...\"), cache %s\n",
                    which, (int)st, msg, expect, cache_unchanged(&r) ? "untouched" : "CHANGED");
            ++failures;
        }
        buffer_free(&short_cos);
        free(out_before);
        run_free(&r);
    }
    assert_int_equal(failures, 0);
}

/* The workspace: its size query, a given buffer, a too-small one. */
static void workspace(void **state) {
    (void)state;
    kv_case c = base_case("workspace", FLASHC_DTYPE_FLOAT32);
    c.s_new = 1; c.rotary_dim = 8;
    kv_run r;
    run_init(&r, &c, 3);
    flashc_kvcache_args a = run_args(&r);
    size_t bytes = 0;
    assert_int_equal(flashc_attention_kvcache_workspace_size(&a, &bytes), FLASHC_SUCCESS);
    assert_true(bytes >= (size_t)(c.batch * c.sq * c.h * c.d) * sizeof(float));
    a.workspace = malloc(bytes);
    a.workspace_bytes = bytes - 1;
    assert_int_equal(flashc_attention_kvcache(&a), FLASHC_ERROR_WORKSPACE);
    assert_true(cache_unchanged(&r));
    a.workspace_bytes = bytes;
    assert_int_equal(flashc_attention_kvcache(&a), FLASHC_SUCCESS);
    free(a.workspace);
    run_free(&r);
}

/* The paged varlen forward (flashc_varlen.block_table) against the
 * reference over the same keys gathered. */
static void paged_varlen_forward(void **state) {
    (void)state;
    int failures = 0;
    const int64_t bs = 4, nblk = 6, h = 4, hk = 2, d = 16, dv = 8, batch = 3;
    const int32_t lq[3] = {3, 0, 5}, lk[3] = {9, 4, 21};
    test_rng rng;
    test_rng_init(&rng, test_seed("paged varlen", 0));
    int64_t kshape[4] = {nblk * batch + 2, bs, hk, d}, vshape[4] = {nblk * batch + 2, bs, hk, dv};
    int64_t tq = lq[0] + lq[1] + lq[2], tk = lk[0] + lk[1] + lk[2];
    int64_t qshape[3] = {tq, h, d}, oshape[3] = {tq, h, dv}, bt_shape[2] = {batch, nblk}, cu[1] = {batch + 1};
    int64_t pk_shape[3] = {tk, hk, d}, pv_shape[3] = {tk, hk, dv};
    buffer q = buffer_new(FLASHC_DTYPE_FLOAT64, 3, qshape), k = buffer_new(FLASHC_DTYPE_FLOAT64, 4, kshape),
           v = buffer_new(FLASHC_DTYPE_FLOAT64, 4, vshape), out = buffer_new(FLASHC_DTYPE_FLOAT64, 3, oshape),
           bt = buffer_new(FLASHC_DTYPE_INT32, 2, bt_shape), cq = buffer_new(FLASHC_DTYPE_INT32, 1, cu),
           ck = buffer_new(FLASHC_DTYPE_INT32, 1, cu), pk = buffer_new(FLASHC_DTYPE_FLOAT64, 3, pk_shape),
           pv = buffer_new(FLASHC_DTYPE_FLOAT64, 3, pv_shape);
    test_fill_normal(&q.t, &rng, 1.0);
    test_fill_normal(&k.t, &rng, 1.0);
    test_fill_normal(&v.t, &rng, 1.0);
    int32_t *cqv = cq.t.data, *ckv = ck.t.data, *btv = bt.t.data;
    cqv[0] = ckv[0] = 0;
    for (int64_t b = 0; b < batch; ++b) {
        cqv[b + 1] = cqv[b] + lq[b];
        ckv[b + 1] = ckv[b] + lk[b];
        for (int64_t j = 0; j < nblk; ++j) btv[b * nblk + j] = (int32_t)((j * batch + b + 1) % (nblk * batch + 2));
        for (int64_t j = 0; j < lk[b]; ++j)
            for (int64_t hh = 0; hh < hk; ++hh) {
                int64_t blk = btv[b * nblk + j / bs];
                for (int64_t x = 0; x < d; ++x) {
                    int64_t idx[3] = {ckv[b] + j, hh, x};
                    flashc_ref_store(&pk.t, idx, at4(&k.t, blk, j % bs, hh, x));
                }
                for (int64_t x = 0; x < dv; ++x) {
                    int64_t idx[3] = {ckv[b] + j, hh, x};
                    flashc_ref_store(&pv.t, idx, at4(&v.t, blk, j % bs, hh, x));
                }
            }
    }
    for (int causal = 0; causal < 2; ++causal) {
        flashc_forward_args f;
        memset(&f, 0, sizeof f);
        f.q = &q.t, f.k = &k.t, f.v = &v.t, f.out = &out.t;
        f.varlen.cu_seqlens_q = &cq.t, f.varlen.cu_seqlens_k = &ck.t, f.varlen.block_table = &bt.t;
        f.varlen.max_seqlen_q = 5, f.varlen.max_seqlen_k = 21;
        f.options = flashc_attention_options_default();
        f.options.causal = causal;
        assert_int_equal(flashc_attention_forward(&f), FLASHC_SUCCESS);
        flashc_forward_args ref = f;
        ref.k = &pk.t, ref.v = &pv.t, ref.varlen.block_table = NULL;
        double o_ref[5 * 8];
        for (int64_t b = 0; b < batch; ++b)
            for (int64_t hh = 0; hh < h; ++hh) {
                assert_int_equal(flashc_ref_forward(&ref, b, hh, o_ref, NULL, NULL), 0);
                for (int64_t i = 0; i < lq[b]; ++i)
                    for (int64_t x = 0; x < dv; ++x) {
                        int64_t idx[3] = {cqv[b] + i, hh, x};
                        if (!(fabs(flashc_ref_load(&out.t, idx) - o_ref[i * dv + x]) <= 1e-10)) ++failures;
                    }
            }
        /* The backward of a paged forward is refused. */
        flashc_backward_args g;
        memset(&g, 0, sizeof g);
        g.varlen = f.varlen;
        assert_int_equal(flashc_attention_backward(&g), FLASHC_ERROR_UNSUPPORTED);
    }
    /* A sequence longer than its blocks, and a block entry out of range. */
    flashc_forward_args f;
    memset(&f, 0, sizeof f);
    f.q = &q.t, f.k = &k.t, f.v = &v.t, f.out = &out.t;
    f.varlen.cu_seqlens_q = &cq.t, f.varlen.cu_seqlens_k = &ck.t, f.varlen.block_table = &bt.t;
    f.varlen.max_seqlen_q = 5, f.varlen.max_seqlen_k = 40;
    f.options = flashc_attention_options_default();
    ckv[3] = ckv[2] + 25; /* 25 > 6 blocks of 4 */
    assert_int_equal(flashc_attention_forward(&f), FLASHC_ERROR_CU_SEQLENS);
    assert_non_null(strstr(flashc_last_error_message(), "block_table"));
    ckv[3] = ckv[2] + 21;
    btv[2 * nblk + 1] = -1;
    assert_int_equal(flashc_attention_forward(&f), FLASHC_ERROR_ARGUMENT);
    assert_non_null(strstr(flashc_last_error_message(), "block_table"));
    btv[1 * nblk + 3] = -1; /* past sequence 1's 4 keys: never read */
    btv[2 * nblk + 1] = 3;
    assert_int_equal(flashc_attention_forward(&f), FLASHC_SUCCESS);
    buffer *all[] = {&q, &k, &v, &out, &bt, &cq, &ck, &pk, &pv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buffer_free(all[i]);
    assert_int_equal(failures, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(contiguous_cache), cmocka_unit_test(batch_index_and_leftpad),
        cmocka_unit_test(rotary),           cmocka_unit_test(paged_cache),
        cmocka_unit_test(errors),           cmocka_unit_test(workspace),
        cmocka_unit_test(paged_varlen_forward), cmocka_unit_test(long_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
