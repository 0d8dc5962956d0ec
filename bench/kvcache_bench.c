/* kvcache_bench: the bandwidth of attention over a KV cache (decode) on the
 * GPU, against the device's copy bandwidth measured in the same run.
 *
 * Decode with one query row, bf16, head dim 128, GQA 32 / 8 and MHA 32 / 32,
 * batch x cache lengths (every cache full: cache_seqlens = capacity, no
 * append), contiguous and paged caches (block sizes 16, 64, 256, blocks in
 * random order; and 64 in order, which tells what the random order costs
 * in address translation), num_splits 0 (the library's choice; --splits N
 * fixes it, for sweeps of the choice). The K / V bytes a
 * call must read, over its time, are its bandwidth; the copy bandwidth is a
 * device-to-device cudaMemcpy of 4 GiB, counted as bytes read + written.
 *
 * Timing: CUDA events around replays of a CUDA graph of `calls` calls
 * (so host overhead stays out), median of 5 replays after 200 ms of
 * warm-up replays;
 * the caches rotate over copies that together exceed 256 MiB, so small
 * problems are not served from the 50 MiB L2. Values are a memset pattern
 * (finite, all equal): bandwidth does not depend on them.
 *
 * Every layout of a row reads the same K / V buffers (allocated once per
 * row; the paged layouts view them as blocks).
 *
 * A library built with -DFLASHC_KVC_TRACE (CMAKE_CUDA_FLAGS) records per-CTA
 * timelines: with FLASHC_KVC_TRACE_OUT=file, each layout's last call is
 * appended there ("hk,batch,cache,block_size[o],kernel cta start end sm
 * steps"; bench/kvcache_trace_summary.py sums them up).
 *
 * --append times each layout three ways: as above; with one new token
 * appended (k_new / v_new written at cache_seqlens = cache - 1, so the
 * attention reads the same keys); and with rotary on q and the new k
 * (rotary_dim = 128, half-split). It prints what the append and the
 * rotary add per call against the bytes they write (the appended K / V
 * rows, and q_rotated) at the copy bandwidth.
 *
 * Usage: kvcache_bench [--quick] [--min-gib N] [--max-gib N] [--reverse]
 *                      [--shape KV_HEADS,BATCH,CACHE] [--splits N] [--head-major]
 *                      [--layouts B,B,..] [--append]
 * (a markdown table; --reverse runs each row's layouts last to first;
 * --head-major lays the contiguous caches out head by head, a probe of
 * whether the heads sharing a cache row's DRAM pages matters (it does not:
 * bench/NOTES.md);
 * --shape runs only that row (any KV heads, batch and cache, on the grid
 * or not), e.g. for a profiler or an A/B; --layouts only those layouts: 0
 * contiguous, a block size, -64 blocks of 64 in order) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "flashc.h"

#define CHECK_CUDA(call)                                                                   \
    do {                                                                                   \
        cudaError_t err_ = (call);                                                         \
        if (err_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define CHECK_FLASHC(call)                                                                 \
    do {                                                                                   \
        flashc_status st_ = (call);                                                        \
        if (st_ != FLASHC_SUCCESS) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, flashc_last_error_message()); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* Defined by a -DFLASHC_KVC_TRACE build of the library only
 * (src/cuda/hopper_kvcache_trace.cuh): per-CTA timelines of the last call. */
extern void flashc_kvc_trace_dump(const char *path, const char *label) __attribute__((weak));
extern void flashc_kvc_trace_reset(void) __attribute__((weak));

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return v[n / 2];
}

/* GB/s of a 4 GiB device-to-device copy (read + write). */
static double copy_bandwidth(cudaStream_t stream) {
    const size_t bytes = (size_t)4 << 30;
    void *a, *b;
    CHECK_CUDA(cudaMalloc(&a, bytes));
    CHECK_CUDA(cudaMalloc(&b, bytes));
    CHECK_CUDA(cudaMemsetAsync(a, 1, bytes, stream));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    float ms[7];
    for (int i = 0; i < 8; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, stream));
        CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream));
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        if (i) CHECK_CUDA(cudaEventElapsedTime(&ms[i - 1], e0, e1));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)bytes / (median(ms, 7) * 1e-3) / 1e9;
}

