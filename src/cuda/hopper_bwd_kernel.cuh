/* The Hopper backward kernel (sm_90a): the portable backward's algorithm
 * (bwd_kernel.cuh) with the five GEMMs on wgmma and the tiles brought in
 * by TMA.
 *
 * One CTA owns BLOCK_N keys of one (sequence, kv head), with K and V in
 * shared memory and dK, dV in registers, and walks every query head of the
 * kv head's group (or, with head splits, its share of them) and every
 * BLOCK_M-row query block that sees its keys, in three warpgroups:
 *   - warpgroup 0, the producer: one lane issues every copy: K and V once
 *     per key block, then Q, dO and their LSE2 / D rows into a two-stage
 *     ring, each stage refilled once both consumers released it;
 *   - warpgroups 1 and 2, the consumers, splitting the work as
 *     hopper_bwd_config.h says (by keys at BLOCK_N = 128, by queries and
 *     columns at BLOCK_N = 64). Per query block, with the products
 *     transposed so that accumulator rows are keys (columns are queries):
 *       S^T = K Q^T, dP^T = V dO^T          SS wgmma, both K-major
 *       Pd^T, dS^T                          hopper_bwd_scores.cuh
 *       dV += Pd^T dO, dK += dS^T Q         BLOCK_N = 128: RS wgmma, the
 *                                           accumulators are already A
 *                                           fragments; BLOCK_N = 64: SS from
 *                                           Pd^T, dS^T in shared memory;
 *                                           dO and Q as stored are MN-major B
 *       dS^T -> shared memory, both warpgroups' parts, then
 *       dQ = dS K                           SS wgmma, dS^T read as an
 *                                           MN-major A, K as an MN-major B;
 *                                           each warpgroup half of the
 *                                           columns (BLOCK_M = 64) or of the
 *                                           queries (BLOCK_M = 128)
 *       dQ added into the float32 accumulator (atomics, or one bulk
 *       reduction per query block)
 *   issued in the order dV, [dS^T in], dQ, dK (BLOCK_N = 128) or
 *   [dS^T, Pd^T in], dQ, dV, dK (BLOCK_N = 64), each warpgroup waiting for
 *   dQ's product alone, so that dQ goes out while the later ones run.
 * dK * scale and dV are stored from the registers at the end of the key
 * block: the CTA's sums run in a fixed order, so they are bitwise stable.
 *
 * QK_COLS, V_COLS (multiples of 64, at most HEAD_DIM): the columns of Q / K
 * and V / dO the loads bring and S^T / dP^T contract over (d and dv rounded
 * up; past them inside a block TMA fills zeros). Columns past them hold
 * stale data: the dK, dV and dQ products still read them where a
 * warpgroup's share of columns extends past d or dv, but only into output
 * columns that are never stored or added.
 *
 * Deterministic mode (p.dq_order): every CTA owns one key block, and the
 * CTAs that add into the dQ rows of one query block do so in a fixed
 * order: the last key block that sees the query block first, then down
 * (flashc_hopper_bwd_dq_rank), each waiting until the block's counter in
 * dq_order reaches its rank and adding one once its additions completed.
 * The CTAs start in that order (the tile order reversed), so a CTA's
 * predecessors started before it and the waits always end. Under a causal
 * mask it is also the order in which the additions come anyway (key block
 * n's CTA reaches a query block after key block n + 1's did), so the
 * waits are short; without a mask they stagger the CTAs of a pair by one
 * step each, once, in the first wave. The waits are off the consumers'
 * path: with dQ through shared memory the reducer waits, else a
 * sequencer warp of the producer warpgroup lets the consumers' atomics go
 * (named barriers) and counts them. 
 *
 * Rows a TMA box brings from past a sequence's end (varlen and seqused_k:
 * another sequence's data, possibly NaN) are zeroed in shared memory: the
 * masks give those keys / queries P = dS = 0, but the GEMMs still multiply
 * them by 0. Past the end of the whole tensor TMA fills zeros itself. */
#ifndef FLASHC_CUDA_HOPPER_BWD_KERNEL_CUH
#define FLASHC_CUDA_HOPPER_BWD_KERNEL_CUH

#include <math.h>

#include <type_traits>

#include "../core/semantics.h"
#include "bwd_kernel.cuh"
#include "bwd_params.h"
#include "bwd_rows.cuh"
#include "fwd_kernel.cuh"
#include "fwd_mask.cuh"
#include "fwd_seq.cuh"
#include "hopper_bwd.h"
#include "tile_schedule.h"
#include "hopper_bwd_config.h"
#include "hopper_bwd_ptx.cuh"
#include "hopper_bwd_scores.cuh"
#include "hopper_ptx.cuh"

/* Named barriers over the 256 consumer threads (0 is __syncthreads). */
enum { FLASHC_HOPPER_BWD_BAR_ZEROED = 1, FLASHC_HOPPER_BWD_BAR_DS_READY = 2 };
#define FLASHC_HOPPER_BWD_CONSUMER_THREADS (128 * FLASHC_HOPPER_BWD_CONSUMER_WARPGROUPS)
/* Deterministic mode, dQ by atomics: over the consumers and the sequencer
 * warp. GO: the consumers may add this query block's dQ; DONE: they have. */
enum { FLASHC_HOPPER_BWD_BAR_DQ_GO = 3, FLASHC_HOPPER_BWD_BAR_DQ_DONE = 4 };
#define FLASHC_HOPPER_BWD_SEQUENCED_THREADS (FLASHC_HOPPER_BWD_CONSUMER_THREADS + 32)

/* How the two consumer warpgroups share a CTA's work (hopper_bwd_config.h). */
template <int HEAD_DIM, int BLOCK_N>
struct flashc_hopper_bwd_split {
    static constexpr int BLOCK_M = flashc_hopper_bwd_block_m(HEAD_DIM);
    static_assert((BLOCK_N == 128 && (BLOCK_M == 64 || (BLOCK_M == 128 && HEAD_DIM == 64))) ||
                      (BLOCK_N == 64 && BLOCK_M == 64 && HEAD_DIM == 256),
                  "compiled splits");
    /* BLOCK_N = 64: the warpgroups split the queries of S^T / dP^T and the
     * columns of dK / dV; P^T goes through shared memory */
    static constexpr bool BY_QUERIES = BLOCK_N == 64;
    static constexpr int S_COLS = BY_QUERIES ? BLOCK_M / 2 : BLOCK_M;    /* queries of a warpgroup's S^T */
    static constexpr int KV_COLS = BY_QUERIES ? HEAD_DIM / 2 : HEAD_DIM; /* columns of its dK, dV */
    /* dQ over all BLOCK_N keys: with BLOCK_M = 128 half of the queries
     * each (all columns), else half of the columns */
    static constexpr bool DQ_BY_QUERIES = BLOCK_M == 128;
    static constexpr int DQ_COLS = DQ_BY_QUERIES ? HEAD_DIM : HEAD_DIM / 2; /* columns of its dQ */
    /* the warpgroup's first key (of the block), query (of the query block),
     * dK / dV column, dQ query and column */
    static __device__ int key0(int warpgroup) { return BY_QUERIES ? 0 : 64 * warpgroup; }
    static __device__ int query0(int warpgroup) { return BY_QUERIES ? S_COLS * warpgroup : 0; }
    static __device__ int kv_col0(int warpgroup) { return BY_QUERIES ? KV_COLS * warpgroup : 0; }
    static __device__ int dq_query0(int warpgroup) { return DQ_BY_QUERIES ? 64 * warpgroup : 0; }
    static __device__ int dq_col0(int warpgroup) { return DQ_BY_QUERIES ? 0 : DQ_COLS * warpgroup; }
};

