/* Tile shapes of the Hopper forward, one per compiled pair of head dims: a
 * problem of head dim d and value head dim dv runs in the first row below
 * with D_QK >= d and D_V >= dv (TMA fills the columns past d and dv with
 * zeros, which add nothing to S and land in output columns never stored).
 *
 * Each row was measured against its neighbours on the H200 (bench/NOTES.md,
 * h5): CONSUMERS warpgroups of 64 query rows (BLOCK_M = 64 * CONSUMERS);
 * BLOCK_N keys per step, two stages of K and V in shared memory (at most
 * 227 KiB: 256 stops at 80 keys, 192 / 192 at 112). Registers per consumer
 * thread (240 with two consumers, 160 with three): O = D_V / 2, S =
 * BLOCK_N / 2, P = BLOCK_N / 4, plus addressing and the softmax state; the
 * general variant (softcap, ALiBi, dropout: tanh and Philox need
 * registers) runs narrower key blocks, BLOCK_N_GENERAL, the widest without
 * spills (ptxas -v).
 *   INTRA_WG_OVERLAP: S of the next key block and P V of the current one in
 *     flight together (hopper_fwd_kernel.cuh); it pays where P V is long
 *     enough to hide the exponentials (not at 64).
 *   PINGPONG: the consumer warpgroups take turns issuing their GEMMs (named
 *     barriers), so one warpgroup's softmax runs while another's GEMMs
 *     occupy the tensor cores.
 * Head dim 64 runs three consumers (192 rows): its softmax costs as much as
 * its GEMMs, and two warpgroups could not keep the tensor cores busy.
 * 192 / 128 (q/k 192, v 128) has its own row: the 256 kernel paid for
 * 256-wide products and 64-key blocks. Wider key blocks at 128 (144 to 192)
 * gained at most 2 % at 16k and lost up to 13 % at 1k, so 128 stays. */
#ifndef FLASHC_CUDA_HOPPER_FWD_CONFIG_H
#define FLASHC_CUDA_HOPPER_FWD_CONFIG_H

/* One producer warpgroup (one lane of it issues the copies) and CONSUMERS
 * (2 or 3) consumer warpgroups of 64 rows per CTA: BLOCK_M = 64 *
 * CONSUMERS. Registers move from the producer to the consumers
 * (setmaxnreg): 128 * (24 + 2 * 240) and 128 * (24 + 3 * 160) <= 65536. */
#define FLASHC_HOPPER_PRODUCER_REGISTERS 24
#define FLASHC_HOPPER_STAGES 2

/* Named barriers: 1 joins the consumer warpgroups; 2 + w is consumer
 * warpgroup w's turn to issue GEMMs (PINGPONG). 0 is __syncthreads. */
#define FLASHC_HOPPER_CONSUMERS_BARRIER 1
#define FLASHC_HOPPER_TURN_BARRIER 2

#define FLASHC_HOPPER_FWD_CONFIGS(X)                                               \
    /* D_QK D_V CONSUMERS BLOCK_N BLOCK_N_GENERAL INTRA_WG_OVERLAP PINGPONG */      \
    X(64, 64, 3, 128, 64, 0, 1)                                                   \
    X(128, 128, 2, 128, 64, 1, 1)                                                 \
    X(192, 128, 2, 128, 64, 1, 1)                                                 \
    X(192, 192, 2, 112, 64, 1, 1)                                                 \
    X(256, 256, 2, 80, 32, 1, 1)

template <int D_QK, int D_V>
struct flashc_hopper_fwd_config;
#define FLASHC_HOPPER_FWD_CONFIG_STRUCT(DQK, DV, WGS, BN, BNG, OVERLAP, PP)          \
    template <>                                                                    \
    struct flashc_hopper_fwd_config<DQK, DV> {                                     \
        static constexpr int CONSUMERS = WGS, BLOCK_M = 64 * WGS;                  \
        static constexpr int THREADS = 128 * (WGS + 1);                            \
        static constexpr int CONSUMER_REGISTERS = WGS == 2 ? 240 : 160;            \
        static constexpr int BLOCK_N = BN, BLOCK_N_GENERAL = BNG;                  \
        static constexpr bool INTRA_WG_OVERLAP = OVERLAP, PINGPONG = PP;           \
        static_assert(WGS == 2 || WGS == 3, "two or three consumer warpgroups");   \
    };
FLASHC_HOPPER_FWD_CONFIGS(FLASHC_HOPPER_FWD_CONFIG_STRUCT)
#undef FLASHC_HOPPER_FWD_CONFIG_STRUCT

#endif
