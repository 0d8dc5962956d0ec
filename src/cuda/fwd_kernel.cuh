/* The forward kernel (FlashAttention-2 schedule on mma.sync, sm_80+).
 *
 * One CTA computes BLOCK_M query rows of one (batch, head). It walks the
 * key blocks that its rows can see, last to first (so the one tile that
 * the causal diagonal cuts comes first), keeping Q, one K and one V tile in
 * shared memory:
 *
 *   wait K[n]; barrier; start loading V[n]
 *   S = Q K^T                      (ldmatrix + mma, float32)
 *   logit rule, mask               (only where needed)
 *   wait V[n]; barrier
 *   online softmax: rescale O, P = 2^(S - m)
 *   dropout on P, P rounded to 16 bits
 *   start loading K[n-1]           (or before the softmax: EARLY_K_LOAD)
 *   O += P V                       (P stays in registers as the A operand)
 *
 * so V's load overlaps the first GEMM and the next K's load overlaps the
 * second GEMM (and the softmax too when issued early). No barrier sits
 * between the softmax and P V, so the exponentials of late columns can
 * run under the mma of early ones. The epilogue divides by the row sums and
 * writes LSE from the fragments and O through the Q tile in shared memory
 * (16-byte stores).
 *
 * GENERAL selects the variant with softcap, ALiBi and dropout (run-time
 * switches inside); the plain variant leaves them out of the inner loop.
 *
 * TAIL: the kernel of the shared last wave (tail_split.h), launched after
 * the main grid's full waves where every tile costs the same: each CTA
 * runs one or two segments (a range of a row block's key blocks), and a
 * row block's segments combine their O, row maxima and sums in CTA order
 * before the epilogue. */
#ifndef FLASHC_CUDA_FWD_KERNEL_CUH
#define FLASHC_CUDA_FWD_KERNEL_CUH

#include <math.h>

#include "../core/semantics.h"
#include "fwd_config.h"
#include "fwd_dropout.cuh"
#include "fwd_mask.cuh"
#include "fwd_params.h"
#include "fwd_seq.cuh"
#include "fwd_softmax.cuh"
#include "fwd_tile_io.cuh"
#include "ptx.cuh"
#include "smem_tile.cuh"
#include "tile_schedule.h"

/* Shared memory of one CTA: Q, K and V tiles (flashc_smem_tile). */
template <typename T, int HEAD_DIM, int BLOCK_M, int BLOCK_N>
constexpr int flashc_fwd_smem_bytes() {
    return (BLOCK_M + 2 * BLOCK_N) * FLASHC_TILE_ROW_BYTES(HEAD_DIM) + FLASHC_TILE_ALIGN;
}

/* Per-lane shared-memory addresses (bytes) of the ldmatrix operands; the
 * GEMMs step from them by compile-time offsets (flashc_smem_tile). */
struct flashc_fwd_lane_addrs {
    uint32_t q;  /* A operand: row lane % 16 of the warp's rows, column 8 * (lane / 16) */
    uint32_t k;  /* B of Q K^T: key (lane % 8) + 8 * (lane / 16), column 8 * ((lane / 8) % 2) */
    uint32_t v;  /* B of P V, transposed: key (lane % 8) + 8 * ((lane / 8) % 2), column 8 * (lane / 16) */
};

/* S = Q K^T for this warp's rows: k-steps of 16 over the configuration's
 * head dim. Columns past the problem's head dim are zero-filled, so they
 * add nothing; running them keeps the loop free of branches, which lets
 * ptxas issue the next ldmatrix under the current mma. */
template <typename T, int HEAD_DIM, int BLOCK_N, int ROW_ATOMS, class L = flashc_smem_tile<HEAD_DIM>>
static __device__ __forceinline__ void flashc_gemm_qk(float (&acc)[ROW_ATOMS][BLOCK_N / 8][4],
                                                      const flashc_fwd_lane_addrs &addr) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
        uint32_t a[ROW_ATOMS][4];
#pragma unroll
        for (int i = 0; i < ROW_ATOMS; ++i)
            flashc_ldmatrix_x4(a[i], L::at(addr.q, 2 * ks, 16 * i));
