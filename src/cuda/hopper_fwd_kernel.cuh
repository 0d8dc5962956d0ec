/* The Hopper forward kernel (sm_90a): the same algorithm as fwd_kernel.cuh,
 * with the two GEMMs on wgmma and the tiles brought in by TMA.
 *
 * One CTA computes 64 * CONSUMERS query rows of one (batch, head) (the tile
 * tile_schedule.h assigns it) in CONSUMERS + 1 warpgroups
 * (hopper_fwd_config.h):
 *   - warpgroup 0, the producer: one lane issues every TMA copy: Q once,
 *     then K and V blocks into a two-stage ring, each stage refilled as
 *     soon as every consumer released it (mbarriers, no CTA-wide barrier in
 *     the loop). It gives most of its registers to the consumers;
 *   - the consumers, each owning 64 rows. Per key block: S = Q K^T (wgmma,
 *     both operands in shared memory), mask and online softmax on the
 *     accumulators, O += P V (wgmma, P from registers, V read transposed
 *     from shared memory). With PINGPONG they take turns issuing their
 *     GEMMs (flashc_hopper_turns), so one's softmax runs under another's
 *     products.
 * Key blocks are walked last to first, as in the portable kernel, so the
 * one block the causal diagonal or the sequence end cuts comes first. Where
 * the configuration says INTRA_WG_OVERLAP, a consumer issues S of block n
 * and P V of block n-1 together and turns S into P while P V still runs,
 * so the exponentials overlap the tensor cores within a warpgroup too (the
 * O rescale waits for P V). The fragment code (mask, logit rule, softmax,
 * dropout, P packing) is the portable kernel's: a wgmma m64nN accumulator
 * is, per warp, the mma.sync m16n8 layout repeated N/8 times
 * (hopper_ptx.cuh).
 *
 * Tiles out of range arrive as zeros from TMA except where a varlen or
 * seqused_k sequence ends inside the packed tensor: the rows past it belong
 * to other data, which masking hides from S, but P V would still multiply
 * them by 0 (NaN there would leak), so those V rows are zeroed in shared
 * memory first. */
#ifndef FLASHC_CUDA_HOPPER_FWD_KERNEL_CUH
#define FLASHC_CUDA_HOPPER_FWD_KERNEL_CUH

#include <math.h>

#include "../core/semantics.h"
#include "fwd_dropout.cuh"
#include "fwd_kernel.cuh"
#include "fwd_mask.cuh"
#include "fwd_params.h"
#include "fwd_seq.cuh"
#include "fwd_softmax.cuh"
#include "hopper_fwd.h"
#include "tile_schedule.h"
#include "hopper_ptx.cuh"

/* Shared memory: Q, then K and V for each stage, then the mbarriers; every
 * tile 1024-byte aligned (plus slack to align the base). */
template <int D_QK, int D_V, int BLOCK_N>
struct flashc_hopper_fwd_smem {
    static constexpr int Q_BYTES = flashc_hopper_fwd_config<D_QK, D_V>::BLOCK_M * D_QK * 2;
    static constexpr int K_BYTES = BLOCK_N * D_QK * 2;
    static constexpr int V_BYTES = BLOCK_N * D_V * 2;
    static constexpr int K_OFFSET = Q_BYTES;
    static constexpr int V_OFFSET = K_OFFSET + FLASHC_HOPPER_STAGES * K_BYTES;
    static constexpr int BARRIER_OFFSET = V_OFFSET + FLASHC_HOPPER_STAGES * V_BYTES;
    /* q_full, k_full[S], v_full[S], k_empty[S], v_empty[S] */
    static constexpr int BARRIERS = 1 + 4 * FLASHC_HOPPER_STAGES;
    static constexpr int BYTES = BARRIER_OFFSET + 8 * BARRIERS + 1024;

