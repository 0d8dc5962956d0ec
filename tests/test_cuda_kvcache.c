/* The CUDA backend's attention over a KV cache (flashc_attention_kvcache)
 * and the varlen forward over paged keys (block_table), against the CPU
 * backend on copies of the same inputs.
 *
 * Every cache byte the call may not write is NaN (0xFF) before the call:
 * rows before leftpad, at and past cache_seqlens (until the append), and
 * every row of the paged blocks no sequence uses. After the call the whole
 * cache must be byte-identical to the CPU backend's (the append lands at
 * cache_seqlens, rotary gives the same bits, nothing else is written), out
 * and LSE must be close to the CPU's (and finite: no NaN leaks in), for
 * every split count tried; a CUDA graph of the call must replay to the
 * same results; consecutive decode steps on one stream must equal the CPU
 * running them in order. Index tensors with out-of-range entries (not
 * checked on the host for CUDA tensors) must not make the kernels touch
 * memory outside the tensors: compute-sanitizer runs this program in
 * scripts/gpu_check.sh.
 *
 * Where no GPU is usable (CI), every test is skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "flashc.h"
#include "flashc_reference.h"
#include "test_support.h"

#define REQUIRE_GPU()                               \
    do {                                            \
        if (!flashc_cuda_available()) skip();       \
    } while (0)

static int cuda_ok(cudaError_t err, const char *what) {
    if (err == cudaSuccess) return 1;
    fprintf(stderr, "  CUDA error in %s: %s\n", what, cudaGetErrorString(err));
    return 0;
}

/* ---- buffers mirrored on the GPU ------------------------------------------ */

/* Host bytes and a device copy of the same size (dev NULL for bytes 0). */
typedef struct buf {
    unsigned char *host;
    void *dev;
    size_t bytes;
} buf;

static void buf_init(buf *b, size_t bytes) {
    b->bytes = bytes;
    b->host = malloc(bytes ? bytes : 1);
    memset(b->host, 0xFF, bytes);
    b->dev = NULL;
    if (bytes) cuda_ok(cudaMalloc(&b->dev, bytes), "cudaMalloc");
}

static void buf_free(buf *b) {
    free(b->host);
    if (b->dev) cudaFree(b->dev);
    memset(b, 0, sizeof *b);
}

static void buf_upload(buf *b) {
    if (b->bytes) cuda_ok(cudaMemcpy(b->dev, b->host, b->bytes, cudaMemcpyHostToDevice), "upload");
}

/* The device bytes now; free() the result. */
static unsigned char *buf_fetch(const buf *b) {
    unsigned char *h = malloc(b->bytes ? b->bytes : 1);
    if (b->bytes) cuda_ok(cudaMemcpy(h, b->dev, b->bytes, cudaMemcpyDeviceToHost), "fetch");
    return h;
}

/* NaN bytes over device memory, finished before the call returns: the
 * memset runs on the legacy stream, which does not order itself with the
 * non-blocking stream the graph test calls on (a poison landing after the
 * kernels, or over the split partials they wrote, once failed that test). */
static void poison_dev(void *dev, size_t bytes) {
    if (bytes) cuda_ok(cudaMemset(dev, 0xFF, bytes), "cudaMemset");
    cuda_ok(cudaDeviceSynchronize(), "cudaMemset");
}

static void buf_poison_dev(buf *b) { poison_dev(b->dev, b->bytes); }

static flashc_tensor tensor_of(const buf *b, int on_gpu, flashc_dtype dtype, int rank, const int64_t *shape) {
    flashc_device dev = {on_gpu ? FLASHC_DEVICE_CUDA : FLASHC_DEVICE_CPU, 0};
    return flashc_tensor_contiguous(on_gpu ? b->dev : (void *)b->host, dtype, dev, rank, shape);
}

/* ---- 16-bit elements ------------------------------------------------------- */

static double load16(flashc_dtype dt, const unsigned char *base, int64_t i) {
    uint16_t v;
    memcpy(&v, base + 2 * i, 2);
    return dt == FLASHC_DTYPE_BFLOAT16 ? flashc_ref_bfloat16_to_double(v) : flashc_ref_half_to_double(v);
}

static void store16(flashc_dtype dt, unsigned char *base, int64_t i, double x) {
    uint16_t v = dt == FLASHC_DTYPE_BFLOAT16 ? flashc_ref_bfloat16_from_double(x) : flashc_ref_half_from_double(x);
    memcpy(base + 2 * i, &v, 2);
}

/* Spacing of the dtype's values at 1. */
static double ulp16(flashc_dtype dt) { return dt == FLASHC_DTYPE_BFLOAT16 ? 0x1p-7 : 0x1p-10; }

/* ---- one problem ------------------------------------------------------------ */

typedef struct kv_config {
    flashc_dtype dtype;
    int b, h, hk, d, dv, sq, s_new;
    int capacity;     /* cache indices per sequence */
    int block_size;   /* 0: contiguous cache of cache_batch batches */
    int cache_batch;  /* contiguous: batches of k_cache (>= b; 0 = b) */
    int seqlens;      /* -1 random, -2 at capacity (after the append), else this value */
    int no_seqlens;   /* cache_seqlens NULL (the whole capacity; no append) */
    int batch_idx, leftpad, lse;
    int rotary_dim, interleaved;
    int causal, window_left, window_right, alibi;
    double softcap;
    int splits[3];    /* the split counts run (0 = the heuristic's) */
} kv_config;

static kv_config base_config(flashc_dtype dt, int b, int h, int hk, int d, int sq, int s_new, int capacity) {
    kv_config c;
    memset(&c, 0, sizeof c);
    c.dtype = dt;
    c.b = b, c.h = h, c.hk = hk, c.d = d, c.dv = d, c.sq = sq, c.s_new = s_new, c.capacity = capacity;
    c.seqlens = -1;
    c.lse = 1;
    c.window_left = c.window_right = -1;
    c.splits[0] = 1, c.splits[1] = 0, c.splits[2] = 5;
    return c;
}

static void describe(const kv_config *c, char *s, size_t n) {
    snprintf(s, n,
             "%s b%d h%d/%d d%d/%d sq%d new%d cap%d bs%d seqlens%d%s%s%s rot%d%s causal%d win(%d,%d) alibi%d "
             "softcap%g",
             c->dtype == FLASHC_DTYPE_BFLOAT16 ? "bf16" : "fp16", c->b, c->h, c->hk, c->d, c->dv, c->sq, c->s_new,
             c->capacity, c->block_size, c->seqlens, c->no_seqlens ? " no-seqlens" : "",
             c->batch_idx ? " batch_idx" : "", c->leftpad ? " leftpad" : "", c->rotary_dim,
             c->interleaved ? "i" : "", c->causal, c->window_left, c->window_right, c->alibi, c->softcap);
}

typedef struct kv_case {
    kv_config cfg;
    int max_blocks, num_blocks, cache_batch;
    buf q, k_cache, v_cache, k_new, v_new, seqlens, leftpad, batch_idx, block_table, cos, sin, alibi;
    buf out, lse;
    int32_t *seqlens_h, *leftpad_h;
    unsigned char *k_cache0, *v_cache0; /* the caches as made, before any append */
} kv_case;

/* Cache index c of sequence i: its row in the k / v allocation (in rows of
 * hk * d elements). */