#pragma unroll
        for (int jp = 0; jp < BLOCK_N / 16; ++jp) {
            uint32_t b[4];
            flashc_ldmatrix_x4(b, L::at(addr.k, 2 * ks, 16 * jp));
#pragma unroll
            for (int i = 0; i < ROW_ATOMS; ++i) {
                flashc_mma16816<T>(acc[i][2 * jp], a[i], b[0], b[1]);
                flashc_mma16816<T>(acc[i][2 * jp + 1], a[i], b[2], b[3]);
            }
        }
    }
}

/* P (float32 fragments of S's layout) rounded to T and packed into the A
 * operand fragments of P V (k-step ks covers S column atoms 2ks, 2ks+1). */
template <typename T, int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ void flashc_pack_p(uint32_t (&a)[ROW_ATOMS][COL_ATOMS / 2][4],
                                                     const float (&P)[ROW_ATOMS][COL_ATOMS][4]) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int ks = 0; ks < COL_ATOMS / 2; ++ks) {
            a[i][ks][0] = flashc_pack2<T>(P[i][2 * ks][0], P[i][2 * ks][1]);
            a[i][ks][1] = flashc_pack2<T>(P[i][2 * ks][2], P[i][2 * ks][3]);
            a[i][ks][2] = flashc_pack2<T>(P[i][2 * ks + 1][0], P[i][2 * ks + 1][1]);
            a[i][ks][3] = flashc_pack2<T>(P[i][2 * ks + 1][2], P[i][2 * ks + 1][3]);
        }
}

/* O += P V with P already packed (flashc_pack_p); V is read transposed by
 * ldmatrix. Columns past head_dim_v are zero and never stored. */
template <typename T, int HEAD_DIM, int BLOCK_N, int ROW_ATOMS, class L = flashc_smem_tile<HEAD_DIM>>
static __device__ __forceinline__ void flashc_gemm_pv(float (&acc_o)[ROW_ATOMS][HEAD_DIM / 8][4],
                                                      const uint32_t (&a)[ROW_ATOMS][BLOCK_N / 16][4],
                                                      uint32_t v_addr) {
#pragma unroll
    for (int ks = 0; ks < BLOCK_N / 16; ++ks) {
#pragma unroll
        for (int dp = 0; dp < HEAD_DIM / 16; ++dp) {
            uint32_t b[4];
            flashc_ldmatrix_x4_trans(b, L::at(v_addr, 2 * dp, 16 * ks));
#pragma unroll
            for (int i = 0; i < ROW_ATOMS; ++i) {
                flashc_mma16816<T>(acc_o[i][2 * dp], a[i][ks], b[0], b[1]);
                flashc_mma16816<T>(acc_o[i][2 * dp + 1], a[i][ks], b[2], b[3]);
            }
        }
    }
}

/* Output row `row` (packed) of (batch, head), and its LSE entry (NULL when
 * LSE is not requested). */
template <typename T>
static __device__ __forceinline__ T *flashc_fwd_out_rows(const flashc_fwd_params &p, int batch, int head,
                                                         int64_t row) {
    return reinterpret_cast<T *>(p.out) + batch * p.o_batch_stride + row * p.o_row_stride + head * p.o_head_stride;
}

static __device__ __forceinline__ float *flashc_fwd_lse_rows(const flashc_fwd_params &p, int batch, int head,
                                                             int64_t row) {
    return p.lse ? p.lse + batch * p.lse_batch_stride + head * p.lse_head_stride + row * p.lse_row_stride
                 : nullptr;
}

/* Rows of a block that sees no key at all: out 0, LSE +inf. */
template <typename T, int THREADS>
static __device__ void flashc_write_empty_rows(const flashc_fwd_params &p, T *out, float *lse,
                                               int rows, int64_t lse_row_stride) {
    const int pairs = p.head_dim_v / 2;
    for (int idx = threadIdx.x; idx < rows * pairs; idx += THREADS) {
        int r = idx / pairs, c = 2 * (idx % pairs);
        *reinterpret_cast<uint32_t *>(out + r * p.o_row_stride + c) = 0u;
    }
    if (lse)
        for (int r = threadIdx.x; r < rows; r += THREADS) lse[r * lse_row_stride] = INFINITY;
}

