/* The CUDA backend's forward. Inputs are made on the host (fp16/bf16),
 * copied to the GPU, outputs poisoned there before each call; every
 * element that comes back is checked against the double reference (the
 * low-precision tolerance rule of test_check.c), against the CPU backend
 * on the same inputs, and for bit-identical repeats; bytes beyond the
 * views must still be poison. Every feature alone and combined, sizes
 * around tile boundaries, every head dim the backend takes, batched and
 * varlen, strided and packed views, half the calls on a non-default
 * stream. Dropout: S_dmask's sign pattern equals the CPU's and the
 * reference Philox mask bit for bit. Error paths specific to CUDA.
 *
 * Where no GPU is usable (CI), every test is skipped. */
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
#include "test_grids.h"

#define MAX_CASES 512

#define REQUIRE_GPU()                                                                             \
    do {                                                                                          \
        if (!tcuda_available()) skip();                                                           \
    } while (0)

static test_config cfgs[MAX_CASES];

/* Shared-grid configs for the GPU; float32/float64 ones alternate between
 * bfloat16 and float16. */
static void adapt(test_config *c, int n) {
    for (int i = 0; i < n; ++i)
        c[i] = tcuda_config(c[i], i & 1 ? FLASHC_DTYPE_FLOAT16 : FLASHC_DTYPE_BFLOAT16);
}

static test_config shaped(flashc_dtype dt, int64_t b, int64_t h, int64_t hk, int64_t d, int64_t dv,
                          int64_t sq, int64_t sk) {
    test_config c = test_config_shaped(dt, b, h, hk, d, dv, sq, sk);
    c.with_sdmask = 1;
    return c;
}

static flashc_dtype alternate(int i) { return i & 1 ? FLASHC_DTYPE_FLOAT16 : FLASHC_DTYPE_BFLOAT16; }

/* ---- Features ------------------------------------------------------------- */

static void features_alone(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_features_alone(cfgs, FLASHC_DTYPE_BFLOAT16);
    n += grid_features_alone(cfgs + n, FLASHC_DTYPE_FLOAT16);
    adapt(cfgs, n);
    tcuda_run_cases("cuda features alone", cfgs, n, 0);
}

/* The windows that matter most to a tiled kernel: causal as a window, a
 * left window, a symmetric one, and the diagonal with everything after
 * it; inside one tile and across tiles, sq < sk and sq > sk. */
static void windows(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int64_t shapes[][2] = {{37, 45}, {45, 37}, {130, 70}, {70, 200}};
    static const int64_t ks[] = {5, 64};
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
        test_config c = shaped(alternate((int)s), 2, 4, 2, 64, 64, shapes[s][0], shapes[s][1]);
        c.options.window_left = -1;
        c.options.window_right = 0;
        cfgs[n++] = c;
        c.options.window_left = 0;
        c.options.window_right = -1;
        cfgs[n++] = c;
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; ++k) {
            c.options.window_left = ks[k];
            c.options.window_right = 0;
            cfgs[n++] = c;
            c.options.window_right = ks[k];
            cfgs[n++] = c;
        }
    }
    tcuda_run_cases("cuda windows", cfgs, n, 0);
}

static void feature_combinations(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_feature_combinations(cfgs, FLASHC_DTYPE_BFLOAT16);
    n += grid_feature_combinations(cfgs + n, FLASHC_DTYPE_FLOAT16);
    adapt(cfgs, n);
    /* the same with wide heads, where the kernel tiles differ */
    int base = n;
    for (int i = 0; i < base && n < MAX_CASES; i += 2) {
        test_config c = cfgs[i];
        c.d = c.dv = 128;
        cfgs[n++] = c;
    }
    tcuda_run_cases("cuda feature combinations", cfgs, n, 0);
}

/* ---- Sizes ---------------------------------------------------------------- */

static void sequence_lengths(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_sequence_lengths(cfgs, FLASHC_DTYPE_BFLOAT16);
    for (int i = 0; i < n; ++i) cfgs[i].dtype = alternate(i);
    adapt(cfgs, n);
    tcuda_run_cases("cuda sequence lengths", cfgs, n, 0);
}