/* A dQ tile's destination, for the reducer (flashc_hopper_bwd_reduce_dq). */
typedef struct flashc_hopper_bwd_dq_slot {
    float *dst;
    uint32_t bytes; /* 0: the consumers are done */
} flashc_hopper_bwd_dq_slot;

/* Shared memory, every tile 1024-byte aligned (plus slack to align the
 * base). K, V, Q, dO: HEAD_DIM / 64 column blocks of [rows x 128 bytes],
 * 128-byte swizzle (as TMA writes them). dS^T (and at BLOCK_N = 64 Pd^T):
 * BLOCK_M / 64 column blocks of [BLOCK_N key rows x 64 queries] (one
 * 128-byte row each), same swizzle, two buffers so one named barrier per
 * query block orders writes after reads. dQ: DQ_TILES float32 tiles
 * [BLOCK_M rows x HEAD_DIM], rows as in the accumulator, each added to it
 * by one bulk reduction. */
template <int HEAD_DIM, int BLOCK_N_>
struct flashc_hopper_bwd_smem {
    static constexpr int BLOCK_M = flashc_hopper_bwd_block_m(HEAD_DIM), BLOCK_N = BLOCK_N_;
    static constexpr int STAGES = FLASHC_HOPPER_BWD_STAGES;
    static constexpr bool PT_IN_SMEM = flashc_hopper_bwd_split<HEAD_DIM, BLOCK_N>::BY_QUERIES;
    static constexpr int KV_BYTES = BLOCK_N * HEAD_DIM * 2;
    static constexpr int QO_BYTES = BLOCK_M * HEAD_DIM * 2;
    static constexpr int DS_BYTES = BLOCK_N * BLOCK_M * 2;
    static constexpr int ROWS_BYTES = 2 * BLOCK_M * 4; /* LSE2 then D */
    static constexpr int K_OFFSET = 0;
    static constexpr int V_OFFSET = K_OFFSET + KV_BYTES;
    static constexpr int Q_OFFSET = V_OFFSET + KV_BYTES;
    static constexpr int DO_OFFSET = Q_OFFSET + STAGES * QO_BYTES;
    static constexpr int DS_OFFSET = DO_OFFSET + STAGES * QO_BYTES;
    static constexpr int PT_OFFSET = DS_OFFSET + 2 * DS_BYTES;
    static constexpr int ROWS_OFFSET = PT_OFFSET + (PT_IN_SMEM ? 2 * DS_BYTES : 0);
    static constexpr int DQ_TILES = flashc_hopper_bwd_dq_tiles(HEAD_DIM); /* hopper_bwd_config.h */
    static constexpr bool DQ_IN_SMEM = DQ_TILES > 0;
    /* the dQ tile of hand-over `step` and the phase of its barriers (never
     * called without tiles; the ring of one keeps the arithmetic defined) */
    static constexpr int DQ_RING = DQ_IN_SMEM ? DQ_TILES : 1;
    static __device__ int dq_buffer(int step) { return step % DQ_RING; }
    static __device__ uint32_t dq_phase(int step) { return (uint32_t)(step / DQ_RING) & 1; }
    static constexpr int DQ_BYTES = BLOCK_M * HEAD_DIM * 4;
    static constexpr int DQ_OFFSET = ROWS_OFFSET + STAGES * ROWS_BYTES;
    static constexpr int BARRIER_OFFSET = DQ_OFFSET + (DQ_IN_SMEM ? DQ_TILES * DQ_BYTES : 0);
    /* the mbarriers, in this order */
    enum { KV_FULL = 0, KV_EMPTY = 1, QDO_FULL = 2, QDO_EMPTY = QDO_FULL + STAGES, DQ_FULL = QDO_EMPTY + STAGES,
           DQ_EMPTY = DQ_FULL + 2, BARRIERS = DQ_EMPTY + 2 };
    /* per dQ tile: where it goes and its bytes (0: no more tiles) */
    static constexpr int DQ_SLOT_OFFSET = BARRIER_OFFSET + 8 * BARRIERS;
    static constexpr int BYTES = DQ_SLOT_OFFSET + 2 * 16 + 1024;
    static_assert(BLOCK_M % 64 == 0, "dS^T: column blocks of 64 queries");
    static_assert(BYTES <= 227 * 1024, "shared memory of one CTA");

    /* Shared addresses, from the 1024-aligned base. */
    static __device__ uint32_t k_tile(uint32_t base) { return base + K_OFFSET; }
    static __device__ uint32_t v_tile(uint32_t base) { return base + V_OFFSET; }
    static __device__ uint32_t q_tile(uint32_t base, int s) { return base + Q_OFFSET + s * QO_BYTES; }
    static __device__ uint32_t do_tile(uint32_t base, int s) { return base + DO_OFFSET + s * QO_BYTES; }
    static __device__ uint32_t ds_tile(uint32_t base, int b) { return base + DS_OFFSET + b * DS_BYTES; }
    static __device__ uint32_t pt_tile(uint32_t base, int b) { return base + PT_OFFSET + b * DS_BYTES; }
    static __device__ uint32_t rows(uint32_t base, int s) { return base + ROWS_OFFSET + s * ROWS_BYTES; }
    static __device__ uint32_t barrier(uint32_t base, int i) { return base + BARRIER_OFFSET + 8 * i; }
    static __device__ uint32_t kv_full(uint32_t base) { return barrier(base, KV_FULL); }
    static __device__ uint32_t kv_empty(uint32_t base) { return barrier(base, KV_EMPTY); }
    static __device__ uint32_t qdo_full(uint32_t base, int s) { return barrier(base, QDO_FULL + s); }
    static __device__ uint32_t qdo_empty(uint32_t base, int s) { return barrier(base, QDO_EMPTY + s); }
    static __device__ uint32_t dq_full(uint32_t base, int b) { return barrier(base, DQ_FULL + b); }
    static __device__ uint32_t dq_empty(uint32_t base, int b) { return barrier(base, DQ_EMPTY + b); }
    static __device__ uint32_t dq_tile(uint32_t base, int b) { return base + DQ_OFFSET + b * DQ_BYTES; }
    static __device__ flashc_hopper_bwd_dq_slot *dq_slot(unsigned char *smem, int b) {
        return reinterpret_cast<flashc_hopper_bwd_dq_slot *>(smem + DQ_SLOT_OFFSET) + b;
    }
    /* dQ goes through the tiles when the accumulator rows are exactly
     * HEAD_DIM floats (then a block's rows are one contiguous range) */
    static __device__ bool dq_via_smem(const flashc_bwd_params &p) {
        return DQ_IN_SMEM && p.fwd.head_dim == HEAD_DIM && p.dq_cols == HEAD_DIM;
    }
};

/* The query blocks that see key block n_block of a sequence: iteration it
 * of the key block is query head heads.first + it / m_count, rows
 * (m_first + it % m_count) * BLOCK_M on. Producer and consumers walk the
 * same list. */