static int64_t cache_row(const kv_case *kc, int i, int c) {
    if (kc->cfg.block_size) {
        int32_t block;
        memcpy(&block, kc->block_table.host + 4 * ((size_t)i * kc->max_blocks + c / kc->cfg.block_size), 4);
        return (int64_t)block * kc->cfg.block_size + c % kc->cfg.block_size;
    }
    int32_t batch = i;
    if (kc->cfg.batch_idx) memcpy(&batch, kc->batch_idx.host + 4 * (size_t)i, 4);
    return (int64_t)batch * kc->cfg.capacity + c;
}

static void fill_normal(buf *b, flashc_dtype dt, int64_t count, test_rng *rng) {
    for (int64_t i = 0; i < count; ++i) store16(dt, b->host, i, test_rng_normal(rng));
}

static void case_init(kv_case *kc, const kv_config *cfg, uint64_t seed) {
    memset(kc, 0, sizeof *kc);
    kc->cfg = *cfg;
    const kv_config *c = &kc->cfg;
    test_rng rng;
    test_rng_init(&rng, seed);
    const flashc_dtype dt = c->dtype;
    const size_t e = 2;
    buf_init(&kc->q, (size_t)c->b * c->sq * c->h * c->d * e);
    fill_normal(&kc->q, dt, (int64_t)c->b * c->sq * c->h * c->d, &rng);
    int64_t cache_rows;
    if (c->block_size) {
        /* the capacity is whole blocks (the rotary tables must cover it) */
        kc->cfg.capacity = (c->capacity + c->block_size - 1) / c->block_size * c->block_size;
        kc->max_blocks = c->capacity / c->block_size;
        kc->num_blocks = c->b * kc->max_blocks + 3; /* 3 blocks nobody uses */
        cache_rows = (int64_t)kc->num_blocks * c->block_size;
        buf_init(&kc->block_table, (size_t)c->b * kc->max_blocks * 4);
        int32_t *perm = malloc(sizeof(int32_t) * kc->num_blocks);
        for (int i = 0; i < kc->num_blocks; ++i) perm[i] = i;
        for (int i = kc->num_blocks - 1; i > 0; --i) {
            int j = (int)test_rng_int(&rng, 0, i);
            int32_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        memcpy(kc->block_table.host, perm, (size_t)c->b * kc->max_blocks * 4);
        free(perm);
    } else {
        kc->cache_batch = c->cache_batch ? c->cache_batch : c->b;
        cache_rows = (int64_t)kc->cache_batch * c->capacity;
        if (c->batch_idx) { /* distinct cache batches, in random order */
            buf_init(&kc->batch_idx, (size_t)c->b * 4);
            int32_t *perm = malloc(sizeof(int32_t) * kc->cache_batch);
            for (int i = 0; i < kc->cache_batch; ++i) perm[i] = i;
            for (int i = kc->cache_batch - 1; i > 0; --i) {
                int j = (int)test_rng_int(&rng, 0, i);
                int32_t t = perm[i];
                perm[i] = perm[j], perm[j] = t;
            }
            memcpy(kc->batch_idx.host, perm, (size_t)c->b * 4);
            free(perm);
        }
    }
    buf_init(&kc->k_cache, (size_t)cache_rows * c->hk * c->d * e);  /* all NaN */
    buf_init(&kc->v_cache, (size_t)cache_rows * c->hk * c->dv * e);
    kc->seqlens_h = calloc((size_t)c->b, sizeof(int32_t));
    kc->leftpad_h = calloc((size_t)c->b, sizeof(int32_t));
    for (int i = 0; i < c->b; ++i) {
        int top = c->capacity - c->s_new;
        kc->seqlens_h[i] = c->no_seqlens ? c->capacity
                           : c->seqlens == -1 ? (int)test_rng_int(&rng, 0, top)
                           : c->seqlens == -2 ? top
                                              : c->seqlens;
        kc->leftpad_h[i] = c->leftpad ? (int)test_rng_int(&rng, 0, kc->seqlens_h[i]) : 0;
        /* the keys already in the cache: [leftpad, seqlens) */
        for (int idx = kc->leftpad_h[i]; idx < kc->seqlens_h[i]; ++idx) {
            int64_t row = cache_row(kc, i, idx);
            for (int x = 0; x < c->hk * c->d; ++x)
                store16(dt, kc->k_cache.host, row * c->hk * c->d + x, test_rng_normal(&rng));
            for (int x = 0; x < c->hk * c->dv; ++x)
                store16(dt, kc->v_cache.host, row * c->hk * c->dv + x, test_rng_normal(&rng));
        }
    }
    if (!c->no_seqlens) {
        buf_init(&kc->seqlens, (size_t)c->b * 4);
        memcpy(kc->seqlens.host, kc->seqlens_h, (size_t)c->b * 4);
    }
    if (c->leftpad) {
        buf_init(&kc->leftpad, (size_t)c->b * 4);
        memcpy(kc->leftpad.host, kc->leftpad_h, (size_t)c->b * 4);
    }
    if (c->s_new) {
        buf_init(&kc->k_new, (size_t)c->b * c->s_new * c->hk * c->d * e);
        buf_init(&kc->v_new, (size_t)c->b * c->s_new * c->hk * c->dv * e);
        fill_normal(&kc->k_new, dt, (int64_t)c->b * c->s_new * c->hk * c->d, &rng);
        fill_normal(&kc->v_new, dt, (int64_t)c->b * c->s_new * c->hk * c->dv, &rng);
    }
    if (c->rotary_dim) {
        const int rows = c->capacity + c->sq, half = c->rotary_dim / 2;
        buf_init(&kc->cos, (size_t)rows * half * e);
        buf_init(&kc->sin, (size_t)rows * half * e);
        for (int r = 0; r < rows; ++r)
            for (int i = 0; i < half; ++i) {
                double angle = r * pow(10000.0, -2.0 * i / c->rotary_dim);
                store16(dt, kc->cos.host, (int64_t)r * half + i, cos(angle));
                store16(dt, kc->sin.host, (int64_t)r * half + i, sin(angle));
            }
    }
    if (c->alibi) {
        buf_init(&kc->alibi, (size_t)c->h * 4);
        for (int i = 0; i < c->h; ++i) {
            float s = (float)test_rng_uniform(&rng, 0.01, 0.5);
            memcpy(kc->alibi.host + 4 * (size_t)i, &s, 4);
        }
    }
    buf_init(&kc->out, (size_t)c->b * c->sq * c->h * c->dv * e);
    buf_init(&kc->lse, (size_t)c->b * c->h * c->sq * 4);
    buf *all[] = {&kc->q, &kc->k_cache, &kc->v_cache, &kc->k_new, &kc->v_new, &kc->seqlens, &kc->leftpad,
                  &kc->batch_idx, &kc->block_table, &kc->cos, &kc->sin, &kc->alibi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buf_upload(all[i]);
    kc->k_cache0 = malloc(kc->k_cache.bytes ? kc->k_cache.bytes : 1);
    kc->v_cache0 = malloc(kc->v_cache.bytes ? kc->v_cache.bytes : 1);
    memcpy(kc->k_cache0, kc->k_cache.host, kc->k_cache.bytes);
    memcpy(kc->v_cache0, kc->v_cache.host, kc->v_cache.bytes);
}

/* The device caches back to the bytes case_init made (NaN poison
 * included), finished before the call returns: each GPU run of a case
 * starts from them, so its own appends are checked; rows an earlier run
 * left behind would hide a row this one failed to write. */
static void caches_reset(kv_case *kc) {
    if (kc->k_cache.bytes)
        cuda_ok(cudaMemcpy(kc->k_cache.dev, kc->k_cache0, kc->k_cache.bytes, cudaMemcpyHostToDevice), "reset");
    if (kc->v_cache.bytes)
        cuda_ok(cudaMemcpy(kc->v_cache.dev, kc->v_cache0, kc->v_cache.bytes, cudaMemcpyHostToDevice), "reset");
    cuda_ok(cudaDeviceSynchronize(), "reset");
}

static void case_free(kv_case *kc) {
    buf *all[] = {&kc->q, &kc->k_cache, &kc->v_cache, &kc->k_new, &kc->v_new, &kc->seqlens, &kc->leftpad,
                  &kc->batch_idx, &kc->block_table, &kc->cos, &kc->sin, &kc->alibi, &kc->out, &kc->lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) buf_free(all[i]);
    free(kc->seqlens_h);
    free(kc->leftpad_h);
    free(kc->k_cache0);
    free(kc->v_cache0);
}

/* Tensors of one call (host or device side) and its arguments. */
typedef struct kv_call {
    flashc_tensor q, kc, vc, kn, vn, seqlens, leftpad, batch_idx, block_table, cos, sin, alibi, out, lse;
    flashc_kvcache_args args;
} kv_call;

static void call_init(kv_call *t, kv_case *kc, int on_gpu, int num_splits, void *stream) {
    const kv_config *c = &kc->cfg;
    const flashc_dtype dt = c->dtype;
    memset(t, 0, sizeof *t);
    int64_t qs[4] = {c->b, c->sq, c->h, c->d};
    t->q = tensor_of(&kc->q, on_gpu, dt, 4, qs);
    int64_t ks[4] = {c->block_size ? kc->num_blocks : kc->cache_batch, c->block_size ? c->block_size : c->capacity,
                     c->hk, c->d};
    t->kc = tensor_of(&kc->k_cache, on_gpu, dt, 4, ks);
    ks[3] = c->dv;
    t->vc = tensor_of(&kc->v_cache, on_gpu, dt, 4, ks);
    flashc_kvcache_args *a = &t->args;
    memset(a, 0, sizeof *a);
    a->q = &t->q;
    a->k_cache = &t->kc;
    a->v_cache = &t->vc;
    if (c->s_new) {
        int64_t ns[4] = {c->b, c->s_new, c->hk, c->d};
        t->kn = tensor_of(&kc->k_new, on_gpu, dt, 4, ns);
        ns[3] = c->dv;
        t->vn = tensor_of(&kc->v_new, on_gpu, dt, 4, ns);
        a->k_new = &t->kn;
        a->v_new = &t->vn;
    }
    int64_t bs[1] = {c->b};
    if (!c->no_seqlens) {
        t->seqlens = tensor_of(&kc->seqlens, on_gpu, FLASHC_DTYPE_INT32, 1, bs);
        a->cache_seqlens = &t->seqlens;
    }
    if (c->leftpad) {
        t->leftpad = tensor_of(&kc->leftpad, on_gpu, FLASHC_DTYPE_INT32, 1, bs);
        a->cache_leftpad = &t->leftpad;
    }
    if (c->batch_idx) {
        t->batch_idx = tensor_of(&kc->batch_idx, on_gpu, FLASHC_DTYPE_INT32, 1, bs);
        a->cache_batch_idx = &t->batch_idx;
    }
    if (c->block_size) {
        int64_t s2[2] = {c->b, kc->max_blocks};
        t->block_table = tensor_of(&kc->block_table, on_gpu, FLASHC_DTYPE_INT32, 2, s2);
        a->block_table = &t->block_table;
    }
    if (c->rotary_dim) {
        int64_t s2[2] = {c->capacity + c->sq, c->rotary_dim / 2};
        t->cos = tensor_of(&kc->cos, on_gpu, dt, 2, s2);
        t->sin = tensor_of(&kc->sin, on_gpu, dt, 2, s2);
        a->rotary_cos = &t->cos;
        a->rotary_sin = &t->sin;
        a->rotary_interleaved = c->interleaved;
    }
    int64_t os[4] = {c->b, c->sq, c->h, c->dv};
    t->out = tensor_of(&kc->out, on_gpu, dt, 4, os);
    a->out = &t->out;
    if (c->lse) {
        int64_t ls[3] = {c->b, c->h, c->sq};
        t->lse = tensor_of(&kc->lse, on_gpu, FLASHC_DTYPE_FLOAT32, 3, ls);
        a->lse = &t->lse;
    }
    a->num_splits = num_splits;
    a->options = flashc_attention_options_default();
    a->options.causal = c->causal;
    a->options.window_left = c->window_left;
    a->options.window_right = c->window_right;
    a->options.softcap = c->softcap;
    if (c->alibi) {
        int64_t hs[1] = {c->h};
        t->alibi = tensor_of(&kc->alibi, on_gpu, FLASHC_DTYPE_FLOAT32, 1, hs);
        a->options.alibi_slopes = &t->alibi;
    }
    a->options.stream = stream;
}

/* Runs the call on the GPU (workspace sized, allocated and poisoned here;
 * out and lse poisoned), on `stream`, and waits. */
static flashc_status gpu_call(kv_case *kc, int num_splits, void *stream, void **workspace_out) {
    kv_call t;
    call_init(&t, kc, 1, num_splits, stream);
    size_t bytes = 0;
    flashc_status st = flashc_attention_kvcache_workspace_size(&t.args, &bytes);
    if (st != FLASHC_SUCCESS) return st;
    void *ws = NULL;
    if (bytes) {
        cuda_ok(cudaMalloc(&ws, bytes), "cudaMalloc workspace");
        poison_dev(ws, bytes);
    }
    buf_poison_dev(&kc->out);
    buf_poison_dev(&kc->lse);
    t.args.workspace = ws;
    t.args.workspace_bytes = bytes;
    st = flashc_attention_kvcache(&t.args);
    if (!cuda_ok(cudaStreamSynchronize((cudaStream_t)stream), "kernels")) st = FLASHC_ERROR_BACKEND;
    if (workspace_out)
        *workspace_out = ws;
    else if (ws)
        cudaFree(ws);
    return st;
}

/* out / lse of the GPU (device bytes) against the CPU's (host bytes). */
static int compare_outputs(const kv_case *kc, const unsigned char *out_gpu, const unsigned char *lse_gpu,
                           const char *what) {
    const kv_config *c = &kc->cfg;
    const int64_t n_out = (int64_t)c->b * c->sq * c->h * c->dv, n_lse = (int64_t)c->b * c->h * c->sq;
    double max_out = 0, max_v = 1;
    for (int64_t i = 0; i < n_out; ++i) max_out = fmax(max_out, fabs(load16(c->dtype, kc->out.host, i)));
    const double tol = 3 * ulp16(c->dtype) * fmax(max_out, 1e-3) + ulp16(c->dtype) * max_v;
    int bad = 0;
    for (int64_t i = 0; i < n_out && bad < 5; ++i) {
        double g = load16(c->dtype, out_gpu, i), r = load16(c->dtype, kc->out.host, i);
        if (!(fabs(g - r) <= tol)) {
            fprintf(stderr, "  %s: out[%lld] = %g, CPU %g (tolerance %g)\n", what, (long long)i, g, r, tol);
            ++bad;
        }
    }
    if (c->lse)
        for (int64_t i = 0; i < n_lse && bad < 10; ++i) {
            float g, r;
            memcpy(&g, lse_gpu + 4 * i, 4);
            memcpy(&r, kc->lse.host + 4 * i, 4);
            int ok = isinf(r) ? g == r : fabs((double)g - r) <= 0x1p-12 * fmax(1.0, fabs(r));
            if (!ok) {
                fprintf(stderr, "  %s: lse[%lld] = %g, CPU %g\n", what, (long long)i, g, r);
                ++bad;
            }
        }
    return bad;
}

/* The GPU's k_cache and v_cache against the CPU's (in kc's host copies),
 * byte for byte; the number that differ. */
static int compare_caches(const kv_case *kc, const char *what) {
    const buf *caches[2] = {&kc->k_cache, &kc->v_cache};
    int failures = 0;
    for (int i = 0; i < 2; ++i) {
        unsigned char *cache = buf_fetch(caches[i]);
        size_t first = 0;
        while (first < caches[i]->bytes && cache[first] == caches[i]->host[first]) ++first;
        if (first < caches[i]->bytes) {
            fprintf(stderr, "  %s: %s differs from the CPU's at byte %zu\n", what, i ? "v_cache" : "k_cache", first);
            ++failures;
        }
        free(cache);
    }
    return failures;
}

/* The whole check of one config: CPU backend on the host bytes, GPU on the
 * device copies, once per split count, each from the caches as made; cache
 * bytes equal, outputs close; returns the failures. */
static int run_case(const kv_config *cfg, uint64_t seed) {
    kv_case kc;
    case_init(&kc, cfg, seed);
    char desc[256];
    describe(cfg, desc, sizeof desc);
    int failures = 0;
    kv_call cpu;
    call_init(&cpu, &kc, 0, 1, NULL);
    flashc_status st = flashc_attention_kvcache(&cpu.args);
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "  [%s] CPU call failed: %s (%s)\n", desc, flashc_status_string(st),
                flashc_last_error_message());
        case_free(&kc);
        return 1;
    }
    for (int s = 0; s < 3; ++s) {
        const int splits = cfg->splits[s];
        caches_reset(&kc);
        st = gpu_call(&kc, splits, NULL, NULL);
        char what[320];
        snprintf(what, sizeof what, "[%s] num_splits %d", desc, splits);
        if (st != FLASHC_SUCCESS) {
            fprintf(stderr, "  %s: GPU call failed: %s (%s)\n", what, flashc_status_string(st),
                    flashc_last_error_message());
            ++failures;
            continue;
        }
        unsigned char *out = buf_fetch(&kc.out), *lse = buf_fetch(&kc.lse);
        failures += compare_outputs(&kc, out, lse, what) != 0;
        free(out);
        free(lse);
        failures += compare_caches(&kc, what);
    }
    if (failures) fprintf(stderr, "  -> FAILED [%s] (seed %llu)\n", desc, (unsigned long long)seed);
    case_free(&kc);
    return failures;
}