/* This CTA's block of query rows. The grid (fwd_launch.cuh) is (pair in
 * its L2 section, rank, section) of the tile schedule (tile_schedule.h),
 * rank 0 a (batch, head) pair's last row block (the one that sees the most
 * keys under a causal mask), so CTAs start in the schedule's order without
 * a division: without a mask a section is one pair and its row blocks run
 * together, sharing its K and V in L2; under a causal mask or a window the
 * longest tiles of a section's pairs start first. (The divisions of
 * flashc_schedule_tile, which the Hopper kernels use, made ptxas spill in
 * the d128 plain kernel's main loop, 19 instructions instead of 4, and cost
 * it 2.6 % without a mask on the H200.) */
typedef struct flashc_fwd_row_block {
    int batch, head, m0, rows;     /* rows [m0, m0 + rows) of the sequence */
    int head_k;                    /* the K / V head of `head` */
    int shift;                     /* sk - sq: the causal / window diagonal */
    flashc_fwd_seq seq;
    int n_block_min, n_block_max;  /* key blocks any of the rows sees */
} flashc_fwd_row_block;

/* Fills *b for row block m_block of (batch, head); false when the CTA has
 * nothing to compute: the block starts past the sequence, or no row of it
 * sees any key (those rows are written here: out 0, LSE +inf). */
template <typename T, int BLOCK_M, int BLOCK_N, int THREADS>
static __device__ __forceinline__ bool flashc_fwd_row_block_at(const flashc_fwd_params &p, int m_block, int head,
                                                               int batch, flashc_fwd_row_block *b) {
    b->head = head;
    b->batch = batch;
    b->seq = flashc_fwd_sequence(p, b->batch);
    b->m0 = m_block * BLOCK_M;
    if (b->m0 >= b->seq.sq) return false;
    b->rows = min(BLOCK_M, b->seq.sq - b->m0);
    b->head_k = b->head / (p.nheads / p.nheads_k);
    b->shift = b->seq.sk - b->seq.sq;
    /* Keys any row of the block sees: [lo(first row), hi(last row)). */
    int64_t lo, hi, lo_last, hi_last;
    flashc_visible_cols(b->m0, b->seq.sq, b->seq.sk, p.window_left, p.window_right, &lo, &hi);
    flashc_visible_cols(b->m0 + b->rows - 1, b->seq.sq, b->seq.sk, p.window_left, p.window_right, &lo_last,
                        &hi_last);
    if (hi_last <= lo) {
        flashc_write_empty_rows<T, THREADS>(p, flashc_fwd_out_rows<T>(p, b->batch, b->head, b->seq.q_start + b->m0),
                                            flashc_fwd_lse_rows(p, b->batch, b->head, b->seq.q_start + b->m0),
                                            b->rows, p.lse_row_stride);
        return false;
    }
    b->n_block_min = (int)(lo / BLOCK_N);
    b->n_block_max = (int)((hi_last + BLOCK_N - 1) / BLOCK_N);
    return true;
}

/* The row block of this CTA of the portable kernel's grid (above); false
 * also for the CTAs past the last pair in the last, narrower section, and
 * with a tail (tail_split.h) for those of the tiles it runs: the
 * schedule's tiles from p.tail.first on (without a mask one pair's row
 * blocks after another, tile pair * m_blocks + rank). */
template <typename T, int BLOCK_M, int BLOCK_N, int THREADS>
static __device__ __forceinline__ bool flashc_fwd_find_row_block(const flashc_fwd_params &p,
                                                                 flashc_fwd_row_block *b) {
    const int m_blocks = (p.seqlen_q + BLOCK_M - 1) / BLOCK_M;
    const bool ranks_in_x = m_blocks > FLASHC_GRID_YZ_MAX; /* fwd_launch.cuh, flashc_fwd_grid */
    const int rank = (int)(ranks_in_x ? blockIdx.x : blockIdx.y);
    /* < 2^31: flashc_schedule_plan */
    const int pair = (int)(ranks_in_x ? blockIdx.z * gridDim.y + blockIdx.y : blockIdx.z * gridDim.x + blockIdx.x);
    if (pair >= p.batch * p.nheads) return false;
    if (p.tail.ctas && (long long)pair * m_blocks + rank >= p.tail.first) return false;
    return flashc_fwd_row_block_at<T, BLOCK_M, BLOCK_N, THREADS>(p, m_blocks - 1 - rank, (int)(pair % p.nheads),
                                                                 (int)(pair / p.nheads), b);
}

