/* Hopper KV-cache kernels for head dims 129-256, decode tiles of at most 16
 * rows per KV head (hopper_kvcache_kernel.cuh). */
#include "hopper_kvcache_launch.cuh"

FLASHC_HOPPER_KVC_DEFINE_RUN(256)
