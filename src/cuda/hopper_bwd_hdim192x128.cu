/* Hopper backward kernels of the 256 configuration for d <= 192 and
 * dv <= 128 (192 / 128, as in DeepSeek's attention): the products stop at
 * 192 columns of Q / K and 128 of V / dO. */
#include "hopper_bwd_launch.cuh"

FLASHC_HOPPER_BWD_DEFINE_RUN_COLS(flashc_hopper_bwd_run_hdim192x128, 256, 192, 128)