static void run_cases(const char *name, const kv_config *cfgs, int n) {
    int failed = 0;
    for (int i = 0; i < n; ++i) failed += run_case(&cfgs[i], test_seed(name, (uint64_t)i)) != 0;
    printf("cuda kvcache %s: %d/%d cases passed\n", name, n - failed, n);
    fflush(stdout);
    if (failed) fail_msg("%s: %d of %d cases failed (details above)", name, failed, n);
}

#define BF16 FLASHC_DTYPE_BFLOAT16
#define FP16 FLASHC_DTYPE_FLOAT16
#define MAX_CASES 96

/* ---- the tests ---------------------------------------------------------------- */

/* Decode and short appends, contiguous caches: seqlens random, 0 and at
 * capacity, GQA / MQA / MHA, both dtypes, every head dim class. */
static void append_and_decode(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[MAX_CASES];
    int n = 0;
    c[n++] = base_config(BF16, 3, 8, 2, 128, 1, 1, 300);
    c[n++] = base_config(FP16, 2, 8, 8, 64, 1, 1, 77);
    c[n++] = base_config(BF16, 2, 16, 1, 128, 1, 3, 200);            /* MQA, 3 new rows */
    c[n] = base_config(BF16, 2, 4, 2, 128, 2, 2, 90), c[n++].seqlens = 0;   /* empty cache before */
    c[n] = base_config(FP16, 2, 4, 2, 64, 1, 1, 64), c[n++].seqlens = -2;   /* full after */
    c[n] = base_config(BF16, 2, 4, 2, 128, 1, 0, 100), c[n++].seqlens = 0;  /* no keys at all */
    c[n] = base_config(BF16, 2, 4, 4, 96, 3, 0, 130), c[n++].no_seqlens = 1;
    c[n++] = base_config(FP16, 2, 8, 2, 256, 1, 1, 150);
    c[n] = base_config(BF16, 3, 16, 8, 256, 1, 1, 700), c[n].softcap = 30, c[n++].window_left = 200; /* Gemma-like */
    c[n++] = base_config(FP16, 2, 16, 2, 256, 3, 3, 300);  /* 24 rows of 256: 32-key steps */
    c[n] = base_config(BF16, 2, 6, 3, 192, 2, 2, 99), c[n].dv = 128, ++n;   /* d != dv */
    c[n] = base_config(FP16, 1, 4, 1, 40, 1, 1, 33), c[n].dv = 72, ++n;
    c[n] = base_config(BF16, 3, 4, 2, 128, 1, 1, 200), c[n++].batch_idx = 1;
    c[n] = base_config(BF16, 2, 4, 2, 128, 1, 1, 200), c[n].batch_idx = 1, c[n++].cache_batch = 5;
    c[n] = base_config(FP16, 3, 4, 2, 64, 2, 2, 150), c[n++].leftpad = 1;
    c[n] = base_config(BF16, 2, 8, 2, 128, 1, 1, 2000), c[n].splits[2] = 17, ++n;
    /* many short sequences: more CTAs than the device holds at once */
    c[n++] = base_config(BF16, 48, 8, 4, 128, 1, 1, 300);
    c[n] = base_config(FP16, 40, 4, 4, 64, 2, 1, 520), c[n].block_size = 16, ++n;
    c[n] = base_config(BF16, 30, 8, 2, 128, 1, 1, 1100), c[n].seqlens = -2, c[n++].causal = 1;
    /* tiles of 17-32 rows per KV head: MQA with a group of 32, and 3
       speculative tokens of a group of 8 (24 rows, causal) */
    c[n++] = base_config(BF16, 3, 32, 1, 128, 1, 1, 700);
    c[n] = base_config(FP16, 2, 16, 2, 128, 3, 3, 300), c[n++].causal = 1;
    /* more new rows than query rows under a window: the first appended rows
       are seen by no query, and still land in the cache */
    c[n] = base_config(BF16, 2, 8, 2, 128, 1, 5, 300), c[n].window_left = 2, c[n++].window_right = 0;
    c[n] = base_config(FP16, 3, 16, 2, 128, 2, 6, 500), c[n].causal = 1, c[n].window_left = 1;
    c[n].rotary_dim = 64, c[n++].block_size = 16;
    run_cases("append and decode", c, n);
}

