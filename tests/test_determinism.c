/* Determinism: forward and backward give bit-identical outputs run to run
 * and whatever the thread count (1, 2, the default), with and without the
 * deterministic flag (the CPU backend is deterministic by construction),
 * and when called from inside a caller's parallel region. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct snapshot {
    unsigned char *bytes[4];
    size_t size[4];
} snapshot;

static void take(snapshot *s, test_alloc *const *allocs, int n) {
    for (int i = 0; i < n; ++i) {
        s->size[i] = allocs[i]->size;
        s->bytes[i] = malloc(s->size[i] ? s->size[i] : 1);
        if (s->size[i]) memcpy(s->bytes[i], allocs[i]->bytes, s->size[i]);
    }
}

static int differs(const snapshot *s, test_alloc *const *allocs, int n, const char **which,
                   const char *const *names) {
    for (int i = 0; i < n; ++i)
        if (s->size[i] != allocs[i]->size ||
            (s->size[i] && memcmp(s->bytes[i], allocs[i]->bytes, s->size[i]) != 0)) {
            *which = names[i];
            return 1;
        }
    return 0;
}

static void release(snapshot *s, int n) {
    for (int i = 0; i < n; ++i) free(s->bytes[i]);
}

static int check_config(const test_config *cfg, uint64_t seed) {
    static const int threads[] = {1, 1, 2, 2, 0};
    test_case tc;
    if (test_case_init(&tc, cfg, seed) != 0) return 1;
    test_alloc *fwd_allocs[3] = {&tc.a_out, &tc.a_lse, &tc.a_sdmask};
    test_alloc *bwd_allocs[3] = {&tc.a_dq, &tc.a_dk, &tc.a_dv};
    const char *fwd_names[3] = {"out", "lse", "s_dmask"}, *bwd_names[3] = {"dq", "dk", "dv"};
    snapshot fwd_ref, bwd_ref;
    memset(&fwd_ref, 0, sizeof fwd_ref);
    memset(&bwd_ref, 0, sizeof bwd_ref);
    int fails = 0;
    char desc[768];
    test_config_describe(cfg, desc, sizeof desc);
    for (size_t r = 0; r < sizeof threads / sizeof threads[0]; ++r) {
        tc.fwd.options.num_threads = threads[r];
        tc.bwd.options.num_threads = threads[r];
        if (test_case_forward(&tc) != FLASHC_SUCCESS || test_case_backward(&tc) != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL call failed [%s]: %s\n", desc, flashc_last_error_message());
            fails = 1;
            break;
        }
        if (r == 0) {
            /* correctness is the other tests' job; here only that every
             * element was written (no poison left) */
            const flashc_tensor *written[5] = {&tc.out, &tc.lse, &tc.dq, &tc.dk, &tc.dv};
            for (int w = 0; w < 5; ++w)
                if (test_count_nan(written[w]) != 0) {
                    fprintf(stderr, "FAIL NaN left in output %d [%s]\n", w, desc);
                    ++fails;
                }
            take(&fwd_ref, fwd_allocs, 3);
            take(&bwd_ref, bwd_allocs, 3);
            continue;
        }
        const char *which = NULL;
        if (differs(&fwd_ref, fwd_allocs, 3, &which, fwd_names) ||
            differs(&bwd_ref, bwd_allocs, 3, &which, bwd_names)) {
            fprintf(stderr, "FAIL %s differs between run 1 (1 thread) and run %zu (%d threads) [%s] seed %llu\n",
                    which, r + 1, threads[r], desc, (unsigned long long)seed);
            ++fails;
        }
    }
    release(&fwd_ref, 3);
    release(&bwd_ref, 3);
    test_case_free(&tc);
    return fails;
}