/* The row block of tail tile `tile` (tail_split.h): the schedule's tile
 * p.tail.first + tile, numbered as flashc_fwd_find_row_block skips them. */
template <typename T, int BLOCK_M, int BLOCK_N, int THREADS>
static __device__ __forceinline__ bool flashc_fwd_tail_row_block(const flashc_fwd_params &p, int tile,
                                                                 flashc_fwd_row_block *b) {
    const int m_blocks = (p.seqlen_q + BLOCK_M - 1) / BLOCK_M;
    const long long t = p.tail.first + tile;
    const int pair = (int)(t / m_blocks), rank = (int)(t % m_blocks);
    return flashc_fwd_row_block_at<T, BLOCK_M, BLOCK_N, THREADS>(p, m_blocks - 1 - rank, pair % p.nheads,
                                                                 pair / p.nheads, b);
}

/* A tail segment's end (tail_split.h): true when this CTA finishes the
 * row block, with st and acc_o then its whole softmax state (every
 * segment's O and row sums rescaled to the largest of their maxima and
 * added in CTA order, the same whichever segment finished last); false
 * when another segment will, this one's state left in its slot: per row
 * atom one float4 of maxima and sums, then the O fragments. */
template <int THREADS, int ROW_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ bool flashc_fwd_tail_combine(const flashc_fwd_params &p, int tile,
                                                               flashc_softmax_state<ROW_ATOMS> &st,
                                                               float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4]) {
    constexpr int SLOT_FLOAT4 = ROW_ATOMS * (OUT_ATOMS + 1);
    const flashc_tail_ctas ctas = flashc_tail_ctas_of(p.tail, tile);
    if (ctas.last == ctas.first) return true; /* the whole row block ran here */
    auto write_slot = [&](float4 *mine) {
#pragma unroll
        for (int i = 0; i < ROW_ATOMS; ++i) {
            __stcg(mine + i * THREADS,
                   make_float4(st.row_max[2 * i], st.row_max[2 * i + 1], st.row_sum[2 * i], st.row_sum[2 * i + 1]));
#pragma unroll
            for (int d = 0; d < OUT_ATOMS; ++d)
                __stcg(mine + (ROW_ATOMS + i * OUT_ATOMS + d) * THREADS,
                       make_float4(acc_o[i][d][0], acc_o[i][d][1], acc_o[i][d][2], acc_o[i][d][3]));
        }
    };
    if (!flashc_tail_arrive<THREADS, SLOT_FLOAT4>(p.tail, p.tail_slots, p.tail_counts, tile, write_slot))
        return false;
    const int me = blockIdx.x;
    auto slot = [&](int q) { return flashc_tail_slot_at<THREADS, SLOT_FLOAT4>(p.tail_slots, q, tile); };
    /* the rows' largest maximum (-inf where no segment saw a key) */
    float m_all[2 * ROW_ATOMS];
#pragma unroll
    for (int r = 0; r < 2 * ROW_ATOMS; ++r) m_all[r] = st.row_max[r];
#pragma unroll 1
    for (int q = ctas.first; q <= ctas.last; ++q) {
        if (q == me) continue;
#pragma unroll
        for (int i = 0; i < ROW_ATOMS; ++i) {
            const float4 s = __ldcg(slot(q) + i * THREADS);
            m_all[2 * i] = fmaxf(m_all[2 * i], s.x);
            m_all[2 * i + 1] = fmaxf(m_all[2 * i + 1], s.y);
        }
    }
    auto weight = [&](float m, int r) { return m == -INFINITY ? 0.0f : flashc_exp2(m - m_all[r]); };
    /* A segment's share in CTA order: the first's scaled, the others' added
     * (explicit roundings, so both ways below give the same bits). Where
     * this CTA is the first (the usual case) its registers start the sum;
     * else they go to its slot and the sum starts from the first's (src:
     * the segment's slot; null: this CTA's registers). */
    auto add_segment = [&](bool first, const float4 *src) {
#pragma unroll
        for (int i = 0; i < ROW_ATOMS; ++i) {
            const float4 s = src ? __ldcg(src + i * THREADS)
                                 : make_float4(st.row_max[2 * i], st.row_max[2 * i + 1], st.row_sum[2 * i],
                                               st.row_sum[2 * i + 1]);
            const float w0 = weight(s.x, 2 * i), w1 = weight(s.y, 2 * i + 1);
            st.row_sum[2 * i] = first ? __fmul_rn(w0, s.z) : __fmaf_rn(w0, s.z, st.row_sum[2 * i]);
            st.row_sum[2 * i + 1] = first ? __fmul_rn(w1, s.w) : __fmaf_rn(w1, s.w, st.row_sum[2 * i + 1]);
#pragma unroll
            for (int d = 0; d < OUT_ATOMS; ++d) {
                const float4 o = src ? __ldcg(src + (ROW_ATOMS + i * OUT_ATOMS + d) * THREADS)
                                     : make_float4(acc_o[i][d][0], acc_o[i][d][1], acc_o[i][d][2], acc_o[i][d][3]);
                acc_o[i][d][0] = first ? __fmul_rn(w0, o.x) : __fmaf_rn(w0, o.x, acc_o[i][d][0]);
                acc_o[i][d][1] = first ? __fmul_rn(w0, o.y) : __fmaf_rn(w0, o.y, acc_o[i][d][1]);
                acc_o[i][d][2] = first ? __fmul_rn(w1, o.z) : __fmaf_rn(w1, o.z, acc_o[i][d][2]);
                acc_o[i][d][3] = first ? __fmul_rn(w1, o.w) : __fmaf_rn(w1, o.w, acc_o[i][d][3]);
            }
        }
    };
    if (me == ctas.first) {
        add_segment(true, nullptr);
    } else {
        write_slot(slot(me)); /* read back by this thread only */
        add_segment(true, slot(ctas.first));
    }
#pragma unroll 1
    for (int q = ctas.first + 1; q <= ctas.last; ++q) add_segment(false, slot(q));
#pragma unroll
    for (int r = 0; r < 2 * ROW_ATOMS; ++r) st.row_max[r] = m_all[r];
    return true;
}