/* Paged caches of block sizes 16, 32, 64, 256 (blocks in random order,
 * some never used), with leftpad and appends across block boundaries; 48
 * (a size the Hopper kernel's boxes do not take) on the portable kernel. */
static void paged(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[MAX_CASES];
    int n = 0;
    static const int sizes[] = {16, 32, 64, 256};
    for (int i = 0; i < 4; ++i) {
        c[n] = base_config(i & 1 ? FP16 : BF16, 3, 8, 2, 128, 1, 1, 700), c[n++].block_size = sizes[i];
        c[n] = base_config(BF16, 2, 4, 4, 64, 5, 5, 300), c[n].block_size = sizes[i], c[n++].leftpad = 1;
        c[n] = base_config(FP16, 2, 4, 1, 256, 1, 1, 260), c[n].block_size = sizes[i], c[n].seqlens = -2, ++n;
    }
    c[n] = base_config(BF16, 2, 8, 2, 128, 3, 3, 200), c[n].block_size = 48, c[n++].causal = 1;
    run_cases("paged", c, n);
}

/* Head dims 96 and 32 with an even number of KV heads run as head pairs
 * on Hopper (hopper_kvcache.h): each tile row in its own head's half of a
 * 2d-column row; at 96 only where each CTA streams enough keys of whole
 * 64-row boxes, else the unpaired TMA kernel. FLASHC_CUDA_KVCACHE=pairs
 * (gpu_check's pairs mode) pairs every case the shape allows; by default
 * the d32 cases pair, the short d96 caches here run unpaired and the last
 * case pairs unsplit. Decode with appends and rotary
 * (behind the append kernel), GQA groups, paged blocks, masks and the
 * logit rule, leftpad and cache_batch_idx, split and not; and the shapes
 * that stay unpaired on the portable kernel: an odd number of KV heads,
 * more than 16 rows per pair at 96. */
