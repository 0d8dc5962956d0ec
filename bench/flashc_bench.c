/* flashc_bench: forward and backward speed of flashc over a grid.
 *
 * CPU (--device cpu, or where no GPU is usable): GFLOP/s over hdim x seqlen
 * x dtype x threads x causal, each as a fraction of the machine's float32
 * FMA peak measured in the same run. Work per run: batch 1, heads = 16384 /
 * seqlen (at least 1), so every run processes tokens x heads = 16384 query
 * rows. Times: wall clock, median of the repeats after the warm-up runs.
 *
 * CUDA (the default where a GPU is usable): TFLOP/s on DESIGN.md's
 * standard grid: bf16, hdim 64/128/256, nheads = 2048 / hdim, batch =
 * 16384 / seqlen, seqlen 512..16384, causal and not. Times: CUDA events
 * around each call on a stream of the bench's own, median of the repeats
 * after the warm-up runs; where one set of tensors fits twice in L2, calls
 * rotate over several sets so the cache does not serve the inputs. A
 * backward the library reports as unsupported on CUDA is skipped with a
 * note.
 *
 * FLOPs follow DESIGN.md: forward 4*b*h*sq*sk*d, halved when causal;
 * backward 2.5x. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "common/device.h"
#include "common/host_data.h"
#include "common/measure.h"
#include "flashc.h"
#include "fma_peak.h"

#define MAX_LIST 16
#define TOKENS_TIMES_HEADS 16384
/* The GPU grid: batch * seqlen = 16384 tokens, nheads * hdim = 2048. */
#define GPU_TOKENS 16384
#define GPU_WIDTH 2048
/* Random values are drawn once into a pool and tiled over the tensors:
 * drawing every element of a 16k-token problem would take seconds. */
#define POOL_ELEMENTS (1 << 20)

typedef struct int_list {
    int n;
    long v[MAX_LIST];
} int_list;

typedef struct bench_options {
    int cuda;                          /* run the GPU grid */
    int_list hdim, seqlen, threads, causal;
    int ndtype;
    flashc_dtype dtype[4];
    int repeat, warmup;
    int tsv;
    int backward;
    int deterministic;                 /* backward in deterministic mode */
    double calibrate_seconds;
} bench_options;

typedef struct bench_result {
    double fwd_s, bwd_s;
    double fwd_gflops, bwd_gflops;
    size_t alloc_bytes;
} bench_result;

static void usage(FILE *out) {
    fputs("usage: flashc_bench [options]\n"
          "Forward and backward speed of flashc. On a GPU (the default where one is usable):\n"
          "TFLOP/s on the standard grid, batch 16384/seqlen, heads 2048/hdim, timed with CUDA\n"
          "events. On the CPU: GFLOP/s as fractions of the float32 FMA peak measured in the\n"
          "same run, batch 1, heads 16384/seqlen. Defaults: GPU / CPU.\n"
          "  --device D         cuda | cpu (cuda when a GPU is usable)\n"
          "  --quick            small grid: hdim 128, seqlen 1024,4096, bf16 / fp32 (CPU:\n"
          "                     threads 1,2)\n"
          "  --hdim LIST        head dims (64,128,256 / 64,128)\n"
          "  --seqlen LIST      sequence lengths (512..16384 / 512..8192, powers of 2)\n"
          "  --dtype LIST       bf16,fp16 / fp32,bf16,fp16,fp64 (bf16 / fp32,bf16)\n"
          "  --threads LIST     CPU thread counts (1,2)\n"
          "  --causal LIST      0 = non-causal, 1 = causal (0,1)\n"
          "  --repeat N         timed runs per measurement, median reported (30 / 3)\n"
          "  --warmup N         untimed runs first (5 / 1)\n"
          "  --forward-only     skip the backward\n"
          "  --deterministic    backward in deterministic mode (dQ summed in a fixed order)\n"
          "  --calibrate-seconds S  length of one CPU calibration trial (0.3)\n"
          "  --tsv              tab-separated output\n"
          "  --help             this text\n",
          out);
}

static int parse_list(const char *opt, const char *text, long lo, long hi, int_list *list) {
    char *copy = strdup(text), *save = NULL;
    if (!copy) return -1;
    list->n = 0;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end = NULL;
        errno = 0;
        long v = strtol(tok, &end, 10);
        if (errno || end == tok || *end || v < lo || v > hi) {
            fprintf(stderr, "flashc_bench: option --%s: '%s' is not an integer in [%ld, %ld]\n", opt, tok, lo, hi);
            rc = -1;
            break;
        }
        if (list->n == MAX_LIST) {
            fprintf(stderr, "flashc_bench: option --%s: more than %d values\n", opt, MAX_LIST);
            rc = -1;
            break;
        }
        list->v[list->n++] = v;
    }
    free(copy);
    if (rc == 0 && list->n == 0) {
        fprintf(stderr, "flashc_bench: option --%s: empty list\n", opt);
        rc = -1;
    }
    return rc;
}

