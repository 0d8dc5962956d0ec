/* The CUDA backend's backward, beyond the forward file's feature grids
 * (test_cuda_forward.c, test "backward"): every kernel configuration (the
 * varlen workspace is laid out in the configuration's tile_m: 128 up to
 * head dim 64, where the Hopper kernel walks 128-row blocks and the
 * portable one 64-row blocks inside them, else 64) on varlen
 * sequences of 1, 17, 63, 65, 127, 129 and 1000 rows, all in one process
 * with every output and workspace NaN-poisoned before each call;
 * deterministic mode bit-identical over 10 runs; dK and dV bit-identical
 * over 10 runs with dQ accumulated by atomics; CTAs that walk several key
 * blocks (deterministic, many kv heads); rows that see no key;
 * large-magnitude inputs; sequences of 16384+; the portable kernel's
 * shared last wave; errors specific to the backward. Each gradient is checked against the double reference and the
 * CPU backend unless the case says otherwise.
 *
 * Where no GPU is usable (CI), every test is skipped. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "test_cuda_support.h"

#define MAX_CASES 128

#define REQUIRE_GPU()                                                                             \
    do {                                                                                          \
        if (!tcuda_available()) skip();                                                           \
    } while (0)

static test_config cfgs[MAX_CASES];

static flashc_dtype alternate(int i) { return i & 1 ? FLASHC_DTYPE_FLOAT16 : FLASHC_DTYPE_BFLOAT16; }

static test_config varlen_config(flashc_dtype dt, int batch, const int64_t *lq, const int64_t *lk, int64_t d,
                                 int64_t dv) {
    test_config c = test_config_shaped(dt, batch, 4, 2, d, dv, 0, 0);
    c.varlen = 1;
    for (int b = 0; b < batch; ++b) {
        c.lens_q[b] = lq[b];
        c.lens_k[b] = lk[b];
    }
    return c;
}

/* The lengths of the list, none a multiple of any tile. */
static const int64_t lengths[7] = {1, 17, 63, 65, 127, 129, 1000};
static const int64_t lengths_rotated[7] = {1000, 1, 129, 17, 65, 127, 63};

/* ---- Every configuration (tile_m), varlen -------------------------------- */

/* One config per compiled head dim (64, 96, 128, 192, 256), chosen by
 * max(d, dv), some with dv != d (on the Hopper path 160 / 96 and 136 / 192
 * reach the 256 configuration's narrower kernels, with columns past d and
 * dv inside their last 64-column block); sq == sk and sq != sk; every feature
 * spread over them; each once more in deterministic mode (dQ slices,
 * summed by the conversion over the same tiles). */
static void every_configuration(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int64_t dims[][2] = {{64, 64}, {40, 72}, {96, 96}, {128, 128}, {128, 64}, {192, 192},
                                      {200, 136}, {256, 256}, {8, 256}, {160, 96}, {136, 192}};
    int n = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
        test_config c = varlen_config(alternate((int)i), 7, lengths, i & 1 ? lengths_rotated : lengths,
                                      dims[i][0], dims[i][1]);
        switch (i % 5) {
            case 0: c.options.causal = 1; break;
            case 1: c.options.window_left = 70; c.options.window_right = 3; c.alibi = 2; break;
            case 2: c.options.softcap = 2.0; c.input_scale = 2.0; c.with_dlse = 1; break;
            case 3: c.options.dropout_p = 0.15; c.options.dropout_seed = 1234 + i; c.options.causal = 1;
                    c.nheads_k = 1; break;
            default: c.varlen_gap_rows = 3; c.use_seqused_k = 1;
                     for (int b = 0; b < 7; ++b) c.seqused_k[b] = c.lens_k[b] * 2 / 3;
                     break;
        }
        cfgs[n++] = c;
        c.options.deterministic = 1;
        cfgs[n++] = c;
    }
    /* batched, every configuration, tails on both sides */
    static const int64_t batched_dims[] = {64, 96, 128, 192, 256};
    for (size_t i = 0; i < sizeof batched_dims / sizeof batched_dims[0]; ++i) {
        test_config c = test_config_shaped(alternate((int)i), 2, 6, 2, batched_dims[i], batched_dims[i],
                                           i & 1 ? 129 : 65, i & 1 ? 63 : 257);
        c.options.causal = (int)(i & 1);
        c.with_dlse = 1;
        cfgs[n++] = c;
    }
    tcuda_run_cases("cuda backward configurations", cfgs, n, 1);
}

