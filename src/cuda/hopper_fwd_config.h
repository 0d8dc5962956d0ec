/* Tile shapes of the Hopper forward, one per compiled pair of head dims: a
 * problem of head dim d and value head dim dv runs in the first row below
 * with D_QK >= d and D_V >= dv (TMA fills the columns past d and dv with
 * zeros, which add nothing to S and land in output columns never stored).
 * BLOCK_M is fixed at 128 (two consumer warpgroups of 64 rows); BLOCK_N
 * keys per step, two stages of K and V in shared memory (at most 227 KiB).
 * Registers per consumer thread (240): O = D_V / 2, S = BLOCK_N / 2,
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

/* Named barriers: 1 joins the consumer warpgroups; 2 + w is consumer
 * warpgroup w's turn to issue GEMMs (PINGPONG). 0 is __syncthreads. */
#define FLASHC_HOPPER_CONSUMERS_BARRIER 1
#define FLASHC_HOPPER_TURN_BARRIER 2

#define FLASHC_HOPPER_FWD_CONFIGS(X)                                    \
    /* D_QK D_V BLOCK_N BLOCK_N_GENERAL INTRA_WG_OVERLAP PINGPONG */     \
    X(64, 64, 128, 64, 0, 1)                                           \
    X(128, 128, 128, 64, 1, 1)                                         \
    X(192, 128, 128, 64, 1, 1)                                         \
    X(256, 256, 64, 32, 1, 1)

template <int D_QK, int D_V>
struct flashc_hopper_fwd_config;
#define FLASHC_HOPPER_FWD_CONFIG_STRUCT(DQK, DV, BN, BNG, OVERLAP, PP) \
    template <>                                                        \
    struct flashc_hopper_fwd_config<DQK, DV> {                         \
        static constexpr int BLOCK_N = BN, BLOCK_N_GENERAL = BNG;      \
        static constexpr bool INTRA_WG_OVERLAP = OVERLAP, PINGPONG = PP; \
    };
FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_FWD_CONFIG_STRUCT)
#undef FLASHC_HOPPER_FWD_CONFIG_STRUCT

#endif
