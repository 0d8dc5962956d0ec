#define _POSIX_C_SOURCE 200809L
#include "cli_options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/host_data.h"

/* Largest sequence length / batch / heads accepted on the command line: a
 * guard against typos that would ask for terabytes, not a library limit. */
#define MAX_EXTENT 1048576
#define MAX_REPEAT 100000

void flashc_cli_options_default(flashc_cli_options *opt) {
    memset(opt, 0, sizeof *opt);
    opt->device = FLASHC_CLI_DEVICE_AUTO;
    opt->batch = 2;
    opt->heads = 16;
    opt->kv_heads = 0;
    opt->seqlen_q = 2048;
    opt->seqlen_k = 2048;
    opt->hdim = 128;
    opt->hdim_v = 0;
    opt->dtype = FLASHC_DTYPE_BFLOAT16;
    opt->causal = 1;
    opt->window_left = -1;
    opt->window_right = -1;
    opt->seed = 0;
    opt->repeat = 1;
    opt->warmup = 0;
    opt->check = 1;
    opt->check_heads = 2;
    opt->check_rows = 32;
    opt->backward = 1;
}

void flashc_cli_print_run_usage(FILE *out) {
    fputs(
        "usage: flashc run [options]\n"
        "Run forward and backward of one attention problem, check sampled rows\n"
        "against an independent double-precision reference, and report time,\n"
        "GFLOP/s, max error and memory. Default: batch 2, 16 heads, seqlen 2048,\n"
        "hdim 128, bfloat16, causal, on CUDA when available, else the CPU.\n"
        "\n"
        "shape:\n"
        "  --batch N           batch size (2)\n"
        "  --heads N           query heads (16)\n"
        "  --kv-heads N        key/value heads, divides --heads (= heads)\n"
        "  --seqlen N          query and key length (2048)\n"
        "  --seqlen-q N        query length\n"
        "  --seqlen-k N        key length\n"
        "  --hdim N            q/k head dim, 1..256 (128)\n"
        "  --hdim-v N          v head dim, 1..256 (= hdim)\n"
        "  --dtype T           fp32 | fp16 | bf16 | fp64 (bf16)\n"
        "  --varlen[=LIST]     packed variable-length batch: random lengths up to\n"
        "                      the seqlens, or LIST of lengths 'L,L,...' or\n"
        "                      'Lq:Lk,...' (sets the batch size)\n"
        "features:\n"
        "  --causal / --no-causal   bottom-right aligned causal mask (on)\n"
        "  --window L,R        sliding window, -1 = unbounded side\n"
        "  --softcap C         logit soft cap, C >= 0 (0 = off)\n"
        "  --alibi h|bh        ALiBi slopes per head or per (batch, head)\n"
        "  --dropout P         dropout probability in [0, 1)\n"
        "  --seed N            seed of the inputs and of the dropout mask (0)\n"
        "  --scale S           softmax scale (default 1/sqrt(hdim))\n"
        "execution:\n"
        "  --device D          cpu | cuda (default: cuda when a GPU is there and the\n"
        "                      problem is fp16/bf16 with head dims multiple of 8)\n"
        "  --threads N         CPU threads, 0 = OpenMP default (0)\n"
        "  --deterministic     deterministic backward\n"
        "  --warmup N          untimed runs before timing (0)\n"
        "  --repeat N          timed runs; the median is reported (1)\n"
        "  --forward-only      skip the backward (where the library has no backward\n"
        "                      for the device yet, it is skipped with a note)\n"
        "  --no-check          skip the reference check\n"
        "  --check-heads N     (batch, head) pairs the forward check samples (2)\n"
        "  --check-rows N      query rows checked per pair: the last N of the\n"
        "                      sequence (32); all rows for small heads or dropout.\n"
        "                      The backward checks dQ of those rows for one kv-head\n"
        "                      group, and dK/dV of the keys they fully determine\n"
        "  --quiet             no progress lines on stderr\n"
        "  --help              this text\n",
        out);
}

/* ---- value parsers: each names the option in its message ---------------- */

