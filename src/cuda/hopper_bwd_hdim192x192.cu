/* Hopper backward kernels of the 256 configuration for d, dv <= 192 (not
 * both <= 128): the products stop at 192 columns. */
#include "hopper_bwd_launch.cuh"

FLASHC_HOPPER_BWD_DEFINE_RUN_COLS(flashc_hopper_bwd_run_hdim192x192, 256, 192, 192)
