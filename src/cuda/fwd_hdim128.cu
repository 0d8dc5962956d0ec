/* Forward kernels for head dims up to 128 (tile shape: fwd_config.h). */
#include "fwd_launch.cuh"

FLASHC_FWD_DEFINE_RUN(128)
