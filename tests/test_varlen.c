/* Variable-length (packed) batches, forward and backward against the
 * reference: empty query and key sequences, seqused_k (including 0), lengths
 * at tile boundaries, every feature, strided/packed layouts, every dtype.
 * Keys past seqused_k must get exactly zero gradients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "test_support.h"

#define MAX_CASES 64

static test_config varlen_base(flashc_dtype dtype, int batch, const int64_t *lq, const int64_t *lk) {
    test_config c = test_config_default();
    c.dtype = dtype;
    c.varlen = 1;
    c.batch = batch;
    c.nheads = 4;
    c.nheads_k = 2;
    c.d = 24;
    c.dv = 20;
    c.with_sdmask = 1;
    for (int b = 0; b < batch; ++b) {
        c.lens_q[b] = lq[b];
        c.lens_k[b] = lk[b];
    }
    return c;
}

/* Every feature over sequences of which one has no query and one no key. */
static void empty_sequences(void **state) {
    (void)state;
    static const int64_t lq[4] = {5, 0, 17, 1}, lk[4] = {7, 3, 0, 12};
    test_config cfgs[MAX_CASES];
    int n = 0;
    test_config c;
    cfgs[n++] = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk);
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.causal = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.window_left = 3;
    c.options.window_right = 2; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.window_left = -1;
    c.options.window_right = 1; c.alibi = 2; c.options.softcap = 1.3; c.input_scale = 2; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.window_left = 2;
    c.options.window_right = -1; c.alibi = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.window_left = 0;
    c.options.window_right = 0; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.options.dropout_p = 0.3;
    c.options.dropout_seed = 31337; c.options.dropout_offset = 99; c.options.causal = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.nheads_k = 1; c.with_dlse = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk); c.nheads = 6; c.nheads_k = 3;
    c.options.softmax_scale = 0.4; c.with_dlse = 1; c.options.causal = 1; c.alibi = 2;
    c.options.dropout_p = 0.2; c.options.dropout_seed = 4; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT32, 4, lq, lk); c.options.causal = 1; c.with_dlse = 1; cfgs[n++] = c;
    test_run_cases("varlen with empty sequences", cfgs, n, 1);
}

/* Packed rows before the first and after the last sequence (cu_seqlens
 * starting above 0): out 0, LSE +inf and zero gradients there. */
static void rows_outside_sequences(void **state) {
    (void)state;
    static const int64_t lq[3] = {9, 0, 4}, lk[3] = {5, 6, 0};
    test_config cfgs[4];
    int n = 0;
    test_config c = varlen_base(FLASHC_DTYPE_FLOAT64, 3, lq, lk);
    c.varlen_gap_rows = 3; c.with_dlse = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT32, 3, lq, lk);
    c.varlen_gap_rows = 2; c.options.causal = 1; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_BFLOAT16, 3, lq, lk);
    c.varlen_gap_rows = 5; c.options.dropout_p = 0.25; c.options.dropout_seed = 77; cfgs[n++] = c;
    c = varlen_base(FLASHC_DTYPE_FLOAT64, 3, lq, lk);
    c.varlen_gap_rows = 1; c.use_seqused_k = 1; c.seqused_k[0] = 2; c.seqused_k[1] = 6;
    c.seqused_k[2] = 0; cfgs[n++] = c;
    for (int i = 0; i < n; ++i) cfgs[i].nan_unused_kv = 1; /* never read */
    test_run_cases("varlen rows outside every sequence", cfgs, n, 1);
}

/* Many sequences, lengths drawn at random in 0..24 (zeros included). */
static void many_sequences(void **state) {
    (void)state;
    test_rng rng;
    test_rng_init(&rng, test_seed("varlen many sequences", 0));
    int64_t lq[TEST_MAX_BATCH], lk[TEST_MAX_BATCH];
    for (int b = 0; b < TEST_MAX_BATCH; ++b) {
        lq[b] = b % 5 == 1 ? 0 : test_rng_int(&rng, 0, 24);
        lk[b] = b % 7 == 2 ? 0 : test_rng_int(&rng, 0, 24);
    }
    test_config cfgs[3];
    cfgs[0] = varlen_base(FLASHC_DTYPE_FLOAT64, TEST_MAX_BATCH, lq, lk);
    cfgs[0].options.causal = 1;
    cfgs[0].alibi = 2;
    cfgs[0].with_dlse = 1;
    cfgs[1] = varlen_base(FLASHC_DTYPE_FLOAT32, TEST_MAX_BATCH, lq, lk);
    cfgs[1].options.dropout_p = 0.2;
    cfgs[1].options.dropout_seed = 21;
    cfgs[1].options.window_left = 3;
    cfgs[1].options.window_right = 4;
    cfgs[2] = varlen_base(FLASHC_DTYPE_BFLOAT16, TEST_MAX_BATCH, lq, lk);
    cfgs[2].options.softcap = 1.5;
    cfgs[2].nheads_k = 1;
    test_run_cases("varlen with 16 sequences", cfgs, 3, 1);
}