typedef struct flashc_hopper_bwd_block {
    int n0, keys;          /* first key, keys of the block inside the sequence */
    int m_first, m_count;  /* query blocks that see any of the keys */
    int iters;             /* heads * m_count */
} flashc_hopper_bwd_block;

template <int BLOCK_M, int BLOCK_N>
static __device__ __forceinline__ flashc_hopper_bwd_block flashc_hopper_bwd_block_of(const flashc_fwd_params &p,
                                                                                     const flashc_fwd_seq &seq,
                                                                                     int n_block, int heads) {
    flashc_hopper_bwd_block b;
    b.n0 = n_block * BLOCK_N;
    b.keys = min(BLOCK_N, seq.sk - b.n0);
    int first_row, last_row;
    flashc_bwd_rows_seeing(b.n0, b.n0 + b.keys, seq.sq, seq.sk, p.window_left, p.window_right, &first_row, &last_row);
    b.m_first = first_row / BLOCK_M;
    b.m_count = last_row >= first_row ? last_row / BLOCK_M - b.m_first + 1 : 0;
    b.iters = heads * b.m_count;
    return b;
}

/* The walk over a key block's list: iteration it is query head
 * first_head + it / m_count, query block m_first + it % m_count, kept as
 * two counters (no division per step). */
typedef struct flashc_hopper_bwd_cursor {
    int head, m_block;
} flashc_hopper_bwd_cursor;

static __device__ __forceinline__ flashc_hopper_bwd_cursor flashc_hopper_bwd_walk(const flashc_hopper_bwd_block &blk,
                                                                                  int first_head) {
    flashc_hopper_bwd_cursor c;
    c.head = first_head;
    c.m_block = blk.m_first;
    return c;
}

static __device__ __forceinline__ void flashc_hopper_bwd_advance(flashc_hopper_bwd_cursor &c,
                                                                 const flashc_hopper_bwd_block &blk) {
    if (++c.m_block == blk.m_first + blk.m_count) {
        c.m_block = blk.m_first;
        ++c.head;
    }
}

/* Deterministic mode: the rank of key block n_block among the key blocks
 * that add into query block m_block (which n_block sees), in the order of
 * their additions: the last key block that sees the query block first.
 * Key block j >= n_block sees it iff j exists and its first visible row,
 * max(0, j BLOCK_N - shift - window_right) (flashc_bwd_rows_seeing), is at
 * most the block's last row: the later key blocks' last visible rows only
 * grow. */
template <int BLOCK_M, int BLOCK_N>
static __device__ __forceinline__ int flashc_hopper_bwd_dq_rank(const flashc_fwd_params &p, const flashc_fwd_seq &seq,
                                                                int n_block, int m_block) {
    int last = (seq.sk + BLOCK_N - 1) / BLOCK_N - 1;
    if (p.window_right >= 0) {
        const long long row = min((long long)(m_block + 1) * BLOCK_M, (long long)seq.sq) - 1;
        /* >= n_block * BLOCK_N >= 0, since n_block sees the block */
        const long long reach = row + (seq.sk - seq.sq) + p.window_right;
        last = (int)min((long long)last, reach / BLOCK_N);
    }
    return max(last - n_block, 0);
}

/* Deterministic mode: the counter of the query block at row m0 of a head. */
template <int BLOCK_M>
static __device__ __forceinline__ int *flashc_hopper_bwd_dq_counter(const flashc_bwd_params &p, int64_t ws_row0,
                                                                    int head, int m0) {
    return p.dq_order + (head * p.ws_rows + ws_row0 + m0) / BLOCK_M;
}

/* The producer: one thread issues, per key block that any query sees, K
 * and V (once both consumers are done with the previous key block), then
 * Q, dO, LSE2 and D of every iteration into the stage ring. */
template <int HEAD_DIM, int BLOCK_N_, int QK_COLS, int V_COLS>
static __device__ __forceinline__ void flashc_hopper_bwd_produce(const flashc_hopper_bwd_maps &maps,
                                                                 const flashc_bwd_params &p,
                                                                 const flashc_fwd_seq &seq, int batch, int head_k,
                                                                 flashc_bwd_heads heads, int chunk,
                                                                 uint32_t base) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N_> L;
    constexpr int BLOCK_M = L::BLOCK_M, BLOCK_N = L::BLOCK_N;
    /* varlen maps have one batch entry and count rows in the packed tensor */
    const int map_batch = p.fwd.cu_seqlens_q ? 0 : batch;
    const int64_t ws_row0 = flashc_bwd_ws_row0(p, batch, seq, p.tile_m);
    int loaded = 0, step = 0;
    for (int n_block = chunk; n_block * BLOCK_N < seq.sk; n_block += p.nchunks) {
        const flashc_hopper_bwd_block blk =
            flashc_hopper_bwd_block_of<BLOCK_M, BLOCK_N>(p.fwd, seq, n_block, heads.count);
        if (blk.iters == 0) continue;
        flashc_mbarrier_wait(L::kv_empty(base), (loaded & 1) ^ 1);
        flashc_mbarrier_expect_bytes(L::kv_full(base), (QK_COLS + V_COLS) * BLOCK_N * 2);
        const int key_row = (int)(seq.k_start + blk.n0);
#pragma unroll
        for (int cb = 0; cb < QK_COLS / 64; ++cb)
            flashc_tma_load_4d(L::k_tile(base) + cb * BLOCK_N * 128, &maps.k, 64 * cb, key_row, head_k, map_batch,
                               L::kv_full(base));
#pragma unroll
        for (int cb = 0; cb < V_COLS / 64; ++cb)
            flashc_tma_load_4d(L::v_tile(base) + cb * BLOCK_N * 128, &maps.v, 64 * cb, key_row, head_k, map_batch,
                               L::kv_full(base));
        ++loaded;
        flashc_hopper_bwd_cursor at = flashc_hopper_bwd_walk(blk, heads.first);
        for (int it = 0; it < blk.iters; ++it, ++step, flashc_hopper_bwd_advance(at, blk)) {
            const int s = step % L::STAGES;
            const uint32_t phase = (uint32_t)(step / L::STAGES) & 1;
            const int head = at.head;
            const int m0 = at.m_block * BLOCK_M;
            const int q_row = (int)(seq.q_start + m0);
            flashc_mbarrier_wait(L::qdo_empty(base, s), phase ^ 1);
            flashc_mbarrier_expect_bytes(L::qdo_full(base, s), (QK_COLS + V_COLS) * BLOCK_M * 2 + L::ROWS_BYTES);
#pragma unroll
            for (int cb = 0; cb < QK_COLS / 64; ++cb)
                flashc_tma_load_4d(L::q_tile(base, s) + cb * BLOCK_M * 128, &maps.q, 64 * cb, q_row, head, map_batch,
                                   L::qdo_full(base, s));
#pragma unroll
            for (int cb = 0; cb < V_COLS / 64; ++cb)
                flashc_tma_load_4d(L::do_tile(base, s) + cb * BLOCK_M * 128, &maps.dout, 64 * cb, q_row, head,
                                   map_batch, L::qdo_full(base, s));
            /* the preprocess wrote whole tiles: no bounds to check */
            const int64_t ws_row = head * p.ws_rows + ws_row0 + m0;
            flashc_bulk_load(L::rows(base, s), p.lse2 + ws_row, BLOCK_M * 4, L::qdo_full(base, s));
            flashc_bulk_load(L::rows(base, s) + BLOCK_M * 4, p.dsum + ws_row, BLOCK_M * 4, L::qdo_full(base, s));
        }
    }
}

