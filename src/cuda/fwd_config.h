/* Tile shapes of the forward kernel, one per compiled head dim. A head dim
 * d (and value head dim dv) runs in the smallest configuration with
 * HEAD_DIM >= max(d, dv); columns past d / dv are zero-filled on load and
 * never stored.
 *
 * BLOCK_M query rows per CTA, BLOCK_N keys per main-loop step (BLOCK_N_GENERAL
 * in the variant with softcap / ALiBi / dropout, whose Philox and tanh need
 * registers the S tile then gives up), WARPS warps each owning
 * BLOCK_M / WARPS rows (16 or 32: one or two mma row-atoms), CTAS_PER_SM for
 * the register cap. 64-row CTAs at 192 / 256: two independent CTAs per SM
 * keep the tensor cores busy through each other's barriers (+15 % at 256
 * over one 128-row CTA of 8 warps, bench/NOTES.md).
 * EARLY_K_LOAD: start the next K tile's load before the softmax (more
 * overlap) rather than just before P V (fewer live registers: with 32-row
 * warps at head dim 96 / 128 the early load makes ptxas spill).
 *
 * Shared memory holds one Q, one K and one V tile, rows padded by 16 bytes
 * so ldmatrix reads hit 8 distinct bank groups. Register budget per thread
 * (float32 accumulators): O = rows/warp * HEAD_DIM / 32, S = rows/warp *
 * BLOCK_N / 32; check ptxas -v for spills after any change (src/cuda/README.md
 * lists the few bytes the plain 64 / 96 / 128 kernels spill today). */
#ifndef FLASHC_CUDA_FWD_CONFIG_H
#define FLASHC_CUDA_FWD_CONFIG_H

#define FLASHC_FWD_CONFIGS(X)                                                         \
    /* HEAD_DIM BLOCK_M BLOCK_N BLOCK_N_GENERAL WARPS CTAS_PER_SM EARLY_K_LOAD */ \
    X(64, 128, 128, 32, 4, 2, 1)                                                      \
    X(96, 128, 64, 32, 4, 2, 0)                                                       \
    X(128, 128, 64, 32, 4, 2, 0)                                                      \
    X(192, 64, 64, 32, 4, 2, 1)                                                       \
    X(256, 64, 64, 32, 4, 2, 1)

template <int HEAD_DIM>
struct flashc_fwd_config;
#define FLASHC_FWD_CONFIG_STRUCT(D, BM, BN, BNG, W, C, EK)                           \
    template <>                                                                      \
    struct flashc_fwd_config<D> {                                                    \
        static constexpr int BLOCK_M = BM, BLOCK_N = BN, BLOCK_N_GENERAL = BNG;      \
        static constexpr int WARPS = W, CTAS_PER_SM = C;                             \
        static constexpr bool EARLY_K_LOAD = EK;                                     \
    };
FLASHC_FWD_CONFIGS(FLASHC_FWD_CONFIG_STRUCT)
#undef FLASHC_FWD_CONFIG_STRUCT

/* Shared memory row stride, in elements, of a tile with `head_dim` columns. */
#define FLASHC_SMEM_ROW(head_dim) ((head_dim) + 8)

#endif