static void seqused_k(void **state) {
    (void)state;
    static const int64_t lq[4] = {6, 4, 0, 11}, lk[4] = {10, 8, 5, 9};
    static const int64_t used[4] = {7, 0, 5, 2};
    test_config cfgs[MAX_CASES];
    int n = 0;
    for (int mode = 0; mode < 4; ++mode) {
        test_config c = varlen_base(mode == 3 ? FLASHC_DTYPE_BFLOAT16 : FLASHC_DTYPE_FLOAT64, 4, lq, lk);
        c.use_seqused_k = 1;
        memcpy(c.seqused_k, used, sizeof used);
        c.nan_unused_kv = 1; /* keys past seqused_k are never read */
        if (mode == 1) c.options.causal = 1;
        if (mode == 2) {
            c.options.window_left = 1;
            c.options.window_right = 3;
            c.alibi = 2;
            c.options.dropout_p = 0.25;
            c.options.dropout_seed = 17;
            c.with_dlse = 1;
        }
        if (mode == 3) {
            c.options.causal = 1;
            c.options.softcap = 2.0;
        }
        cfgs[n++] = c;
    }
    test_run_cases("varlen with seqused_k", cfgs, n, 1);
}

static void tile_lengths(void **state) {
    (void)state;
    static const int64_t lq_full[4] = {63, 129, 1, 65}, lk_full[4] = {64, 127, 257, 1};
    static const int64_t lq_quick[3] = {63, 1, 65}, lk_quick[3] = {65, 64, 1};
    int quick = test_quick();
    test_config cfgs[4];
    int n = 0;
    for (int causal = 0; causal < 2; ++causal) {
        test_config c = varlen_base(FLASHC_DTYPE_FLOAT32, quick ? 3 : 4, quick ? lq_quick : lq_full,
                                    quick ? lk_quick : lk_full);
        c.d = c.dv = 8;
        c.nheads = 2;
        c.nheads_k = 1;
        c.options.causal = causal;
        cfgs[n++] = c;
    }
    test_run_cases("varlen lengths at tile boundaries", cfgs, n, 1);
}

/* Windows at the sizes where a bound stops binding, for sequences of
 * different lengths (so per-sequence and maximum lengths differ). */
static void window_bounds(void **state) {
    (void)state;
    static const int64_t lq[4] = {17, 3, 20, 7}, lk[4] = {1, 12, 7, 20};
    static const int64_t windows[][2] = {{0, 15}, {0, 16}, {0, 19}, {0, 20}, {6, -1}, {11, -1},
                                         {19, -1}, {20, 0}, {-1, 1}, {5, 6}};
    test_config cfgs[16];
    int n = 0;
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; ++w) {
        test_config c = varlen_base(FLASHC_DTYPE_FLOAT64, 4, lq, lk);
        c.d = c.dv = 8;
        c.options.window_left = windows[w][0];
        c.options.window_right = windows[w][1];
        c.with_dlse = 1;
        cfgs[n++] = c;
    }
    test_run_cases("varlen windows at the binding limits", cfgs, n, 1);
}

static void layouts(void **state) {
    (void)state;
    static const int64_t lq[4] = {9, 0, 33, 17}, lk[4] = {9, 0, 33, 17};
    static const int64_t lq2[4] = {9, 1, 33, 0}, lk2[4] = {4, 0, 40, 17};
    test_config cfgs[8];
    int n = 0;
    test_layout ls[3] = {TEST_LAYOUT_PADDED, TEST_LAYOUT_HEAD_MAJOR, TEST_LAYOUT_PACKED};
    for (int l = 0; l < 3; ++l) {
        test_config c = varlen_base(FLASHC_DTYPE_FLOAT32, 4, l == 2 ? lq : lq2, l == 2 ? lk : lk2);
        c.layout = ls[l];
        c.d = c.dv = 16;
        c.options.causal = 1;
        c.alibi = 2;
        c.with_dlse = 1;
        cfgs[n++] = c;
        c.nheads_k = 4;
        c.options.causal = 0;
        c.alibi = 0;
        c.options.window_left = 5;
        c.options.window_right = 5;
        c.options.dropout_p = 0.1;
        c.options.dropout_seed = 5;
        cfgs[n++] = c;
    }
    test_run_cases("varlen strided and packed layouts", cfgs, n, 1);
}

static void dtypes(void **state) {
    (void)state;
    static const int64_t lq[3] = {20, 0, 45}, lk[3] = {31, 7, 45};
    static const flashc_dtype all[4] = {FLASHC_DTYPE_BFLOAT16, FLASHC_DTYPE_FLOAT16,
                                        FLASHC_DTYPE_FLOAT32, FLASHC_DTYPE_FLOAT64};
    test_config cfgs[8];
    int n = 0;
    for (int t = 0; t < 4; ++t) {
        test_config c = varlen_base(all[t], 3, lq, lk);
        c.d = c.dv = 64;
        c.options.causal = 1;
        cfgs[n++] = c;
        c.options.causal = 0;
        c.options.softcap = 1.5;
        c.alibi = 1;
        c.options.dropout_p = 0.15;
        c.options.dropout_seed = 77;
        c.with_dlse = 1;
        cfgs[n++] = c;
    }
    test_run_cases("varlen dtypes", cfgs, n, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_sequences),
        cmocka_unit_test(rows_outside_sequences), cmocka_unit_test(many_sequences),
        cmocka_unit_test(seqused_k),
        cmocka_unit_test(tile_lengths),    cmocka_unit_test(window_bounds),
        cmocka_unit_test(layouts),
        cmocka_unit_test(dtypes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