/* Deterministic mode: this CTA's turns, in the order of its steps (the
 * producer's list): turn(counter, rank) for each query block it adds
 * into. */
template <int BLOCK_M, int BLOCK_N, typename Turn>
static __device__ __forceinline__ void flashc_hopper_bwd_for_each_turn(const flashc_bwd_params &p,
                                                                       const flashc_fwd_seq &seq, int batch,
                                                                       flashc_bwd_heads heads, int chunk,
                                                                       Turn turn) {
    const int64_t ws_row0 = flashc_bwd_ws_row0(p, batch, seq, p.tile_m);
    for (int n_block = chunk; n_block * BLOCK_N < seq.sk; n_block += p.nchunks) {
        const flashc_hopper_bwd_block blk =
            flashc_hopper_bwd_block_of<BLOCK_M, BLOCK_N>(p.fwd, seq, n_block, heads.count);
        flashc_hopper_bwd_cursor at = flashc_hopper_bwd_walk(blk, heads.first);
        for (int it = 0; it < blk.iters; ++it, flashc_hopper_bwd_advance(at, blk))
            turn(flashc_hopper_bwd_dq_counter<BLOCK_M>(p, ws_row0, at.head, at.m_block * BLOCK_M),
                 flashc_hopper_bwd_dq_rank<BLOCK_M, BLOCK_N>(p.fwd, seq, n_block, at.m_block));
    }
}

/* The dQ reducer (one thread of the producer warpgroup, when
 * dq_via_smem): once every consumer thread wrote its part of dQ tile
 * step % DQ_TILES (and one of them the tile's slot), adds the tile into the
 * float32 accumulator with one bulk reduction, and frees the tile once the
 * reduction has read it. It runs in the producer's few registers: the
 * consumers work out the addresses. */
template <int HEAD_DIM, int BLOCK_N>
static __device__ __forceinline__ void flashc_hopper_bwd_reduce_dq(unsigned char *smem, uint32_t base) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N> L;
    for (int step = 0;; ++step) {
        const int b = L::dq_buffer(step);
        flashc_mbarrier_wait(L::dq_full(base, b), L::dq_phase(step));
        const flashc_hopper_bwd_dq_slot slot = *L::dq_slot(smem, b);
        if (slot.bytes == 0) break;
        flashc_bulk_reduce_add_f32(slot.dst, L::dq_tile(base, b), slot.bytes);
        flashc_bulk_commit();
        flashc_bulk_wait_all<true>();
        flashc_mbarrier_arrive(L::dq_empty(base, b));
    }
    flashc_bulk_wait_all<false>();
}

/* Deterministic mode, the same with turns: each reduction waits for this
 * CTA's turn at its query block and, once completed, counts itself. With
 * one tile (head dim 64) it frees the tile as soon as the reduction has
 * read it, so the consumers write the next while the reduction completes;
 * with two (128) after the count, as measured best (bench/NOTES.md b16). */
template <int HEAD_DIM, int BLOCK_N_>
static __device__ __forceinline__ void flashc_hopper_bwd_reduce_dq_in_turn(const flashc_bwd_params &p,
                                                                           const flashc_fwd_seq &seq, int batch,
                                                                           flashc_bwd_heads heads, int chunk,
                                                                           unsigned char *smem, uint32_t base) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N_> L;
    int step = 0;
    flashc_hopper_bwd_for_each_turn<L::BLOCK_M, L::BLOCK_N>(p, seq, batch, heads, chunk, [&](int *counter, int rank) {
        const int b = L::dq_buffer(step);
        flashc_mbarrier_wait(L::dq_full(base, b), L::dq_phase(step));
        const flashc_hopper_bwd_dq_slot slot = *L::dq_slot(smem, b);
        flashc_wait_counter(counter, rank);
        flashc_bulk_reduce_add_f32(slot.dst, L::dq_tile(base, b), slot.bytes);
        flashc_bulk_commit();
        if constexpr (L::DQ_TILES == 1) {
            flashc_bulk_wait_all<true>();
            flashc_mbarrier_arrive(L::dq_empty(base, b));
        }
        flashc_bulk_wait_all<false>();
        flashc_release_increment(counter);
        if constexpr (L::DQ_TILES != 1) flashc_mbarrier_arrive(L::dq_empty(base, b));
        ++step;
    });
}

/* Deterministic mode with dQ by the consumers' atomics: the sequencer
 * (one warp of the producer warpgroup), per query block, waits for this
 * CTA's turn, lets the consumers add (GO), waits until they have issued
 * their additions (DONE), and counts them: the release after the barrier
 * covers the consumers' atomics. */
template <int HEAD_DIM, int BLOCK_N_>
static __device__ __forceinline__ void flashc_hopper_bwd_sequence_dq(const flashc_bwd_params &p,
                                                                     const flashc_fwd_seq &seq, int batch,
                                                                     flashc_bwd_heads heads, int chunk,
                                                                     int lane) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N_> L;
    flashc_hopper_bwd_for_each_turn<L::BLOCK_M, L::BLOCK_N>(p, seq, batch, heads, chunk, [&](int *counter, int rank) {
        if (lane == 0) flashc_wait_counter(counter, rank);
        __syncwarp();
        flashc_named_barrier_arrive(FLASHC_HOPPER_BWD_BAR_DQ_GO, FLASHC_HOPPER_BWD_SEQUENCED_THREADS);
        flashc_named_barrier(FLASHC_HOPPER_BWD_BAR_DQ_DONE, FLASHC_HOPPER_BWD_SEQUENCED_THREADS);
        if (lane == 0) flashc_release_increment(counter);
    });
}

/* The consumers' side of one dQ tile hand-over: every consumer thread
 * waits for tile step % DQ_TILES to be free, `write`s its part, then arrives;
 * consumer thread 0 also fills the slot (bytes = 0: no more tiles). */
template <int HEAD_DIM, int BLOCK_N, typename Write>
static __device__ __forceinline__ void flashc_hopper_bwd_hand_over_dq(unsigned char *smem, uint32_t base, int step,
                                                                      int consumer_thread, float *dst,
                                                                      uint32_t bytes, Write write) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N> L;
    const int b = L::dq_buffer(step);
    flashc_mbarrier_wait(L::dq_empty(base, b), L::dq_phase(step) ^ 1);
    write(reinterpret_cast<float *>(smem + L::DQ_OFFSET + b * L::DQ_BYTES));
    if (consumer_thread == 0) {
        L::dq_slot(smem, b)->dst = dst;
        L::dq_slot(smem, b)->bytes = bytes;
    }
    flashc_fence_proxy_async(); /* the tile visible to the bulk reduction */
    flashc_mbarrier_arrive(L::dq_full(base, b));
}

/* Zero rows [first_row, ROWS) of a tile of COL_BLOCKS [ROWS x 128-byte]
 * column blocks (whole rows, so the swizzle does not matter), spread over
 * the consumer threads. The caller fences and synchronises. */