    /* Shared addresses, from the 1024-aligned base. */
    static __device__ uint32_t k_tile(uint32_t base, int s) { return base + K_OFFSET + s * K_BYTES; }
    static __device__ uint32_t v_tile(uint32_t base, int s) { return base + V_OFFSET + s * V_BYTES; }
    static __device__ uint32_t q_full(uint32_t base) { return base + BARRIER_OFFSET; }
    static __device__ uint32_t k_full(uint32_t base, int s) { return q_full(base) + 8 * (1 + s); }
    static __device__ uint32_t v_full(uint32_t base, int s) { return k_full(base, FLASHC_HOPPER_STAGES + s); }
    static __device__ uint32_t k_empty(uint32_t base, int s) { return v_full(base, FLASHC_HOPPER_STAGES + s); }
    static __device__ uint32_t v_empty(uint32_t base, int s) { return k_empty(base, FLASHC_HOPPER_STAGES + s); }
};

/* Zero rows [first_row, BLOCK_N) of a V stage (all consumer threads), then
 * make the zeros visible to wgmma. */
template <int D_V, int BLOCK_N, int CONSUMERS>
static __device__ void flashc_hopper_zero_v_rows(unsigned char *v_stage, int first_row, int consumer_thread) {
    constexpr int CHUNKS_PER_ROW = 128 / 16;
    const int rows = BLOCK_N - first_row;
    const int chunks = (D_V / 64) * rows * CHUNKS_PER_ROW;
    for (int c = consumer_thread; c < chunks; c += 128 * CONSUMERS) {
        const int block = c / (rows * CHUNKS_PER_ROW), rest = c % (rows * CHUNKS_PER_ROW);
        const int row = first_row + rest / CHUNKS_PER_ROW, chunk = rest % CHUNKS_PER_ROW;
        *reinterpret_cast<uint4 *>(v_stage + block * BLOCK_N * 128 + row * 128 + chunk * 16) = make_uint4(0, 0, 0, 0);
    }
    flashc_fence_proxy_async();
    flashc_named_barrier(FLASHC_HOPPER_CONSUMERS_BARRIER, 128 * CONSUMERS);
}

/* The producer: one thread issues Q, then K and V of every key block
 * (last to first) into the stage ring, waiting for every consumer to
 * release a stage before refilling it. */
template <int D_QK, int D_V, int BLOCK_N>
static __device__ __forceinline__ void flashc_hopper_produce(const flashc_hopper_fwd_maps &maps,
                                                             const flashc_fwd_params &p, const flashc_fwd_seq &seq,
                                                             int batch, int head, int m0, int n_block_max,
                                                             int n_iters, uint32_t base) {
    typedef flashc_hopper_fwd_smem<D_QK, D_V, BLOCK_N> L;
    const int head_k = head / (p.nheads / p.nheads_k);
    /* varlen maps have one batch entry and count rows in the packed tensor */
    const int map_batch = p.cu_seqlens_q ? 0 : batch;
    flashc_mbarrier_expect_bytes(L::q_full(base), L::Q_BYTES);
#pragma unroll
    for (int cb = 0; cb < D_QK / 64; ++cb)
        flashc_tma_load_4d(base + cb * flashc_hopper_fwd_config<D_QK, D_V>::BLOCK_M * 128, &maps.q, 64 * cb, (int)(seq.q_start + m0), head,
                           map_batch, L::q_full(base));
    for (int it = 0; it < n_iters; ++it) {
        const int s = it % FLASHC_HOPPER_STAGES;
        const uint32_t phase = (it / FLASHC_HOPPER_STAGES) & 1;
        const int key_row = (int)(seq.k_start + (int64_t)(n_block_max - 1 - it) * BLOCK_N);
        flashc_mbarrier_wait(L::k_empty(base, s), phase ^ 1);
        flashc_mbarrier_expect_bytes(L::k_full(base, s), L::K_BYTES);
#pragma unroll
        for (int cb = 0; cb < D_QK / 64; ++cb)
            flashc_tma_load_4d(L::k_tile(base, s) + cb * BLOCK_N * 128, &maps.k, 64 * cb, key_row, head_k, map_batch,
                               L::k_full(base, s));
        flashc_mbarrier_wait(L::v_empty(base, s), phase ^ 1);
        flashc_mbarrier_expect_bytes(L::v_full(base, s), L::V_BYTES);
#pragma unroll
        for (int cb = 0; cb < D_V / 64; ++cb)
            flashc_tma_load_4d(L::v_tile(base, s) + cb * BLOCK_N * 128, &maps.v, 64 * cb, key_row, head_k, map_batch,
                               L::v_full(base, s));
    }
}