/* ---- Feature combinations ------------------------------------------------ */

/* Softcap, dropout and ALiBi together, in pairs and all three (with a
 * window), at each portable head dim and both 16-bit types: the general
 * variants' code paths one feature at a time never reach. */
static void feature_combinations(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int64_t dims[] = {64, 128, 256};
    int n = 0;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i)
        for (int combo = 0; combo < 4; ++combo) {
            const int t = (int)i * 4 + combo;
            test_config c = test_config_shaped(alternate(t), 2, 4, 2, dims[i], dims[i], t & 1 ? 130 : 67,
                                               t & 1 ? 200 : 67);
            c.options.causal = t & 2 ? 1 : 0;
            if (combo != 1) c.options.softcap = 5.0;
            if (combo != 2) {
                c.options.dropout_p = 0.2;
                c.options.dropout_seed = 77 + t;
            }
            if (combo != 0) c.alibi = 1 + (t & 1);
            if (combo == 3) {
                c.options.window_left = 40;
                c.options.window_right = 7;
            }
            c.with_dlse = combo == 3;
            cfgs[n++] = c;
        }
    tcuda_run_cases("cuda backward feature combinations", cfgs, n, 1);
}

/* ---- Reproducibility --------------------------------------------------- */

static int64_t differing_bytes(const unsigned char *a, const unsigned char *b, size_t n) {
    int64_t d = 0;
    for (size_t i = 0; i < n; ++i) d += a[i] != b[i];
    return d;
}

/* Runs the backward `runs` times on one case; compares the bytes of dq, dk
 * and dv with the first run (`exact` of them must match: bit 0 dq, 1 dk,
 * 2 dv). The first run is checked against the reference. Returns failures;
 * *dq_differed tells whether dq changed in some run. */
static int repeat_backward(const test_config *cfg, uint64_t seed, int runs, unsigned exact, int *dq_differed) {
    tcuda_case c;
    char desc[768];
    test_config_describe(cfg, desc, sizeof desc);
    *dq_differed = 0;
    if (tcuda_case_init(&c, cfg, seed, NULL) != 0 || tcuda_forward(&c) != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL forward before the backward [%s]: %s\n", desc, flashc_last_error_message());
        tcuda_case_free(&c);
        return 1;
    }
    test_alloc *allocs[3] = {&c.tc.a_dq, &c.tc.a_dk, &c.tc.a_dv};
    const char *names[3] = {"dq", "dk", "dv"};
    unsigned char *first[3] = {NULL, NULL, NULL};
    int fails = 0;
    for (int r = 0; r < runs && !fails; ++r) {
        flashc_status st = tcuda_backward(&c);
        if (st != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL CUDA backward returned %s (%s) [%s]\n", flashc_status_string(st),
                    flashc_last_error_message(), desc);
            ++fails;
            break;
        }
        if (r == 0) {
            fails += test_check_backward(&c.tc);
            for (int i = 0; i < 3; ++i) {
                first[i] = malloc(allocs[i]->size ? allocs[i]->size : 1);
                if (first[i]) memcpy(first[i], allocs[i]->bytes, allocs[i]->size);
            }
            continue;
        }
        for (int i = 0; i < 3; ++i) {
            if (!first[i]) continue;
            int64_t d = differing_bytes(first[i], allocs[i]->bytes, allocs[i]->size);
            if (d == 0) continue;
            if (i == 0) *dq_differed = 1;
            if (exact & (1u << i)) {
                fprintf(stderr, "FAIL %s of run %d differs from run 0 in %lld of %zu bytes [%s] input seed %llu\n",
                        names[i], r, (long long)d, allocs[i]->size, desc, (unsigned long long)seed);
                ++fails;
            }
        }
    }
    for (int i = 0; i < 3; ++i) free(first[i]);
    tcuda_case_free(&c);
    return fails;
}