/* A finished row of the epilogues below, from its running maximum m (log2
 * units) and its row sum: the factor of its O fragments (`rescale`, the
 * dropout factor, over the sum) and its LSE = m + log(sum) in natural
 * units; a row that saw no key gets 0 and +inf. */
static __device__ __forceinline__ float flashc_fwd_row_factor(float rescale, float sum) {
    return sum > 0.0f ? rescale / sum : 0.0f;
}
static __device__ __forceinline__ float flashc_fwd_row_lse(float row_max, float sum) {
    return sum > 0.0f ? (row_max + log2f(sum)) * (float)FLASHC_LN2 : INFINITY;
}

/* The finished rows of one warp's fragments, for the epilogues below:
 * visit(i, half, r, row, sum) for each half of each row atom i, r = 2 i +
 * half the softmax state's entry, `row` the lane's row within the block
 * and `sum` the row's whole sum (its quad's lanes added). */
template <int ROW_ATOMS, class Visit>
static __device__ __forceinline__ void flashc_fwd_each_row(const flashc_softmax_state<ROW_ATOMS> &st,
                                                           int warp_row0, int lane, Visit visit) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half)
            visit(i, half, 2 * i + half, warp_row0 + 16 * i + 8 * half + lane / 4,
                  flashc_quad_sum(st.row_sum[2 * i + half]));
}

/* Epilogue of one warp straight from the fragments (the Hopper forward's;
 * the portable kernel stages its rows, below): O / rowsum (times
 * `rescale`, the dropout factor) and LSE = m + log(sum); `out` and `lse`
 * point at the block's first row, warp_row0 is the warp's first row in the
 * block, rows past `rows` are not written. */
