/* The grids of problems shared by the forward and backward tests. Each
 * fills `cfgs` (room for 256) and returns how many; FLASHC_TEST_QUICK
 * shrinks the big ones. */
#ifndef FLASHC_TEST_GRIDS_H
#define FLASHC_TEST_GRIDS_H

#include "test_support.h"

/* Each feature on its own (sq != sk, GQA, dv != d, S_dmask on). */
int grid_features_alone(test_config *cfgs, flashc_dtype dtype);
/* Features combined, both sq < sk and sq > sk. */
int grid_feature_combinations(test_config *cfgs, flashc_dtype dtype);
/* seqlen 1, primes, sq != sk both ways, with causal and a window. */
int grid_sequence_lengths(test_config *cfgs, flashc_dtype dtype);
/* Lengths at tile multiples +-1: 63, 64, 65, 127, 128, 129, 255, 257. */
int grid_tile_boundaries(test_config *cfgs, flashc_dtype dtype);
/* d in {1, 3, 7, 31, 33, 64, 96, 128, 129, 200, 256}, and dv != d. */
int grid_head_dims(test_config *cfgs, flashc_dtype dtype);
/* bfloat16, float16, float32, float64 with several features each. */
int grid_dtypes(test_config *cfgs);
/* Padded, head-major, seq-major and packed qkv views. */
int grid_layouts(test_config *cfgs);

#endif