static void tile_boundaries(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_tile_boundaries(cfgs, FLASHC_DTYPE_BFLOAT16);
    for (int i = 0; i < n; ++i) cfgs[i].dtype = alternate(i);
    adapt(cfgs, n);
    /* the GPU's tiles are 64 or 128 rows/keys wide, depending on the head
     * dim: lengths on either side of both, for narrow and wide heads */
    static const int64_t lens[] = {63, 64, 65, 127, 128, 129, 255, 257};
    static const int64_t dims[] = {64, 128, 256};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; ++l)
        for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
            test_config c = shaped(alternate((int)(l + d)), 1, 2, 1, dims[d], dims[d], lens[l], lens[l]);
            c.options.causal = (int)((l + d) & 1);
            cfgs[n++] = c;
        }
    static const int64_t mixed[][2] = {{63, 129}, {129, 63}, {128, 257}, {257, 128}, {1, 129}, {129, 1}};
    for (size_t m = 0; m < sizeof mixed / sizeof mixed[0]; ++m) {
        test_config c = shaped(alternate((int)m), 2, 4, 2, 128, 128, mixed[m][0], mixed[m][1]);
        c.options.causal = (int)(m & 1);
        cfgs[n++] = c;
    }
    if (!test_quick()) {
        /* many tiles in both directions */
        test_config c = shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 1, 128, 128, 520, 520);
        c.options.causal = 1;
        c.with_sdmask = 0;
        cfgs[n++] = c;
        c = shaped(FLASHC_DTYPE_FLOAT16, 1, 2, 1, 64, 64, 389, 701);
        c.options.window_left = 300;
        c.options.window_right = 129;
        c.alibi = 1;
        c.with_sdmask = 0;
        cfgs[n++] = c;
        c = shaped(FLASHC_DTYPE_BFLOAT16, 1, 2, 1, 256, 256, 333, 257);
        c.options.causal = 1;
        c.options.softcap = 2.0;
        c.with_sdmask = 0;
        cfgs[n++] = c;
    }
    tcuda_run_cases("cuda tile boundaries", cfgs, n, 0);
}

/* Queries past the 65535 row blocks a grid's y dimension holds (the
 * portable kernel's 128-row blocks at d <= 64): every row block runs once,
 * the first rows included. Three keys keep the references cheap. */
static void long_sequences(void **state) {
    (void)state;
    REQUIRE_GPU();
    const int64_t rows = 65535LL * 128 + 77;
    test_config c = shaped(FLASHC_DTYPE_BFLOAT16, 1, 1, 1, 8, 8, rows, 3);
    c.with_sdmask = 0;
    cfgs[0] = c;
    tcuda_run_cases("cuda long sequence", cfgs, 1, 0);
    c.dtype = FLASHC_DTYPE_FLOAT16;
    c.options.causal = 1; /* all but the last 5 rows masked: zeros */
    c.seqlen_k = 5;
    cfgs[0] = c;
    tcuda_run_cases("cuda long sequence, causal", cfgs, 1, 0);
}

static void head_dims(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const int64_t dims[] = {8, 24, 40, 64, 72, 96, 128, 160, 192, 200, 256};
    static const int64_t pairs[][2] = {{64, 32}, {32, 128}, {8, 256}, {256, 8},
                                       {128, 64}, {200, 256}, {40, 72}, {256, 128},
                                       {192, 128}, {176, 120}, {160, 64}};
    int n = 0;
    for (int t = 0; t < 2; ++t)
        for (size_t i = 0; i < sizeof dims / sizeof dims[0]; ++i) {
            int flip = (int)((i + (size_t)t) & 1);
            test_config c = shaped(alternate(t), 1, 4, 2, dims[i], dims[i], flip ? 129 : 65, flip ? 63 : 129);
            c.options.causal = flip;
            c.alibi = (int)(i % 3 == 0);
            cfgs[n++] = c;
        }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; ++i) {
        test_config c = shaped(alternate((int)i), 2, 2, 1, pairs[i][0], pairs[i][1], 70, 45);
        c.options.window_left = (int64_t)i * 3;
        c.options.window_right = 2;
        cfgs[n++] = c;
    }
    /* q/k 192, v 128 over several key blocks of its own tile, both masks */
    for (int t = 0; t < 2; ++t) {
        test_config c = shaped(alternate(t), 1, 2, 1, 192, 128, t ? 333 : 129, t ? 517 : 300);
        c.options.causal = t;
        c.options.softcap = t ? 0.0 : 4.0;
        cfgs[n++] = c;
    }
    int shared = grid_head_dims(cfgs + n, FLASHC_DTYPE_BFLOAT16);
    adapt(cfgs + n, shared);
    n += shared;
    tcuda_run_cases("cuda head dims", cfgs, n, 0);
}

/* ---- Layouts, dtypes ------------------------------------------------------ */