template <int ROWS, int COL_BLOCKS>
static __device__ void flashc_hopper_bwd_zero_rows(unsigned char *tile, int first_row, int consumer_thread) {
    constexpr int CHUNKS_PER_ROW = 128 / 16;
    const int rows = ROWS - first_row;
    const int chunks = COL_BLOCKS * rows * CHUNKS_PER_ROW;
    for (int c = consumer_thread; c < chunks; c += FLASHC_HOPPER_BWD_CONSUMER_THREADS) {
        const int block = c / (rows * CHUNKS_PER_ROW), rest = c % (rows * CHUNKS_PER_ROW);
        const int row = first_row + rest / CHUNKS_PER_ROW, chunk = rest % CHUNKS_PER_ROW;
        *reinterpret_cast<uint4 *>(tile + block * ROWS * 128 + row * 128 + chunk * 16) = make_uint4(0, 0, 0, 0);
    }
}

/* Make the consumers' ordinary shared-memory writes visible to wgmma, then
 * wait for both consumer warpgroups. */
static __device__ __forceinline__ void flashc_hopper_bwd_publish(int barrier) {
    flashc_fence_proxy_async();
    flashc_named_barrier(barrier, FLASHC_HOPPER_BWD_CONSUMER_THREADS);
}

/* acc (keys x N columns) += A B with A = Pd^T or dS^T from shared memory
 * (BLOCK_N = 64 key rows of the BLOCK_M = 64 queries, K-major) and B = the N columns
 * of dO or Q from queries_addr on (the column block of the warpgroup's
 * first column; MN-major, 16 query rows per k-step, column blocks
 * BLOCK_M * 128 bytes apart). One batch, committed. The key-split
 * configurations use flashc_wgmma_rs_batch instead, A from registers. */
template <typename T, int N, int BLOCK_M>
static __device__ __forceinline__ void flashc_hopper_bwd_issue_key_grad_ss(float *acc, uint32_t scores_addr,
                                                                           uint32_t queries_addr) {
    static_assert(BLOCK_M == 64, "A: one 128-byte row of queries per key");
    const uint64_t desc_a0 = flashc_wgmma_desc(scores_addr, 16);
    const uint64_t desc_b0 = flashc_wgmma_desc(queries_addr, BLOCK_M * 128);
    flashc_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BLOCK_M / 16; ++ks)
        flashc_wgmma_ss_bmn<T, N, 0>(acc, flashc_wgmma_desc_add(desc_a0, ks * 32),
                                     flashc_wgmma_desc_add(desc_b0, ks * 16 * 128), 1);
    flashc_wgmma_commit();
}

/* dQ of 64 queries, columns [col0, col0 + N) = dS K over the BLOCK_N
 * keys: A = dS^T in shared memory (key rows of the queries' 64-query
 * column block at ds_addr: MN-major), B = K as stored (key rows,
 * MN-major; the columns start inside column block col0 / 64, blocks
 * BLOCK_N * 128 bytes apart); 16 key rows (2048 bytes) per k-step. One
 * batch, committed. */
template <typename T, int N, int BLOCK_N>
static __device__ __forceinline__ void flashc_hopper_bwd_issue_dq(float *acc, uint32_t ds_addr, uint32_t k_addr,
                                                                  int col0) {
    const uint64_t desc_a0 = flashc_wgmma_desc(ds_addr, BLOCK_N * 128);
    const uint64_t desc_b0 = flashc_wgmma_desc(k_addr + (col0 / 64) * BLOCK_N * 128 + (col0 % 64) * 2, BLOCK_N * 128);
    flashc_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < BLOCK_N / 16; ++ks)
        flashc_wgmma_ss_bmn<T, N, 1>(acc, flashc_wgmma_desc_add(desc_a0, ks * 2048),
                                     flashc_wgmma_desc_add(desc_b0, ks * 2048), ks > 0);
    flashc_wgmma_commit();
}

/* Store this warp's 16 x (16 KSTEPS) slice of a transposed score tile
 * (16-bit fragments, the A layout of the RS wgmma) into its shared tile
 * (column blocks of KEY_ROWS key rows x 64 queries), from query query0 (a
 * multiple of 8) on: fragment register r of k-step ks is key row
 * g + 8 (r % 2), queries query0 + 16 ks + 8 (r / 2) + 2 (lane % 4) + {0, 1},
 * i.e. 16-byte chunk c = query0 / 8 + 2 ks + r / 2 of the queries: chunk
 * c % 8 of the row in column block c / 8, swizzled by the row. */
template <int KEY_ROWS, int KSTEPS>
static __device__ __forceinline__ void flashc_hopper_bwd_store_scores(unsigned char *tile, int key_row0, int query0,
                                                                      int lane, const uint32_t (&frag)[KSTEPS][4]) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = key_row0 + lane / 4 + 8 * (r % 2);
            const int c = query0 / 8 + 2 * ks + r / 2;
            const int block = KSTEPS > 4 ? c / 8 : 0; /* <= 4 k-steps: callers stay in one block */
            *reinterpret_cast<uint32_t *>(tile + block * KEY_ROWS * 128 + row * 128 + ((c % 8) ^ (row % 8)) * 16 +
                                          4 * (lane % 4)) = frag[ks][r];
        }
}

/* This thread's dK and dV accumulator pairs inside the block's keys and
 * the head dims: store_k / store_v(key in the block, column, first,
 * second) for each (dK columns from dk_col0 on, dV from dv_col0). */
template <int DK_ATOMS, int DV_ATOMS, typename StoreK, typename StoreV>
static __device__ __forceinline__ void flashc_hopper_bwd_each_key_grad(const float (&acc_dk)[1][DK_ATOMS][4],
                                                                       const float (&acc_dv)[1][DV_ATOMS][4],
                                                                       int warp_key0, int dk_col0, int dv_col0,
                                                                       int lane, int keys, int d, int dv,
                                                                       StoreK store_k, StoreV store_v) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int key = warp_key0 + 8 * half + lane / 4;
        if (key >= keys) continue;
#pragma unroll
        for (int j = 0; j < DK_ATOMS; ++j) {
            const int col = dk_col0 + 8 * j + 2 * (lane % 4);
            if (col < d) store_k(key, col, acc_dk[0][j][2 * half], acc_dk[0][j][2 * half + 1]);
        }
#pragma unroll
        for (int j = 0; j < DV_ATOMS; ++j) {
            const int col = dv_col0 + 8 * j + 2 * (lane % 4);
            if (col < dv) store_v(key, col, acc_dv[0][j][2 * half], acc_dv[0][j][2 * half + 1]);
        }
    }
}

/* A consumer warpgroup: its share (flashc_hopper_bwd_split) of every key
 * block of this CTA. GENERAL: softcap or dropout (hopper_bwd_scores.cuh). */