template <typename T, int ROW_ATOMS, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_fwd_store_rows(const flashc_fwd_params &p, T *out, float *lse,
                                                             const flashc_softmax_state<ROW_ATOMS> &st,
                                                             const float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4],
                                                             int warp_row0, int rows, float rescale, int lane) {
    flashc_fwd_each_row(st, warp_row0, lane, [&](int i, int half, int r, int row, float sum) {
        if (row >= rows) return;
        const float inv = flashc_fwd_row_factor(rescale, sum);
        T *o_row = out + row * p.o_row_stride;
#pragma unroll
        for (int d = 0; d < OUT_ATOMS; ++d) {
            const int col = 8 * d + 2 * (lane % 4);
            if (col < p.head_dim_v)
                *reinterpret_cast<uint32_t *>(o_row + col) =
                    flashc_pack2<T>(acc_o[i][d][2 * half] * inv, acc_o[i][d][2 * half + 1] * inv);
        }
        if (lse && lane % 4 == 0) lse[row * p.lse_row_stride] = flashc_fwd_row_lse(st.row_max[r], sum);
    });
}

/* The portable kernel's epilogue of one warp: O / rowsum (times
 * `rescale`, the dropout factor) and LSE = m + log(sum). `out` and `lse`
 * point at the block's first row, warp_row0 is the warp's first row in
 * the block, rows past `rows` are not written. O goes out through shared
 * memory: the warp's rows of the fragments into `stage` (the CTA's Q
 * tile, layout L, which no warp reads after the last Q K^T), then back as
 * whole 16-byte chunks, so that the global stores are 16 bytes a lane and
 * a row's lanes adjacent (a quarter of the store instructions of 4-byte
 * stores straight from the fragments, each of which half-filled 8
 * sectors; the epilogue took 3.6 us of a 103 us d128 CTA,
 * bench/NOTES.md). Only this warp touches its rows: no CTA barrier. */
template <typename T, int HEAD_DIM, int ROW_ATOMS, int OUT_ATOMS, class L>
static __device__ __forceinline__ void flashc_fwd_store_rows_staged(const flashc_fwd_params &p, T *out, float *lse,
                                                                    const flashc_softmax_state<ROW_ATOMS> &st,
                                                                    const float (&acc_o)[ROW_ATOMS][OUT_ATOMS][4],
                                                                    unsigned char *stage, int warp_row0, int rows,
                                                                    float rescale, int lane) {
    /* every row goes to the stage, rows past `rows` too (they are never
     * read back) */
    flashc_fwd_each_row(st, warp_row0, lane, [&](int i, int half, int r, int row, float sum) {
        const float inv = flashc_fwd_row_factor(rescale, sum);
#pragma unroll
        for (int d = 0; d < OUT_ATOMS; ++d)
            *reinterpret_cast<uint32_t *>(stage + L::offset(row, d) + 4 * (lane % 4)) =
                flashc_pack2<T>(acc_o[i][d][2 * half] * inv, acc_o[i][d][2 * half + 1] * inv);
        if (lse && lane % 4 == 0 && row < rows)
            lse[row * p.lse_row_stride] = flashc_fwd_row_lse(st.row_max[r], sum);
    });
    __syncwarp();
    constexpr int CHUNKS = HEAD_DIM / 8; /* 16-byte chunks of a row */
    constexpr int ROW_LANES = CHUNKS < 32 ? CHUNKS : 32;
    constexpr int ROW_STEP = 32 / ROW_LANES; /* rows per store instruction */
    constexpr int WARP_ROWS = 16 * ROW_ATOMS;
    if (lane >= ROW_STEP * ROW_LANES) return; /* 12 or 24 chunks a row: the last lanes sit out */
    const int c0 = lane % ROW_LANES;
#pragma unroll
    for (int rr = 0; rr < WARP_ROWS; rr += ROW_STEP) {
        const int row = warp_row0 + rr + lane / ROW_LANES;
#pragma unroll
        for (int c = c0; c < CHUNKS; c += ROW_LANES)
            if (row < rows && c * 8 < p.head_dim_v)
                *reinterpret_cast<uint4 *>(out + row * p.o_row_stride + c * 8) =
                    *reinterpret_cast<const uint4 *>(stage + L::offset(row, c));
    }
}

template <typename T, int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int CTAS_PER_SM, bool EARLY_K_LOAD,
          bool GENERAL, bool TAIL>