/* Big enough for many CTAs to add into the same dQ rows at once; each
 * Hopper configuration, dQ through shared memory and by atomics, masks
 * that make the key blocks adding into one query block start and end
 * anywhere (the order of deterministic mode's additions). */
static int reproducibility_configs(test_config *out) {
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 2, 8, 2, 128, 128, 700, 700);
    c.options.causal = 1;
    c.options.dropout_p = 0.1;
    c.options.dropout_seed = 42;
    c.with_dlse = 1;
    out[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_FLOAT16, 1, 4, 1, 256, 256, 333, 1000);
    c.alibi = 2;
    c.options.softcap = 3.0;
    out[n++] = c;
    c = varlen_config(FLASHC_DTYPE_BFLOAT16, 7, lengths, lengths_rotated, 64, 64);
    c.options.window_left = 100;
    c.options.window_right = 10;
    c.varlen_gap_rows = 4;
    out[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 2, 96, 96, 1500, 1200);
    out[n++] = c;
    /* more queries than keys under a causal mask (the last key blocks see
     * every query block below the diagonal), head dims 192 / 128 */
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 2, 4, 2, 192, 128, 900, 500);
    c.options.causal = 1;
    out[n++] = c;
    /* a window over more keys than queries, dQ through shared memory */
    c = test_config_shaped(FLASHC_DTYPE_FLOAT16, 1, 6, 3, 128, 128, 300, 1100);
    c.options.window_left = 200;
    c.options.window_right = 50;
    out[n++] = c;
    return n;
}

static void deterministic_bit_identical(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = reproducibility_configs(cfgs), failed = 0, count = test_quick() ? 1 : n;
    for (int i = 0; i < count; ++i) {
        test_config c = cfgs[i];
        c.options.deterministic = 1;
        int dq_differed;
        if (repeat_backward(&c, test_seed("cuda deterministic", (uint64_t)i), 10, 7u, &dq_differed) != 0) {
            fprintf(stderr, "  -> deterministic case %d failed\n", i);
            ++failed;
        }
    }
    if (failed) fail_msg("cuda deterministic: %d of %d cases failed", failed, count);
}

/* dQ may accumulate in any order (atomics); dK and dV never. */
static void dkdv_stable_with_atomics(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = reproducibility_configs(cfgs), failed = 0, count = test_quick() ? 1 : n, dq_changes = 0;
    for (int i = 0; i < count; ++i) {
        int dq_differed;
        if (repeat_backward(&cfgs[i], test_seed("cuda dkdv stable", (uint64_t)i), 10, 6u, &dq_differed) != 0) {
            fprintf(stderr, "  -> dk/dv stability case %d failed\n", i);
            ++failed;
        }
        dq_changes += dq_differed;
    }
    printf("cuda dk/dv stable: dq changed between runs in %d of %d cases (atomics; allowed)\n", dq_changes, count);
    if (failed) fail_msg("cuda dk/dv stable: %d of %d cases failed", failed, count);
}

/* With batch * nheads_k above FLASHC_BWD_DET_TARGET_CTAS (264), the
 * deterministic plan deals one chunk per (sequence, kv head): each CTA then
 * walks all its key blocks in turn, reloading K and V into the same shared
 * memory (the Hopper kernel's K / V barriers go through several phases). */
static void deterministic_key_block_walk(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 12, 46, 23, 64, 64, 40, 300);
    c.options.deterministic = 1;
    c.with_dlse = 1;
    cfgs[n++] = c;
    c.dtype = FLASHC_DTYPE_FLOAT16;
    c.d = c.dv = 128;
    c.nheads = 23;
    c.seqlen_q = 70;
    c.seqlen_k = 260;
    c.options.causal = 1;
    cfgs[n++] = c;
    static const int64_t lq[12] = {1, 17, 63, 65, 127, 129, 30, 200, 2, 64, 128, 9};
    static const int64_t lk[12] = {300, 1, 129, 17, 65, 400, 63, 2, 257, 128, 5, 130};
    c = varlen_config(FLASHC_DTYPE_BFLOAT16, 12, lq, lk, 64, 64);
    c.nheads = 23;
    c.nheads_k = 23;
    c.options.deterministic = 1;
    c.options.window_left = 50;
    c.options.window_right = 20;
    c.varlen_gap_rows = 2;
    cfgs[n++] = c;
    tcuda_run_cases("cuda backward deterministic key-block walk", cfgs, n, 1);
}