/* `bytes` of device memory holding the memset pattern 0x3C (finite bf16
 * values, all equal). */
static void *device_filled(size_t bytes, cudaStream_t stream) {
    void *p;
    CHECK_CUDA(cudaMalloc(&p, bytes));
    CHECK_CUDA(cudaMemsetAsync(p, 0x3C, bytes, stream));
    return p;
}

typedef struct bench_row {
    int nheads, nheads_k, batch, cache, block_size;
    int in_order; /* paged: block i of the table is block i of the cache */
    int append;   /* 0: none; 1: one new token (k_new / v_new); 2: and rotary on q and k_new */
} bench_row;

/* The K / V caches of the current row, shared by its layouts: a 4-16 GiB
 * buffer allocated after another one was freed was read 12-15 % slower
 * than the first one (whatever the layout; bench/NOTES.md), so every
 * layout of a row reads the same memory. */
static int bench_splits; /* num_splits of every call: 0 = the library's choice */
static int bench_head_major; /* contiguous caches laid out (batch, head, row, column), viewed as flash_attn's shape */
static void *pool_k[16], *pool_v[16];
static size_t pool_bytes;
static int pool_copies;

static void pool_resize(size_t bytes, int copies, cudaStream_t stream) {
    if (bytes == pool_bytes && copies == pool_copies) return;
    for (int c = 0; c < pool_copies; ++c) cudaFree(pool_k[c]), cudaFree(pool_v[c]);
    for (int c = 0; c < copies; ++c) pool_k[c] = device_filled(bytes, stream), pool_v[c] = device_filled(bytes, stream);
    pool_bytes = bytes, pool_copies = copies;
}

/* Runs one row; returns the per-call time in microseconds and the splits
 * the library chose. */