static int parse_dtypes(const char *text, bench_options *o) {
    char *copy = strdup(text), *save = NULL;
    if (!copy) return -1;
    o->ndtype = 0;
    int rc = 0;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (o->ndtype == 4 || flashc_tool_parse_dtype(tok, &o->dtype[o->ndtype]) != 0) {
            fprintf(stderr, "flashc_bench: option --dtype: '%s' is not one of fp32, bf16, fp16, fp64 (at most 4)\n", tok);
            rc = -1;
            break;
        }
        o->ndtype++;
    }
    free(copy);
    if (rc == 0 && o->ndtype == 0) {
        fprintf(stderr, "flashc_bench: option --dtype: empty list\n");
        rc = -1;
    }
    return rc;
}

static int parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    int_list l;
    if (parse_list(opt, text, lo, hi, &l) != 0) return -1;
    if (l.n != 1) {
        fprintf(stderr, "flashc_bench: option --%s takes one value\n", opt);
        return -1;
    }
    *out = (int)l.v[0];
    return 0;
}

/* Returns 0 to run, 1 after --help, -1 on a bad option. Lists not given
 * take the defaults (or the --quick values) of the device chosen. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { O_QUICK = 1000, O_HDIM, O_SEQLEN, O_DTYPE, O_THREADS, O_CAUSAL, O_REPEAT, O_WARMUP,
           O_FWD, O_DET, O_CAL, O_TSV, O_DEVICE, O_HELP };
    static const struct option longopts[] = {
        {"quick", no_argument, NULL, O_QUICK},       {"hdim", required_argument, NULL, O_HDIM},
        {"seqlen", required_argument, NULL, O_SEQLEN}, {"dtype", required_argument, NULL, O_DTYPE},
        {"threads", required_argument, NULL, O_THREADS}, {"causal", required_argument, NULL, O_CAUSAL},
        {"repeat", required_argument, NULL, O_REPEAT}, {"warmup", required_argument, NULL, O_WARMUP},
        {"forward-only", no_argument, NULL, O_FWD},   {"calibrate-seconds", required_argument, NULL, O_CAL},
        {"tsv", no_argument, NULL, O_TSV},            {"device", required_argument, NULL, O_DEVICE},
        {"deterministic", no_argument, NULL, O_DET},  {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof *o);
    int quick = 0, device = -1; /* -1 auto, 0 cpu, 1 cuda */
    int given_hdim = 0, given_seqlen = 0, given_dtype = 0, given_threads = 0, given_causal = 0;
    int given_repeat = 0, given_warmup = 0;
    o->tsv = 0;
    o->backward = 1;
    o->calibrate_seconds = 0.3;
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":", longopts, NULL);
        if (c == -1) break;
        int rc = 0;
        switch (c) {
            case O_QUICK: quick = 1; break;
            case O_HDIM: rc = parse_list("hdim", optarg, 1, 256, &o->hdim); given_hdim = 1; break;
            case O_SEQLEN: rc = parse_list("seqlen", optarg, 1, 1 << 20, &o->seqlen); given_seqlen = 1; break;
            case O_DTYPE: rc = parse_dtypes(optarg, o); given_dtype = 1; break;
            case O_THREADS: rc = parse_list("threads", optarg, 0, 1024, &o->threads); given_threads = 1; break;
            case O_CAUSAL: rc = parse_list("causal", optarg, 0, 1, &o->causal); given_causal = 1; break;
            case O_REPEAT: rc = parse_int("repeat", optarg, 1, 1000, &o->repeat); given_repeat = 1; break;
            case O_WARMUP: rc = parse_int("warmup", optarg, 0, 1000, &o->warmup); given_warmup = 1; break;
            case O_FWD: o->backward = 0; break;
            case O_DET: o->deterministic = 1; break;
            case O_CAL: {
                char *end = NULL;
                o->calibrate_seconds = strtod(optarg, &end);
                if (end == optarg || *end || !(o->calibrate_seconds >= 0.01 && o->calibrate_seconds <= 60)) {
                    fprintf(stderr, "flashc_bench: option --calibrate-seconds expects a number in [0.01, 60], got '%s'\n", optarg);
                    rc = -1;
                }
                break;
            }
            case O_TSV: o->tsv = 1; break;
            case O_DEVICE:
                if (strcmp(optarg, "cpu") == 0) device = 0;
                else if (strcmp(optarg, "cuda") == 0) device = 1;
                else {
                    fprintf(stderr, "flashc_bench: option --device expects 'cpu' or 'cuda', got '%s'\n", optarg);
                    rc = -1;
                }
                break;
            case O_HELP: usage(stdout); return 1;
            case ':': fprintf(stderr, "flashc_bench: option '%s' needs a value\n", argv[optind - 1]); return -1;
            default:
                fprintf(stderr, "flashc_bench: unknown option '%s' (see --help)\n", argv[optind - 1]);
                return -1;
        }
        if (rc) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "flashc_bench: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    int usable = flashc_tool_cuda_usable();
    if (device == 1 && !usable) {
        fprintf(stderr, "flashc_bench: option --device cuda: no CUDA device is available to this build "
                        "(flashc_cuda_available() is %d)\n", flashc_cuda_available());
        return -1;
    }
    o->cuda = device == 1 || (device == -1 && usable);
    if (o->cuda) {
        if (!given_hdim) parse_list("hdim", quick ? "128" : "64,128,256", 1, 256, &o->hdim);
        if (!given_seqlen)
            parse_list("seqlen", quick ? "1024,4096" : "512,1024,2048,4096,8192,16384", 1, 1 << 20, &o->seqlen);
        if (!given_dtype) parse_dtypes("bf16", o);
        if (!given_repeat) o->repeat = 30;
        if (!given_warmup) o->warmup = 5;
        parse_list("threads", "0", 0, 1024, &o->threads); /* unused on the GPU */
        for (int i = 0; i < o->ndtype; ++i)
            if (o->dtype[i] != FLASHC_DTYPE_BFLOAT16 && o->dtype[i] != FLASHC_DTYPE_FLOAT16) {
                fprintf(stderr, "flashc_bench: option --dtype: the CUDA backend takes bf16 and fp16 only, got %s\n",
                        flashc_tool_dtype_name(o->dtype[i]));
                return -1;
            }
    } else {
        if (!given_hdim) parse_list("hdim", quick ? "128" : "64,128", 1, 256, &o->hdim);
        if (!given_seqlen) parse_list("seqlen", quick ? "1024,4096" : "512,1024,2048,4096,8192", 1, 1 << 20, &o->seqlen);
        if (!given_dtype) parse_dtypes(quick ? "fp32" : "fp32,bf16", o);
        if (!given_threads) parse_list("threads", "1,2", 0, 1024, &o->threads);
        if (!given_repeat) o->repeat = 3;
        if (!given_warmup) o->warmup = 1;
    }
    if (!given_causal) parse_list("causal", "0,1", 0, 1, &o->causal);
    return 0;
}

