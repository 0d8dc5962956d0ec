/* Tile shapes of the forward kernel, one per compiled head dim. A head dim
 * d (and value head dim dv) runs in the smallest configuration with
 * HEAD_DIM >= max(d, dv); columns past d / dv are zero-filled on load and
 * never stored.
 *
 * BLOCK_M query rows per CTA, BLOCK_N keys per main-loop step; in the
 * variant with softcap / ALiBi / a negative scale BLOCK_N_GENERAL, and
 * BLOCK_N_DROPOUT with dropout, whose Philox state needs the registers a
 * wider S tile would take (H100, portable forced, 64 keys against 32:
 * softcap +5 to +15 %, ALiBi +4 %, dropout -2 to -3.5 %; 128 and 96 keep
 * 32, where a 64-key S tile beside 32-row warps' O would spill;
 * bench/NOTES.md), WARPS warps each owning
 * BLOCK_M / WARPS rows (16 or 32: one or two mma row-atoms), CTAS_PER_SM for
 * the register cap. 64-row CTAs at 192 / 256: two independent CTAs per SM
 * keep the tensor cores busy through each other's barriers (+15 % at 256
 * over one 128-row CTA of 8 warps, bench/NOTES.md).
 * EARLY_K_LOAD: start the next K tile's load before the softmax (more
 * overlap) rather than just before P V (fewer live registers: with 32-row
 * warps at head dim 96 / 128 the early load makes ptxas spill).
 *
 * Shared memory holds one Q, one K and one V tile (smem_tile.cuh: swizzled
 * at head dims 64 / 128 / 256, rows padded by 16 bytes at 96 / 192). Register budget per thread
 * (float32 accumulators): O = rows/warp * HEAD_DIM / 32, S = rows/warp *
 * BLOCK_N / 32; check ptxas -v for spills after any change (src/cuda/README.md
 * lists the few bytes the plain 64 / 96 / 128 kernels spill today). */
#ifndef FLASHC_CUDA_FWD_CONFIG_H
#define FLASHC_CUDA_FWD_CONFIG_H

#define FLASHC_FWD_CONFIGS(X)                                                                           \
    /* HEAD_DIM BLOCK_M BLOCK_N BLOCK_N_GENERAL BLOCK_N_DROPOUT WARPS CTAS_PER_SM EARLY_K_LOAD */       \
    X(64, 128, 128, 64, 32, 4, 2, 1)                                                                    \
    X(96, 128, 64, 32, 32, 4, 2, 0)                                                                     \
    X(128, 128, 64, 32, 32, 4, 2, 0)                                                                    \
    X(192, 64, 64, 64, 32, 4, 2, 1)                                                                     \
    X(256, 64, 64, 64, 32, 4, 2, 1)

template <int HEAD_DIM>
struct flashc_fwd_config;
#define FLASHC_FWD_CONFIG_STRUCT(D, BM, BN, BNG, BND, W, C, EK)                                         \
    template <>                                                                                         \
    struct flashc_fwd_config<D> {                                                                       \
        static constexpr int BLOCK_M = BM, BLOCK_N = BN, BLOCK_N_GENERAL = BNG, BLOCK_N_DROPOUT = BND;  \
        static constexpr int WARPS = W, CTAS_PER_SM = C;                                                \
        static constexpr bool EARLY_K_LOAD = EK;                                                        \
    };
FLASHC_FWD_CONFIGS(FLASHC_FWD_CONFIG_STRUCT)
#undef FLASHC_FWD_CONFIG_STRUCT

/* The portable kernel's costs in iterations (one key block) for the plan
 * of its shared last wave (tail_split.h): a tile's start (Q and the first
 * K loaded), and a segment's slot written and read back (its O, row
 * maxima and sums: a float32 tile of BLOCK_M x HEAD_DIM, about the bytes
 * of one K and V tile). */
#define FLASHC_FWD_TILE_START 1
#define FLASHC_FWD_TAIL_SLOT 1

/* Row stride, in elements, of a shared-memory tile with `head_dim`
 * columns padded by 16 bytes (ldmatrix without bank conflicts). */
#define FLASHC_SMEM_ROW(head_dim) ((head_dim) + 8)

/* The tiles the portable forward and backward copy in (smem_tile.cuh):
 * swizzled, unpadded rows where a row of 16-bit elements is a power-of-two
 * number of 128-byte lines (head dims 64, 128, 256: the backward's warp
 * tiles split such a row into power-of-two chunk ranges, which the
 * swizzled address steps need), else rows padded by 16 bytes; their row
 * stride in bytes; and the slack each kernel's shared memory carries to
 * start them on a 128-byte boundary. */
#define FLASHC_TILE_SWIZZLED(head_dim) ((head_dim) >= 64 && ((head_dim) & ((head_dim) - 1)) == 0)
#define FLASHC_TILE_ROW_BYTES(head_dim) \
    (FLASHC_TILE_SWIZZLED(head_dim) ? 2 * (head_dim) : 2 * FLASHC_SMEM_ROW(head_dim))
/* the same where a kernel may also ask for padded rows (swizzle = 0) */
#define FLASHC_TILE_ROW_BYTES_IF(head_dim, swizzle) \
    ((swizzle) ? FLASHC_TILE_ROW_BYTES(head_dim) : 2 * FLASHC_SMEM_ROW(head_dim))
#define FLASHC_TILE_ALIGN 128

#endif
