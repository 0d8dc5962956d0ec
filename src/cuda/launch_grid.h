/* The flat grids of the CUDA kernels: blocks_per_head x heads x batch CTAs
 * in one dimension (the kernels decode it themselves). */
#ifndef FLASHC_CUDA_LAUNCH_GRID_H
#define FLASHC_CUDA_LAUNCH_GRID_H

#include <cuda_runtime.h>

/* *grid = blocks_per_head * heads * batch; cudaErrorInvalidConfiguration
 * past the 2^31 - 1 blocks one grid dimension holds. A grid of 0 means
 * there is nothing to launch. */
static inline cudaError_t flashc_flat_grid(long long blocks_per_head, long long heads, long long batch,
                                           unsigned *grid) {
    const long long blocks = blocks_per_head * heads * batch;
    if (blocks > 0x7fffffffLL) return cudaErrorInvalidConfiguration;
    *grid = (unsigned)blocks;
    return cudaSuccess;
}

#endif
