/* Running lists of configs inside a cmocka test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_support.h"

void test_run_cases(const char *name, const test_config *cfgs, int count, int backward) {
    int failed = 0;
    for (int i = 0; i < count; ++i) {
        uint64_t seed = test_seed(name, (uint64_t)i);
        if (test_run_case(&cfgs[i], seed, backward) != 0) {
            fprintf(stderr, "  -> %s case %d failed (input seed %llu)\n", name, i,
                    (unsigned long long)seed);
            ++failed;
        }
    }
    printf("%s: %d/%d cases passed\n", name, count - failed, count);
    fflush(stdout);
    if (failed) fail_msg("%s: %d of %d cases failed (details above)", name, failed, count);
}