/* The forward's scratch (flashc_attention_forward_allocating), kept for
 * every call of the run. */
static flashc_tool_scratch forward_scratch;

static flashc_status forward(const flashc_forward_args *fa) {
    return flashc_attention_forward_allocating(fa, flashc_tool_scratch_allocate, &forward_scratch);
}

static void print_status_error(const char *what, flashc_status st) {
    fprintf(stderr, "flashc_bench: %s failed: %s: %s\n", what, flashc_status_string(st),
            flashc_last_error_message());
}

/* Median seconds of `repeat` calls after `warmup` calls; -1 on error. */
static double time_call(int backward, const flashc_forward_args *fa, const flashc_backward_args *ba,
                        int warmup, int repeat) {
    double times[1000];
    for (int i = 0; i < warmup + repeat; ++i) {
        double t = flashc_tool_now();
        flashc_status st = backward ? flashc_attention_backward(ba) : forward(fa);
        t = flashc_tool_now() - t;
        if (st != FLASHC_SUCCESS) {
            print_status_error(backward ? "backward" : "forward", st);
            return -1.0;
        }
        if (i >= warmup) times[i - warmup] = t;
    }
    return flashc_tool_median(times, repeat);
}

static int bench_one(const bench_options *o, int64_t d, int64_t s, flashc_dtype dt, int threads, int causal,
                     bench_result *r) {
    memset(r, 0, sizeof *r);
    int64_t b = 1, h = TOKENS_TIMES_HEADS / s;
    if (h < 1) h = 1;
    int64_t qs[4] = {b, s, h, d}, lse_shape[3] = {b, h, s};
    flashc_dtype lse_dt = dt == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32;
    flashc_tool_buffer q, k, v, out, lse, dout, dq, dk, dv;
    memset(&dout, 0, sizeof dout);
    memset(&dq, 0, sizeof dq);
    memset(&dk, 0, sizeof dk);
    memset(&dv, 0, sizeof dv);
    size_t bytes = 0;
    int rc = -1;
    void *ws = NULL;
    if (flashc_tool_buffer_alloc(&q, dt, 4, qs, &bytes) || flashc_tool_buffer_alloc(&k, dt, 4, qs, &bytes) ||
        flashc_tool_buffer_alloc(&v, dt, 4, qs, &bytes) || flashc_tool_buffer_alloc(&out, dt, 4, qs, &bytes) ||
        flashc_tool_buffer_alloc(&lse, lse_dt, 3, lse_shape, &bytes)) {
        fprintf(stderr, "flashc_bench: out of memory\n");
        return -1;
    }
    flashc_tool_rng rng = flashc_tool_rng_seeded((uint64_t)(d * 1000003 + s));
    int64_t n = b * s * h * d;
    flashc_tool_fill_normal(q.data, dt, n, 1.0, &rng);
    flashc_tool_fill_normal(k.data, dt, n, 1.0, &rng);
    flashc_tool_fill_normal(v.data, dt, n, 1.0, &rng);

    flashc_forward_args fa;
    memset(&fa, 0, sizeof fa);
    fa.q = &q.desc;
    fa.k = &k.desc;
    fa.v = &v.desc;
    fa.out = &out.desc;
    fa.lse = &lse.desc;
    fa.options = flashc_attention_options_default();
    fa.options.causal = causal;
    fa.options.num_threads = threads;

    double flops = flashc_tool_forward_flops(h, s, s, d, d, causal) * (double)b;
    r->fwd_s = time_call(0, &fa, NULL, o->warmup, o->repeat);
    if (r->fwd_s < 0) goto done;
    r->fwd_gflops = flops / r->fwd_s * 1e-9;

    if (o->backward) {
        if (flashc_tool_buffer_alloc(&dout, dt, 4, qs, &bytes) || flashc_tool_buffer_alloc(&dq, dt, 4, qs, &bytes) ||
            flashc_tool_buffer_alloc(&dk, dt, 4, qs, &bytes) || flashc_tool_buffer_alloc(&dv, dt, 4, qs, &bytes)) {
            fprintf(stderr, "flashc_bench: out of memory\n");
            goto done;
        }
        flashc_tool_fill_normal(dout.data, dt, n, 1.0, &rng);
        flashc_backward_args ba;
        memset(&ba, 0, sizeof ba);
        ba.dout = &dout.desc;
        ba.q = &q.desc;
        ba.k = &k.desc;
        ba.v = &v.desc;
        ba.out = &out.desc;
        ba.lse = &lse.desc;
        ba.dq = &dq.desc;
        ba.dk = &dk.desc;
        ba.dv = &dv.desc;
        ba.options = fa.options;
        ba.options.deterministic = o->deterministic;
        size_t ws_bytes = 0;
        flashc_status st = flashc_attention_backward_workspace_size(&ba, &ws_bytes);
        if (st != FLASHC_SUCCESS) {
            print_status_error("workspace query", st);
            goto done;
        }
        ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64 + 64);
        if (!ws) goto done;
        memset(ws, 0, ws_bytes);
        bytes += ws_bytes;
        ba.workspace = ws;
        ba.workspace_bytes = ws_bytes;
        r->bwd_s = time_call(1, NULL, &ba, o->warmup, o->repeat);
        if (r->bwd_s < 0) goto done;
        r->bwd_gflops = 2.5 * flops / r->bwd_s * 1e-9;
    }
    rc = 0;
