/* Tile shapes of the Hopper backward: a head dim d (and value head dim dv)
 * runs in the smallest HEAD_DIM >= max(d, dv) listed here; larger head
 * dims stay on the portable kernel.
 *
 * One CTA owns BLOCK_N = 128 keys of one (sequence, kv head): a producer
 * warpgroup (one lane issues the TMA copies) and two consumer warpgroups of
 * 64 keys each. Query rows come BLOCK_M = 64 at a time (the workspace
 * tile_m, as in the portable configurations of these head dims), Q / dO
 * and their LSE / D rows double-buffered.
 * Registers per consumer thread (240): dK + dV = HEAD_DIM, S^T + dP^T = 64,
 * their 16-bit copies 32, dQ HEAD_DIM / 4, plus addressing. */
#ifndef FLASHC_CUDA_HOPPER_BWD_CONFIG_H
#define FLASHC_CUDA_HOPPER_BWD_CONFIG_H

#define FLASHC_HOPPER_BWD_BLOCK_M 64
#define FLASHC_HOPPER_BWD_BLOCK_N 128
#define FLASHC_HOPPER_BWD_STAGES 2
#define FLASHC_HOPPER_BWD_CONSUMER_WARPGROUPS 2
#define FLASHC_HOPPER_BWD_THREADS (128 * (FLASHC_HOPPER_BWD_CONSUMER_WARPGROUPS + 1))
/* 128 * (24 + 2 * 240) <= 65536 */
#define FLASHC_HOPPER_BWD_PRODUCER_REGISTERS 24
#define FLASHC_HOPPER_BWD_CONSUMER_REGISTERS 240

#define FLASHC_HOPPER_BWD_CONFIGS(X) \
    /* HEAD_DIM */                   \
    X(64)                            \
    X(128)

#endif
