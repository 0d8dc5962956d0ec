/* Tile shapes of the backward kernel, one per compiled head dim. A problem
 * runs in the smallest configuration with HEAD_DIM >= max(d, dv), as in
 * the forward (columns past d / dv are zero-filled and never stored).
 *
 * One CTA owns BLOCK_N keys of one (sequence, kv head) and walks BLOCK_M
 * query rows at a time (BLOCK_M is the tile_m of every per-row workspace
 * buffer). WARPS warps; each GEMM splits its output over them:
 *   S = Q K^T, dP = dO V^T  [BLOCK_M x BLOCK_N]: S_WARPS_M x (WARPS / S_WARPS_M)
 *   dV += P^T dO, dK += dS^T Q  [BLOCK_N x HEAD_DIM]: KV_WARPS_N x (WARPS / KV_WARPS_N)
 *   dQ = dS K  [BLOCK_M x HEAD_DIM]: Q_WARPS_M x (WARPS / Q_WARPS_M), DQ_CHUNK columns at a time
 * GENERAL_S_WARPS_M: S_WARPS_M of the general variant (softcap, ALiBi,
 * dropout), whose score code needs more registers: at d64 FlashAttention-2's
 * 2 x 4 S warps are 3 % faster in the plain variant and make the general
 * one spill 388 bytes; at d256 4 x 2 S warps (FlashAttention-2's) gain
 * 0.3 - 0.9 % in the plain variant and make the general one spill
 * (bench/NOTES.md, "the backward's loop head").
 * dQ warps, with the blocked dQ reductions (bwd_rows.cuh): d64 8 x 1
 * (16 x 64, two chunks, so the first chunk's reductions drain under the
 * second chunk's products) +1.3 to +2.1 % over FlashAttention-2's 4 x 2;
 * d128 2 x 4 (32 x 32, one chunk) 0 to +0.9 % over 4 x 2; d256 2 x 4
 * spills and loses 7 % (bench/NOTES.md, "the dQ warps").
 * DQ_IN_KV: the first two dQ chunks' k-loops run inside dV's and dK's
 * (each chunk's adds after its loop, the dK products after the first
 * chunk's adds), where those loops are as long as dQ's (BLOCK_M ==
 * BLOCK_N): on the H200 d256 (four chunks) +1.1 to +1.7 %, d192 (three)
 * +1.1 to +1.7 %; d64 (one chunk, inside both) -0.4 %, d128 -3.4 %, the
 * d128 SMALL one (two chunks, under a 99 KiB limit) -1.0 to +0.3 %
 * (bench/NOTES.md, "dQ chunks inside the dK / dV k-loops" and "the
 * preprocess at one round trip").
 * Register budget per thread (float32 accumulators): dK + dV =
 * BLOCK_N * 2 * HEAD_DIM / (32 WARPS) live through the whole loop, S + dP =
 * 2 BLOCK_M BLOCK_N / (32 WARPS), one dQ chunk = BLOCK_M DQ_CHUNK / (32 WARPS).
 * SWIZZLE: K, V, Q, dO tiles swizzled where the head dim allows
 * (smem_tile.cuh), and P, dS too at 128 keys, else rows padded by 16
 * bytes; d96 / d192 rows cannot be swizzled. Unpadded rows are what fit
 * two Q / dO stages of d64 and d128 into A100's 163 KiB (one stage before:
 * with two, +6 to +13 % under that limit on the H200, +1 to +4 % without
 * it: bench/NOTES.md "swizzled P and dS"; swizzled K, V, Q, dO gave d256
 * +5 %, "swizzled tiles"; its 64-key P / dS rows stay padded). The SMALL
 * configurations (sm_86 / sm_89, not measured) keep padded rows.
 *
 * Shared memory: K, V (BLOCK_N rows), Q and dO (BLOCK_M rows, two stages
 * where the device has room, else one), P and dS (BLOCK_M x BLOCK_N, 16-bit),
 * LSE and D rows. One stage of the 64 - 256 configurations needs 113 -
 * 147 KiB, more than the 99 KiB a CTA may have on sm_86 / sm_89; there the
 * plan takes their SMALL configurations (64 query rows at 64, 64 keys at
 * 96 / 128, or 32 query rows and fewer keys: 70 - 85 KiB). */