/* Turns of the consumer warpgroups on the tensor cores (PINGPONG): a
 * warpgroup waits for its turn before issuing its GEMMs and hands the turn
 * to the next warpgroup once they are issued, so the GEMMs of one overlap
 * the softmax of another. Each turn barrier counts the 128 threads that
 * wait on it and the 128 of the warpgroup handing it over. All consumer
 * warpgroups of a CTA walk the same key blocks, so their turns pair up. */
template <bool PINGPONG, int CONSUMERS>
struct flashc_hopper_turns {
    int mine, next;
    __device__ explicit flashc_hopper_turns(int warpgroup)
        : mine(FLASHC_HOPPER_TURN_BARRIER + warpgroup),
          next(FLASHC_HOPPER_TURN_BARRIER + (warpgroup + 1) % CONSUMERS) {
        /* warpgroup 0 holds the first turn */
        if (PINGPONG && warpgroup == 0) flashc_named_barrier_arrive(mine, 256);
    }
    __device__ void wait() const {
        if (PINGPONG) flashc_named_barrier(mine, 256);
    }
    __device__ void pass() const {
        if (PINGPONG) flashc_named_barrier_arrive(next, 256);
    }
};

/* A consumer warpgroup: its 64 rows against every key block, then the
 * epilogue. */