/* ---- GQA head splits ----------------------------------------------------- */

/* Either kernel (Hopper or portable) may split a kv head's group of query
 * heads over CTAs (float32 dK / dV partials, then summed in split order by
 * one more kernel; the plan's choice depends on the problem's size, so it
 * is forced here through FLASHC_CUDA_BWD_HEAD_SPLITS to each divisor of
 * the group): causal, varlen with seqused_k and a window, softcap at head
 * dim 256, deterministic mode (the Hopper kernel's ordered dQ, the
 * portable kernel's dQ slices). */
static void gqa_head_splits(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const char *forced[] = {"1", "2", "4", "8"};
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 2, 8, 1, 128, 128, 300, 500);
    c.options.causal = 1;
    c.with_dlse = 1;
    cfgs[n++] = c;
    c = varlen_config(FLASHC_DTYPE_FLOAT16, 7, lengths, lengths_rotated, 64, 64);
    c.nheads = 8;
    c.nheads_k = 2;
    c.options.window_left = 40;
    c.options.window_right = 10;
    c.options.deterministic = 1;
    c.use_seqused_k = 1;
    for (int b = 0; b < 7; ++b) c.seqused_k[b] = c.lens_k[b] * 3 / 4;
    cfgs[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 8, 2, 256, 256, 200, 130);
    c.options.softcap = 4.0;
    cfgs[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 8, 1, 96, 96, 333, 333);
    c.options.deterministic = 1;
    c.options.causal = 1;
    cfgs[n++] = c;
    for (size_t i = 0; i < sizeof forced / sizeof forced[0]; ++i) {
        setenv("FLASHC_CUDA_BWD_HEAD_SPLITS", forced[i], 1);
        char name[96];
        snprintf(name, sizeof name, "cuda backward GQA head splits %s", forced[i]);
        tcuda_run_cases(name, cfgs, n, 1);
    }
    unsetenv("FLASHC_CUDA_BWD_HEAD_SPLITS");
}

/* ---- The portable kernel's shared last wave ---------------------------- */

/* Bytes of workspace the backward asks for the case's arguments, under
 * the environment as it is now (0 on error). */
static size_t backward_workspace(const tcuda_case *c) {
    size_t bytes = 0;
    return flashc_attention_backward_workspace_size(&c->bwd, &bytes) == FLASHC_SUCCESS ? bytes : 0;
}

/* Without a mask, a window or varlen the portable kernel's last partial
 * wave of tiles is shared out over every SM (src/cuda/tail_split.h): each
 * tail CTA runs the end of one tile and the start of the next, and a
 * tile's segments add their dK / dV in CTA order. Forced portable, shapes
 * whose plan takes a tail on a 132-SM GPU (H100 / H200: checked there by
 * the workspace, which holds the segments' slots only then; GQA with
 * fewer than two tiles per SM splits the group over CTAs instead):
 * fewer tiles than SMs (each tile cut in two or three) and several waves
 * with a partial one, GQA, the general kernel (dropout, softcap, ALiBi:
 * the same shapes without a tail, which that variant never takes),
 * d != dv, sq != sk; each against the references, and dK / dV
 * bit-identical over runs whichever segment of a tile finishes last. */
