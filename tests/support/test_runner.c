/* Running lists of configs inside a cmocka test. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include <cmocka.h>

#include "test_support.h"

void test_run_cases(const char *name, const test_config *cfgs, int count, int backward) {
    int failed = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < count; ++i) {
        uint64_t seed = test_seed(name, (uint64_t)i);
        if (test_run_case(&cfgs[i], seed, backward) != 0) {
            fprintf(stderr, "  -> %s case %d failed (input seed %llu)\n", name, i,
                    (unsigned long long)seed);
            ++failed;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: %d/%d cases passed (%.1f s)\n", name, count - failed, count,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fflush(stdout);
    if (failed) fail_msg("%s: %d of %d cases failed (details above)", name, failed, count);
}