static void head_pairs(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[MAX_CASES];
    int n = 0;
    c[n++] = base_config(BF16, 3, 8, 8, 96, 1, 1, 700); /* MHA (Phi-3-like) */
    c[n] = base_config(FP16, 2, 8, 4, 96, 1, 1, 500), c[n].rotary_dim = 96, c[n].interleaved = 1;
    c[n].causal = 1, c[n++].block_size = 16;
    c[n] = base_config(BF16, 2, 12, 6, 96, 2, 2, 300), c[n].window_left = 50, c[n].window_right = 0;
    c[n++].alibi = 1;                                     /* 8 rows per pair */
    c[n] = base_config(BF16, 2, 16, 4, 96, 1, 0, 900), c[n].softcap = 20, c[n++].splits[2] = 7;
    c[n] = base_config(BF16, 3, 8, 8, 96, 1, 1, 300), c[n++].leftpad = 1;
    c[n] = base_config(FP16, 2, 8, 8, 96, 1, 1, 300), c[n].batch_idx = 1, c[n++].cache_batch = 5;
    c[n] = base_config(BF16, 2, 8, 2, 96, 1, 1, 2000), c[n].seqlens = -2, c[n++].block_size = 256;
    c[n] = base_config(BF16, 2, 4, 2, 96, 1, 1, 64), c[n++].seqlens = 0;
    c[n] = base_config(FP16, 3, 4, 4, 32, 1, 1, 300), c[n++].block_size = 64;
    c[n] = base_config(FP16, 2, 16, 2, 32, 4, 4, 400), c[n].rotary_dim = 32, c[n++].causal = 1; /* 64 rows */
    c[n++] = base_config(BF16, 2, 6, 3, 96, 1, 1, 200);  /* 3 KV heads: unpaired */
    c[n] = base_config(BF16, 2, 32, 4, 96, 3, 3, 200), c[n++].causal = 1; /* 48 rows per pair: unpaired */
    if (!test_quick()) { /* 136 pair CTAs fill a 132-SM Hopper unsplit, 2100 keys each: pairs by default */
        c[n] = base_config(BF16, 17, 16, 16, 96, 1, 1, 2100), c[n++].seqlens = -2;
    }
    run_cases("head pairs", c, n);
}

/* Rotary (interleaved and half-split, partial rotary dims) on appended
 * keys and q: positions per row under a causal mask, else all at seqlens. */
static void rotary(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[MAX_CASES];
    int n = 0;
    for (int inter = 0; inter < 2; ++inter)
        for (int causal = 0; causal < 2; ++causal) {
            c[n] = base_config(inter ? FP16 : BF16, 2, 8, 2, 128, 3, 4, 160);
            c[n].rotary_dim = 128, c[n].interleaved = inter, c[n++].causal = causal;
            c[n] = base_config(BF16, 2, 4, 2, 64, 1, 2, 100);
            c[n].rotary_dim = 32, c[n].interleaved = inter, c[n].causal = causal, c[n++].block_size = 16;
        }
    run_cases("rotary", c, n);
}

/* Every mask option and the logit rule, decode and prefill over a cache
 * (sq in the hundreds: the 64-row warp layout), split and not. */
static void masks(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[MAX_CASES];
    int n = 0;
    const int shapes[][2] = {{1, 1}, {5, 5}, {70, 40}, {200, 0}};
    for (int s = 0; s < 4; ++s) {
        const int sq = shapes[s][0], s_new = shapes[s][1];
        kv_config b = base_config(s & 1 ? FP16 : BF16, 2, 8, 2, 128, sq, s_new, 400);
        b.causal = 1, c[n++] = b;
        b.causal = 0, b.window_left = 50, b.window_right = 0, c[n++] = b;
        b.window_left = 30, b.window_right = 10, c[n++] = b;
        b.window_left = -1, b.window_right = 3, c[n++] = b;
        b.window_right = -1, b.softcap = 5.0, c[n++] = b;
        b.softcap = 0, b.alibi = 1, c[n++] = b;
        b.causal = 1, b.softcap = 10, b.block_size = 64, c[n++] = b;
    }
    if (!test_quick()) { /* prefill of thousands of tile rows (slow under the sanitizers) */
        kv_config big = base_config(BF16, 1, 4, 1, 64, 700, 0, 1500);
        big.causal = 1, c[n++] = big;
    }
    run_cases("masks", c, n);
}

/* Long decodes the library splits itself (num_splits 0) and with a forced
 * count: against the CPU, and bitwise the same in repeated calls. Short,
 * empty and full caches in one batch leave some splits without keys. */