static void shared_last_wave(void **state) {
    (void)state;
    REQUIRE_GPU();
    char *restore = tcuda_env_set("FLASHC_CUDA_BACKWARD", "portable");
    int n = 0;
    /* GQA (enough tiles for the plan not to split the group instead):
     * 288 tiles, two waves and 24 tiles of 10 iterations over 60 CTAs */
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 8, 6, 3, 64, 64, 600, 1500);
    c.with_dlse = 1;
    cfgs[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_FLOAT16, 4, 16, 16, 64, 64, 1100, 1100);
    cfgs[n++] = c; /* 576 tiles: four waves and 48 */
    test_config wide = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 6, 6, 96, 128, 1000, 777);
    cfgs[n++] = wide; /* d != dv, sq != sk in the d128 configuration: 42 tiles, no full wave */
    test_config big = test_config_shaped(FLASHC_DTYPE_FLOAT16, 2, 4, 4, 256, 256, 1000, 600);
    cfgs[n++] = big; /* 80 tiles of 16 iterations */
    /* the same two shapes with the general kernel (no tail; their
     * references run in full mode only, as the quick mode ran four cases) */
    const int plain_cases = n;
    wide.options.dropout_p = 0.15;
    wide.options.dropout_seed = 7;
    wide.options.softcap = 5.0;
    cfgs[n++] = wide;
    big.alibi = 2;
    cfgs[n++] = big;

    int sms = 0, failed = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) sms = 0;
    if (sms == 132) {
        for (int i = 0; i < n; ++i) {
            tcuda_case tc;
            if (tcuda_case_init(&tc, &cfgs[i], test_seed("cuda shared last wave size", (uint64_t)i), NULL) != 0) {
                ++failed;
                continue;
            }
            const size_t with_tail = backward_workspace(&tc);
            setenv("FLASHC_CUDA_BWD_TAIL", "0", 1);
            const size_t without = backward_workspace(&tc);
            unsetenv("FLASHC_CUDA_BWD_TAIL");
            tcuda_case_free(&tc);
            printf("shared last wave case %d: workspace %zu bytes with the tail, %zu without\n", i, with_tail,
                   without);
            /* the general variant never takes a tail (src/cuda/bwd_workspace.h) */
            if (i >= plain_cases) {
                if (!(with_tail == without && without > 0)) {
                    fprintf(stderr, "FAIL shared last wave case %d: the general variant took a tail\n", i);
                    ++failed;
                }
                continue;
            }
            if (!(with_tail > without && without > 0)) {
                fprintf(stderr, "FAIL shared last wave case %d: the plan took no tail (workspace %zu / %zu)\n", i,
                        with_tail, without);
                ++failed;
            }
        }
    } else {
        printf("shared last wave: %d SMs, not 132: whether each case takes a tail is not checked\n", sms);
    }
    for (int i = 0; i < (test_quick() ? 1 : n); ++i) {
        int dq_differed;
        if (repeat_backward(&cfgs[i], test_seed("cuda shared last wave stable", (uint64_t)i), 5, 6u,
                            &dq_differed) != 0) {
            fprintf(stderr, "  -> shared last wave stability case %d failed\n", i);
            ++failed;
        }
    }
    tcuda_run_cases("cuda backward shared last wave", cfgs, test_quick() ? plain_cases : n, 1);
    tcuda_env_restore("FLASHC_CUDA_BACKWARD", restore);
    if (failed) fail_msg("cuda shared last wave: %d checks failed", failed);
}

/* ---- Rows that see no key ---------------------------------------------- */

/* LSE = +inf rows: gradients exactly 0 (the reference's), never NaN; keys
 * no row sees: dK = dV = 0. */
static void fully_masked_rows(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    for (int t = 0; t < 2; ++t) {
        test_config c = test_config_shaped(alternate(t), 2, 4, 2, 64, 64, 40, 13);
        test_config k;
        k = c; k.options.causal = 1; k.with_dlse = 1; cfgs[n++] = k;
        k = c; k.seqlen_q = 130; k.seqlen_k = 10; k.options.window_left = 2; k.options.window_right = 0;
        cfgs[n++] = k;
        k = c; k.seqlen_q = 25; k.seqlen_k = 300; k.options.window_left = 1; k.options.window_right = 1;
        k.alibi = 2; k.d = k.dv = 128; cfgs[n++] = k;
        k = c; k.seqlen_q = 200; k.seqlen_k = 5; k.options.window_right = 4; k.options.softcap = 1.0;
        cfgs[n++] = k;
        k = c; k.options.causal = 1; k.options.dropout_p = 0.4; k.options.dropout_seed = 9; k.alibi = 1;
        k.options.softcap = 2.0; k.nheads_k = 1; k.options.deterministic = t; cfgs[n++] = k;
        k = c; k.seqlen_q = 1000; k.seqlen_k = 129; k.options.causal = 1; k.d = k.dv = 256; cfgs[n++] = k;
        static const int64_t lq[3] = {4, 6, 3}, lk[3] = {0, 5, 0};
        k = varlen_config(alternate(t), 3, lq, lk, 64, 64);
        cfgs[n++] = k;
        static const int64_t lq2[2] = {5, 3}, lk2[2] = {0, 0};
        k = varlen_config(alternate(t + 1), 2, lq2, lk2, 96, 96);
        k.options.causal = 1;
        k.options.deterministic = 1;
        cfgs[n++] = k;
    }
    tcuda_run_cases("cuda backward masked rows", cfgs, n, 1);
}

