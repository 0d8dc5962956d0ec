/* Hopper backward kernels for head dims up to 256 (hopper_bwd_config.h). */
#include "hopper_bwd_launch.cuh"

FLASHC_HOPPER_BWD_DEFINE_RUN(256)
