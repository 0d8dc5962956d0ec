/* Dropout: the kept fraction is within a binomial bound of 1 - p; S_dmask
 * carries exactly the mask the forward applied (its sign, and the output
 * rebuilt from it); the backward replays that mask (gradients match the
 * reference with the same mask); seed and offset (both 32-bit halves)
 * select the mask, and the same pair gives the same mask. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static test_config dropout_base(double p) {
    int64_t s = test_quick() ? 128 : 256;
    test_config c = test_config_shaped(FLASHC_DTYPE_FLOAT32, 1, 2, 1, 16, 16, s, s);
    c.with_sdmask = 1;
    c.options.dropout_p = p;
    c.options.dropout_seed = 0x0123456789abcdefull;
    c.options.dropout_offset = 0x0000000500000007ull;
    return c;
}

/* Count dropped entries (negative S_dmask) over the visible region. */
static void count_dropped(const test_case *tc, int64_t *dropped, int64_t *total) {
    *dropped = *total = 0;
    const flashc_tensor *t = &tc->s_dmask;
    for (int64_t b = 0; b < tc->cfg.batch; ++b)
        for (int64_t h = 0; h < tc->cfg.nheads; ++h)
            for (int64_t i = 0; i < tc->cfg.seqlen_q; ++i)
                for (int64_t j = 0; j < tc->cfg.seqlen_k; ++j) {
                    int64_t index[4] = {b, h, i, j};
                    double v = flashc_ref_load(t, index);
                    ++*total;
                    if (signbit(v)) ++*dropped;
                }
}

static void kept_fraction(void **state) {
    (void)state;
    const double ps[] = {0.1, 0.5, 0.9};
    int failed = 0;
    for (int k = 0; k < 3; ++k) {
        test_config c = dropout_base(ps[k]);
        test_case tc;
        uint64_t seed = test_seed("dropout kept fraction", (uint64_t)k);
        assert_int_equal(test_case_init(&tc, &c, seed), 0);
        assert_int_equal(test_case_forward(&tc), FLASHC_SUCCESS);
        failed += test_check_forward(&tc) != 0;
        int64_t dropped, total;
        count_dropped(&tc, &dropped, &total);
        double kept = 1.0 - (double)dropped / (double)total;
        double sigma = sqrt(ps[k] * (1 - ps[k]) / (double)total);
        printf("p=%.2f kept %.5f of %lld (expected %.5f, 5 sigma %.5f)\n", ps[k], kept,
               (long long)total, 1 - ps[k], 5 * sigma);
        if (fabs(kept - (1 - ps[k])) > 5 * sigma) {
            fprintf(stderr, "FAIL kept fraction %.5f outside 5 sigma of %.5f (seed %llu)\n", kept,
                    1 - ps[k], (unsigned long long)seed);
            ++failed;
        }
        test_case_free(&tc);
    }
    assert_int_equal(failed, 0);
}

/* The forward's own output, rebuilt from its S_dmask: P_ij = |S_ij| /
 * sum_j |S_ij| (S is exp(s - m)), kept where S_ij > 0, scaled 1/(1-p). */
static void sdmask_matches_applied_mask(void **state) {
    (void)state;
    int failed = 0;
    for (int k = 0; k < 3; ++k) {
        test_config c = dropout_base(0.3 + 0.2 * k);
        c.dtype = FLASHC_DTYPE_FLOAT64;
        c.seqlen_q = 45;
        c.seqlen_k = 77;
        c.batch = 2;
        c.nheads = 4;
        c.nheads_k = 2;
        c.options.causal = k == 1;
        c.alibi = k == 2 ? 2 : 0;
        c.options.softcap = k == 2 ? 2.0 : 0.0;
        test_case tc;
        uint64_t seed = test_seed("dropout sdmask applied", (uint64_t)k);
        assert_int_equal(test_case_init(&tc, &c, seed), 0);
        assert_int_equal(test_case_forward(&tc), FLASHC_SUCCESS);
        failed += test_check_forward(&tc) != 0;
        double max_err = 0.0, p = c.options.dropout_p;
        for (int64_t b = 0; b < c.batch; ++b)
            for (int64_t h = 0; h < c.nheads; ++h)
                for (int64_t i = 0; i < c.seqlen_q; ++i) {
                    double norm = 0.0;
                    for (int64_t j = 0; j < c.seqlen_k; ++j) {
                        int64_t si[4] = {b, h, i, j};
                        norm += fabs(flashc_ref_load(&tc.s_dmask, si));
                    }
                    for (int64_t x = 0; x < c.dv; ++x) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < c.seqlen_k; ++j) {
                            int64_t si[4] = {b, h, i, j}, vi[4] = {b, j, h / 2, x};
                            double s = flashc_ref_load(&tc.s_dmask, si);
                            if (s > 0) acc += s / norm / (1 - p) * flashc_ref_load(&tc.v, vi);
                        }
                        int64_t oi[4] = {b, i, h, x};
                        double want = norm > 0 ? acc : 0.0;
                        double e = fabs(flashc_ref_load(&tc.out, oi) - want);
                        if (!(e <= max_err)) max_err = e;
                    }
                }
        if (!(max_err < 1e-10)) {
            fprintf(stderr, "FAIL out rebuilt from S_dmask differs by %.3g (p=%g, seed %llu)\n",
                    max_err, p, (unsigned long long)seed);
            ++failed;
        }
        test_case_free(&tc);
    }
    assert_int_equal(failed, 0);
}