/* ---- Large magnitudes ---------------------------------------------------- */

/* Scores far beyond the exponent's range: q and k drawn with standard
 * deviation 10 and 30 (logits in the thousands, one-hot softmax rows), with
 * and without softcap (saturated tanh), ALiBi over long distances. */
static void large_magnitudes(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    static const double scales[] = {10.0, 30.0};
    for (int s = 0; s < 2; ++s)
        for (int f = 0; f < 3; ++f) {
            test_config c = test_config_shaped(alternate(s + f), 2, 4, 2, f == 2 ? 256 : 64, f == 2 ? 256 : 64,
                                               150, 180);
            c.input_scale = scales[s];
            if (f == 1) {
                c.options.softcap = 30.0;
                c.options.causal = 1;
            }
            if (f == 2) {
                c.alibi = 2;
                c.seqlen_k = 2000;
                c.options.dropout_p = 0.2;
                c.options.dropout_seed = 7;
            }
            c.with_dlse = 1;
            cfgs[n++] = c;
        }
    tcuda_run_cases("cuda backward large magnitudes", cfgs, n, 1);
}

/* ---- Long sequences ------------------------------------------------------ */

typedef struct finite_ctx {
    const flashc_tensor *t;
    int64_t bad;
} finite_ctx;

static void finite_one(const int64_t *index, void *ctx) {
    finite_ctx *f = ctx;
    if (!isfinite(flashc_ref_load(f->t, index))) ++f->bad;
}

static int64_t count_nonfinite(const flashc_tensor *t) {
    finite_ctx f = {t, 0};
    test_for_each(t, finite_one, &f);
    return f.bad;
}

/* 16384+ keys against a short query block and the other way round (the
 * reference stays cheap), checked in full; and a 16384 x 16384 causal
 * problem, too big for the double reference: every gradient finite and
 * within the tolerance of the CPU backend's. */
static void long_sequences(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 1, 64, 64, 70, 16500);
    cfgs[n++] = c;
    c.options.window_left = 3000;
    c.options.window_right = 100;
    c.dtype = FLASHC_DTYPE_FLOAT16;
    cfgs[n++] = c;
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 2, 128, 128, 16500, 70);
    c.options.causal = 1;
    cfgs[n++] = c;
    c.options.deterministic = 1;
    c.options.causal = 0;
    c.alibi = 1;
    cfgs[n++] = c;
    tcuda_run_cases("cuda backward long sequences", cfgs, n, 1);
    if (test_quick()) return;

    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 1, 128, 128, 16384, 16384);
    c.options.causal = 1;
    c.with_dlse = 1;
    tcuda_case tc;
    int fails = 0;
    if (tcuda_case_init(&tc, &c, test_seed("cuda backward 16k", 0), NULL) != 0 ||
        tcuda_forward(&tc) != FLASHC_SUCCESS || tcuda_backward(&tc) != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL 16384 x 16384: %s\n", flashc_last_error_message());
        fails = 1;
    } else {
        const flashc_tensor *grads[3] = {&tc.tc.dq, &tc.tc.dk, &tc.tc.dv};
        for (int i = 0; i < 3; ++i) {
            int64_t bad = count_nonfinite(grads[i]);
            if (bad) {
                fprintf(stderr, "FAIL 16384 x 16384: %lld non-finite elements in gradient %d\n", (long long)bad, i);
                ++fails;
            }
        }
        fails += tcuda_check_backward_against_cpu(&tc);
    }
    tcuda_case_free(&tc);
    if (fails) fail_msg("cuda backward 16384 x 16384: %d failures", fails);
}

/* ---- Errors specific to the CUDA backward -------------------------------- */

static int names(const char *msg, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(msg, word); p; p = strstr(p + 1, word)) {
        int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (before && after) return 1;
    }
    return 0;
}