static void layouts_and_dtypes(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_layouts(cfgs);
    n += grid_dtypes(cfgs + n);
    adapt(cfgs, n);
    /* packed qkv with wide heads, MQA, and one with dv != d in a padded
     * layout */
    test_config c = shaped(FLASHC_DTYPE_BFLOAT16, 2, 4, 4, 128, 128, 130, 130);
    c.layout = TEST_LAYOUT_PACKED;
    c.options.causal = 1;
    cfgs[n++] = c;
    c.nheads_k = 1;
    c.options.causal = 0;
    c.options.softcap = 1.5;
    c.dtype = FLASHC_DTYPE_FLOAT16;
    cfgs[n++] = c;
    c = shaped(FLASHC_DTYPE_FLOAT16, 2, 6, 2, 96, 64, 77, 99);
    c.layout = TEST_LAYOUT_PADDED;
    c.alibi = 2;
    c.options.causal = 1;
    cfgs[n++] = c;
    c.layout = TEST_LAYOUT_HEAD_MAJOR;
    cfgs[n++] = c;
    c.layout = TEST_LAYOUT_SEQ_MAJOR;
    c.dtype = FLASHC_DTYPE_BFLOAT16;
    cfgs[n++] = c;
    tcuda_run_cases("cuda layouts and dtypes", cfgs, n, 0);
}

/* ---- Varlen --------------------------------------------------------------- */

static test_config varlen_base(flashc_dtype dt, int batch, const int64_t *lq, const int64_t *lk) {
    test_config c = shaped(dt, batch, 4, 2, 24, 24, 0, 0);
    c.varlen = 1;
    for (int b = 0; b < batch; ++b) {
        c.lens_q[b] = lq[b];
        c.lens_k[b] = lk[b];
    }
    return c;
}

static int varlen_configs(test_config *out) {
    int n = 0;
    test_config c;
    /* empty query and key sequences, with every feature */
    static const int64_t lq[4] = {5, 0, 17, 1}, lk[4] = {7, 3, 0, 12};
    for (int f = 0; f < 8; ++f) {
        c = varlen_base(alternate(f), 4, lq, lk);
        switch (f) {
            case 1: c.options.causal = 1; break;
            case 2: c.options.window_left = 3; c.options.window_right = 2; break;
            case 3: c.options.window_right = 1; c.alibi = 2; c.options.softcap = 1.3; c.input_scale = 2; break;
            case 4: c.options.window_left = 2; c.alibi = 1; break;
            case 5: c.options.dropout_p = 0.3; c.options.dropout_seed = 31337; c.options.dropout_offset = 99;
                    c.options.causal = 1; break;
            case 6: c.nheads_k = 1; break;
            case 7: c.nheads = 6; c.nheads_k = 3; c.options.softmax_scale = 0.4; c.options.causal = 1;
                    c.alibi = 2; c.options.dropout_p = 0.2; c.options.dropout_seed = 4; break;
            default: break;
        }
        out[n++] = c;
    }
    /* packed rows outside every sequence */
    static const int64_t gq[3] = {9, 0, 4}, gk[3] = {5, 6, 0};
    c = varlen_base(FLASHC_DTYPE_BFLOAT16, 3, gq, gk);
    c.varlen_gap_rows = 3;
    c.nan_unused_kv = 1; /* NaN there must not leak into any output */
    out[n++] = c;
    c.dtype = FLASHC_DTYPE_FLOAT16;
    c.varlen_gap_rows = 5;
    c.options.causal = 1;
    c.options.dropout_p = 0.25;
    c.options.dropout_seed = 77;
    out[n++] = c;
    /* seqused_k, 0 included */
    static const int64_t sq[4] = {6, 4, 0, 11}, sk[4] = {10, 8, 5, 9}, used[4] = {7, 0, 5, 2};
    for (int mode = 0; mode < 3; ++mode) {
        c = varlen_base(alternate(mode), 4, sq, sk);
        c.use_seqused_k = 1;
        memcpy(c.seqused_k, used, sizeof used);
        c.nan_unused_kv = 1;
        if (mode == 1) c.options.causal = 1;
        if (mode == 2) {
            c.options.window_left = 1;
            c.options.window_right = 3;
            c.alibi = 2;
            c.options.dropout_p = 0.25;
            c.options.dropout_seed = 17;
            c.varlen_gap_rows = 2;
        }
        out[n++] = c;
    }
    /* sixteen sequences of random lengths, zeros included */
    test_rng rng;
    test_rng_init(&rng, test_seed("cuda varlen lengths", 0));
    int64_t mq[TEST_MAX_BATCH], mk[TEST_MAX_BATCH];
    for (int b = 0; b < TEST_MAX_BATCH; ++b) {
        mq[b] = b % 5 == 1 ? 0 : test_rng_int(&rng, 0, 150);
        mk[b] = b % 7 == 2 ? 0 : test_rng_int(&rng, 0, 150);
    }
    c = varlen_base(FLASHC_DTYPE_BFLOAT16, TEST_MAX_BATCH, mq, mk);
    c.d = c.dv = 64;
    c.options.causal = 1;
    c.alibi = 2;
    out[n++] = c;
    c.dtype = FLASHC_DTYPE_FLOAT16;
    c.options.causal = 0;
    c.options.window_left = 30;
    c.options.window_right = 4;
    c.options.dropout_p = 0.2;
    c.options.dropout_seed = 21;
    c.use_seqused_k = 1;
    for (int b = 0; b < TEST_MAX_BATCH; ++b) c.seqused_k[b] = mk[b] / 2;
    out[n++] = c;
    /* lengths at the tiles' edges, wide heads */
    static const int64_t tq[4] = {63, 129, 1, 257}, tk[4] = {64, 127, 257, 1};
    for (int causal = 0; causal < 2; ++causal) {
        c = varlen_base(alternate(causal), 4, tq, tk);
        c.d = c.dv = causal ? 256 : 128;
        c.nheads = 2;
        c.nheads_k = 1;
        c.options.causal = causal;
        out[n++] = c;
    }
    /* strided and packed layouts */
    static const int64_t pq[4] = {9, 0, 33, 17};
    static const test_layout ls[3] = {TEST_LAYOUT_PADDED, TEST_LAYOUT_HEAD_MAJOR, TEST_LAYOUT_PACKED};
    for (int l = 0; l < 3; ++l) {
        c = varlen_base(alternate(l), 4, pq, pq);
        c.layout = ls[l];
        c.d = c.dv = 32;
        c.options.causal = 1;
        c.alibi = 2;
        out[n++] = c;
        c.nheads_k = 4;
        c.options.causal = 0;
        c.alibi = 0;
        c.options.window_left = 5;
        c.options.window_right = 5;
        c.options.dropout_p = 0.1;
        c.options.dropout_seed = 5;
        out[n++] = c;
    }
    return n;
}

