/* Forward (built as test_forward) or backward (built as test_backward,
 * TEST_BACKWARD=1) against the double-precision reference, on the grids of
 * test_grids.c: every feature alone and combined, sq != sk both ways,
 * seqlen 1, primes, tile boundaries +-1, head dims 1..256 (dv != d too),
 * every dtype, strided and packed layouts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "test_support.h"
#include "test_grids.h"

#ifndef TEST_BACKWARD
#  define TEST_BACKWARD 0
#endif
#define PASS (TEST_BACKWARD ? "backward" : "forward")
/* The half-precision dtype the head-dim sweep adds: both get covered. */
#define HEAD_DIM_LOW_PRECISION (TEST_BACKWARD ? FLASHC_DTYPE_BFLOAT16 : FLASHC_DTYPE_FLOAT16)

#define MAX_CASES 256

typedef int (*dtype_grid)(test_config *cfgs, flashc_dtype dtype);

/* Run `grid` for each dtype of `dtypes` (terminated by -1). */
static void run_grid(const char *what, dtype_grid grid, const int *dtypes) {
    test_config cfgs[MAX_CASES];
    char name[128];
    for (int i = 0; dtypes[i] >= 0; ++i) {
        flashc_dtype dt = (flashc_dtype)dtypes[i];
        int n = grid(cfgs, dt);
        snprintf(name, sizeof name, "%s %s (%s)", PASS, what, flashc_dtype_name(dt));
        test_run_cases(name, cfgs, n, TEST_BACKWARD);
    }
}

static void features_alone(void **state) {
    (void)state;
    const int dtypes[] = {FLASHC_DTYPE_FLOAT64, FLASHC_DTYPE_FLOAT32, -1};
    run_grid("features alone", grid_features_alone, dtypes);
}

static void feature_combinations(void **state) {
    (void)state;
    const int dtypes[] = {FLASHC_DTYPE_FLOAT64, FLASHC_DTYPE_BFLOAT16, -1};
    run_grid("combinations", grid_feature_combinations, dtypes);
}

static void sequence_lengths(void **state) {
    (void)state;
    const int dtypes[] = {FLASHC_DTYPE_FLOAT32, -1};
    run_grid("sequence lengths", grid_sequence_lengths, dtypes);
}

static void tile_boundaries(void **state) {
    (void)state;
    const int dtypes[] = {FLASHC_DTYPE_FLOAT32, FLASHC_DTYPE_FLOAT64, -1};
    run_grid("tile boundaries", grid_tile_boundaries, dtypes);
}

static void head_dims(void **state) {
    (void)state;
    const int dtypes[] = {FLASHC_DTYPE_FLOAT32, FLASHC_DTYPE_FLOAT64, HEAD_DIM_LOW_PRECISION, -1};
    run_grid("head dims", grid_head_dims, dtypes);
}

static void dtypes(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    char name[64];
    snprintf(name, sizeof name, "%s dtypes", PASS);
    test_run_cases(name, cfgs, grid_dtypes(cfgs), TEST_BACKWARD);
}

static void layouts(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    char name[64];
    snprintf(name, sizeof name, "%s strided and packed layouts", PASS);
    test_run_cases(name, cfgs, grid_layouts(cfgs), TEST_BACKWARD);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(features_alone),   cmocka_unit_test(feature_combinations),
        cmocka_unit_test(sequence_lengths), cmocka_unit_test(tile_boundaries),
        cmocka_unit_test(head_dims),        cmocka_unit_test(dtypes),
        cmocka_unit_test(layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
