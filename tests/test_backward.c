/* Backward (dq, dk, dv) against the double-precision reference, on the same
 * grids as the forward test: every feature alone and
 * combined, sq != sk both ways, seqlen 1, primes, tile boundaries +-1, head
 * dims 1..256 (dv != d too), every dtype, strided and packed layouts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "test_support.h"
#include "test_grids.h"

#define MAX_CASES 256

static void features_alone(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_features_alone(cfgs, FLASHC_DTYPE_FLOAT64);
    test_run_cases("backward features alone (float64)", cfgs, n, 1);
    n = grid_features_alone(cfgs, FLASHC_DTYPE_FLOAT32);
    test_run_cases("backward features alone (float32)", cfgs, n, 1);
}

static void feature_combinations(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_feature_combinations(cfgs, FLASHC_DTYPE_FLOAT64);
    test_run_cases("backward combinations (float64)", cfgs, n, 1);
    n = grid_feature_combinations(cfgs, FLASHC_DTYPE_BFLOAT16);
    test_run_cases("backward combinations (bfloat16)", cfgs, n, 1);
}

static void sequence_lengths(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_sequence_lengths(cfgs, FLASHC_DTYPE_FLOAT32);
    test_run_cases("backward sequence lengths (float32)", cfgs, n, 1);
}

static void tile_boundaries(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_tile_boundaries(cfgs, FLASHC_DTYPE_FLOAT32);
    test_run_cases("backward tile boundaries (float32)", cfgs, n, 1);
    n = grid_tile_boundaries(cfgs, FLASHC_DTYPE_FLOAT64);
    test_run_cases("backward tile boundaries (float64)", cfgs, n, 1);
}

static void head_dims(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_head_dims(cfgs, FLASHC_DTYPE_FLOAT32);
    test_run_cases("backward head dims (float32)", cfgs, n, 1);
    n = grid_head_dims(cfgs, FLASHC_DTYPE_FLOAT64);
    test_run_cases("backward head dims (float64)", cfgs, n, 1);
    n = grid_head_dims(cfgs, FLASHC_DTYPE_BFLOAT16);
    test_run_cases("backward head dims (bfloat16)", cfgs, n, 1);
}

static void dtypes(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_dtypes(cfgs);
    test_run_cases("backward dtypes", cfgs, n, 1);
}

static void layouts(void **state) {
    (void)state;
    test_config cfgs[MAX_CASES];
    int n = grid_layouts(cfgs);
    test_run_cases("backward strided and packed layouts", cfgs, n, 1);
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