done:
    r->alloc_bytes = bytes;
    free(ws);
    flashc_tool_buffer_free(&q);
    flashc_tool_buffer_free(&k);
    flashc_tool_buffer_free(&v);
    flashc_tool_buffer_free(&out);
    flashc_tool_buffer_free(&lse);
    flashc_tool_buffer_free(&dout);
    flashc_tool_buffer_free(&dq);
    flashc_tool_buffer_free(&dk);
    flashc_tool_buffer_free(&dv);
    return rc;
}

/* ---- GPU grid ---------------------------------------------------------- */

/* One set of device tensors of a problem and the calls over them. */
typedef struct gpu_set {
    void *mem[9];   /* q k v out lse dout dq dk dv */
    flashc_tensor t[9];
    flashc_forward_args fa;
    flashc_backward_args ba;
} gpu_set;

enum { G_Q, G_K, G_V, G_OUT, G_LSE, G_DOUT, G_DQ, G_DK, G_DV };

typedef struct gpu_run {
    gpu_set *sets;
    int nsets, backward;
    flashc_status status;
} gpu_run;

/* Normal values in `dtype`, tiled over device tensors at random offsets. */
typedef struct value_pool {
    unsigned char *bytes;
    size_t size, esize;
} value_pool;

static int pool_init(value_pool *p, flashc_dtype dt, uint64_t seed) {
    p->esize = flashc_dtype_size(dt);
    p->size = (size_t)POOL_ELEMENTS * p->esize;
    p->bytes = malloc(p->size);
    if (!p->bytes) return -1;
    flashc_tool_rng rng = flashc_tool_rng_seeded(seed);
    flashc_tool_fill_normal(p->bytes, dt, POOL_ELEMENTS, 1.0, &rng);
    return 0;
}