static void long_decodes(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config c[10];
    int n = 0;
    kv_config a = base_config(BF16, 3, 8, 2, 128, 1, 0, 9000);
    a.splits[0] = 0, a.splits[1] = 0, a.splits[2] = 3;
    c[n++] = a;                                         /* GQA 4, random lengths */
    kv_config b = a;
    b.block_size = 16, b.s_new = 2, b.rotary_dim = 128, c[n++] = b; /* paged 16, append + rotary */
    b = a, b.h = 16, b.d = b.dv = 64, b.block_size = 256, b.softcap = 20, c[n++] = b; /* group 8, d64 */
    b = a, b.h = b.hk = 4, b.sq = 2, b.causal = 1, b.window_left = 3000, b.window_right = 0, c[n++] = b;
    b = a, b.b = 5, b.seqlens = 0, c[n++] = b;           /* every cache empty */
    b = a, b.b = 2, b.hk = 1, b.capacity = 40000, b.seqlens = -2, b.alibi = 1, c[n++] = b; /* MQA, full */
    if (!test_quick()) { /* MHA over 64k keys: on a 132-SM Hopper the heuristic's plan is one CTA per SM,
                            16 heads x 8 splits of 8192 keys (hopper_kvcache.h); 512 MiB of cache */
        b = base_config(BF16, 1, 16, 16, 128, 1, 1, 65536), b.seqlens = -2, c[n++] = b;
        /* MQA with a group of 32: the 32-row tile one CTA per SM, 2 x 63
           splits of 1088 keys (the same rule) */
        b = base_config(BF16, 2, 32, 1, 128, 1, 1, 70000), b.seqlens = -2, c[n++] = b;
    }
    run_cases("long decodes", c, n);

    kv_case kc;
    case_init(&kc, &a, test_seed("long decode determinism", 0));
    assert_int_equal(gpu_call(&kc, 0, NULL, NULL), FLASHC_SUCCESS);
    unsigned char *out0 = buf_fetch(&kc.out), *lse0 = buf_fetch(&kc.lse);
    for (int call = 0; call < 3; ++call) {
        assert_int_equal(gpu_call(&kc, 0, NULL, NULL), FLASHC_SUCCESS);
        unsigned char *out = buf_fetch(&kc.out), *lse = buf_fetch(&kc.lse);
        assert_memory_equal(out, out0, kc.out.bytes);
        assert_memory_equal(lse, lse0, kc.lse.bytes);
        free(out), free(lse);
    }
    free(out0), free(lse0);
    case_free(&kc);
    printf("cuda kvcache long decodes: identical calls give identical bytes\n");
}

/* Step t's arguments in a decode_steps run: k_new / v_new row t of the
 * (b, STEPS, hk, .) buffers, cache_seqlens + t, out and LSE of step t. */
static void step_args(kv_call *t, kv_case *kc, int on_gpu, int step, int steps, buf *seqlens, buf *out,
                      buf *lse) {
    const kv_config *c = &kc->cfg;
    const size_t kn_row = (size_t)c->hk * c->d * 2, vn_row = (size_t)c->hk * c->dv * 2;
    unsigned char *kn = on_gpu ? (unsigned char *)kc->k_new.dev : kc->k_new.host;
    unsigned char *vn = on_gpu ? (unsigned char *)kc->v_new.dev : kc->v_new.host;
    t->kn.data = kn + step * kn_row, t->kn.stride[0] = (int64_t)steps * c->hk * c->d;
    t->vn.data = vn + step * vn_row, t->vn.stride[0] = (int64_t)steps * c->hk * c->dv;
    const size_t seq_bytes = (size_t)c->b * 4, out_bytes = (size_t)c->b * c->sq * c->h * c->dv * 2,
                 lse_bytes = (size_t)c->b * c->h * c->sq * 4;
    t->seqlens.data = (on_gpu ? (unsigned char *)seqlens->dev : seqlens->host) + step * seq_bytes;
    t->out.data = (on_gpu ? (unsigned char *)out->dev : out->host) + step * out_bytes;
    t->lse.data = (on_gpu ? (unsigned char *)lse->dev : lse->host) + step * lse_bytes;
}

/* Consecutive decode steps on one stream with nothing between them and one
 * workspace: each step appends a token that the next reads as an older
 * cache row. On Hopper a step's attention CTAs write that token themselves
 * and read it through TMA (FLASHC_CUDA_KVCACHE_APPEND=kernel: read the
 * older rows while the append kernel still runs), and the previous step's
 * combine may still read the partials; every step's out and LSE, and the
 * cache after the last step, must equal the CPU's, which runs the same
 * steps in order. */
