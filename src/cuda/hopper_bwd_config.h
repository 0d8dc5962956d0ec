/* Tile shapes of the Hopper backward: a head dim d (and value head dim dv)
 * runs in the smallest HEAD_DIM >= max(d, dv) listed here.
 *
 * A CTA owns BLOCK_N keys of one (sequence, kv head): a producer
 * warpgroup (one lane issues the TMA copies) and two consumer warpgroups.
 * Query rows come BLOCK_M at a time, Q / dO and their LSE / D rows
 * double-buffered. The workspace's tile_m (bwd_workspace.h) is a multiple
 * of BLOCK_M. The consumers split the work in one of three ways:
 *   BLOCK_N = 128, BLOCK_M = 64 (head dim 128): warpgroup w owns keys
 *     [64 w, 64 w + 64): S^T and dP^T of its keys against all 64 queries,
 *     dK and dV of its keys (all columns) with P^T and dS^T straight from
 *     registers; dQ columns [64 w, 64 w + 64) of the 64 queries.
 *     Registers per consumer thread (240): dK + dV = 128, S^T + dP^T = 64,
 *     their 16-bit copies 32, dQ 32, plus addressing.
 *   BLOCK_N = 128, BLOCK_M = 128 (head dim 64): as above with 128 queries
 *     per step, which halves the per-step costs (barriers, waits, the
 *     LSE / D loads, descriptors) against the work and doubles the width
 *     of S^T and dP^T (less shared-memory traffic per product); dQ =
 *     queries [64 w, 64 w + 64), all 64 columns. Registers: dK + dV = 64,
 *     S^T + dP^T = 128 (then 64 as 16-bit), dQ 32. Measured on the H200
 *     against BLOCK_M = 64: +4 to +8 %.
 *   BLOCK_N = 64, BLOCK_M = 64 (head dim 256): both own all 64 keys;
 *     warpgroup w computes S^T and dP^T against queries [32 w, 32 w + 32)
 *     and dK, dV columns [128 w, 128 w + 128), with P^T and dS^T exchanged
 *     through shared memory; dQ columns [128 w, 128 w + 128). Registers:
 *     dK + dV = 128, dQ 64, S^T + dP^T 32.
 * dQ is added into the float32 accumulator either by the consumers
 * (red.global, four floats each; DQ_TILES = 0) or through DQ_TILES float32
 * tiles in shared memory that a producer-warpgroup thread adds with one
 * bulk reduction each. Measured on the H200: two tiles +7 % at head dim
 * 128; at 64, one tile (two do not fit beside the rest at BLOCK_M = 128)
 * +7 to +14 % (bench/NOTES.md b17; at BLOCK_M = 64 the tiles had lost
 * 2.5 %); at 256 no tile fits. */
#ifndef FLASHC_CUDA_HOPPER_BWD_CONFIG_H
#define FLASHC_CUDA_HOPPER_BWD_CONFIG_H

#define FLASHC_HOPPER_BWD_STAGES 2
#define FLASHC_HOPPER_BWD_CONSUMER_WARPGROUPS 2
#define FLASHC_HOPPER_BWD_THREADS (128 * (FLASHC_HOPPER_BWD_CONSUMER_WARPGROUPS + 1))
/* 128 * (24 + 2 * 240) <= 65536 */
#define FLASHC_HOPPER_BWD_PRODUCER_REGISTERS 24
#define FLASHC_HOPPER_BWD_CONSUMER_REGISTERS 240

#define FLASHC_HOPPER_BWD_CONFIGS(X)          \
    /* HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES */ \
    X(64, 128, 128, 1)                         \
    X(128, 64, 128, 2)                         \
    X(256, 64, 64, 0)

/* BLOCK_M, BLOCK_N and DQ_TILES of the configuration a head dim d runs in
 * (the smallest HEAD_DIM >= d; 0 past the last). */
#define FLASHC_HOPPER_BWD_BLOCK_M_IF(HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES) head_dim <= (HEAD_DIM) ? (BLOCK_M) :
#define FLASHC_HOPPER_BWD_BLOCK_N_IF(HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES) head_dim <= (HEAD_DIM) ? (BLOCK_N) :
#define FLASHC_HOPPER_BWD_DQ_TILES_IF(HEAD_DIM, BLOCK_M, BLOCK_N, DQ_TILES) head_dim <= (HEAD_DIM) ? (DQ_TILES) :
static constexpr int flashc_hopper_bwd_block_m(long long head_dim) {
    return FLASHC_HOPPER_BWD_CONFIGS(FLASHC_HOPPER_BWD_BLOCK_M_IF) 0;
}
static constexpr int flashc_hopper_bwd_block_n(long long head_dim) {
    return FLASHC_HOPPER_BWD_CONFIGS(FLASHC_HOPPER_BWD_BLOCK_N_IF) 0;
}
static constexpr int flashc_hopper_bwd_dq_tiles(long long head_dim) {
    return FLASHC_HOPPER_BWD_CONFIGS(FLASHC_HOPPER_BWD_DQ_TILES_IF) 0;
}
#undef FLASHC_HOPPER_BWD_BLOCK_M_IF
#undef FLASHC_HOPPER_BWD_BLOCK_N_IF
#undef FLASHC_HOPPER_BWD_DQ_TILES_IF

#endif