static int parse_int64(const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno == ERANGE || end == text || *end != '\0') {
        fprintf(stderr, "flashc run: option --%s expects an integer, got '%s'\n", opt, text);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "flashc run: option --%s: %lld is out of range [%lld, %lld]\n", opt, v,
                (long long)lo, (long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_int(const char *opt, const char *text, int lo, int hi, int *out) {
    int64_t v;
    if (parse_int64(opt, text, lo, hi, &v) != 0) return -1;
    *out = (int)v;
    return 0;
}

static int parse_double(const char *opt, const char *text, double lo, double hi, int hi_open,
                        double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno == ERANGE || end == text || *end != '\0' || !isfinite(v)) {
        fprintf(stderr, "flashc run: option --%s expects a finite number, got '%s'\n", opt, text);
        return -1;
    }
    if (v < lo || v > hi || (hi_open && v == hi)) {
        fprintf(stderr, "flashc run: option --%s: %g is out of range [%g, %g%s\n", opt, v, lo, hi,
                hi_open ? ")" : "]");
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_seed(const char *text, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (text[0] == '-') {
        fprintf(stderr, "flashc run: option --seed expects a non-negative integer, got '%s'\n", text);
        return -1;
    }
    unsigned long long v = strtoull(text, &end, 0);
    if (errno == ERANGE || end == text || *end != '\0') {
        fprintf(stderr, "flashc run: option --seed expects a non-negative integer, got '%s'\n", text);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_window(const char *text, int64_t *left, int64_t *right) {
    const char *comma = strchr(text, ',');
    if (!comma) {
        fprintf(stderr, "flashc run: option --window expects L,R (e.g. 128,0), got '%s'\n", text);
        return -1;
    }
    char first[64];
    size_t n = (size_t)(comma - text);
    if (n == 0 || n >= sizeof first) {
        fprintf(stderr, "flashc run: option --window expects L,R (e.g. 128,0), got '%s'\n", text);
        return -1;
    }
    memcpy(first, text, n);
    first[n] = '\0';
    if (parse_int64("window", first, -1, INT64_MAX / 4, left) != 0) return -1;
    return parse_int64("window", comma + 1, -1, INT64_MAX / 4, right);
}

/* "L,L,..." or "Lq:Lk,...". */
static int parse_varlen_list(const char *text, flashc_cli_options *opt) {
    char *copy = strdup(text);
    if (!copy) return -1;
    int count = 0, rc = 0;
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (count >= FLASHC_CLI_MAX_VARLEN) {
            fprintf(stderr, "flashc run: option --varlen: more than %d sequences\n",
                    FLASHC_CLI_MAX_VARLEN);
            rc = -1;
            break;
        }
        char *colon = strchr(item, ':');
        if (colon) *colon = '\0';
        if (parse_int64("varlen", item, 0, MAX_EXTENT, &opt->varlen_q[count]) != 0 ||
            parse_int64("varlen", colon ? colon + 1 : item, 0, MAX_EXTENT,
                        &opt->varlen_k[count]) != 0) {
            rc = -1;
            break;
        }
        count++;
    }
    free(copy);
    if (rc == 0 && count == 0) {
        fprintf(stderr, "flashc run: option --varlen: empty length list\n");
        rc = -1;
    }
    opt->varlen_count = count;
    return rc;
}

enum {
    OPT_BATCH = 1000, OPT_HEADS, OPT_KV_HEADS, OPT_SEQLEN, OPT_SEQLEN_Q, OPT_SEQLEN_K,
    OPT_HDIM, OPT_HDIM_V, OPT_DTYPE, OPT_CAUSAL, OPT_NO_CAUSAL, OPT_WINDOW, OPT_SOFTCAP,
    OPT_ALIBI, OPT_DROPOUT, OPT_SEED, OPT_SCALE, OPT_VARLEN, OPT_THREADS,
    OPT_DETERMINISTIC, OPT_REPEAT, OPT_WARMUP, OPT_DEVICE, OPT_NO_CHECK, OPT_CHECK_HEADS, OPT_CHECK_ROWS,
    OPT_FORWARD_ONLY, OPT_QUIET, OPT_HELP
};

int flashc_cli_parse_run_options(int argc, char **argv, flashc_cli_options *opt) {
    static const struct option longopts[] = {
        {"batch", required_argument, NULL, OPT_BATCH},
        {"heads", required_argument, NULL, OPT_HEADS},
        {"kv-heads", required_argument, NULL, OPT_KV_HEADS},
        {"seqlen", required_argument, NULL, OPT_SEQLEN},
        {"seqlen-q", required_argument, NULL, OPT_SEQLEN_Q},
        {"seqlen-k", required_argument, NULL, OPT_SEQLEN_K},
        {"hdim", required_argument, NULL, OPT_HDIM},
        {"hdim-v", required_argument, NULL, OPT_HDIM_V},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"causal", no_argument, NULL, OPT_CAUSAL},
        {"no-causal", no_argument, NULL, OPT_NO_CAUSAL},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"softcap", required_argument, NULL, OPT_SOFTCAP},
        {"alibi", required_argument, NULL, OPT_ALIBI},
        {"dropout", required_argument, NULL, OPT_DROPOUT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"scale", required_argument, NULL, OPT_SCALE},
        {"varlen", optional_argument, NULL, OPT_VARLEN},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"deterministic", no_argument, NULL, OPT_DETERMINISTIC},
        {"repeat", required_argument, NULL, OPT_REPEAT},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"no-check", no_argument, NULL, OPT_NO_CHECK},
        {"check-heads", required_argument, NULL, OPT_CHECK_HEADS},
        {"check-rows", required_argument, NULL, OPT_CHECK_ROWS},
        {"forward-only", no_argument, NULL, OPT_FORWARD_ONLY},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int window_given = 0;
    optind = 1;
    opterr = 0; /* our own messages */
    for (;;) {
        int longindex = -1;
        int c = getopt_long(argc, argv, ":h", longopts, &longindex);
        if (c == -1) break;
        const char *a = optarg;
        int rc = 0;
        switch (c) {
            case OPT_BATCH: rc = parse_int64("batch", a, 1, MAX_EXTENT, &opt->batch); break;
            case OPT_HEADS: rc = parse_int64("heads", a, 1, 65536, &opt->heads); break;
            case OPT_KV_HEADS: rc = parse_int64("kv-heads", a, 1, 65536, &opt->kv_heads); break;
            case OPT_SEQLEN:
                rc = parse_int64("seqlen", a, 1, MAX_EXTENT, &opt->seqlen_q);
                opt->seqlen_k = opt->seqlen_q;
                break;
            case OPT_SEQLEN_Q: rc = parse_int64("seqlen-q", a, 1, MAX_EXTENT, &opt->seqlen_q); break;
            case OPT_SEQLEN_K: rc = parse_int64("seqlen-k", a, 1, MAX_EXTENT, &opt->seqlen_k); break;
            case OPT_HDIM: rc = parse_int64("hdim", a, 1, FLASHC_MAX_HEAD_DIM, &opt->hdim); break;
            case OPT_HDIM_V: rc = parse_int64("hdim-v", a, 1, FLASHC_MAX_HEAD_DIM, &opt->hdim_v); break;
            case OPT_DTYPE:
                if (flashc_tool_parse_dtype(a, &opt->dtype) != 0) {
                    fprintf(stderr, "flashc run: option --dtype expects fp32, fp16, bf16 or fp64, got '%s'\n", a);
                    rc = -1;
                }
                break;
            case OPT_CAUSAL: opt->causal = 1; break;
            case OPT_NO_CAUSAL: opt->causal = 0; break;
            case OPT_WINDOW:
                rc = parse_window(a, &opt->window_left, &opt->window_right);
                window_given = 1;
                break;
            case OPT_SOFTCAP: rc = parse_double("softcap", a, 0.0, 1e30, 0, &opt->softcap); break;
            case OPT_ALIBI:
                if (strcmp(a, "h") == 0) opt->alibi = FLASHC_CLI_ALIBI_PER_HEAD;
                else if (strcmp(a, "bh") == 0) opt->alibi = FLASHC_CLI_ALIBI_PER_BATCH_HEAD;
                else {
                    fprintf(stderr, "flashc run: option --alibi expects 'h' or 'bh', got '%s'\n", a);
                    rc = -1;
                }
                break;
            case OPT_DROPOUT: rc = parse_double("dropout", a, 0.0, 1.0, 1, &opt->dropout); break;
            case OPT_SEED: rc = parse_seed(a, &opt->seed); break;
            case OPT_SCALE: rc = parse_double("scale", a, -1e30, 1e30, 0, &opt->scale); break;
            case OPT_VARLEN:
                opt->varlen = 1;
                if (a) {
                    opt->varlen_random = 0;
                    rc = parse_varlen_list(a, opt);
                } else {
                    opt->varlen_random = 1;
                }
                break;
            case OPT_THREADS: rc = parse_int("threads", a, 0, 4096, &opt->threads); break;
            case OPT_DETERMINISTIC: opt->deterministic = 1; break;
            case OPT_REPEAT: rc = parse_int("repeat", a, 1, MAX_REPEAT, &opt->repeat); break;
            case OPT_WARMUP: rc = parse_int("warmup", a, 0, MAX_REPEAT, &opt->warmup); break;
            case OPT_DEVICE:
                if (strcmp(a, "cpu") == 0) opt->device = FLASHC_CLI_DEVICE_CPU;
                else if (strcmp(a, "cuda") == 0) opt->device = FLASHC_CLI_DEVICE_CUDA;
                else {
                    fprintf(stderr, "flashc run: option --device expects 'cpu' or 'cuda', got '%s'\n", a);
                    rc = -1;
                }
                break;
            case OPT_NO_CHECK: opt->check = 0; break;
            case OPT_CHECK_ROWS: rc = parse_int("check-rows", a, 1, 1 << 30, &opt->check_rows); break;
            case OPT_CHECK_HEADS: rc = parse_int("check-heads", a, 1, 1 << 20, &opt->check_heads); break;
            case OPT_FORWARD_ONLY: opt->backward = 0; break;
            case OPT_QUIET: opt->quiet = 1; break;
            case 'h':
            case OPT_HELP: flashc_cli_print_run_usage(stdout); return 1;
            case ':':
                fprintf(stderr, "flashc run: option '%s' needs a value\n", argv[optind - 1]);
                return -1;
            default:
                fprintf(stderr, "flashc run: unknown option '%s' (see flashc run --help)\n",
                        argv[optind - 1]);
                return -1;
        }
        if (rc != 0) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "flashc run: unexpected argument '%s' (see flashc run --help)\n", argv[optind]);
        return -1;
    }
    if (opt->kv_heads == 0) opt->kv_heads = opt->heads;
    if (opt->hdim_v == 0) opt->hdim_v = opt->hdim;
    if (opt->heads % opt->kv_heads != 0) {
        fprintf(stderr, "flashc run: option --kv-heads: %lld does not divide --heads %lld\n",
                (long long)opt->kv_heads, (long long)opt->heads);
        return -1;
    }
    if (window_given && opt->causal && opt->window_right != 0) {
        /* An explicit window with the default causal would silently lose
         * its right side; make the user say which one they mean. */
        fprintf(stderr, "flashc run: option --window %lld,%lld conflicts with --causal (causal means a right window of 0); add --no-causal\n",
                (long long)opt->window_left, (long long)opt->window_right);
        return -1;
    }
    if (opt->varlen && !opt->varlen_random) opt->batch = opt->varlen_count;
    if (opt->varlen && opt->varlen_random && opt->batch > FLASHC_CLI_MAX_VARLEN) {
        fprintf(stderr, "flashc run: option --varlen: batch %lld exceeds %d sequences\n",
                (long long)opt->batch, FLASHC_CLI_MAX_VARLEN);
        return -1;
    }
    return 0;
}