#ifndef FLASHC_CUDA_BWD_CONFIG_H
#define FLASHC_CUDA_BWD_CONFIG_H

#include "fwd_config.h"

#define FLASHC_BWD_CONFIGS(X)                                                                                             \
    /* HEAD_DIM BLOCK_M BLOCK_N WARPS S_WARPS_M GENERAL_S_WARPS_M KV_WARPS_N Q_WARPS_M DQ_CHUNK DQ_IN_KV SWIZZLE SMALL */ \
    X(64, 128, 128, 8, 2, 4, 4, 8, 32, 0, 1, 0)                                                                           \
    X(96, 64, 128, 8, 2, 2, 4, 4, 48, 0, 0, 0)                                                                            \
    X(128, 64, 128, 8, 2, 2, 4, 2, 32, 0, 1, 0)                                                                           \
    X(192, 64, 64, 8, 2, 2, 2, 4, 32, 1, 0, 0)                                                                            \
    X(256, 64, 64, 8, 4, 2, 2, 4, 32, 1, 1, 0)                                                                            \
    /* SMALL: for 99 KiB per CTA (sm_86 / sm_89), where the ones above do not fit */                                      \
    X(64, 64, 128, 8, 2, 2, 4, 4, 32, 0, 0, 1)                                                                            \
    X(96, 64, 64, 8, 2, 2, 4, 4, 48, 0, 0, 1)                                                                             \
    X(128, 64, 64, 8, 2, 2, 2, 4, 32, 0, 0, 1)                                                                            \
    X(192, 32, 64, 8, 2, 2, 2, 2, 48, 0, 0, 1)                                                                            \
    X(256, 32, 32, 4, 2, 2, 2, 2, 32, 0, 1, 1)

/* The compiled head dims, smallest first. */
#define FLASHC_BWD_HEAD_DIMS(X) X(64) X(96) X(128) X(192) X(256)

template <int HEAD_DIM, bool SMALL = false>
struct flashc_bwd_config {
    static constexpr bool COMPILED = false;
};
#define FLASHC_BWD_CONFIG_STRUCT(D, BM, BN, W, SWM, GSWM, KVWN, QWM, DQC, DQKV, SWZ, SM) \
    template <>                                                                          \
    struct flashc_bwd_config<D, SM> {                                                    \
        static constexpr bool COMPILED = true;                                           \
        static constexpr int BLOCK_M = BM, BLOCK_N = BN, WARPS = W;                      \
        static constexpr int S_WARPS_M = SWM, GENERAL_S_WARPS_M = GSWM;                  \
        static constexpr int KV_WARPS_N = KVWN, Q_WARPS_M = QWM;                         \
        static constexpr int DQ_CHUNK = DQC;                                             \
        static constexpr bool DQ_IN_KV = DQKV;                                           \
        static constexpr bool SWIZZLE = SWZ;                                             \
    };
FLASHC_BWD_CONFIGS(FLASHC_BWD_CONFIG_STRUCT)
#undef FLASHC_BWD_CONFIG_STRUCT

/* Shared memory of one CTA, in bytes (16-bit elements), with `stages`
 * buffers of Q, dO and their LSE / D rows: K, V, Q, dO tiles as
 * smem_tile.cuh lays them out, P and dS rows as FLASHC_BWD_P_ROW_BYTES says. */
#define FLASHC_BWD_SMEM_BYTES(head_dim, block_m, block_n, swizzle, stages)                                \
    ((2 * (block_n) + (stages) * 2 * (block_m)) * FLASHC_TILE_ROW_BYTES_IF(head_dim, swizzle) +            \
     2 * (block_m) * FLASHC_BWD_P_ROW_BYTES(head_dim, block_n, swizzle) + (stages) * 2 * (block_m) * 4 +    \
     FLASHC_TILE_ALIGN)
/* A P / dS row: unpadded (swizzled) where the other tiles are swizzled and
 * the block has 128 keys, else padded by 16 bytes (bwd_kernel.cuh) */
#define FLASHC_BWD_P_ROW_BYTES(head_dim, block_n, swizzle)                                                  \
    (((swizzle) && FLASHC_TILE_SWIZZLED(head_dim) && (block_n) % 128 == 0) ? 2 * (block_n) : 2 * ((block_n) + 8))

#endif
