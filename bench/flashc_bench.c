/* flashc_bench: forward and backward GFLOP/s of the CPU backend over a grid
 * (hdim x seqlen x dtype x threads x causal), each as a fraction of the
 * machine's float32 FMA peak measured in the same run.
 *
 * Work per run: batch 1, heads = 16384 / seqlen (at least 1), so every run
 * processes tokens x heads = 16384 query rows: the cost per run grows with
 * seqlen only through the length of each row. FLOPs follow DESIGN.md:
 * forward 4*b*h*sq*sk*d, halved when causal; backward 2.5x. Times are the
 * median of the repeats after the warm-up runs. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <omp.h>

#include "common/host_data.h"
#include "common/measure.h"
#include "flashc.h"
#include "fma_peak.h"

#define MAX_LIST 16
#define TOKENS_TIMES_HEADS 16384

typedef struct int_list {
    int n;
    long v[MAX_LIST];
} int_list;

typedef struct bench_options {
    int_list hdim, seqlen, threads, causal;
    int ndtype;
    flashc_dtype dtype[4];
    int repeat, warmup;
    int tsv;
    int backward;
    double calibrate_seconds;
} bench_options;

typedef struct bench_result {
    double fwd_s, bwd_s;
    double fwd_gflops, bwd_gflops;
    size_t alloc_bytes;
} bench_result;

static void usage(FILE *out) {
    fputs("usage: flashc_bench [options]\n"
          "Forward and backward GFLOP/s of the CPU backend, as fractions of the float32\n"
          "FMA peak measured in the same run. Each run: batch 1, heads 16384/seqlen.\n"
          "  --quick            small grid: hdim 128, seqlen 1024,4096, fp32, threads 1,2\n"
          "  --hdim LIST        head dims (64,128)\n"
          "  --seqlen LIST      sequence lengths (512,1024,2048,4096,8192)\n"
          "  --dtype LIST       fp32,bf16,fp16,fp64 (fp32,bf16)\n"
          "  --threads LIST     thread counts (1,2)\n"
          "  --causal LIST      0 = non-causal, 1 = causal (0,1)\n"
          "  --repeat N         timed runs per measurement, median reported (3)\n"
          "  --warmup N         untimed runs first (1)\n"
          "  --forward-only     skip the backward\n"
          "  --calibrate-seconds S  length of one calibration trial (0.3)\n"
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

/* Returns 0 to run, 1 after --help, -1 on a bad option. */
static int parse_options(int argc, char **argv, bench_options *o) {
    enum { O_QUICK = 1000, O_HDIM, O_SEQLEN, O_DTYPE, O_THREADS, O_CAUSAL, O_REPEAT, O_WARMUP,
           O_FWD, O_CAL, O_TSV, O_HELP };
    static const struct option longopts[] = {
        {"quick", no_argument, NULL, O_QUICK},       {"hdim", required_argument, NULL, O_HDIM},
        {"seqlen", required_argument, NULL, O_SEQLEN}, {"dtype", required_argument, NULL, O_DTYPE},
        {"threads", required_argument, NULL, O_THREADS}, {"causal", required_argument, NULL, O_CAUSAL},
        {"repeat", required_argument, NULL, O_REPEAT}, {"warmup", required_argument, NULL, O_WARMUP},
        {"forward-only", no_argument, NULL, O_FWD},   {"calibrate-seconds", required_argument, NULL, O_CAL},
        {"tsv", no_argument, NULL, O_TSV},            {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    /* Defaults: the full grid. */
    parse_list("hdim", "64,128", 1, 256, &o->hdim);
    parse_list("seqlen", "512,1024,2048,4096,8192", 1, 1 << 20, &o->seqlen);
    parse_list("threads", "1,2", 0, 1024, &o->threads);
    parse_list("causal", "0,1", 0, 1, &o->causal);
    parse_dtypes("fp32,bf16", o);
    o->repeat = 3;
    o->warmup = 1;
    o->tsv = 0;
    o->backward = 1;
    o->calibrate_seconds = 0.3;
    int_list quick_seqlen;
    parse_list("seqlen", "1024,4096", 1, 1 << 20, &quick_seqlen);
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":", longopts, NULL);
        if (c == -1) break;
        int rc = 0;
        switch (c) {
            case O_QUICK:
                o->hdim.n = 1;
                o->hdim.v[0] = 128;
                o->seqlen = quick_seqlen;
                o->ndtype = 1;
                o->dtype[0] = FLASHC_DTYPE_FLOAT32;
                break;
            case O_HDIM: rc = parse_list("hdim", optarg, 1, 256, &o->hdim); break;
            case O_SEQLEN: rc = parse_list("seqlen", optarg, 1, 1 << 20, &o->seqlen); break;
            case O_DTYPE: rc = parse_dtypes(optarg, o); break;
            case O_THREADS: rc = parse_list("threads", optarg, 0, 1024, &o->threads); break;
            case O_CAUSAL: rc = parse_list("causal", optarg, 0, 1, &o->causal); break;
            case O_REPEAT: rc = parse_int("repeat", optarg, 1, 1000, &o->repeat); break;
            case O_WARMUP: rc = parse_int("warmup", optarg, 0, 1000, &o->warmup); break;
            case O_FWD: o->backward = 0; break;
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
    return 0;
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
        flashc_status st = backward ? flashc_attention_backward(ba) : flashc_attention_forward(fa);
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