static void varlen(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = varlen_configs(cfgs);
    tcuda_run_cases("cuda varlen", cfgs, n, 0);
}

/* Rows that see no key: out exactly 0, LSE +inf (checked exactly by
 * test_check_forward). */
static void masked_rows(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    for (int t = 0; t < 2; ++t) {
        test_config c = shaped(alternate(t), 2, 4, 2, 64, 64, 40, 13);
        test_config k;
        k = c; k.options.causal = 1; cfgs[n++] = k;
        k = c; k.seqlen_q = 130; k.seqlen_k = 10; k.options.window_left = 2; k.options.window_right = 0;
        cfgs[n++] = k;
        k = c; k.seqlen_q = 25; k.seqlen_k = 8; k.options.window_left = 1; k.options.window_right = 1;
        k.alibi = 2; cfgs[n++] = k;
        k = c; k.seqlen_q = 200; k.seqlen_k = 5; k.options.window_right = 4; k.options.softcap = 1.0;
        cfgs[n++] = k;
        k = c; k.options.causal = 1; k.options.dropout_p = 0.4; k.options.dropout_seed = 9; k.alibi = 1;
        k.options.softcap = 2.0; k.nheads_k = 1; cfgs[n++] = k;
        static const int64_t lq[3] = {4, 6, 3}, lk[3] = {0, 5, 0};
        k = varlen_base(alternate(t), 3, lq, lk);
        cfgs[n++] = k;
        static const int64_t lq2[2] = {5, 3}, lk2[2] = {0, 0};
        k = varlen_base(alternate(t + 1), 2, lq2, lk2);
        k.options.causal = 1;
        cfgs[n++] = k;
    }
    tcuda_run_cases("cuda masked rows", cfgs, n, 0);
}

/* ---- Dropout -------------------------------------------------------------- */

/* S_dmask's sign is the dropout mask: equal to the CPU backend's and to
 * the reference Philox for the same (seed, offset), over enough entries
 * to mean it (nearly every visible entry is non-zero), with the kept
 * fraction within 5 sigma of 1 - p. */