static int upload_random(void *dev, size_t bytes, const value_pool *p, flashc_tool_rng *rng,
                         unsigned char *staging) {
    size_t done = 0, half = p->size / 2 / p->esize;
    while (done < bytes) {
        size_t start = (size_t)(flashc_tool_rng_next(rng) % half) * p->esize;
        size_t n = p->size - start;
        if (n > bytes - done) n = bytes - done;
        memcpy(staging + done, p->bytes + start, n);
        done += n;
    }
    return flashc_tool_device_copy_to(dev, staging, bytes);
}

static int gpu_call(void *ctx, int i) {
    gpu_run *r = ctx;
    gpu_set *s = &r->sets[i % r->nsets];
    r->status = r->backward ? flashc_attention_backward(&s->ba) : forward(&s->fa);
    if (r->status == FLASHC_SUCCESS) return 0;
    if (!(r->backward && r->status == FLASHC_ERROR_UNSUPPORTED))
        print_status_error(r->backward ? "backward" : "forward", r->status);
    return -1;
}

/* Median seconds per call after the warm-up; -1 on failure (r->status
 * says whether the library refused). */
static double gpu_time(gpu_run *r, const bench_options *o, void *stream) {
    double *times = malloc((size_t)(o->warmup + o->repeat) * sizeof(double));
    if (!times) return -1.0;
    double median = -1.0;
    if ((o->warmup == 0 || flashc_tool_time_calls(stream, o->warmup, gpu_call, r, times) == 0) &&
        flashc_tool_time_calls(stream, o->repeat, gpu_call, r, times) == 0)
        median = flashc_tool_median(times, o->repeat);
    free(times);
    return median;
}

typedef struct gpu_result {
    double fwd_s, bwd_s, fwd_tflops, bwd_tflops;
    size_t alloc_bytes;
    int nsets;
    int bwd_unsupported;
} gpu_result;