/* Gradients with dropout match the reference using the same mask: the
 * backward replays the forward's mask, for several p, seeds and offsets
 * (64-bit values whose high halves matter). */
static void backward_replays_mask(void **state) {
    (void)state;
    static const double ps[] = {0.05, 0.3, 0.5, 0.8, 0.95};
    static const uint64_t seeds[] = {0, 1, 0xffffffffull, 0x100000000ull, 0xfedcba9876543210ull};
    static const uint64_t offsets[] = {0, 12, 0x100000000ull, 0xffffffffffffffffull, 77};
    test_config cfgs[10];
    int n = 0;
    for (int k = 0; k < 5; ++k) {
        test_config c = test_config_default();
        c.dtype = FLASHC_DTYPE_FLOAT64;
        c.seqlen_q = 33;
        c.seqlen_k = 47;
        c.with_sdmask = 1;
        c.with_dlse = 1;
        c.options.dropout_p = ps[k];
        c.options.dropout_seed = seeds[k];
        c.options.dropout_offset = offsets[k];
        c.options.causal = k & 1;
        c.alibi = k == 2 ? 1 : 0;
        c.options.softcap = k == 3 ? 1.5 : 0;
        cfgs[n++] = c;
        c.dtype = FLASHC_DTYPE_BFLOAT16;
        c.nheads_k = 1;
        cfgs[n++] = c;
    }
    test_run_cases("dropout backward replay", cfgs, n, 1);
}

/* Sign pattern of S_dmask for (seed, offset). */
static unsigned char *mask_of(uint64_t seed, uint64_t offset, uint64_t input_seed, int64_t *n) {
    test_config c = dropout_base(0.5);
    c.seqlen_q = c.seqlen_k = 64;
    c.options.dropout_seed = seed;
    c.options.dropout_offset = offset;
    test_case tc;
    if (test_case_init(&tc, &c, input_seed) != 0) return NULL;
    if (test_case_forward(&tc) != FLASHC_SUCCESS) {
        test_case_free(&tc);
        return NULL;
    }
    *n = c.nheads * c.seqlen_q * c.seqlen_k;
    unsigned char *m = malloc((size_t)*n);
    int64_t e = 0;
    for (int64_t h = 0; h < c.nheads; ++h)
        for (int64_t i = 0; i < c.seqlen_q; ++i)
            for (int64_t j = 0; j < c.seqlen_k; ++j, ++e) {
                int64_t index[4] = {0, h, i, j};
                m[e] = (unsigned char)signbit(flashc_ref_load(&tc.s_dmask, index));
            }
    test_case_free(&tc);
    return m;
}

static void seed_and_offset_select_mask(void **state) {
    (void)state;
    const uint64_t seed = 0x1111222233334444ull, offset = 0x0000000900000003ull;
    uint64_t in1 = test_seed("dropout seeds", 0), in2 = test_seed("dropout seeds", 1);
    int64_t n = 0;
    unsigned char *base = mask_of(seed, offset, in1, &n);
    assert_non_null(base);
    /* same (seed, offset), different inputs: the same mask */
    unsigned char *same = mask_of(seed, offset, in2, &n);
    assert_non_null(same);
    assert_memory_equal(base, same, (size_t)n);
    free(same);
    const struct {
        const char *what;
        uint64_t seed, offset;
    } changes[] = {
        {"seed low bit", seed ^ 1, offset},
        {"seed high half", seed ^ (1ull << 45), offset},
        {"offset low half", seed, offset + 1},
        {"offset high half", seed, offset + (1ull << 32)},
    };
    for (size_t k = 0; k < sizeof changes / sizeof changes[0]; ++k) {
        unsigned char *m = mask_of(changes[k].seed, changes[k].offset, in1, &n);
        assert_non_null(m);
        int64_t differ = 0;
        for (int64_t e = 0; e < n; ++e) differ += m[e] != base[e];
        printf("%s: %lld of %lld mask entries differ\n", changes[k].what, (long long)differ,
               (long long)n);
        /* independent masks at p = 0.5 differ in half the entries */
        if (differ < n / 3) fail_msg("changing the %s barely changes the mask", changes[k].what);
        free(m);
    }
    free(base);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kept_fraction),
        cmocka_unit_test(sdmask_matches_applied_mask),
        cmocka_unit_test(backward_replays_mask),
        cmocka_unit_test(seed_and_offset_select_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