static void dropout_mask(void **state) {
    (void)state;
    REQUIRE_GPU();
    static const struct {
        double p;
        uint64_t seed, offset;
        int causal, varlen;
    } cases[] = {
        {0.1, 0x0123456789abcdefull, 0x0000000500000007ull, 0, 0},
        {0.5, 0, 0, 1, 0},
        {0.9, 0xffffffffull, 0xffffffffffffffffull, 0, 0},
        {0.17, 0xfedcba9876543210ull, 1ull << 33, 1, 1},
        {0.3, 0x100000000ull, 12345, 0, 1},
    };
    int quick = test_quick(), count = quick ? 2 : (int)(sizeof cases / sizeof cases[0]);
    int failed = 0;
    #pragma omp parallel for schedule(dynamic, 1) reduction(+ : failed)
    for (int k = 0; k < count; ++k) {
        int64_t s = quick ? 96 : 200;
        test_config c = shaped(alternate(k), 2, 4, 2, 64, 64, s, s + 37);
        c.options.dropout_p = cases[k].p;
        c.options.dropout_seed = cases[k].seed;
        c.options.dropout_offset = cases[k].offset;
        c.options.causal = cases[k].causal;
        if (cases[k].varlen) {
            static const int64_t lq[3] = {150, 0, 77}, lk[3] = {190, 5, 77};
            c = varlen_base(alternate(k), 3, lq, lk);
            c.d = c.dv = 64;
            c.options.dropout_p = cases[k].p;
            c.options.dropout_seed = cases[k].seed;
            c.options.dropout_offset = cases[k].offset;
            c.options.causal = cases[k].causal;
        }
        uint64_t seed = test_seed("cuda dropout mask", (uint64_t)k);
        tcuda_case tc;
        int fails = 0;
        if (tcuda_case_init(&tc, &c, seed, k & 1 ? tcuda_side_stream() : NULL) != 0) {
            fails = 1;
        } else {
            flashc_status st = tcuda_forward(&tc);
            if (st != FLASHC_SUCCESS) {
                fprintf(stderr, "FAIL CUDA forward with dropout returned %s (%s)\n",
                        flashc_status_string(st), flashc_last_error_message());
                fails = 1;
            } else {
                fails += test_check_forward(&tc.tc);
                tcuda_mask_stats ms;
                fails += tcuda_check_against_cpu(&tc, &ms);
                double kept = ms.signed_both ? 1.0 - (double)ms.dropped / (double)ms.signed_both : 0.0;
                double sigma = ms.signed_both ? sqrt(c.options.dropout_p * (1 - c.options.dropout_p) /
                                                     (double)ms.signed_both)
                                              : 1.0;
                printf("p=%.2f: mask compared bit for bit on %lld of %lld visible entries, kept %.4f "
                       "(expected %.4f, 5 sigma %.4f)\n",
                       c.options.dropout_p, (long long)ms.signed_both, (long long)ms.visible, kept,
                       1 - c.options.dropout_p, 5 * sigma);
                if (ms.signed_both < ms.visible * 9 / 10) {
                    fprintf(stderr, "FAIL too few non-zero S_dmask entries to compare the mask\n");
                    ++fails;
                }
                if (fabs(kept - (1 - c.options.dropout_p)) > 5 * sigma) {
                    fprintf(stderr, "FAIL kept fraction %.4f outside 5 sigma of %.4f\n", kept,
                            1 - c.options.dropout_p);
                    ++fails;
                }
            }
        }
        tcuda_case_free(&tc);
        if (fails) {
            fprintf(stderr, "  -> cuda dropout mask case %d failed (input seed %llu)\n", k,
                    (unsigned long long)seed);
            ++failed;
        }
    }
    if (failed) fail_msg("cuda dropout mask: %d of %d cases failed", failed, count);
}

/* ---- Reproducibility ------------------------------------------------------ */

/* Larger problems (many blocks in flight), three runs each (default
 * stream, side stream, default stream): identical bytes of out, lse and
 * s_dmask, every element written. Correctness is the other tests' job
 * (each of their cases is also repeated once). */
static void bitwise_reproducible(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = 0;
    test_config c = shaped(FLASHC_DTYPE_BFLOAT16, 2, 8, 2, 128, 128, 600, 600);
    c.options.causal = 1;
    c.options.dropout_p = 0.1;
    c.options.dropout_seed = 42;
    cfgs[n++] = c;
    c = shaped(FLASHC_DTYPE_FLOAT16, 1, 4, 4, 256, 256, 333, 1000);
    c.alibi = 2;
    c.options.softcap = 3.0;
    c.with_sdmask = 0;
    cfgs[n++] = c;
    static const int64_t lq[4] = {300, 1, 0, 257}, lk[4] = {200, 400, 3, 257};
    c = varlen_base(FLASHC_DTYPE_BFLOAT16, 4, lq, lk);
    c.d = c.dv = 64;
    c.options.window_left = 50;
    c.options.window_right = 10;
    c.varlen_gap_rows = 4;
    cfgs[n++] = c;
    int count = test_quick() ? 1 : n, failed = 0;
    for (int i = 0; i < count; ++i) {
        tcuda_case tc;
        uint64_t seed = test_seed("cuda reproducible", (uint64_t)i);
        int fails = 0;
        if (tcuda_case_init(&tc, &cfgs[i], seed, NULL) != 0 || tcuda_forward(&tc) != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL CUDA forward: %s\n", flashc_last_error_message());
            fails = 1;
        } else {
            const flashc_tensor *written[3] = {&tc.tc.out, &tc.tc.lse, &tc.tc.s_dmask};
            for (int w = 0; w < (cfgs[i].with_sdmask ? 3 : 2); ++w)
                if (test_count_nan(written[w]) != 0) {
                    fprintf(stderr, "FAIL NaN (poison) left in output %d\n", w);
                    ++fails;
                }
            fails += tcuda_check_repeatable(&tc, tcuda_side_stream());
            fails += tcuda_check_repeatable(&tc, NULL);
        }
        tcuda_case_free(&tc);
        if (fails) {
            fprintf(stderr, "  -> cuda reproducible case %d failed (input seed %llu)\n", i,
                    (unsigned long long)seed);
            ++failed;
        }
    }
    if (failed) fail_msg("cuda reproducible: %d of %d cases failed", failed, count);
}