__global__ void __launch_bounds__(WARPS * 32, CTAS_PER_SM) flashc_fwd_kernel(const flashc_fwd_params p) {
    constexpr int THREADS = WARPS * 32;
    constexpr int ROWS_PER_WARP = BLOCK_M / WARPS;
    constexpr int ROW_ATOMS = ROWS_PER_WARP / 16;
    constexpr int COL_ATOMS = BLOCK_N / 8;
    constexpr int OUT_ATOMS = HEAD_DIM / 8;
    static_assert(ROWS_PER_WARP % 16 == 0, "each warp owns whole 16-row mma atoms");
    typedef flashc_smem_tile<HEAD_DIM> L;

    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = flashc_tile_base<L>(smem_raw);
    T *sQ = reinterpret_cast<T *>(smem);
    T *sK = reinterpret_cast<T *>(smem + BLOCK_M * L::ROW_BYTES);
    T *sV = reinterpret_cast<T *>(smem + (BLOCK_M + BLOCK_N) * L::ROW_BYTES);

#if __CUDA_ARCH__ >= 900
    /* the tail grid (a programmatic dependent launch) may be scheduled
     * once every CTA of this one has started */
    if constexpr (!TAIL) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* Row block blk over its key blocks n_block_first down to n_block_min
     * (all it sees, or a tail segment's share of them, from tile
     * tail_tile). A lambda, so the plain kernel's code is a straight line:
     * inside the tail's segment loop ptxas spills more in the main loop. */
    auto run_row_block = [&](const flashc_fwd_row_block &blk, int n_block_first, int n_block_min, int tail_tile) {
        const int batch = blk.batch, head = blk.head, m0 = blk.m0, rows = blk.rows;
        const flashc_fwd_seq seq = blk.seq;
        const int head_k = blk.head_k, shift = blk.shift;

        const T *q = reinterpret_cast<const T *>(p.q) + batch * p.q_batch_stride +
                     (seq.q_start + m0) * p.q_row_stride + head * p.q_head_stride;
        const T *k = reinterpret_cast<const T *>(p.k) + batch * p.k_batch_stride + seq.k_start * p.k_row_stride +
                     head_k * p.k_head_stride;
        const T *v = reinterpret_cast<const T *>(p.v) + batch * p.v_batch_stride + seq.k_start * p.v_row_stride +
                     head_k * p.v_head_stride;

        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int warp_row0 = warp * ROWS_PER_WARP;
        flashc_fwd_lane_addrs addr;
        addr.q = flashc_smem_addr(sQ) + L::offset(warp_row0 + lane % 16, lane / 16);
        addr.k = flashc_smem_addr(sK) + L::offset((lane % 8) + (lane / 16) * 8, (lane / 8) % 2);
        addr.v = flashc_smem_addr(sV) + L::offset((lane % 8) + ((lane / 8) % 2) * 8, lane / 16);
        flashc_tile_pos pos;
        pos.row0 = m0 + warp_row0 + lane / 4;
        pos.shift = shift;
        pos.sk = seq.sk;

        const float alibi_slope_log2 = GENERAL ? flashc_alibi_slope_log2(p, batch, head) : 0.0f;
        const float score_to_log2 = GENERAL ? 1.0f : p.scale_log2;

        flashc_load_tile_async<T, BLOCK_M, HEAD_DIM, THREADS>(sQ, q, p.q_row_stride, rows, p.head_dim);
        {
            const int n0 = n_block_first * BLOCK_N;
            flashc_load_tile_async<T, BLOCK_N, HEAD_DIM, THREADS>(sK, k + n0 * p.k_row_stride, p.k_row_stride,
                                                                 seq.sk - n0, p.head_dim);
        }
        flashc_cp_async_commit();

        float acc_o[ROW_ATOMS][OUT_ATOMS][4];
        flashc_softmax_state<ROW_ATOMS> st;
        flashc_softmax_start(acc_o, st);

        /* Start loading K[n-1] into sK (every warp is past its Q K^T of
         * K[n]). Predicated rather than branched, so the caller's code on
         * either side stays one basic block: past the first key block all
         * rows are invalid and only zeros are written. */
        auto start_k_load = [&](int n_block) {
            const int n_prev = (n_block - 1) * BLOCK_N;
            const int valid_rows = n_block > n_block_min ? seq.sk - n_prev : 0;
            const T *src = n_block > n_block_min ? k + n_prev * p.k_row_stride : k;
            flashc_load_tile_async<T, BLOCK_N, HEAD_DIM, THREADS>(sK, src, p.k_row_stride, valid_rows, p.head_dim);
            flashc_cp_async_commit();
        };

        for (int n_block = n_block_first; n_block >= n_block_min; --n_block) {
            const int n0 = n_block * BLOCK_N;
            flashc_cp_async_wait<0>();
            __syncthreads();
            flashc_load_tile_async<T, BLOCK_N, HEAD_DIM, THREADS>(sV, v + n0 * p.v_row_stride, p.v_row_stride,
                                                                 seq.sk - n0, p.head_dim_v);
            flashc_cp_async_commit();

            float acc_s[ROW_ATOMS][COL_ATOMS][4];
            flashc_gemm_qk<T, HEAD_DIM, BLOCK_N, ROW_ATOMS>(acc_s, addr);

            pos.col0 = n0 + 2 * (lane % 4);
            if (GENERAL) flashc_apply_logit_rule(acc_s, p, pos, alibi_slope_log2);
            if (flashc_tile_needs_mask(m0, rows, n0, BLOCK_N, seq.sk, shift, p.window_left, p.window_right))
                flashc_apply_mask(acc_s, pos, p.window_left, p.window_right);

            /* V[n] landed, and every warp is done with K[n]. */
            flashc_cp_async_wait<0>();
            __syncthreads();
            if (EARLY_K_LOAD) start_k_load(n_block);
            flashc_softmax_update(st, acc_s, acc_o, score_to_log2);
            if (GENERAL && p.dropout_threshold)
                flashc_apply_dropout(acc_s, p, batch, head, pos.row0, pos.col0);
            uint32_t p_frag[ROW_ATOMS][COL_ATOMS / 2][4];
            flashc_pack_p<T>(p_frag, acc_s);

            if (!EARLY_K_LOAD) start_k_load(n_block);
            flashc_gemm_pv<T, HEAD_DIM, BLOCK_N, ROW_ATOMS>(acc_o, p_frag, addr.v);
        }
        flashc_cp_async_wait<0>(); /* the last (all-zero) K load, before the CTA exits */

        if constexpr (TAIL) {
            if (!flashc_fwd_tail_combine<THREADS>(p, tail_tile, st, acc_o)) return;
        }
        /* Epilogue: O / rowsum (times the dropout rescale), LSE = m + log(sum).
         * The output pointers are formed only now, to keep the loop's registers
         * for the accumulators. */
        const int64_t q_row0 = flashc_fwd_sequence(p, batch).q_start + m0; /* reloaded: not kept live */
        T *out = flashc_fwd_out_rows<T>(p, batch, head, q_row0);
        float *lse = flashc_fwd_lse_rows(p, batch, head, q_row0);
        flashc_fwd_store_rows_staged<T, HEAD_DIM, ROW_ATOMS, OUT_ATOMS, L>(
            p, out, lse, st, acc_o, reinterpret_cast<unsigned char *>(sQ), warp_row0, rows,
            GENERAL ? p.dropout_rescale : 1.0f, lane);
        /* the next tail segment loads its Q into the staging rows */
        if constexpr (TAIL) __syncthreads();
    };

    if constexpr (TAIL) {
        /* this CTA's segments (tail_split.h), first the end of one row
         * block, then the start of the next; iteration it of a row block
         * is its key block n_block_max - 1 - it */
        const int segments = flashc_tail_segments(p.tail, blockIdx.x);
        for (int segment = 0; segment < segments; ++segment) {
            const flashc_tail_segment seg = flashc_tail_segment_of(p.tail, blockIdx.x, segment);
            flashc_fwd_row_block blk;
            if (!flashc_fwd_tail_row_block<T, BLOCK_M, BLOCK_N, THREADS>(p, seg.tile, &blk)) continue;
            run_row_block(blk, blk.n_block_max - 1 - seg.lo, max(blk.n_block_max - seg.hi, blk.n_block_min),
                          seg.tile);
        }
#if __CUDA_ARCH__ >= 900
        /* the tail grid ends after the main one (the kernels after it in
         * the stream wait for this grid only) */
        asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
    } else {
        flashc_fwd_row_block blk;
        if (!flashc_fwd_find_row_block<T, BLOCK_M, BLOCK_N, THREADS>(p, &blk)) return;
        run_row_block(blk, blk.n_block_max - 1, blk.n_block_min, 0);
    }
}

#endif