template <typename T, int D_QK, int D_V, int BLOCK_N, bool GENERAL>
static __device__ __forceinline__ void flashc_hopper_consume(const flashc_fwd_params &p, const flashc_fwd_seq &seq,
                                                             int batch, int head, int m0, int rows,
                                                             int n_block_max, int n_iters, int warpgroup,
                                                             int warp_in_group, int lane, unsigned char *smem,
                                                             uint32_t base) {
    typedef flashc_hopper_fwd_config<D_QK, D_V> C;
    constexpr int COL_ATOMS = BLOCK_N / 8;
    constexpr int OUT_ATOMS = D_V / 8;
    typedef flashc_hopper_fwd_smem<D_QK, D_V, BLOCK_N> L;
    const int shift = seq.sk - seq.sq;

    const int warp_row0 = 64 * warpgroup + 16 * warp_in_group; /* this warp's first row in the block */
    const int wg_m0 = m0 + 64 * warpgroup;
    const int wg_rows = max(0, min(64, rows - 64 * warpgroup));
    flashc_tile_pos pos;
    pos.row0 = m0 + warp_row0 + lane / 4;
    pos.shift = shift;
    pos.sk = seq.sk;

    const float alibi_slope_log2 = GENERAL ? flashc_alibi_slope_log2(p, batch, head) : 0.0f;
    const float score_to_log2 = GENERAL ? 1.0f : p.scale_log2;

    float acc_o[1][OUT_ATOMS][4];
    flashc_softmax_state<1> st;
    flashc_softmax_start(acc_o, st);

    const uint32_t q_addr = base + warpgroup * 64 * 128;
    auto stage = [](int it) { return it % FLASHC_HOPPER_STAGES; };
    auto phase = [](int it) { return (uint32_t)(it / FLASHC_HOPPER_STAGES) & 1; };
    const flashc_hopper_turns<C::PINGPONG, C::CONSUMERS> turns(warpgroup);

    /* Scores of key block `it` (in acc_s, just computed) -> P: logit rule,
     * mask, maxima (alpha: the factor O still owes), exponentials, dropout. */
    auto scores_to_p = [&](float (&acc_s)[1][COL_ATOMS][4], int it, float (&alpha)[2]) {
        const int n0 = (n_block_max - 1 - it) * BLOCK_N;
        pos.col0 = n0 + 2 * (lane % 4);
        if (GENERAL) flashc_apply_logit_rule(acc_s, p, pos, alibi_slope_log2);
        if (flashc_tile_needs_mask(wg_m0, max(wg_rows, 1), n0, BLOCK_N, seq.sk, shift, p.window_left,
                                   p.window_right))
            flashc_apply_mask(acc_s, pos, p.window_left, p.window_right);
        flashc_softmax_raise_max<false>(st, acc_s, score_to_log2, alpha, acc_o);
        flashc_softmax_exponentiate(st, acc_s, score_to_log2);
        if (GENERAL && p.dropout_threshold) flashc_apply_dropout(acc_s, p, batch, head, pos.row0, pos.col0);
    };
    /* Issue S = Q K^T for key block `it` once its K landed. */
    auto issue_s = [&](float (&acc_s)[1][COL_ATOMS][4], int it) {
        flashc_mbarrier_wait(L::k_full(base, stage(it)), phase(it));
        flashc_wgmma_ss_batch<T, BLOCK_N, D_QK, C::BLOCK_M, BLOCK_N>(&acc_s[0][0][0], q_addr,
                                                                            L::k_tile(base, stage(it)));
    };
    /* S of block it is complete (K's stage released once it is read). */
    auto s_done = [&](float (&acc_s)[1][COL_ATOMS][4], int it) {
        flashc_fence_registers<BLOCK_N / 2>(&acc_s[0][0][0]);
        if (lane == 0) flashc_mbarrier_arrive(L::k_empty(base, stage(it)));
    };
    /* Issue O += P V for key block `it` once its V landed. */
    auto issue_pv = [&](const uint32_t (&p_frag)[COL_ATOMS / 2][4], int it) {
        flashc_mbarrier_wait(L::v_full(base, stage(it)), phase(it));
        flashc_wgmma_rs_batch<T, D_V, BLOCK_N>(&acc_o[0][0][0], p_frag, L::v_tile(base, stage(it)));
    };
    /* Wait for the P V of block it (the last batch in flight). */
    auto finish_pv = [&](int it) {
        flashc_wgmma_wait<0>();
        flashc_fence_registers<D_V / 2>(&acc_o[0][0][0]);
        if (lane == 0) flashc_mbarrier_arrive(L::v_empty(base, stage(it)));
    };

    /* The first key block is the one a varlen or seqused_k sequence can end
     * inside: its V rows past the end are zeroed before any P V reads them,
     * by all consumer warpgroups together (outside the turns). */
    {
        const int n0 = (n_block_max - 1) * BLOCK_N;
        if (n0 + BLOCK_N > seq.sk) {
            flashc_mbarrier_wait(L::v_full(base, stage(0)), phase(0));
            flashc_hopper_zero_v_rows<D_V, BLOCK_N, C::CONSUMERS>(smem + L::V_OFFSET, seq.sk - n0, threadIdx.x - 128);
        }
    }

    uint32_t p_frag[1][COL_ATOMS / 2][4];
    flashc_mbarrier_wait(L::q_full(base), 0);
    if (!C::INTRA_WG_OVERLAP) {
        /* A turn: P V of block it - 1 (and its wait), then S of block it. */
        turns.wait();
        for (int it = 0; it < n_iters; ++it) {
            float acc_s[1][COL_ATOMS][4], alpha[2];
            issue_s(acc_s, it);
            turns.pass();
            flashc_wgmma_wait<0>();
            s_done(acc_s, it);
            scores_to_p(acc_s, it, alpha);
            flashc_rescale_o(acc_o, alpha);
            flashc_pack_p<T>(p_frag, acc_s);
            turns.wait();
            issue_pv(p_frag[0], it);
            finish_pv(it);
        }
        turns.pass();
    } else {
        /* Block 0's S and P first; then per block, S of block it and P V of
         * block it - 1 are issued in one turn and run on the tensor cores
         * while this warpgroup turns S into P (the O rescale waits for
         * P V). */
        {
            float acc_s[1][COL_ATOMS][4], alpha[2];
            issue_s(acc_s, 0);
            flashc_wgmma_wait<0>();
            s_done(acc_s, 0);
            scores_to_p(acc_s, 0, alpha); /* O is still 0: nothing to rescale */
            flashc_pack_p<T>(p_frag, acc_s);
        }
        for (int it = 1; it < n_iters; ++it) {
            float acc_s[1][COL_ATOMS][4], alpha[2];
            turns.wait();
            issue_s(acc_s, it);
            issue_pv(p_frag[0], it - 1);
            turns.pass();
            flashc_wgmma_wait<1>(); /* S done, P V may still run */
            s_done(acc_s, it);
            scores_to_p(acc_s, it, alpha);
            finish_pv(it - 1); /* O and the old P are free again */
            flashc_rescale_o(acc_o, alpha);
            flashc_pack_p<T>(p_frag, acc_s);
        }
        issue_pv(p_frag[0], n_iters - 1);
        finish_pv(n_iters - 1);
    }

    /* Epilogue: O / rowsum (times the dropout rescale), LSE = m + log(sum). */
    T *out = flashc_fwd_out_rows<T>(p, batch, head, seq.q_start + m0);
    float *lse = flashc_fwd_lse_rows(p, batch, head, seq.q_start + m0);
    flashc_fwd_store_rows<T>(p, out, lse, st, acc_o, warp_row0, rows, GENERAL ? p.dropout_rescale : 1.0f, lane);
}