/* The portable kernel's shared last wave (src/cuda/tail_split.h): where
 * every row block costs the same, the last wave's key blocks are shared
 * over every SM and the segments combined in CTA order through the
 * scratch that tcuda_forward's allocator hands out (NaN-poisoned before
 * each call). Shapes that take it on any GPU of 28 SMs or more (case 0)
 * and on the 132-SM H100 / H200 (every case): no full wave (a tile cut
 * in up to six segments), several waves and a partial one, GQA and MQA,
 * d != dv, a last key block cut short, long keys against few rows; each
 * against the references, and bit-identical over repeats on both streams
 * whichever segment of a row block finishes last. */
static void shared_last_wave(void **state) {
    (void)state;
    REQUIRE_GPU();
    char *restore = tcuda_env_set("FLASHC_CUDA_FORWARD", "portable");
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 1, 3, 3, 128, 128, 1000, 1500);
    c.with_lse = 1;
    cfgs[n++] = c; /* 24 row blocks of 24 key blocks, no main grid */
    c = test_config_shaped(FLASHC_DTYPE_FLOAT16, 4, 16, 4, 64, 64, 1100, 1100);
    cfgs[n++] = c; /* 576 row blocks: two waves of 264 and 48 */
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 2, 4, 4, 256, 256, 700, 1000);
    c.with_lse = 1;
    cfgs[n++] = c; /* 88 row blocks of 16 key blocks */
    c = test_config_shaped(FLASHC_DTYPE_FLOAT16, 1, 8, 2, 96, 128, 2048, 2048);
    cfgs[n++] = c; /* the d128 configuration: 128 row blocks of 32 */
    c = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 3, 5, 1, 64, 64, 333, 4000);
    c.with_lse = 1;
    cfgs[n++] = c; /* MQA, 45 row blocks of 32 key blocks, the last of 32 keys */

    int sms = 0, failed = 0, took = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) sms = 0;
    /* FLASHC_CUDA_FWD_TAIL=0 (for benchmarks) turns the shared wave off:
     * the cases then check the plain schedule */
    const char *tail_env = getenv("FLASHC_CUDA_FWD_TAIL");
    const int tail_off = tail_env && strcmp(tail_env, "0") == 0;
    for (int i = 0; i < n; ++i) {
        tcuda_case tc;
        const uint64_t seed = test_seed("cuda forward shared last wave", (uint64_t)i);
        char desc[768];
        test_config_describe(&cfgs[i], desc, sizeof desc);
        int fails = 0;
        if (tcuda_case_init(&tc, &cfgs[i], seed, NULL) != 0 || tcuda_forward(&tc) != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL CUDA forward: %s [%s]\n", flashc_last_error_message(), desc);
            fails = 1;
        } else {
            const int requested = tc.scratch_requests;
            took += requested > 0;
            printf("shared last wave case %d: scratch %s (%zu bytes)\n", i, requested ? "used" : "not asked for",
                   tc.scratch_bytes);
            if (!requested && sms == 132 && !tail_off) {
                fprintf(stderr, "FAIL the forward asked for no scratch on 132 SMs [%s]\n", desc);
                ++fails;
            }
            fails += test_check_forward(&tc.tc);
            for (int r = 0; r < (test_quick() ? 1 : 3); ++r) {
                fails += tcuda_check_repeatable(&tc, tcuda_side_stream());
                fails += tcuda_check_repeatable(&tc, NULL);
            }
            fails += tcuda_check_against_cpu(&tc, NULL);
        }
        tcuda_case_free(&tc);
        if (fails) {
            fprintf(stderr, "  -> shared last wave case %d failed (input seed %llu)\n", i, (unsigned long long)seed);
            ++failed;
        }
    }
    if (sms >= 28 && took == 0 && !tail_off) {
        fprintf(stderr, "FAIL no case asked for scratch on %d SMs\n", sms);
        ++failed;
    }
    tcuda_env_restore("FLASHC_CUDA_FORWARD", restore);
    if (failed) fail_msg("cuda forward shared last wave: %d failures", failed);
}