static void misalign_dout(tcuda_case *c) { tcuda_repad(&c->tc.dout, &c->tc.a_dout, 3, 0, 0); }
static void misalign_dq(tcuda_case *c) { tcuda_repad(&c->tc.dq, &c->tc.a_dq, 3, 0, 0); }
static void misalign_dk(tcuda_case *c) { tcuda_repad(&c->tc.dk, &c->tc.a_dk, 8, 1, 0); }
static void misalign_dv(tcuda_case *c) { tcuda_repad(&c->tc.dv, &c->tc.a_dv, 3, 0, 0); }

/* dout, dq, dk, dv rows must be 16-byte aligned too: FLASHC_ERROR_STRIDE
 * naming the tensor, gradients and workspace untouched. */
static void backward_errors(void **state) {
    (void)state;
    REQUIRE_GPU();
    struct {
        const char *what, *name;
        void (*mutate)(tcuda_case *c);
    } cases[] = {
        {"dout row stride not a multiple of 8", "dout", misalign_dout},
        {"dq row stride not a multiple of 8", "dq", misalign_dq},
        {"dk base not 16-byte aligned", "dk", misalign_dk},
        {"dv row stride not a multiple of 8", "dv", misalign_dv},
    };
    int count = (int)(sizeof cases / sizeof cases[0]), failed = 0;
    for (int i = 0; i < count; ++i) {
        test_config cfg = test_config_shaped(alternate(i), 2, 4, 2, 64, 64, 9, 11);
        tcuda_case c;
        int fails = 0;
        if (tcuda_case_init(&c, &cfg, test_seed("cuda backward errors", (uint64_t)i), NULL) != 0 ||
            tcuda_forward(&c) != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL %s: could not build the case\n", cases[i].what);
            fails = 1;
        } else {
            cases[i].mutate(&c);
            if (tcuda_case_upload(&c) != 0) {
                fails = 1;
            } else {
                flashc_status st = tcuda_backward(&c);
                const char *msg = flashc_last_error_message();
                printf("%s: %s \"%s\"\n", cases[i].what, flashc_status_string(st), msg);
                if (st != FLASHC_ERROR_STRIDE || !names(msg, cases[i].name)) {
                    fprintf(stderr, "FAIL %s: expected FLASHC_ERROR_STRIDE naming %s, got %s \"%s\"\n",
                            cases[i].what, cases[i].name, flashc_status_string(st), msg);
                    ++fails;
                }
                test_alloc *grads[3] = {&c.tc.a_dq, &c.tc.a_dk, &c.tc.a_dv};
                for (int g = 0; g < 3; ++g)
                    if (test_untouched_violations(grads[g], NULL, 0) != 0) {
                        fprintf(stderr, "FAIL %s: gradient %d was written though the call failed\n",
                                cases[i].what, g);
                        ++fails;
                    }
                if (!tcuda_workspace_untouched(&c)) {
                    fprintf(stderr, "FAIL %s: the workspace was written though the call failed\n",
                            cases[i].what);
                    ++fails;
                }
            }
        }
        tcuda_case_free(&c);
        failed += fails != 0;
    }
    if (failed) fail_msg("cuda backward errors: %d of %d cases failed", failed, count);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_configuration),
        cmocka_unit_test(feature_combinations),
        cmocka_unit_test(deterministic_bit_identical),
        cmocka_unit_test(dkdv_stable_with_atomics),
        cmocka_unit_test(deterministic_key_block_walk),
        cmocka_unit_test(gqa_head_splits),
        cmocka_unit_test(shared_last_wave),
        cmocka_unit_test(fully_masked_rows),
        cmocka_unit_test(large_magnitudes),
        cmocka_unit_test(long_sequences),
        cmocka_unit_test(backward_errors),
    };
    /* FLASHC_TEST_FILTER=pattern runs the matching tests only (cmocka's
     * '*' and '?' wildcards), e.g. under the slower sanitizers. */
    const char *filter = getenv("FLASHC_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    if (!tcuda_available())
        printf("test_cuda_backward: no usable CUDA device (flashc_cuda_available() = %d): every test "
               "is skipped\n",
               flashc_cuda_available());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
