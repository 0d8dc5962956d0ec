/* Tile shapes of the Hopper forward, one per compiled head dim: a head dim
 * d (and value head dim dv) runs in the smallest HEAD_DIM >= max(d, dv).
 * BLOCK_M is fixed at 128 (two consumer warpgroups of 64 rows); BLOCK_N
 * keys per step, two stages of K and V in shared memory (at most 227 KiB).
 * Registers per consumer thread (240): O = HEAD_DIM / 2, S = BLOCK_N / 2,
 * P = BLOCK_N / 4, plus addressing and the softmax state; the general
 * variant (softcap, ALiBi, dropout: tanh and Philox need registers) runs
 * narrower key blocks, BLOCK_N_GENERAL, the widest without spills
 * (ptxas -v). INTRA_WG_OVERLAP: S of the next key block and P V of the
 * current one in flight together (hopper_fwd_kernel.cuh); measured +3 % at
 * 128 and +5 % at 256, -11 % at 64 (bench/NOTES.md), so 64 runs them one
 * after the other. */
#ifndef FLASHC_CUDA_HOPPER_FWD_CONFIG_H
#define FLASHC_CUDA_HOPPER_FWD_CONFIG_H

/* One producer warpgroup (one lane of it issues the copies) and two
 * consumer warpgroups of 64 rows per CTA. Registers move from the producer
 * to the consumers (setmaxnreg): 128 * (24 + 2 * 240) <= 65536. */
#define FLASHC_HOPPER_CONSUMER_WARPGROUPS 2
#define FLASHC_HOPPER_BLOCK_M (64 * FLASHC_HOPPER_CONSUMER_WARPGROUPS)
#define FLASHC_HOPPER_THREADS (128 * (FLASHC_HOPPER_CONSUMER_WARPGROUPS + 1))
#define FLASHC_HOPPER_PRODUCER_REGISTERS 24
#define FLASHC_HOPPER_CONSUMER_REGISTERS 240
#define FLASHC_HOPPER_STAGES 2

#define FLASHC_HOPPER_FWD_CONFIGS(X)                    \
    /* HEAD_DIM BLOCK_N BLOCK_N_GENERAL INTRA_WG_OVERLAP */ \
    X(64, 128, 64, 0)                                      \
    X(128, 128, 64, 1)                                     \
    X(256, 64, 32, 1)

template <int HEAD_DIM>
struct flashc_hopper_fwd_config;
#define FLASHC_HOPPER_FWD_CONFIG_STRUCT(D, BN, BNG, OVERLAP)      \
    template <>                                                   \
    struct flashc_hopper_fwd_config<D> {                          \
        static constexpr int BLOCK_N = BN, BLOCK_N_GENERAL = BNG; \
        static constexpr bool INTRA_WG_OVERLAP = OVERLAP;         \
    };
FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_FWD_CONFIG_STRUCT)
#undef FLASHC_HOPPER_FWD_CONFIG_STRUCT

#endif