template <typename T, int D_QK, int D_V, int BLOCK_N, bool GENERAL>
__global__ void __launch_bounds__(flashc_hopper_fwd_config<D_QK, D_V>::THREADS, 1)
    flashc_hopper_fwd_kernel(const __grid_constant__ flashc_hopper_fwd_maps maps, const flashc_fwd_params p,
                             const flashc_tile_schedule sched) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef flashc_hopper_fwd_config<D_QK, D_V> C;
    constexpr int BLOCK_M = C::BLOCK_M;
    typedef flashc_hopper_fwd_smem<D_QK, D_V, BLOCK_N> L;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_addr = flashc_smem_addr(smem_raw);
    const uint32_t base = (raw_addr + 1023u) & ~1023u;

    /* the tile: rank 0 is the last row block (tile_schedule.h) */
    int rank, pair;
    flashc_schedule_tile(sched, blockIdx.x, &rank, &pair);
    flashc_fwd_row_block blk;
    if (!flashc_fwd_row_block_at<T, BLOCK_M, BLOCK_N, C::THREADS>(p, sched.ranks - 1 - rank, pair % p.nheads,
                                                                  pair / p.nheads, &blk))
        return;
    const int batch = blk.batch, head = blk.head, m0 = blk.m0, rows = blk.rows;
    const flashc_fwd_seq seq = blk.seq;
    const int n_block_min = blk.n_block_min, n_block_max = blk.n_block_max;
    const int n_iters = n_block_max - n_block_min;

    if (threadIdx.x == 0) {
        flashc_mbarrier_init(L::q_full(base), 1);
        for (int s = 0; s < FLASHC_HOPPER_STAGES; ++s) {
            flashc_mbarrier_init(L::k_full(base, s), 1);
            flashc_mbarrier_init(L::v_full(base, s), 1);
            /* every consumer warp releases a stage after its wgmma wait */
            flashc_mbarrier_init(L::k_empty(base, s), 4 * C::CONSUMERS);
            flashc_mbarrier_init(L::v_empty(base, s), 4 * C::CONSUMERS);
        }
        flashc_mbarrier_init_fence();
    }
    __syncthreads();

    const int warp = threadIdx.x / 32;
    if (warp < 4) {
        flashc_setmaxnreg_dec<FLASHC_HOPPER_PRODUCER_REGISTERS>();
        if (threadIdx.x == 0)
            flashc_hopper_produce<D_QK, D_V, BLOCK_N>(maps, p, seq, batch, head, m0, n_block_max, n_iters, base);
    } else {
        flashc_setmaxnreg_inc<C::CONSUMER_REGISTERS>();
        flashc_hopper_consume<T, D_QK, D_V, BLOCK_N, GENERAL>(p, seq, batch, head, m0, rows, n_block_max, n_iters,
                                                             warp / 4 - 1, warp % 4, threadIdx.x % 32,
                                                             smem_raw + (base - raw_addr), base);
    }
#else
    __trap(); /* built without sm_90a: the dispatcher never launches this */
#endif
}

#endif