template <typename T, int HEAD_DIM, int BLOCK_N_, bool GENERAL, int QK_COLS, int V_COLS>
static __device__ __forceinline__ void flashc_hopper_bwd_consume(const flashc_bwd_params &p,
                                                                 const flashc_fwd_seq &seq, int batch, int head_k,
                                                                 flashc_bwd_heads heads, int chunk,
                                                                 int warpgroup, int warp_in_group, int lane,
                                                                 unsigned char *smem, uint32_t base) {
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N_> L;
    typedef flashc_hopper_bwd_split<HEAD_DIM, BLOCK_N_> W;
    constexpr int BLOCK_M = L::BLOCK_M, BLOCK_N = L::BLOCK_N;
    constexpr int Q_ATOMS = W::S_COLS / 8;       /* column atoms of S^T, dP^T */
    constexpr int D_ATOMS = W::KV_COLS / 8;      /* column atoms of dK */
    /* dV's columns per warpgroup: with the column split and dv in half the
     * configuration's columns (192 / 128), half of V_COLS each, so that
     * neither multiplies columns that do not exist */
    constexpr int DV_COLS = W::BY_QUERIES && 2 * V_COLS <= HEAD_DIM ? V_COLS / 2 : W::KV_COLS;
    constexpr int DV_ATOMS = DV_COLS / 8;
    constexpr int DQ_COLS = W::DQ_COLS;
    constexpr int DQ_ATOMS = DQ_COLS / 8;
    static_assert(Q_ATOMS * 4 <= 64, "dropout: one keep bit per element of the thread's slice");
    typedef typename std::conditional<Q_ATOMS * 4 <= 32, uint32_t, uint64_t>::type keep_bits;
    const int shift = seq.sk - seq.sq;
    const int consumer_thread = threadIdx.x - 128;
    const int64_t ws_row0 = flashc_bwd_ws_row0(p, batch, seq, p.tile_m);
    float *dq_accum = p.dq_accum; /* one accumulator (deterministic: ordered additions) */
    const bool ordered = p.dq_order != nullptr;
    const int wg_key0 = W::key0(warpgroup);                 /* this warpgroup's first key in the block */
    const int warp_key0 = wg_key0 + 16 * warp_in_group;     /* this warp's first key in the block */
    const int wg_query0 = W::query0(warpgroup);             /* its first query of S^T in the query block */
    const int kv_col0 = W::kv_col0(warpgroup);              /* its first dK column */
    const int dv_col0 = W::BY_QUERIES ? DV_COLS * warpgroup : 0; /* its first dV column */
    const int dq_query0 = W::dq_query0(warpgroup);          /* its first dQ query of the query block */
    const int dq_col0 = W::dq_col0(warpgroup);              /* its first dQ column */
    const bool dq_via_smem = L::dq_via_smem(p);
    const uint32_t k_addr = L::k_tile(base), v_addr = L::v_tile(base);

    int loaded = 0, step = 0;
    for (int n_block = chunk; n_block * BLOCK_N < seq.sk; n_block += p.nchunks) {
        const flashc_hopper_bwd_block blk =
            flashc_hopper_bwd_block_of<BLOCK_M, BLOCK_N>(p.fwd, seq, n_block, heads.count);
        float acc_dk[1][D_ATOMS][4], acc_dv[1][DV_ATOMS][4];
        flashc_zero_acc(acc_dk);
        flashc_zero_acc(acc_dv);

        if (blk.iters > 0) {
            flashc_mbarrier_wait(L::kv_full(base), loaded & 1);
            ++loaded;
            if (blk.keys < BLOCK_N) { /* uniform over the consumers */
                flashc_hopper_bwd_zero_rows<BLOCK_N, HEAD_DIM / 64>(smem + L::K_OFFSET, blk.keys, consumer_thread);
                flashc_hopper_bwd_zero_rows<BLOCK_N, HEAD_DIM / 64>(smem + L::V_OFFSET, blk.keys, consumer_thread);
                flashc_hopper_bwd_publish(FLASHC_HOPPER_BWD_BAR_ZEROED);
            }
        }
        flashc_hopper_bwd_pos pos;
        pos.key0 = blk.n0 + warp_key0 + lane / 4;
        pos.shift = shift;
        pos.sk = seq.sk;

        flashc_hopper_bwd_cursor at = flashc_hopper_bwd_walk(blk, heads.first);
        for (int it = 0; it < blk.iters; ++it, ++step, flashc_hopper_bwd_advance(at, blk)) {
            const int s = step % L::STAGES;
            const int head = at.head;
            const int m0 = at.m_block * BLOCK_M;
            const int rows = min(BLOCK_M, seq.sq - m0);
            flashc_mbarrier_wait(L::qdo_full(base, s), (uint32_t)(step / L::STAGES) & 1);
            if (rows < BLOCK_M) { /* uniform over the consumers */
                flashc_hopper_bwd_zero_rows<BLOCK_M, HEAD_DIM / 64>(smem + L::Q_OFFSET + s * L::QO_BYTES, rows,
                                                                    consumer_thread);
                flashc_hopper_bwd_zero_rows<BLOCK_M, HEAD_DIM / 64>(smem + L::DO_OFFSET + s * L::QO_BYTES, rows,
                                                                    consumer_thread);
                flashc_hopper_bwd_publish(FLASHC_HOPPER_BWD_BAR_ZEROED);
            }

            /* S^T and dP^T, two batches: P^T is computed while dP^T runs */
            float acc_s[1][Q_ATOMS][4], acc_dp[1][Q_ATOMS][4];
            /* S^T = K Q^T, dP^T = V dO^T: the warpgroup's 64 keys against
             * its S_COLS queries */
            flashc_wgmma_ss_batch<T, W::S_COLS, QK_COLS, BLOCK_N, BLOCK_M>(&acc_s[0][0][0], k_addr + wg_key0 * 128,
                                                                           L::q_tile(base, s) + wg_query0 * 128);
            flashc_wgmma_ss_batch<T, W::S_COLS, V_COLS, BLOCK_N, BLOCK_M>(&acc_dp[0][0][0], v_addr + wg_key0 * 128,
                                                                          L::do_tile(base, s) + wg_query0 * 128);
            flashc_wgmma_wait<1>(); /* S^T in, dP^T may still run */
            flashc_fence_registers<W::S_COLS / 2>(&acc_s[0][0][0]);
            {
                pos.query0 = m0 + wg_query0 + 2 * (lane % 4);
                const bool masked = flashc_tile_needs_mask(m0, rows, blk.n0 + wg_key0, 64, seq.sk, shift,
                                                           p.fwd.window_left, p.fwd.window_right);
                const float alibi_slope_log2 = flashc_alibi_slope_log2(p.fwd, batch, head);
                const float *lse2 = reinterpret_cast<const float *>(smem + L::ROWS_OFFSET + s * L::ROWS_BYTES);
                const float *dsum = lse2 + BLOCK_M;
                const int col0 = wg_query0 + 2 * (lane % 4);
                if (GENERAL) {
                    const keep_bits keep = p.fwd.dropout_threshold
                                               ? flashc_hopper_bwd_keep_bits<keep_bits, Q_ATOMS>(p.fwd, pos, batch,
                                                                                                 head)
                                               : ~(keep_bits)0;
                    flashc_wgmma_wait<0>();
                    flashc_fence_registers<W::S_COLS / 2>(&acc_dp[0][0][0]);
                    if (masked || alibi_slope_log2 != 0.0f) /* uniform over the warpgroup */
                        flashc_hopper_bwd_scores_general<keep_bits, Q_ATOMS, true>(
                            acc_s, acc_dp, lse2, dsum, col0, p.fwd, pos, masked, alibi_slope_log2, keep);
                    else
                        flashc_hopper_bwd_scores_general<keep_bits, Q_ATOMS, false>(
                            acc_s, acc_dp, lse2, dsum, col0, p.fwd, pos, masked, alibi_slope_log2, keep);
                } else {
                    if (masked || alibi_slope_log2 != 0.0f) /* uniform over the warpgroup */
                        flashc_hopper_bwd_probs<Q_ATOMS, true>(acc_s, lse2, col0, p.fwd, pos, masked,
                                                               alibi_slope_log2);
                    else
                        flashc_hopper_bwd_probs<Q_ATOMS, false>(acc_s, lse2, col0, p.fwd, pos, masked,
                                                                alibi_slope_log2);
                    flashc_wgmma_wait<0>();
                    flashc_fence_registers<W::S_COLS / 2>(&acc_dp[0][0][0]);
                    flashc_hopper_bwd_dscores<Q_ATOMS>(acc_s, acc_dp, dsum, col0);
                }
            }
            uint32_t p_frag[1][Q_ATOMS / 2][4], ds_frag[1][Q_ATOMS / 2][4];
            flashc_pack_p<T>(p_frag, acc_s);
            flashc_pack_p<T>(ds_frag, acc_dp);

            /* dS^T (and Pd^T when the warpgroups split the queries) to
             * shared memory; with key-split warpgroups dV and dK start
             * meanwhile from the registers. Then the barrier: both parts
             * written. Also: both warpgroups finished every product of the
             * previous query block (each waited for them before arriving
             * here), so buffer step % 2 is not reread while the next block
             * writes the other one. */
            flashc_hopper_bwd_store_scores<BLOCK_N>(smem + L::DS_OFFSET + (step % 2) * L::DS_BYTES, warp_key0,
                                                    wg_query0, lane, ds_frag[0]);
            float acc_dq[1][DQ_ATOMS][4];
            const uint32_t ds_addr = L::ds_tile(base, step % 2);
            const uint32_t dq_ds_addr = ds_addr + (dq_query0 / 64) * BLOCK_N * 128;
            if constexpr (W::BY_QUERIES) {
                flashc_hopper_bwd_store_scores<BLOCK_N>(smem + L::PT_OFFSET + (step % 2) * L::DS_BYTES, warp_key0,
                                                        wg_query0, lane, p_frag[0]);
                flashc_hopper_bwd_publish(FLASHC_HOPPER_BWD_BAR_DS_READY);
                /* dQ first, then dV += Pd^T dO, dK += dS^T Q: dQ's
                 * additions go out while the tensor cores run dV and dK */
                flashc_hopper_bwd_issue_dq<T, DQ_COLS, BLOCK_N>(&acc_dq[0][0][0], dq_ds_addr, k_addr, dq_col0);
                /* the column blocks of dO and Q where this warpgroup's
                 * dV and dK columns start */
                const uint32_t dv_block = (dv_col0 / 64) * BLOCK_M * 128, dk_block = (kv_col0 / 64) * BLOCK_M * 128;
                flashc_hopper_bwd_issue_key_grad_ss<T, DV_COLS, BLOCK_M>(&acc_dv[0][0][0], L::pt_tile(base, step % 2),
                                                                         L::do_tile(base, s) + dv_block);
                flashc_hopper_bwd_issue_key_grad_ss<T, W::KV_COLS, BLOCK_M>(&acc_dk[0][0][0], ds_addr,
                                                                           L::q_tile(base, s) + dk_block);
            } else {
                /* dV += Pd^T dO from the registers; once both halves of
                 * dS^T are in, dQ, then dK += dS^T Q: dQ goes out while
                 * dK runs */
                flashc_wgmma_rs_batch<T, HEAD_DIM, BLOCK_M>(&acc_dv[0][0][0], p_frag[0], L::do_tile(base, s));
                flashc_hopper_bwd_publish(FLASHC_HOPPER_BWD_BAR_DS_READY);
                flashc_hopper_bwd_issue_dq<T, DQ_COLS, BLOCK_N>(&acc_dq[0][0][0], dq_ds_addr, k_addr, dq_col0);
                flashc_wgmma_rs_batch<T, HEAD_DIM, BLOCK_M>(&acc_dk[0][0][0], ds_frag[0], L::q_tile(base, s));
            }
            /* dQ's batch complete; the batches issued after it (dV and dK,
             * or dK) may still run */
            flashc_wgmma_wait<W::BY_QUERIES ? 2 : 1>();
            flashc_fence_registers<DQ_COLS / 2>(&acc_dq[0][0][0]);
            /* Once every product completed, Q, dO and the LSE2 / D rows of
             * stage s are read. Every thread read the rows with ordinary
             * loads, and an arrival releases only the arriving thread's own
             * accesses, so every consumer thread arrives (one arrival per
             * warp, even after __syncwarp, left the producer's next bulk
             * copy into the stage unordered after the other lanes' reads:
             * racecheck hazards). */
            const auto release_stage = [&] {
                flashc_wgmma_wait<0>();
                flashc_fence_registers<DV_COLS / 2>(&acc_dv[0][0][0]);
                flashc_fence_registers<W::KV_COLS / 2>(&acc_dk[0][0][0]);
                flashc_mbarrier_arrive(L::qdo_empty(base, s));
            };
            /* in deterministic mode the stage goes back before this CTA
             * waits for its turn at the query block (directly, or for a dQ
             * tile its reducer holds until then), so the producer's refill
             * does not wait for it either */
            if (ordered) release_stage();

            if (dq_via_smem) {
                /* the tile's rows inside the sequence, added by the reducer */
                flashc_hopper_bwd_hand_over_dq<HEAD_DIM, BLOCK_N>(
                    smem, base, step, consumer_thread,
                    dq_accum + ((int64_t)head * p.ws_rows + ws_row0 + m0) * HEAD_DIM,
                    (uint32_t)(rows * HEAD_DIM * 4), [&](float *tile) {
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const int row = dq_query0 + 16 * warp_in_group + 8 * half + lane / 4;
#pragma unroll
                            for (int j = 0; j < DQ_ATOMS; ++j)
                                *reinterpret_cast<float2 *>(tile + row * HEAD_DIM + dq_col0 + 8 * j +
                                                            2 * (lane % 4)) =
                                    make_float2(acc_dq[0][j][2 * half], acc_dq[0][j][2 * half + 1]);
                        }
                    });
            } else {
                /* added here, four columns per reduction: the lanes of a
                 * pair (lane, lane ^ 1) hold columns c .. c + 3 of rows g
                 * and g + 8 between them; they swap halves so that the
                 * even lane adds row g's four and the odd lane row
                 * g + 8's. Rows of the block inside the sequence, columns
                 * inside d (a multiple of 8: four columns are all inside
                 * or all outside). */
                float *dq_rows = dq_accum + ((int64_t)head * p.ws_rows + ws_row0 + m0) * p.dq_cols;
                if (ordered) flashc_named_barrier(FLASHC_HOPPER_BWD_BAR_DQ_GO, FLASHC_HOPPER_BWD_SEQUENCED_THREADS);
                const int odd = lane & 1;
                const int row = dq_query0 + 16 * warp_in_group + 8 * odd + lane / 4;
#pragma unroll
                for (int j = 0; j < DQ_ATOMS; ++j) {
                    const float *a = acc_dq[0][j];
                    const float give0 = odd ? a[0] : a[2], give1 = odd ? a[1] : a[3];
                    const float got0 = __shfl_xor_sync(0xffffffffu, give0, 1);
                    const float got1 = __shfl_xor_sync(0xffffffffu, give1, 1);
                    const int col = dq_col0 + 8 * j + 4 * ((lane % 4) / 2);
                    if (row < rows && col < p.fwd.head_dim)
                        flashc_red_add_f32x4(dq_rows + (int64_t)row * p.dq_cols + col, odd ? got0 : a[0],
                                             odd ? got1 : a[1], odd ? a[2] : got0, odd ? a[3] : got1);
                }
                if (ordered)
                    flashc_named_barrier_arrive(FLASHC_HOPPER_BWD_BAR_DQ_DONE, FLASHC_HOPPER_BWD_SEQUENCED_THREADS);
            }
            if (!ordered) release_stage();
        }
        /* every read of K and V for this key block has completed (every
         * thread arrives: the zeroing of rows past the sequence wrote K / V
         * with ordinary stores) */
        if (blk.iters > 0) flashc_mbarrier_arrive(L::kv_empty(base));

        /* dK * scale and dV, straight from the fragments; keys of the block
         * no query sees get zeros. With head splits, this CTA's share:
         * float32 partials (unscaled), rows of the packed keys. */
        if (p.head_splits > 1) {
            const flashc_bwd_parts parts = flashc_bwd_parts_of(p, batch, seq, blk.n0, heads.split, head_k);
            flashc_hopper_bwd_each_key_grad(
                acc_dk, acc_dv, warp_key0, kv_col0, dv_col0, lane, blk.keys, p.fwd.head_dim, p.fwd.head_dim_v,
                [=](int key, int col, float a, float b) {
                    *reinterpret_cast<float2 *>(parts.dk + key * parts.dk_stride + col) = make_float2(a, b);
                },
                [=](int key, int col, float a, float b) {
                    *reinterpret_cast<float2 *>(parts.dv + key * parts.dv_stride + col) = make_float2(a, b);
                });
            continue;
        }
        T *dk = reinterpret_cast<T *>(p.dk) + batch * p.dk_batch_stride + (seq.k_start + blk.n0) * p.dk_row_stride +
                head_k * p.dk_head_stride;
        T *dv = reinterpret_cast<T *>(p.dv) + batch * p.dv_batch_stride + (seq.k_start + blk.n0) * p.dv_row_stride +
                head_k * p.dv_head_stride;
        const int64_t dk_rows = p.dk_row_stride, dv_rows = p.dv_row_stride;
        const float scale = p.scale;
        flashc_hopper_bwd_each_key_grad(
            acc_dk, acc_dv, warp_key0, kv_col0, dv_col0, lane, blk.keys, p.fwd.head_dim, p.fwd.head_dim_v,
            [=](int key, int col, float a, float b) {
                *reinterpret_cast<uint32_t *>(dk + key * dk_rows + col) = flashc_pack2<T>(a * scale, b * scale);
            },
            [=](int key, int col, float a, float b) {
                *reinterpret_cast<uint32_t *>(dv + key * dv_rows + col) = flashc_pack2<T>(a, b);
            });
    }
    /* the reducer stops at an empty slot */
    if (dq_via_smem)
        flashc_hopper_bwd_hand_over_dq<HEAD_DIM, BLOCK_N>(smem, base, step, consumer_thread, nullptr, 0u,
                                                          [](float *) {});
}

