/* Hopper KV-cache kernels for head pairs at head dim 96 (two heads' rows
 * as one of 192 columns, hopper_kvcache.h): the decode tile of at most 16
 * rows per pair, two CTAs per SM (hopper_kvcache_kernel.cuh). */
#include "hopper_kvcache_launch.cuh"

FLASHC_HOPPER_KVC_DEFINE_RUN(192)