static int bench_one_cuda(const bench_options *o, int64_t d, int64_t s, flashc_dtype dt, int causal,
                          void *stream, char *unsupported_note, size_t note_size, gpu_result *r) {
    memset(r, 0, sizeof *r);
    int64_t b = GPU_TOKENS / s > 0 ? GPU_TOKENS / s : 1, h = GPU_WIDTH / d > 0 ? GPU_WIDTH / d : 1;
    int64_t qs[4] = {b, s, h, d}, lse_shape[3] = {b, h, s};
    int ntensors = o->backward ? 9 : 5;
    size_t tensor_bytes = (size_t)(b * s * h * d) * flashc_dtype_size(dt);
    size_t lse_bytes = (size_t)(b * h * s) * sizeof(float);
    size_t set_bytes = (size_t)(ntensors - 1) * tensor_bytes + lse_bytes;
    /* Rotate over sets totalling 4x L2 where one set would sit in it. */
    size_t l2 = flashc_tool_cuda_l2_bytes();
    int nsets = 1;
    if (l2 > 0 && set_bytes < 2 * l2) {
        size_t want = (4 * l2 + set_bytes - 1) / set_bytes;
        nsets = want > 64 ? 64 : (int)want;
    }
    gpu_set *sets = calloc((size_t)nsets, sizeof *sets);
    unsigned char *staging = malloc(tensor_bytes);
    value_pool pool = {NULL, 0, 0};
    int rc = -1;
    if (!sets || !staging || pool_init(&pool, dt, (uint64_t)(d * 1000003 + s)) != 0) {
        fprintf(stderr, "flashc_bench: out of host memory\n");
        goto done;
    }
    flashc_tool_rng rng = flashc_tool_rng_seeded((uint64_t)(d * 7919 + s * 31 + causal));
    flashc_device cuda = {FLASHC_DEVICE_CUDA, 0};
    static const char *names[9] = {"q", "k", "v", "out", "lse", "dout", "dq", "dk", "dv"};
    for (int k = 0; k < nsets; ++k) {
        gpu_set *g = &sets[k];
        for (int i = 0; i < ntensors; ++i) {
            int is_lse = i == G_LSE;
            size_t bytes = is_lse ? lse_bytes : tensor_bytes;
            if (flashc_tool_device_alloc(&g->mem[i], bytes, names[i]) != 0) goto done;
            r->alloc_bytes += bytes;
            g->t[i] = flashc_tensor_contiguous(g->mem[i], is_lse ? FLASHC_DTYPE_FLOAT32 : dt, cuda,
                                               is_lse ? 3 : 4, is_lse ? lse_shape : qs);
            int input = i == G_Q || i == G_K || i == G_V || i == G_DOUT;
            if (input && upload_random(g->mem[i], bytes, &pool, &rng, staging) != 0) goto done;
            /* outputs poisoned: an unwritten element stays NaN */
            if (!input && flashc_tool_device_fill(g->mem[i], 0xFF, bytes) != 0) goto done;
        }
        g->fa.q = &g->t[G_Q];
        g->fa.k = &g->t[G_K];
        g->fa.v = &g->t[G_V];
        g->fa.out = &g->t[G_OUT];
        g->fa.lse = &g->t[G_LSE];
        g->fa.options = flashc_attention_options_default();
        g->fa.options.causal = causal;
        g->fa.options.stream = stream;
        if (o->backward) {
            g->ba.dout = &g->t[G_DOUT];
            g->ba.q = &g->t[G_Q];
            g->ba.k = &g->t[G_K];
            g->ba.v = &g->t[G_V];
            g->ba.out = &g->t[G_OUT];
            g->ba.lse = &g->t[G_LSE];
            g->ba.dq = &g->t[G_DQ];
            g->ba.dk = &g->t[G_DK];
            g->ba.dv = &g->t[G_DV];
            g->ba.options = g->fa.options;
            g->ba.options.deterministic = o->deterministic;
        }
    }
    r->nsets = nsets;
    double flops = flashc_tool_forward_flops(h, s, s, d, d, causal) * (double)b;
    gpu_run run = {sets, nsets, 0, FLASHC_SUCCESS};
    r->fwd_s = gpu_time(&run, o, stream);
    if (r->fwd_s < 0) goto done;
    r->fwd_tflops = flops / r->fwd_s * 1e-12;

    if (o->backward) {
        size_t ws_bytes = 0;
        flashc_status st = flashc_attention_backward_workspace_size(&sets[0].ba, &ws_bytes);
        void *ws = NULL;
        if (st == FLASHC_SUCCESS && ws_bytes > 0) {
            if (flashc_tool_device_alloc(&ws, ws_bytes, "the backward workspace") != 0) goto done;
            r->alloc_bytes += ws_bytes;
        }
        if (st == FLASHC_SUCCESS) {
            /* each set's out and lse from its own forward, as the
             * backward expects them */
            for (int k = 0; k < nsets; ++k) {
                flashc_status fst = forward(&sets[k].fa);
                if (fst != FLASHC_SUCCESS) {
                    print_status_error("forward", fst);
                    flashc_tool_device_free(ws);
                    goto done;
                }
            }
            for (int k = 0; k < nsets; ++k) {
                sets[k].ba.workspace = ws;
                sets[k].ba.workspace_bytes = ws_bytes;
            }
            run.backward = 1;
            r->bwd_s = gpu_time(&run, o, stream);
            st = run.status;
        }
        flashc_tool_device_free(ws);
        if (st == FLASHC_ERROR_UNSUPPORTED) {
            r->bwd_unsupported = 1;
            snprintf(unsupported_note, note_size, "%s", flashc_last_error_message());
            r->bwd_s = 0.0;
        } else if (st != FLASHC_SUCCESS) {
            if (run.backward == 0) print_status_error("backward workspace query", st);
            goto done;
        } else if (r->bwd_s < 0) {
            goto done;
        } else {
            r->bwd_tflops = 2.5 * flops / r->bwd_s * 1e-12;
        }
    }
    rc = 0;
done:
    if (sets) {
        flashc_tool_stream_synchronize(stream);
        for (int k = 0; k < nsets; ++k)
            for (int i = 0; i < 9; ++i) flashc_tool_device_free(sets[k].mem[i]);
    }
    free(sets);
    free(staging);
    free(pool.bytes);
    return rc;
}