static void bit_identical(void **state) {
    (void)state;
    int64_t big = test_quick() ? 130 : 300;
    test_config cfgs[4];
    int n = 0;
    test_config c = test_config_shaped(FLASHC_DTYPE_FLOAT32, 2, 4, 2, 64, 64, big, big);
    c.with_sdmask = 1;
    c.with_dlse = 1;
    c.options.causal = 1;
    c.alibi = 2;
    c.options.dropout_p = 0.1;
    c.options.dropout_seed = 5;
    cfgs[n++] = c;
    c.dtype = FLASHC_DTYPE_BFLOAT16;
    c.options.causal = 0;
    c.options.softcap = 2.0;
    c.options.deterministic = 1;
    c.seqlen_q = big - 37;
    cfgs[n++] = c;
    test_config v = test_config_default();
    v.dtype = FLASHC_DTYPE_FLOAT32;
    v.varlen = 1;
    v.batch = 3;
    v.lens_q[0] = big / 3; v.lens_q[1] = 0; v.lens_q[2] = big - 43;
    v.lens_k[0] = big / 2; v.lens_k[1] = 9; v.lens_k[2] = big - 1;
    v.nheads = 6;
    v.nheads_k = 2;
    v.d = v.dv = 32;
    v.options.window_left = 40;
    v.options.window_right = 7;
    cfgs[n++] = v;
    test_config f = test_config_default(); /* float64 */
    f.seqlen_q = 129;
    f.seqlen_k = 65;
    f.options.causal = 1;
    cfgs[n++] = f;
    int failed = 0;
    for (int k = 0; k < n; ++k) failed += check_config(&cfgs[k], test_seed("determinism", (uint64_t)k)) != 0;
    printf("determinism: %d/%d configs bit-identical over 5 runs (1, 1, 2, 2, default threads)\n",
           n - failed, n);
    assert_int_equal(failed, 0);
}

/* One-thread calls made from inside a caller's OpenMP parallel region (each
 * thread of a team of two runs its own problem: the library opens a region
 * of its own, so its worksharing loops are not shared out among the
 * caller's threads) give the bits of the same call made outside one. */
static void inside_a_callers_parallel_region(void **state) {
    (void)state;
    test_config c = test_config_shaped(FLASHC_DTYPE_FLOAT32, 2, 3, 1, 24, 16, 70, 131);
    c.with_lse = 1;
    c.options.causal = 1;
    c.options.num_threads = 1;
    uint64_t seed = test_seed("determinism in parallel", 0);
    test_case outside, inside[2];
    assert_int_equal(test_case_init(&outside, &c, seed), 0);
    assert_int_equal(test_case_forward(&outside), FLASHC_SUCCESS);
    assert_int_equal(test_case_backward(&outside), FLASHC_SUCCESS);
    for (int t = 0; t < 2; ++t) assert_int_equal(test_case_init(&inside[t], &c, seed), 0);
    flashc_status st[2] = {FLASHC_ERROR_ARGUMENT, FLASHC_ERROR_ARGUMENT};
    int team = 0;
    #pragma omp parallel num_threads(2)
    {
        int t = omp_get_thread_num();
        #pragma omp single
        team = omp_get_num_threads();
        st[t] = test_case_forward(&inside[t]);
        if (st[t] == FLASHC_SUCCESS) st[t] = test_case_backward(&inside[t]);
    }
    if (team != 2) {
        printf("note: the parallel region got %d thread(s)\n", team);
    }
    for (int t = 0; t < team; ++t) {
        assert_int_equal(st[t], FLASHC_SUCCESS);
        const test_alloc *a[5] = {&inside[t].a_out, &inside[t].a_lse, &inside[t].a_dq,
                                  &inside[t].a_dk, &inside[t].a_dv};
        const test_alloc *b[5] = {&outside.a_out, &outside.a_lse, &outside.a_dq, &outside.a_dk,
                                  &outside.a_dv};
        for (int i = 0; i < 5; ++i) {
            assert_int_equal(a[i]->size, b[i]->size);
            assert_memory_equal(a[i]->bytes, b[i]->bytes, a[i]->size);
        }
    }
    for (int t = 0; t < 2; ++t) test_case_free(&inside[t]);
    test_case_free(&outside);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(bit_identical),
                                       cmocka_unit_test(inside_a_callers_parallel_region)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