static double run_row(const bench_row *r, cudaStream_t stream, int *splits_out) {
    const int d = 128, hk = r->nheads_k, h = r->nheads, b = r->batch, cap = r->cache;
    const size_t kv_elems = (size_t)b * cap * hk * d; /* per tensor */
    const size_t kv_bytes = 2 * kv_elems * 2;         /* K and V, bf16 */
    int copies = (int)(((size_t)256 << 20) / kv_bytes) + 1;
    if (copies > 16) copies = 16;
    const int bs = r->block_size;
    const int max_blocks = bs ? (cap + bs - 1) / bs : 0;
    const int64_t blocks = (int64_t)b * max_blocks;
    const flashc_device dev = {FLASHC_DEVICE_CUDA, 0};

    void *out, *kc[16], *vc[16], *table = NULL, *seqlens, *knew = NULL, *vnew = NULL, *cosine = NULL, *sine = NULL;
    void *q = device_filled((size_t)b * h * d * 2, stream);
    CHECK_CUDA(cudaMalloc(&out, (size_t)b * h * d * 2));
    if (r->append) { /* one token per sequence; rotary tables of cap positions */
        knew = device_filled((size_t)b * hk * d * 2, stream), vnew = device_filled((size_t)b * hk * d * 2, stream);
        cosine = device_filled((size_t)cap * (d / 2) * 2, stream);
        sine = device_filled((size_t)cap * (d / 2) * 2, stream);
    }
    pool_resize(kv_elems * 2, copies, stream);
    for (int c = 0; c < copies; ++c) kc[c] = pool_k[c], vc[c] = pool_v[c];
    int32_t *host = malloc(sizeof(int32_t) * (size_t)(blocks > b ? blocks : b));
    for (int i = 0; i < b; ++i) host[i] = r->append ? cap - 1 : cap; /* the same keys either way */
    CHECK_CUDA(cudaMalloc(&seqlens, sizeof(int32_t) * (size_t)b));
    CHECK_CUDA(cudaMemcpy(seqlens, host, sizeof(int32_t) * (size_t)b, cudaMemcpyHostToDevice));
    if (bs) { /* every block once, in random order unless in_order */
        for (int64_t i = 0; i < blocks; ++i) host[i] = (int32_t)i;
        uint64_t s = 88172645463325252ull;
        for (int64_t i = blocks - 1; i > 0 && !r->in_order; --i) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            int64_t j = (int64_t)(s % (uint64_t)(i + 1));
            int32_t t = host[i];
            host[i] = host[j], host[j] = t;
        }
        CHECK_CUDA(cudaMalloc(&table, sizeof(int32_t) * (size_t)blocks));
        CHECK_CUDA(cudaMemcpy(table, host, sizeof(int32_t) * (size_t)blocks, cudaMemcpyHostToDevice));
    }
    free(host);

    int64_t qs[4] = {b, 1, h, d}, ks[4] = {bs ? blocks : b, bs ? bs : cap, hk, d}, ss[1] = {b},
            ts[2] = {b, max_blocks}, ns[4] = {b, 1, hk, d}, rs[2] = {cap, d / 2};
    flashc_tensor tq = flashc_tensor_contiguous(q, FLASHC_DTYPE_BFLOAT16, dev, 4, qs);
    flashc_tensor to = flashc_tensor_contiguous(out, FLASHC_DTYPE_BFLOAT16, dev, 4, qs);
    flashc_tensor tseq = flashc_tensor_contiguous(seqlens, FLASHC_DTYPE_INT32, dev, 1, ss);
    flashc_tensor ttab = flashc_tensor_contiguous(table, FLASHC_DTYPE_INT32, dev, 2, ts);
    flashc_tensor tkn = flashc_tensor_contiguous(knew, FLASHC_DTYPE_BFLOAT16, dev, 4, ns);
    flashc_tensor tvn = flashc_tensor_contiguous(vnew, FLASHC_DTYPE_BFLOAT16, dev, 4, ns);
    flashc_tensor tcos = flashc_tensor_contiguous(cosine, FLASHC_DTYPE_BFLOAT16, dev, 2, rs);
    flashc_tensor tsin = flashc_tensor_contiguous(sine, FLASHC_DTYPE_BFLOAT16, dev, 2, rs);
    flashc_tensor tk[16], tv[16];
    flashc_kvcache_args args[16];
    size_t ws_bytes = 0;
    void *ws = NULL;
    for (int c = 0; c < copies; ++c) {
        tk[c] = flashc_tensor_contiguous(kc[c], FLASHC_DTYPE_BFLOAT16, dev, 4, ks);
        tv[c] = flashc_tensor_contiguous(vc[c], FLASHC_DTYPE_BFLOAT16, dev, 4, ks);
        if (bench_head_major && !bs) { /* each head's rows contiguous: row stride d, head stride cap * d */
            tk[c].stride[1] = tv[c].stride[1] = d;
            tk[c].stride[2] = tv[c].stride[2] = (int64_t)cap * d;
        }
        flashc_kvcache_args *a = &args[c];
        memset(a, 0, sizeof *a);
        a->q = &tq, a->k_cache = &tk[c], a->v_cache = &tv[c], a->out = &to;
        a->cache_seqlens = &tseq;
        if (bs) a->block_table = &ttab;
        if (r->append) a->k_new = &tkn, a->v_new = &tvn;
        if (r->append == 2) a->rotary_cos = &tcos, a->rotary_sin = &tsin;
        a->num_splits = bench_splits;
        a->options = flashc_attention_options_default();
        a->options.stream = stream;
        if (c == 0) {
            CHECK_FLASHC(flashc_attention_kvcache_workspace_size(a, &ws_bytes));
            if (ws_bytes) CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
        }
        a->workspace = ws, a->workspace_bytes = ws_bytes;
    }
    /* the split count behind the workspace size (partials of b * h rows
     * of d + 1 floats per split, plus the library's alignment slack and,
     * with rotary, q_rotated) */
    *splits_out = ws_bytes >= (size_t)b * h * (d + 1) * 8 ? (int)(ws_bytes / ((size_t)b * h * (d + 1) * 4)) : 1;

    /* enough calls per graph for about 2 ms at 3.5 TB/s */
    int calls = (int)(7e9 / (double)kv_bytes) + 1;
    if (calls > 200) calls = 200;
    for (int c = 0; c < copies; ++c) CHECK_FLASHC(flashc_attention_kvcache(&args[c])); /* warm-up, smem opt-in */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) CHECK_FLASHC(flashc_attention_kvcache(&args[i % copies]));
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    /* Warm-up: replays for 200 ms at least. One replay was not enough: the
     * first layout timed in a process ran 10-15 % slower than the same
     * layout timed after the others (2026-12-01, H200: 1086 against 950 us
     * at 64 x 16384), whichever layout came first. */
    float warm = 0, ms[5];
    CHECK_CUDA(cudaEventRecord(e0, stream));
    for (int i = 0; i < 1000 && warm < 200.0f; ++i) {
        CHECK_CUDA(cudaGraphLaunch(exec, stream));
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&warm, e0, e1));
    }
    for (int i = 0; i < 5; ++i) {
        CHECK_CUDA(cudaEventRecord(e0, stream));
        CHECK_CUDA(cudaGraphLaunch(exec, stream));
        CHECK_CUDA(cudaEventRecord(e1, stream));
        CHECK_CUDA(cudaEventSynchronize(e1));
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], e0, e1));
    }
    const char *trace_out = getenv("FLASHC_KVC_TRACE_OUT");
    if (flashc_kvc_trace_dump && trace_out) { /* the last call of one more replay */
        char label[96];
        const char *kernel = getenv("FLASHC_CUDA_KVCACHE");
        snprintf(label, sizeof label, "%d,%d,%d,%d%s,%s", r->nheads_k, b, cap, bs, r->in_order ? "o" : "",
                 kernel ? kernel : "default");
        flashc_kvc_trace_reset();
        CHECK_CUDA(cudaGraphLaunch(exec, stream));
        CHECK_CUDA(cudaStreamSynchronize(stream));
        flashc_kvc_trace_dump(trace_out, label);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(q), cudaFree(out), cudaFree(seqlens), cudaFree(table), cudaFree(ws);
    cudaFree(knew), cudaFree(vnew), cudaFree(cosine), cudaFree(sine);
    return median(ms, 5) * 1e3 / calls;
}