static int run_cuda_grid(const bench_options *o) {
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    printf("# flashc_bench  flashc %s  %s\n# device: %s (L2 %.0f MiB), CUDA backend\n", flashc_version(), date,
           flashc_tool_cuda_device_name(), (double)flashc_tool_cuda_l2_bytes() / 1048576.0);
    printf("# work per run: batch %d/seqlen, heads %d/hdim; FLOPs forward 4*b*h*s*s*d (halved causal), backward 2.5x;\n"
           "# times: CUDA events around each call (enqueued back to back), median of %d after %d warm-up;\n"
           "# where one set of tensors fits twice in L2, calls rotate over sets totalling 4x L2\n",
           GPU_TOKENS, GPU_WIDTH, o->repeat, o->warmup);
    if (o->backward && o->deterministic) printf("# backward: deterministic mode\n");
    if (o->tsv)
        printf("hdim\tseqlen\tbatch\theads\tdtype\tcausal\tfwd_ms\tfwd_tflops\tbwd_ms\tbwd_tflops\tsets\talloc_mib\n");
    else
        printf("%4s %6s %4s %5s %5s %6s | %9s %8s | %9s %8s | %4s %9s\n", "hdim", "seqlen", "b", "heads", "dtype",
               "causal", "fwd ms", "fwd TF/s", "bwd ms", "bwd TF/s", "sets", "alloc MiB");
    void *stream = NULL;
    if (flashc_tool_stream_create(&stream) != 0) return 1;
    char note[512] = "";
    int failures = 0, unsupported = 0;
    double t_start = flashc_tool_now();
    for (int di = 0; di < o->hdim.n; ++di)
        for (int dti = 0; dti < o->ndtype; ++dti)
            for (int ci = 0; ci < o->causal.n; ++ci)
                for (int si = 0; si < o->seqlen.n; ++si) {
                    int64_t d = o->hdim.v[di], s = o->seqlen.v[si];
                    int causal = (int)o->causal.v[ci];
                    flashc_dtype dt = o->dtype[dti];
                    int64_t b = GPU_TOKENS / s > 0 ? GPU_TOKENS / s : 1, h = GPU_WIDTH / d > 0 ? GPU_WIDTH / d : 1;
                    fprintf(stderr, "[%8.1f s] hdim %lld seqlen %lld %s causal %d\n", flashc_tool_now() - t_start,
                            (long long)d, (long long)s, flashc_tool_dtype_name(dt), causal);
                    gpu_result r;
                    if (bench_one_cuda(o, d, s, dt, causal, stream, note, sizeof note, &r) != 0) {
                        failures++;
                        continue;
                    }
                    unsupported |= r.bwd_unsupported;
                    int bwd = o->backward && !r.bwd_unsupported;
                    if (o->tsv) {
                        printf("%lld\t%lld\t%lld\t%lld\t%s\t%d\t%.4f\t%.2f\t", (long long)d, (long long)s, (long long)b,
                               (long long)h, flashc_tool_dtype_name(dt), causal, r.fwd_s * 1e3, r.fwd_tflops);
                        if (bwd) printf("%.4f\t%.2f", r.bwd_s * 1e3, r.bwd_tflops);
                        else printf("nan\tnan");
                        printf("\t%d\t%.1f\n", r.nsets, (double)r.alloc_bytes / 1048576.0);
                    } else {
                        printf("%4lld %6lld %4lld %5lld %5s %6s | %9.3f %8.1f | ", (long long)d, (long long)s,
                               (long long)b, (long long)h, flashc_tool_dtype_name(dt), causal ? "yes" : "no",
                               r.fwd_s * 1e3, r.fwd_tflops);
                        if (bwd) printf("%9.3f %8.1f", r.bwd_s * 1e3, r.bwd_tflops);
                        else printf("%9s %8s", "-", "-");
                        printf(" | %4d %9.1f\n", r.nsets, (double)r.alloc_bytes / 1048576.0);
                    }
                    fflush(stdout);
                }
    flashc_tool_stream_destroy(stream);
    if (unsupported)
        printf("# backward: not available on CUDA in this version of the library (FLASHC_ERROR_UNSUPPORTED: %s)\n",
               note);
    if (failures) fprintf(stderr, "flashc_bench: %d configuration(s) failed\n", failures);
    return failures ? 1 : 0;
}

/* ---- CPU grid ---------------------------------------------------------- */

