/* Backward kernels for head dims up to 192 (tile shape: bwd_config.h). */
#include "bwd_launch.cuh"

FLASHC_BWD_DEFINE_RUN(192)
