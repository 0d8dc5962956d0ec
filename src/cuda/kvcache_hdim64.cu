/* KV-cache attention kernels for head dims up to 64 (kvcache_config.h). */
#include "kvcache_launch.cuh"

FLASHC_KVC_DEFINE_RUN(64)
