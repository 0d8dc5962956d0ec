/* Rows that see no key (a window that excludes everything for them, sq > sk
 * with causal, an empty key sequence in varlen, seqused_k = 0): out 0 and
 * LSE +inf in the forward (checked exactly by the comparison), and in the
 * backward finite gradients, exactly 0 for those rows' dq, even with a
 * non-zero dLSE on them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "test_support.h"

#define MAX_CASES 64

static int masked_configs(test_config *cfgs, flashc_dtype dtype) {
    int n = 0;
    test_config c = test_config_default();
    c.dtype = dtype;
    c.with_sdmask = 1;
    c.with_dlse = 1;
    test_config k;
    k = c; k.seqlen_q = 40; k.seqlen_k = 13; k.options.causal = 1; cfgs[n++] = k;
    k = c; k.seqlen_q = 30; k.seqlen_k = 10; k.options.window_left = 2; k.options.window_right = 0;
    cfgs[n++] = k;
    k = c; k.seqlen_q = 25; k.seqlen_k = 8; k.options.window_left = 1; k.options.window_right = 1;
    k.alibi = 2; cfgs[n++] = k;
    k = c; k.seqlen_q = 30; k.seqlen_k = 5; k.options.window_left = -1; k.options.window_right = 4;
    k.options.softcap = 1.0; cfgs[n++] = k;
    k = c; k.seqlen_q = 40; k.seqlen_k = 13; k.options.causal = 1; k.options.dropout_p = 0.4;
    k.options.dropout_seed = 9; k.alibi = 1; k.options.softcap = 2.0; k.nheads_k = 1; cfgs[n++] = k;
    /* varlen: empty key sequences, seqused_k = 0, and a batch with no key at all */
    k = c; k.varlen = 1; k.batch = 3;
    k.lens_q[0] = 4; k.lens_q[1] = 6; k.lens_q[2] = 3;
    k.lens_k[0] = 0; k.lens_k[1] = 5; k.lens_k[2] = 0;
    cfgs[n++] = k;
    k.options.causal = 1; k.options.dropout_p = 0.2; k.options.dropout_seed = 3; cfgs[n++] = k;
    k = c; k.varlen = 1; k.batch = 3; k.use_seqused_k = 1;
    k.lens_q[0] = 7; k.lens_q[1] = 2; k.lens_q[2] = 5;
    k.lens_k[0] = 6; k.lens_k[1] = 5; k.lens_k[2] = 4;
    k.seqused_k[0] = 0; k.seqused_k[1] = 5; k.seqused_k[2] = 0;
    k.alibi = 2; cfgs[n++] = k;
    k = c; k.varlen = 1; k.batch = 2;
    k.lens_q[0] = 5; k.lens_q[1] = 3; k.lens_k[0] = 0; k.lens_k[1] = 0;
    cfgs[n++] = k;
    return n;
}

/* dq of a row whose LSE is +inf must be exactly 0. */
static int masked_dq_exactly_zero(const test_case *tc) {
    const test_config *c = &tc->cfg;
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->bwd.varlen), bad = 0;
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->bwd.varlen, b);
        for (int64_t h = 0; h < c->nheads; ++h)
            for (int64_t i = 0; i < seq.len_q; ++i) {
                int64_t li3[3] = {b, h, i}, li2[2] = {h, seq.q_start + i};
                if (!isinf(flashc_ref_load(&tc->lse, c->varlen ? li2 : li3))) continue;
                for (int64_t x = 0; x < c->d; ++x) {
                    int64_t q4[4] = {b, i, h, x}, q3[3] = {seq.q_start + i, h, x};
                    double v = flashc_ref_load(&tc->dq, c->varlen ? q3 : q4);
                    if (v != 0.0 && bad++ == 0)
                        fprintf(stderr, "FAIL dq of masked row (b=%lld,h=%lld,row=%lld,x=%lld) = %g\n",
                                (long long)b, (long long)h, (long long)i, (long long)x, v);
                }
            }
    }
    return bad != 0;
}

static void run_dtype(flashc_dtype dtype, const char *name) {
    test_config cfgs[MAX_CASES];
    int n = masked_configs(cfgs, dtype), failed = 0;
    for (int k = 0; k < n; ++k) {
        uint64_t seed = test_seed(name, (uint64_t)k);
        int fails = test_run_case(&cfgs[k], seed, 1);
        test_case tc;
        test_case_init(&tc, &cfgs[k], seed);
        if (test_case_forward(&tc) == FLASHC_SUCCESS && test_case_backward(&tc) == FLASHC_SUCCESS)
            fails += masked_dq_exactly_zero(&tc);
        else
            ++fails;
        test_case_free(&tc);
        if (fails) {
            fprintf(stderr, "  -> %s case %d failed (input seed %llu)\n", name, k,
                    (unsigned long long)seed);
            ++failed;
        }
    }
    printf("%s: %d/%d cases passed\n", name, n - failed, n);
    if (failed) fail_msg("%s: %d of %d cases failed", name, failed, n);
}

static void masked_rows_float64(void **state) {
    (void)state;
    run_dtype(FLASHC_DTYPE_FLOAT64, "masked rows float64");
}
static void masked_rows_float32(void **state) {
    (void)state;
    run_dtype(FLASHC_DTYPE_FLOAT32, "masked rows float32");
}
static void masked_rows_bfloat16(void **state) {
    (void)state;
    run_dtype(FLASHC_DTYPE_BFLOAT16, "masked rows bfloat16");
}
static void masked_rows_float16(void **state) {
    (void)state;
    run_dtype(FLASHC_DTYPE_FLOAT16, "masked rows float16");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(masked_rows_float64),
        cmocka_unit_test(masked_rows_float32),
        cmocka_unit_test(masked_rows_bfloat16),
        cmocka_unit_test(masked_rows_float16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