/* ---- Errors specific to CUDA ---------------------------------------------- */

/* Does `msg` name `word` as a whole word (not inside another name)? */
static int names(const char *msg, const char *word) {
    size_t n = strlen(word);
    for (const char *p = strstr(msg, word); p; p = strstr(p + 1, word)) {
        int before = p == msg || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
        int after = !(isalnum((unsigned char)p[n]) || p[n] == '_');
        if (before && after) return 1;
    }
    return 0;
}

static void repad_q_stride(tcuda_case *c) { tcuda_repad(&c->tc.q, &c->tc.a_q, 3, 0, 0); }
static void repad_k_stride(tcuda_case *c) { tcuda_repad(&c->tc.k, &c->tc.a_k, 3, 0, 0); }
static void repad_v_stride(tcuda_case *c) { tcuda_repad(&c->tc.v, &c->tc.a_v, 3, 0, 0); }
static void repad_out_stride(tcuda_case *c) { tcuda_repad(&c->tc.out, &c->tc.a_out, 3, 0, 0); }
static void repad_q_base(tcuda_case *c) { tcuda_repad(&c->tc.q, &c->tc.a_q, 8, 1, 0); }
static void repad_v_base(tcuda_case *c) { tcuda_repad(&c->tc.v, &c->tc.a_v, 8, 1, 0); }
static void repad_out_base(tcuda_case *c) { tcuda_repad(&c->tc.out, &c->tc.a_out, 8, 1, 0); }

typedef struct cuda_error_case {
    const char *what;
    flashc_dtype dtype;
    int64_t d, dv;
    void (*mutate)(tcuda_case *c); /* a host view re-made (then uploaded) */
    flashc_status expect;
    const char *named[4];          /* the message names one of these */
} cuda_error_case;

static int run_error_case(const cuda_error_case *e, int index) {
    test_config cfg = shaped(e->dtype, 2, 4, 2, e->d, e->dv, 9, 11);
    cfg.alibi = 1;
    tcuda_case c;
    void *stream = index & 1 ? tcuda_side_stream() : NULL;
    if (tcuda_case_init(&c, &cfg, test_seed("cuda errors", (uint64_t)index), stream) != 0) {
        fprintf(stderr, "FAIL %s: could not build the case\n", e->what);
        tcuda_case_free(&c);
        return 1;
    }
    if (e->mutate) {
        e->mutate(&c);
        if (tcuda_case_upload(&c) != 0) {
            tcuda_case_free(&c);
            return 1;
        }
    }
    test_case *tc = &c.tc;
    test_alloc *inputs[4] = {&tc->a_q, &tc->a_k, &tc->a_v, &tc->a_alibi};
    flashc_status st = tcuda_forward(&c);
    const char *msg = flashc_last_error_message();
    int fails = 0;
    if (st != e->expect && st != FLASHC_ERROR_UNSUPPORTED) {
        fprintf(stderr, "FAIL %s: expected %s (or FLASHC_ERROR_UNSUPPORTED), got %s (\"%s\")\n", e->what,
                flashc_status_string(e->expect), flashc_status_string(st), msg);
        ++fails;
    }
    int named = 0;
    for (int i = 0; i < 4 && e->named[i]; ++i) named |= names(msg, e->named[i]);
    if (!named) {
        fprintf(stderr, "FAIL %s: the message \"%s\" names none of \"%s\"%s%s\n", e->what, msg,
                e->named[0], e->named[1] ? ", \"" : "", e->named[1] ? e->named[1] : "");
        ++fails;
    }
    /* nothing written: outputs still poison, inputs as uploaded */
    test_alloc *outputs[3] = {&tc->a_out, &tc->a_lse, &tc->a_sdmask};
    for (int i = 0; i < 3; ++i)
        if (test_untouched_violations(outputs[i], NULL, 0) != 0) {
            fprintf(stderr, "FAIL %s: output %d was written though the call failed\n", e->what, i);
            ++fails;
        }
    for (int i = 0; i < 4; ++i) {
        if (!inputs[i]->bytes) continue;
        unsigned char *now = tcuda_fetch(&c, inputs[i]);
        if (!now || memcmp(now, inputs[i]->bytes, inputs[i]->size) != 0) {
            fprintf(stderr, "FAIL %s: input %d changed on the device\n", e->what, i);
            ++fails;
        }
        free(now);
    }
    printf("%s: %s \"%s\"\n", e->what, flashc_status_string(st), msg);
    tcuda_case_free(&c);
    return fails;
}

