/* Hopper KV-cache kernels for head dims up to 128 (hopper_kvcache_kernel.cuh). */
#include "hopper_kvcache_launch.cuh"

FLASHC_HOPPER_KVC_DEFINE_RUN(128)
FLASHC_KVC_TRACE_DEFINE_HOST /* per-CTA timelines, in -DFLASHC_KVC_TRACE builds only */
