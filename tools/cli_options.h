/* The options of `flashc run`: one struct, filled by the getopt_long
 * parser from defaults that describe the embedded problem. */
#ifndef FLASHC_TOOLS_CLI_OPTIONS_H
#define FLASHC_TOOLS_CLI_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "flashc.h"

#define FLASHC_CLI_MAX_VARLEN 4096

typedef enum flashc_cli_device {
    FLASHC_CLI_DEVICE_AUTO = 0,
    FLASHC_CLI_DEVICE_CPU,
    FLASHC_CLI_DEVICE_CUDA
} flashc_cli_device;

typedef enum flashc_cli_alibi {
    FLASHC_CLI_ALIBI_OFF = 0,
    FLASHC_CLI_ALIBI_PER_HEAD,         /* slopes (h) */
    FLASHC_CLI_ALIBI_PER_BATCH_HEAD    /* slopes (b, h) */
} flashc_cli_alibi;

typedef struct flashc_cli_options {
    flashc_cli_device device;
    int64_t batch, heads, kv_heads;    /* kv_heads 0: same as heads */
    int64_t seqlen_q, seqlen_k;
    int64_t hdim, hdim_v;              /* hdim_v 0: same as hdim */
    flashc_dtype dtype;
    int causal;
    int64_t window_left, window_right;
    double softcap;
    flashc_cli_alibi alibi;
    double dropout;
    uint64_t seed;
    double scale;                      /* 0: 1/sqrt(hdim) */
    /* Varlen: 0 off; otherwise batch = varlen_count sequences. Lengths
     * either random (varlen_random) or the given lists. */
    int varlen;
    int varlen_random;
    int varlen_count;
    int64_t varlen_q[FLASHC_CLI_MAX_VARLEN], varlen_k[FLASHC_CLI_MAX_VARLEN];
    int threads;
    int deterministic;
    int repeat, warmup;
    int check;                         /* compare sampled rows with the reference */
    int check_heads;                   /* (batch, head) pairs checked in the forward */
    int check_rows;                    /* query rows checked per pair (last rows) */
    int backward;                      /* also run (and check) the backward */
    int quiet;                         /* no progress lines */
} flashc_cli_options;

/* The embedded default problem: batch 2, 16 heads, seqlen 2048, hdim 128,
 * bfloat16, causal, best device. */
void flashc_cli_options_default(flashc_cli_options *opt);

/* Parse `flashc run` arguments (argv[0] is the subcommand name). Returns 0
 * on success, 1 when --help was printed, -1 after printing an error that
 * names the offending option. */
int flashc_cli_parse_run_options(int argc, char **argv, flashc_cli_options *opt);

void flashc_cli_print_run_usage(FILE *out);

#endif