static void cuda_errors(void **state) {
    (void)state;
    REQUIRE_GPU();
    const flashc_dtype bf = FLASHC_DTYPE_BFLOAT16, f16 = FLASHC_DTYPE_FLOAT16;
    const cuda_error_case cases[] = {
        {"float32 CUDA tensors", FLASHC_DTYPE_FLOAT32, 64, 64, NULL, FLASHC_ERROR_DTYPE, {"q", "dtype"}},
        {"float64 CUDA tensors", FLASHC_DTYPE_FLOAT64, 64, 64, NULL, FLASHC_ERROR_DTYPE, {"q", "dtype"}},
        {"head dim 20", bf, 20, 20, NULL, FLASHC_ERROR_HEAD_DIM, {"q", "k", "head_dim", "head dim"}},
        {"head dim 68", f16, 68, 68, NULL, FLASHC_ERROR_HEAD_DIM, {"q", "k", "head_dim", "head dim"}},
        {"v head dim 20", bf, 24, 20, NULL, FLASHC_ERROR_HEAD_DIM, {"v", "out", "head_dim_v", "head dim"}},
        {"q row stride not a multiple of 8", bf, 64, 64, repad_q_stride, FLASHC_ERROR_STRIDE, {"q"}},
        {"k row stride not a multiple of 8", f16, 64, 64, repad_k_stride, FLASHC_ERROR_STRIDE, {"k"}},
        {"v row stride not a multiple of 8", bf, 64, 64, repad_v_stride, FLASHC_ERROR_STRIDE, {"v"}},
        {"out row stride not a multiple of 8", f16, 64, 64, repad_out_stride, FLASHC_ERROR_STRIDE, {"out"}},
        {"q base not 16-byte aligned", bf, 64, 64, repad_q_base, FLASHC_ERROR_STRIDE, {"q"}},
        {"v base not 16-byte aligned", f16, 64, 64, repad_v_base, FLASHC_ERROR_STRIDE, {"v"}},
        {"out base not 16-byte aligned", bf, 64, 64, repad_out_base, FLASHC_ERROR_STRIDE, {"out"}},
    };
    int n = (int)(sizeof cases / sizeof cases[0]), failed = 0;
    for (int i = 0; i < n; ++i) failed += run_error_case(&cases[i], i) != 0;
    if (failed) fail_msg("cuda errors: %d of %d cases failed", failed, n);
}

/* ---- Backward ------------------------------------------------------------- */

/* The backward on the forward's grids: every feature alone and combined,
 * and the varlen configs (empty sequences, gaps, seqused_k, layouts), each
 * against the reference and against the CPU backend; every third config
 * again in deterministic mode. (test_cuda_backward.c has the backward's
 * own checks.) */
static void backward(void **state) {
    (void)state;
    REQUIRE_GPU();
    int n = grid_features_alone(cfgs, FLASHC_DTYPE_BFLOAT16);
    n += grid_feature_combinations(cfgs + n, FLASHC_DTYPE_FLOAT16);
    adapt(cfgs, n);
    n += varlen_configs(cfgs + n);
    for (int i = 0, base = n; i < base && n < MAX_CASES; i += 3) {
        cfgs[n] = cfgs[i];
        cfgs[n++].options.deterministic = 1;
    }
    tcuda_run_cases("cuda backward", cfgs, n, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(features_alone),
        cmocka_unit_test(windows),
        cmocka_unit_test(feature_combinations),
        cmocka_unit_test(sequence_lengths),
        cmocka_unit_test(tile_boundaries),
        cmocka_unit_test(long_sequences),
        cmocka_unit_test(head_dims),
        cmocka_unit_test(layouts_and_dtypes),
        cmocka_unit_test(varlen),
        cmocka_unit_test(masked_rows),
        cmocka_unit_test(dropout_mask),
        cmocka_unit_test(bitwise_reproducible),
        cmocka_unit_test(shared_last_wave),
        cmocka_unit_test(cuda_errors),
        cmocka_unit_test(backward),
    };
    /* FLASHC_TEST_FILTER=pattern runs the matching tests only (cmocka's
     * '*' and '?' wildcards), e.g. under the slower sanitizers. */
    const char *filter = getenv("FLASHC_TEST_FILTER");
    if (filter && filter[0]) cmocka_set_test_filter(filter);
    if (!tcuda_available())
        printf("test_cuda_forward: no usable CUDA device (flashc_cuda_available() = %d): every test "
               "is skipped\n",
               flashc_cuda_available());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
