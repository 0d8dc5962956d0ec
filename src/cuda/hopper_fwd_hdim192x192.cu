/* Hopper forward kernels for head dims up to 192, value head dims up to 192
 * (hopper_fwd_config.h). */
#include "hopper_fwd_launch.cuh"

FLASHC_HOPPER_FWD_DEFINE_RUN(192, 192)