static void cpu_model(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                snprintf(buf, n, "%s", colon + 2);
                buf[strcspn(buf, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

/* Peak for `threads` (0 = OpenMP default counts as the max listed). */
typedef struct peak_table {
    int n;
    int threads[MAX_LIST];
    double avx512[MAX_LIST], avx2[MAX_LIST], best[MAX_LIST];
} peak_table;

static double peak_for(const peak_table *pt, int threads) {
    for (int i = 0; i < pt->n; ++i)
        if (pt->threads[i] == threads) return pt->best[i];
    return 0.0;
}

int main(int argc, char **argv) {
    bench_options o;
    int parsed = parse_options(argc, argv, &o);
    if (parsed != 0) return parsed > 0 ? 0 : 2;
    if (o.cuda) {
        const int rc = run_cuda_grid(&o);
        flashc_tool_scratch_free(&forward_scratch);
        return rc;
    }

    char model[256], date[64];
    cpu_model(model, sizeof model);
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    printf("# flashc_bench  flashc %s  %s\n# cpu: %s (%d OpenMP threads available)\n# compiler of this program: %s\n",
           flashc_version(), date, model, omp_get_num_procs(),
#if defined(__clang__)
           "clang " __clang_version__
#elif defined(__GNUC__)
           "gcc " __VERSION__
#else
           "unknown"
#endif
    );
    printf("# work per run: batch 1, heads 16384/seqlen; FLOPs forward 4*b*h*s*s*d (halved causal), backward 2.5x;\n"
           "# times: median of %d after %d warm-up\n", o.repeat, o.warmup);

    /* Calibration: float32 FMA peak per ISA and thread count. */
    peak_table pt;
    memset(&pt, 0, sizeof pt);
    for (int i = 0; i < o.threads.n && pt.n < MAX_LIST; ++i) {
        int t = (int)o.threads.v[i];
        if (t == 0) continue; /* the OpenMP default: no fraction reported */
        int seen = 0;
        for (int j = 0; j < pt.n; ++j) seen |= pt.threads[j] == t;
        if (seen) continue;
        pt.threads[pt.n] = t;
        pt.avx512[pt.n] = flashc_fma_measure("avx512", t, o.calibrate_seconds, 3);
        pt.avx2[pt.n] = flashc_fma_measure("avx2", t, o.calibrate_seconds, 3);
        pt.best[pt.n] = pt.avx512[pt.n] > pt.avx2[pt.n] ? pt.avx512[pt.n] : pt.avx2[pt.n];
        printf("# fp32 FMA peak, %d thread%s: avx512 %.1f GFLOP/s, avx2 %.1f GFLOP/s -> peak %.1f GFLOP/s\n", t,
               t == 1 ? "" : "s", pt.avx512[pt.n], pt.avx2[pt.n], pt.best[pt.n]);
        pt.n++;
    }
    fflush(stdout);

    if (o.tsv)
        printf("hdim\tseqlen\tbatch\theads\tdtype\tthreads\tcausal\tfwd_ms\tfwd_gflops\tfwd_peak_frac\tbwd_ms\tbwd_gflops\tbwd_peak_frac\talloc_mib\trss_mib\n");
    else
        printf("%4s %6s %3s %5s %5s %3s %6s | %10s %9s %6s | %10s %9s %6s | %9s %8s\n", "hdim", "seqlen", "b", "heads",
               "dtype", "thr", "causal", "fwd ms", "fwd GF/s", "%peak", "bwd ms", "bwd GF/s", "%peak", "alloc MiB",
               "RSS MiB");
    int failures = 0;
    double t_start = flashc_tool_now();
    for (int di = 0; di < o.hdim.n; ++di)
        for (int dti = 0; dti < o.ndtype; ++dti)
            for (int ti = 0; ti < o.threads.n; ++ti)
                for (int ci = 0; ci < o.causal.n; ++ci)
                    for (int si = 0; si < o.seqlen.n; ++si) {
                        int64_t d = o.hdim.v[di], s = o.seqlen.v[si];
                        int threads = (int)o.threads.v[ti], causal = (int)o.causal.v[ci];
                        flashc_dtype dt = o.dtype[dti];
                        int64_t heads = TOKENS_TIMES_HEADS / s > 0 ? TOKENS_TIMES_HEADS / s : 1;
                        fprintf(stderr, "[%8.1f s] hdim %lld seqlen %lld %s threads %d causal %d\n",
                                flashc_tool_now() - t_start, (long long)d, (long long)s, flashc_tool_dtype_name(dt),
                                threads, causal);
                        bench_result r;
                        if (bench_one(&o, d, s, dt, threads, causal, &r) != 0) {
                            failures++;
                            continue;
                        }
                        double peak = peak_for(&pt, threads);
                        double ff = peak > 0 ? r.fwd_gflops / peak : NAN;
                        double bf = peak > 0 && o.backward ? r.bwd_gflops / peak : NAN;
                        double rss = (double)flashc_tool_peak_rss_bytes() / 1048576.0;
                        if (o.tsv)
                            printf("%lld\t%lld\t1\t%lld\t%s\t%d\t%d\t%.3f\t%.2f\t%.4f\t%.3f\t%.2f\t%.4f\t%.1f\t%.1f\n",
                                   (long long)d, (long long)s, (long long)heads, flashc_tool_dtype_name(dt), threads,
                                   causal, r.fwd_s * 1e3, r.fwd_gflops, ff, r.bwd_s * 1e3, r.bwd_gflops, bf,
                                   (double)r.alloc_bytes / 1048576.0, rss);
                        else
                            printf("%4lld %6lld %3d %5lld %5s %3d %6s | %10.2f %9.2f %5.1f%% | %10.2f %9.2f %5.1f%% | %9.1f %8.1f\n",
                                   (long long)d, (long long)s, 1, (long long)heads, flashc_tool_dtype_name(dt), threads,
                                   causal ? "yes" : "no", r.fwd_s * 1e3, r.fwd_gflops, 100 * ff, r.bwd_s * 1e3,
                                   r.bwd_gflops, 100 * bf, (double)r.alloc_bytes / 1048576.0, rss);
                        fflush(stdout);
                    }
    printf("# peak RSS of the whole run: %.1f MiB\n", (double)flashc_tool_peak_rss_bytes() / 1048576.0);
    if (failures) fprintf(stderr, "flashc_bench: %d configuration(s) failed\n", failures);
    return failures ? 1 : 0;
}