/* Whether `layout` (a block size, 0 contiguous, -64 blocks of 64 in order)
 * is in the comma-separated list. */
static int layout_listed(const char *list, int layout) {
    for (const char *at = list; at && *at; at = strchr(at, ',') ? strchr(at, ',') + 1 : NULL)
        if (atoi(at) == layout) return 1;
    return 0;
}

int main(int argc, char **argv) {
    int quick = 0, reverse = 0, only_hk = 0, only_batch = 0, only_cache = 0, append = 0;
    double min_gib = 0.0, max_gib = 16.0;
    const char *layouts_arg = NULL;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--max-gib") && i + 1 < argc)
            max_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--min-gib") && i + 1 < argc)
            min_gib = atof(argv[++i]);
        else if (!strcmp(argv[i], "--reverse"))
            reverse = 1;
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc &&
                 sscanf(argv[++i], "%d,%d,%d", &only_hk, &only_batch, &only_cache) == 3 && only_hk > 0 &&
                 only_batch > 0 && only_cache > 0 && 32 % only_hk == 0) {
            /* one row */
        } else if (!strcmp(argv[i], "--head-major")) {
            bench_head_major = 1;
        } else if (!strcmp(argv[i], "--splits") && i + 1 < argc) {
            bench_splits = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--layouts") && i + 1 < argc) {
            layouts_arg = argv[++i];
        } else if (!strcmp(argv[i], "--append")) {
            append = 1;
        } else {
            fprintf(stderr, "usage: kvcache_bench [--quick] [--min-gib N] [--max-gib N] [--reverse] "
                            "[--shape KV_HEADS,BATCH,CACHE] [--splits N] [--head-major] [--layouts B,B,..] "
                            "[--append]\n");
            return 2;
        }
    }
    if (!flashc_cuda_available()) {
        printf("kvcache_bench: no CUDA device\n");
        return 0;
    }
    cudaStream_t stream;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    struct cudaDeviceProp prop;
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    const double copy = copy_bandwidth(stream);
    printf("# %s, %d SMs; flashc %s; copy bandwidth (4 GiB cudaMemcpy D2D, read + write) %.0f GB/s\n", prop.name,
           prop.multiProcessorCount, flashc_version(), copy);
    printf("| heads | layout | batch | cache | tokens | splits | us / call | GB/s | / copy |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    int batches[] = {1, 4, 16, 64, 256}, caches[] = {1024, 4096, 16384, 32768, 131072}, kv_heads[] = {8, 32};
    static const int layouts[] = {0, 16, 64, 256, -64}; /* -64: in order */
    int n_heads = 2, n_batches = 5, n_caches = 5;
    if (only_hk) { /* --shape: that row alone, on the grid or not */
        kv_heads[0] = only_hk, batches[0] = only_batch, caches[0] = only_cache;
        n_heads = n_batches = n_caches = 1;
    }
    for (int hi = 0; hi < n_heads; ++hi)
        for (int bi = 0; bi < n_batches; ++bi)
            for (int ci = 0; ci < n_caches; ++ci)
                for (int lj = 0; lj < 5; ++lj) {
                    const int li = reverse ? 4 - lj : lj;
                    const int bs = layouts[li] < 0 ? -layouts[li] : layouts[li];
                    bench_row r = {32, kv_heads[hi], batches[bi], caches[ci], bs, layouts[li] < 0, 0};
                    const double bytes = 4.0 * r.batch * (double)r.cache * r.nheads_k * 128;
                    if (!only_hk && (bytes > max_gib * (1u << 30) || bytes < min_gib * (1u << 30))) continue;
                    if (quick && !(r.batch == 1 || r.batch * (double)r.cache >= 262144)) continue;
                    if (layouts_arg && !layout_listed(layouts_arg, layouts[li])) continue;
                    if (quick && r.block_size == 16 && r.batch != 1) continue;
                    double us_of[3] = {0, 0, 0};
                    for (r.append = 0; r.append <= (append ? 2 : 0); ++r.append) {
                        int splits = 1;
                        const double us = run_row(&r, stream, &splits);
                        const double gbs = bytes / (us * 1e-6) / 1e9;
                        char layout[48];
                        const char *added = r.append == 2 ? " +append+rotary" : r.append ? " +append" : "";
                        if (r.block_size)
                            snprintf(layout, sizeof layout, "paged %d%s%s", r.block_size,
                                     r.in_order ? " in order" : "", added);
                        else
                            snprintf(layout, sizeof layout, "contiguous%s", added);
                        printf("| %d/%d | %s | %d | %d | %lld | %d | %.1f | %.0f | %.3f |\n", r.nheads, r.nheads_k,
                               layout, r.batch, r.cache, (long long)r.batch * r.cache, splits, us, gbs, gbs / copy);
                        fflush(stdout);
                        us_of[r.append] = us;
                    }
                    if (append) { /* bytes moved, read + written: the new K / V rows; q and q_rotated */
                        const double kv_new = 2.0 * 2.0 * r.batch * r.nheads_k * 128 * 2;
                        const double q_rot = 2.0 * r.batch * r.nheads * 128 * 2;
                        printf("# append adds %.2f us (its %.0f bytes at the copy bandwidth: %.3f us); rotary adds "
                               "%.2f us more (%.0f bytes: %.3f us)\n",
                               us_of[1] - us_of[0], kv_new, kv_new / (copy * 1e3), us_of[2] - us_of[1], q_rot,
                               q_rot / (copy * 1e3));
                    }
                }
    cudaStreamDestroy(stream);
    return 0;
}