static void decode_steps(void **state) {
    (void)state;
    REQUIRE_GPU();
    enum { STEPS = 6 };
    static const int runs[][3] = {/* block size, num_splits, rotary_dim */ {0, 0, 128}, {16, 3, 64}, {64, 1, 0},
                                  {0, 7, 0}};
    int failed = 0;
    for (int r = 0; r < 4; ++r) {
        kv_config cfg = base_config(r % 2 ? FP16 : BF16, 3, 8, 2, 128, 1, STEPS, 1200);
        cfg.block_size = runs[r][0], cfg.rotary_dim = runs[r][2];
        kv_case kc;
        case_init(&kc, &cfg, test_seed("decode steps", (uint64_t)r)); /* seqlens random in [0, capacity - STEPS] */
        kc.cfg.s_new = 1;                                             /* each step appends one of the STEPS rows */
        const kv_config *c = &kc.cfg;
        buf seqlens, out, lse;
        buf_init(&seqlens, (size_t)STEPS * c->b * 4);
        buf_init(&out, (size_t)STEPS * c->b * c->sq * c->h * c->dv * 2);
        buf_init(&lse, (size_t)STEPS * c->b * c->h * c->sq * 4);
        for (int step = 0; step < STEPS; ++step)
            for (int i = 0; i < c->b; ++i) {
                const int32_t len = kc.seqlens_h[i] + step;
                memcpy(seqlens.host + 4 * ((size_t)step * c->b + i), &len, 4);
            }
        buf_upload(&seqlens);
        buf_poison_dev(&out);
        buf_poison_dev(&lse);

        /* the GPU's steps first (the CPU's change the host cache) */
        cudaStream_t stream;
        assert_true(cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
        kv_call t;
        call_init(&t, &kc, 1, runs[r][1], stream);
        size_t bytes = 0;
        assert_int_equal(flashc_attention_kvcache_workspace_size(&t.args, &bytes), FLASHC_SUCCESS);
        void *ws = NULL;
        if (bytes) {
            assert_true(cuda_ok(cudaMalloc(&ws, bytes), "cudaMalloc workspace"));
            poison_dev(ws, bytes);
        }
        for (int step = 0; step < STEPS; ++step) {
            call_init(&t, &kc, 1, runs[r][1], stream);
            step_args(&t, &kc, 1, step, STEPS, &seqlens, &out, &lse);
            t.args.workspace = ws, t.args.workspace_bytes = bytes;
            assert_int_equal(flashc_attention_kvcache(&t.args), FLASHC_SUCCESS);
        }
        assert_true(cuda_ok(cudaStreamSynchronize(stream), "decode steps"));
        for (int step = 0; step < STEPS; ++step) {
            kv_call cpu;
            call_init(&cpu, &kc, 0, 1, NULL);
            step_args(&cpu, &kc, 0, step, STEPS, &seqlens, &out, &lse);
            assert_int_equal(flashc_attention_kvcache(&cpu.args), FLASHC_SUCCESS);
        }
        char desc[256], what[320];
        describe(c, desc, sizeof desc);
        unsigned char *out_gpu = buf_fetch(&out), *lse_gpu = buf_fetch(&lse);
        const size_t out_bytes = kc.out.bytes, lse_bytes = kc.lse.bytes;
        int bad = 0;
        for (int step = 0; step < STEPS; ++step) { /* compare_outputs reads the CPU's from kc.out / kc.lse */
            memcpy(kc.out.host, out.host + step * out_bytes, out_bytes);
            memcpy(kc.lse.host, lse.host + step * lse_bytes, lse_bytes);
            snprintf(what, sizeof what, "[%s] num_splits %d, step %d", desc, runs[r][1], step);
            bad += compare_outputs(&kc, out_gpu + step * out_bytes, lse_gpu + step * lse_bytes, what) != 0;
        }
        snprintf(what, sizeof what, "[%s] num_splits %d, after %d steps", desc, runs[r][1], STEPS);
        bad += compare_caches(&kc, what);
        failed += bad != 0;
        free(out_gpu), free(lse_gpu);
        if (ws) cudaFree(ws);
        cudaStreamDestroy(stream);
        buf_free(&seqlens), buf_free(&out), buf_free(&lse);
        case_free(&kc);
    }
    printf("cuda kvcache decode steps: %d/4 runs of %d steps on one stream passed\n", 4 - failed, STEPS);
    if (failed) fail_msg("decode steps: %d of 4 runs failed (details above)", failed);
}

/* A CUDA graph of the call (append, attention, split combine) replays to
 * the same results, caches included, as the direct call (each from the
 * caches as made). */
static void graph_capture(void **state) {
    (void)state;
    REQUIRE_GPU();
    kv_config cfg = base_config(BF16, 2, 8, 2, 128, 1, 1, 3000);
    cfg.rotary_dim = 64, cfg.block_size = 64;
    kv_case kc;
    case_init(&kc, &cfg, test_seed("graph", 0));
    cudaStream_t stream;
    assert_true(cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream"));
    for (int splits = 1; splits <= 7; splits += 6) {
        void *ws = NULL;
        caches_reset(&kc);
        assert_int_equal(gpu_call(&kc, splits, stream, &ws), FLASHC_SUCCESS); /* warm: smem opt-in */
        unsigned char *out0 = buf_fetch(&kc.out), *lse0 = buf_fetch(&kc.lse);
        unsigned char *k0 = buf_fetch(&kc.k_cache), *v0 = buf_fetch(&kc.v_cache);
        kv_call t;
        call_init(&t, &kc, 1, splits, stream);
        size_t bytes = 0;
        assert_int_equal(flashc_attention_kvcache_workspace_size(&t.args, &bytes), FLASHC_SUCCESS);
        t.args.workspace = ws;
        t.args.workspace_bytes = bytes;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        assert_true(cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture"));
        flashc_status st = flashc_attention_kvcache(&t.args);
        assert_true(cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture"));
        assert_int_equal(st, FLASHC_SUCCESS);
        assert_true(cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
        for (int replay = 0; replay < 2; ++replay) {
            caches_reset(&kc); /* the replay's own append is compared */
            buf_poison_dev(&kc.out);
            buf_poison_dev(&kc.lse);
            assert_true(cuda_ok(cudaGraphLaunch(exec, stream), "launch"));
            assert_true(cuda_ok(cudaStreamSynchronize(stream), "replay"));
            unsigned char *out = buf_fetch(&kc.out), *lse = buf_fetch(&kc.lse);
            unsigned char *k = buf_fetch(&kc.k_cache), *v = buf_fetch(&kc.v_cache);
            assert_memory_equal(out, out0, kc.out.bytes);
            assert_memory_equal(lse, lse0, kc.lse.bytes);
            assert_memory_equal(k, k0, kc.k_cache.bytes);
            assert_memory_equal(v, v0, kc.v_cache.bytes);
            free(out), free(lse), free(k), free(v);
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        free(out0), free(lse0), free(k0), free(v0);
        if (ws) cudaFree(ws);
    }
    cudaStreamDestroy(stream);
    case_free(&kc);
    printf("cuda kvcache graph capture: replays equal the direct calls\n");
}

/* Out-of-range index tensors on the device: the call succeeds, writes only
 * finite values (or zeros), and touches no cache row of the broken
 * sequences; memcheck (gpu_check.sh) sees no access outside the tensors. */
static void bad_indices(void **state) {
    (void)state;
    REQUIRE_GPU();
    for (int paged_case = 0; paged_case < 2; ++paged_case) {
        kv_config cfg = base_config(BF16, 4, 4, 2, 64, 2, 2, 128);
        cfg.leftpad = 1;
        if (paged_case)
            cfg.block_size = 16;
        else
            cfg.batch_idx = 1, cfg.cache_batch = 4;
        kv_case kc;
        case_init(&kc, &cfg, test_seed("bad indices", (uint64_t)paged_case));
        int32_t v;
        v = cfg.capacity; /* sequence 1: seqlens + new rows past the capacity */
        memcpy(kc.seqlens.host + 4, &v, 4);
        v = -3; /* sequence 2: negative leftpad */
        memcpy(kc.leftpad.host + 8, &v, 4);
        if (paged_case) { /* sequence 3: block-table entries outside the blocks */
            for (int j = 0; j < kc.max_blocks; ++j) {
                v = j % 2 ? -1 : kc.num_blocks + j;
                memcpy(kc.block_table.host + 4 * (3 * (size_t)kc.max_blocks + j), &v, 4);
            }
        } else {
            v = 1000; /* sequence 3: a cache batch that does not exist */
            memcpy(kc.batch_idx.host + 12, &v, 4);
        }
        buf *edited[] = {&kc.seqlens, &kc.leftpad, &kc.block_table, &kc.batch_idx};
        for (int i = 0; i < 4; ++i) buf_upload(edited[i]);
        for (int splits = 1; splits <= 4; splits += 3) {
            assert_int_equal(gpu_call(&kc, splits, NULL, NULL), FLASHC_SUCCESS);
            unsigned char *out = buf_fetch(&kc.out);
            int64_t nonfinite = 0;
            for (int64_t i = 0; i < (int64_t)(kc.out.bytes / 2); ++i) nonfinite += !isfinite(load16(cfg.dtype, out, i));
            free(out);
            assert_int_equal(nonfinite, 0);
        }
        /* the broken sequences' cache rows: still as uploaded (sequence 0
         * appended its rows, which is all that changed) */
        unsigned char *cache = buf_fetch(&kc.k_cache);
        int64_t changed_elsewhere = 0;
        const int64_t row_bytes = (int64_t)cfg.hk * cfg.d * 2;
        for (int64_t row = 0; row < (int64_t)(kc.k_cache.bytes / row_bytes); ++row) {
            int own = 0; /* a row sequence 0 appends */
            for (int r = 0; r < cfg.s_new; ++r) own |= cache_row(&kc, 0, kc.seqlens_h[0] + r) == row;
            if (!own && memcmp(cache + row * row_bytes, kc.k_cache.host + row * row_bytes, (size_t)row_bytes))
                ++changed_elsewhere;
        }
        free(cache);
        case_free(&kc);
        assert_int_equal(changed_elsewhere, 0);
    }
    printf("cuda kvcache bad indices: no writes outside the valid sequence, outputs finite\n");
}

/* The varlen forward with a block table: paged K/V of block sizes 16 / 64
 * / 256, GQA, causal or not, seqused_k, rows outside every sequence. */
static void varlen_paged_forward(void **state) {
    (void)state;
    REQUIRE_GPU();
    /* the last at head dim 32: head pairs on Hopper (hopper_kvcache.h), in
       tiles of 64 rows */
    static const int sizes[] = {16, 64, 256, 64};
    int failed = 0, count = 0;
    for (int s = 0; s < 4; ++s)
        for (int causal = 0; causal < 2; ++causal) {
            ++count;
            const flashc_dtype dt = s & 1 ? FP16 : BF16;
            const int b = 3, h = 8, hk = 2, d = s == 3 ? 32 : 128, bs = sizes[s], max_blocks = (600 + bs - 1) / bs;
            const int lens_q[3] = {1, 37, 130}, lens_k[3] = {600, 0, 333};
            test_rng rng;
            test_rng_init(&rng, test_seed("varlen paged", (uint64_t)(2 * s + causal)));
            const int gap = 2, total_q = gap + 1 + 37 + 130 + gap, num_blocks = b * max_blocks + 2;
            int32_t cu_q[4], cu_k[4], seqused[3];
            cu_q[0] = gap, cu_k[0] = 0;
            for (int i = 0; i < b; ++i) {
                cu_q[i + 1] = cu_q[i] + lens_q[i];
                cu_k[i + 1] = cu_k[i] + lens_k[i];
                seqused[i] = lens_k[i] - (i == 0 ? 17 : 0);
            }
            buf q, kc, vc, out, lse, bcu_q, bcu_k, bused, btable;
            buf_init(&q, (size_t)total_q * h * d * 2);
            fill_normal(&q, dt, (int64_t)total_q * h * d, &rng);
            buf_init(&kc, (size_t)num_blocks * bs * hk * d * 2);
            buf_init(&vc, (size_t)num_blocks * bs * hk * d * 2);
            buf_init(&btable, (size_t)b * max_blocks * 4);
            for (int i = 0; i < b * max_blocks; ++i) {
                int32_t blk = (i * 7 + 3) % num_blocks; /* a permutation: 7 is prime to num_blocks here */
                memcpy(btable.host + 4 * (size_t)i, &blk, 4);
            }
            for (int i = 0; i < b; ++i)
                for (int c = 0; c < seqused[i]; ++c) {
                    int32_t blk;
                    memcpy(&blk, btable.host + 4 * ((size_t)i * max_blocks + c / bs), 4);
                    int64_t row = (int64_t)blk * bs + c % bs;
                    for (int x = 0; x < hk * d; ++x) {
                        store16(dt, kc.host, row * hk * d + x, test_rng_normal(&rng));
                        store16(dt, vc.host, row * hk * d + x, test_rng_normal(&rng));
                    }
                }
            buf_init(&out, (size_t)total_q * h * d * 2);
            buf_init(&lse, (size_t)h * total_q * 4);
            buf_init(&bcu_q, 16), buf_init(&bcu_k, 16), buf_init(&bused, 12);
            memcpy(bcu_q.host, cu_q, 16), memcpy(bcu_k.host, cu_k, 16), memcpy(bused.host, seqused, 12);
            buf *up[] = {&q, &kc, &vc, &btable, &bcu_q, &bcu_k, &bused};
            for (int i = 0; i < 7; ++i) buf_upload(up[i]);
            unsigned char *gpu_out = NULL, *gpu_lse = NULL;
            for (int on_gpu = 1; on_gpu >= 0; --on_gpu) {
                int64_t qs[3] = {total_q, h, d}, ks[4] = {num_blocks, bs, hk, d}, ls[2] = {h, total_q};
                int64_t cs[1] = {b + 1}, us[1] = {b}, ts[2] = {b, max_blocks};
                flashc_tensor tq = tensor_of(&q, on_gpu, dt, 3, qs), tk = tensor_of(&kc, on_gpu, dt, 4, ks);
                flashc_tensor tv = tensor_of(&vc, on_gpu, dt, 4, ks), to = tensor_of(&out, on_gpu, dt, 3, qs);
                flashc_tensor tl = tensor_of(&lse, on_gpu, FLASHC_DTYPE_FLOAT32, 2, ls);
                flashc_tensor tcq = tensor_of(&bcu_q, on_gpu, FLASHC_DTYPE_INT32, 1, cs);
                flashc_tensor tck = tensor_of(&bcu_k, on_gpu, FLASHC_DTYPE_INT32, 1, cs);
                flashc_tensor tu = tensor_of(&bused, on_gpu, FLASHC_DTYPE_INT32, 1, us);
                flashc_tensor tt = tensor_of(&btable, on_gpu, FLASHC_DTYPE_INT32, 2, ts);
                flashc_forward_args a;
                memset(&a, 0, sizeof a);
                a.q = &tq, a.k = &tk, a.v = &tv, a.out = &to, a.lse = &tl;
                a.varlen.cu_seqlens_q = &tcq, a.varlen.cu_seqlens_k = &tck, a.varlen.seqused_k = &tu;
                a.varlen.block_table = &tt;
                a.varlen.max_seqlen_q = 130, a.varlen.max_seqlen_k = 600;
                a.options = flashc_attention_options_default();
                a.options.causal = causal;
                if (on_gpu) buf_poison_dev(&out), buf_poison_dev(&lse);
                flashc_status st = flashc_attention_forward(&a);
                if (st != FLASHC_SUCCESS) {
                    fprintf(stderr, "  varlen paged (%s): %s\n", on_gpu ? "GPU" : "CPU", flashc_last_error_message());
                    ++failed;
                    break;
                }
                if (on_gpu) {
                    cuda_ok(cudaDeviceSynchronize(), "varlen paged forward");
                    gpu_out = buf_fetch(&out), gpu_lse = buf_fetch(&lse);
                    if (!causal && s == 0) { /* errors specific to this path */
                        a.options.dropout_p = 0.1;
                        assert_int_not_equal(flashc_attention_forward(&a), FLASHC_SUCCESS);
                        assert_non_null(strstr(flashc_last_error_message(), "dropout_p"));
                    }
                }
            }
            if (gpu_out) {
                kv_case view; /* compare_outputs on a (1, total_q, h, d) shape */
                memset(&view, 0, sizeof view);
                view.cfg = base_config(dt, 1, h, hk, d, total_q, 0, 1);
                view.out = out;
                view.lse = lse;
                int bad = compare_outputs(&view, gpu_out, gpu_lse, "varlen paged forward");
                if (bad) fprintf(stderr, "  -> FAILED varlen paged bs %d d %d causal %d\n", bs, d, causal);
                failed += bad != 0;
            }
            free(gpu_out), free(gpu_lse);
            buf *all[] = {&q, &kc, &vc, &out, &lse, &bcu_q, &bcu_k, &bused, &btable};
            for (int i = 0; i < 9; ++i) buf_free(all[i]);
        }
    printf("cuda kvcache varlen paged forward: %d/%d cases passed\n", count - failed, count);
    if (failed) fail_msg("varlen paged forward: %d of %d cases failed", failed, count);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(append_and_decode),
        cmocka_unit_test(paged),
        cmocka_unit_test(rotary),
        cmocka_unit_test(head_pairs),
        cmocka_unit_test(masks),
        cmocka_unit_test(long_decodes),
        cmocka_unit_test(decode_steps),
        cmocka_unit_test(graph_capture),
        cmocka_unit_test(bad_indices),
        cmocka_unit_test(varlen_paged_forward),
    };
    const char *filter = getenv("FLASHC_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    if (!flashc_cuda_available())
        printf("test_cuda_kvcache: no usable CUDA device: every test is skipped\n");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