template <typename T, int HEAD_DIM, int BLOCK_N, bool GENERAL, int QK_COLS, int V_COLS>
__global__ void __launch_bounds__(FLASHC_HOPPER_BWD_THREADS, 1)
    flashc_hopper_bwd_kernel(const __grid_constant__ flashc_hopper_bwd_maps maps, const flashc_bwd_params p,
                             const flashc_tile_schedule sched) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef flashc_hopper_bwd_smem<HEAD_DIM, BLOCK_N> L;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const uint32_t raw_addr = flashc_smem_addr(smem_raw);
    const uint32_t base = (raw_addr + 1023u) & ~1023u;

    /* the tile: rank 0 is the first chunk, whose keys the most queries see
     * under a causal mask (tile_schedule.h); a pair is a (batch, kv head,
     * head split) */
    int chunk, pair;
    flashc_schedule_tile(sched, blockIdx.x, &chunk, &pair);
    /* deterministic: the last key blocks start first (their CTAs add first) */
    if (p.dq_order) chunk = sched.ranks - 1 - chunk;
    const int split = pair % p.head_splits;
    const int head_k = pair / p.head_splits % p.fwd.nheads_k, batch = pair / p.head_splits / p.fwd.nheads_k;
    const flashc_bwd_heads heads = flashc_bwd_heads_of(p, head_k, split);
    const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
    if (chunk * L::BLOCK_N >= seq.sk) return; /* no key block: nothing to write */

    if (threadIdx.x == 0) {
        flashc_mbarrier_init(L::kv_full(base), 1);
        /* every consumer thread releases a buffer after its wgmma wait */
        flashc_mbarrier_init(L::kv_empty(base), FLASHC_HOPPER_BWD_CONSUMER_THREADS);
        for (int s = 0; s < L::STAGES; ++s) {
            flashc_mbarrier_init(L::qdo_full(base, s), 1);
            flashc_mbarrier_init(L::qdo_empty(base, s), FLASHC_HOPPER_BWD_CONSUMER_THREADS);
        }
        for (int b = 0; b < 2; ++b) {
            flashc_mbarrier_init(L::dq_full(base, b), FLASHC_HOPPER_BWD_CONSUMER_THREADS);
            flashc_mbarrier_init(L::dq_empty(base, b), 1);
        }
        flashc_mbarrier_init_fence();
    }
    __syncthreads();

    const int warp = threadIdx.x / 32;
    if (warp < 4) {
        flashc_setmaxnreg_dec<FLASHC_HOPPER_BWD_PRODUCER_REGISTERS>();
        if (threadIdx.x == 0)
            flashc_hopper_bwd_produce<HEAD_DIM, BLOCK_N, QK_COLS, V_COLS>(maps, p, seq, batch, head_k, heads, chunk,
                                                                          base);
        unsigned char *smem = smem_raw + (base - raw_addr);
        if (threadIdx.x == 32 && L::dq_via_smem(p)) {
            if (p.dq_order)
                flashc_hopper_bwd_reduce_dq_in_turn<HEAD_DIM, BLOCK_N>(p, seq, batch, heads, chunk, smem, base);
            else
                flashc_hopper_bwd_reduce_dq<HEAD_DIM, BLOCK_N>(smem, base);
        }
        if (warp == 1 && p.dq_order && !L::dq_via_smem(p))
            flashc_hopper_bwd_sequence_dq<HEAD_DIM, BLOCK_N>(p, seq, batch, heads, chunk, threadIdx.x % 32);
    } else {
        flashc_setmaxnreg_inc<FLASHC_HOPPER_BWD_CONSUMER_REGISTERS>();
        flashc_hopper_bwd_consume<T, HEAD_DIM, BLOCK_N, GENERAL, QK_COLS, V_COLS>(p, seq, batch, head_k, heads, chunk,
                                                                                 warp / 4 - 1,
                                                                 warp % 4, threadIdx.x % 32,
                                                                 smem_raw + (base - raw_addr), base);
    }
#else
    __trap(); /* built without sm_90a: the dispatcher never launches this */
#endif
}

#endif
