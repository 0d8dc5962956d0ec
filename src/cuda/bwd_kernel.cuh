/* The backward kernel (FlashAttention-2 schedule on mma.sync, sm_80+).
 *
 * One CTA owns BLOCK_N keys of one (sequence, kv head), with K and V in
 * shared memory and dK, dV accumulating in registers, and walks every query
 * head of the kv head's group and every BLOCK_M-row query block that sees
 * any of its keys:
 *
 *   wait Q, dO, LSE, D [it]; barrier           (A)
 *   start loading Q, dO, LSE, D [it + 1]       (two stages; one stage: at the end)
 *   S = Q K^T, dP = dO V^T                     (float32 fragments)
 *   P, dropout, dS -> sP, sdS (16-bit)         (bwd_scores.cuh)
 *   barrier                                    (B)
 *   dV += Pd^T dO, dK += dS^T Q                (A operands from sP / sdS, transposed)
 *   dQ = dS K, added into the float32 accumulator, DQ_CHUNK columns at a time
 *                                              (DQ_IN_KV: the first two chunks' k-loops
 *                                              inside dV's and dK's)
 *
 * Barrier (A) also orders iteration it - 1's reads of sP, sdS and the other
 * Q / dO stage before this iteration overwrites them. The epilogue writes
 * dK * scale and dV from the registers; the CTA's sums run in a fixed order,
 * so dK and dV are bitwise reproducible. GENERAL: softcap, ALiBi or
 * dropout is on (or the scale is negative); the plain variant leaves them
 * out. dQ: atomics into slice 0, or
 * (deterministic) this CTA's own slice, which only it writes, in program
 * order.
 *
 * TAIL: the kernel of the shared last wave (tail_split.h), launched after
 * the main grid's full waves: each CTA runs one or two segments (a range
 * of a tile's iterations), and a tile's segments add their dK / dV in CTA
 * order before the epilogue (the plain variant only). */
#ifndef FLASHC_CUDA_BWD_KERNEL_CUH
#define FLASHC_CUDA_BWD_KERNEL_CUH

#include <math.h>

#include <type_traits>

#include "../core/semantics.h"
#include "bwd_config.h"
#include "bwd_gemm.cuh"
#include "bwd_params.h"
#include "bwd_rows.cuh"
#include "bwd_scores.cuh"
#include "tail_split.h"
#include "bwd_visibility.h"
#include "fwd_mask.cuh"
#include "fwd_seq.cuh"
#include "fwd_tile_io.cuh"
#include "ptx.cuh"
#include "tile_schedule.h"

/* One warp's chunk of dQ = dS K (mma fragments) added into the float32
 * accumulator in its blocked layout (bwd_rows.cuh): each reduction of a
 * warp adds one 8 x 8 atom's 64 floats, contiguous, where rows of STRIDE
 * floats (the configuration's head dim) spread them over eight rows (the
 * adds cost 24 - 33 % of the backward on the H200 that way, bench/NOTES.md
 * "the dQ reductions"). dq: this lane's first element in the block of the
 * warp tile's first row and column (+ FLASHC_BWD_DQ_LANE * lane). Every
 * column is added, those past the problem's head dim too (zeros: K's
 * columns there are zero-filled), so the adds need no test and take one
 * address and immediate offsets. */
template <int ROW_ATOMS, int COL_ATOMS, int STRIDE>
static __device__ __forceinline__ void flashc_bwd_add_dq(float *dq, const float (&acc)[ROW_ATOMS][COL_ATOMS][4]) {
#pragma unroll
    for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
                flashc_bwd_dq_add(dq + (16 * i + 8 * half) * STRIDE + 64 * j, acc[i][j][2 * half],
                                  acc[i][j][2 * half + 1]);
}

/* A tail segment's end (tail_split.h): true when this CTA finishes the
 * tile, with acc (dV, dK fragments) then holding the sum of every
 * segment's, added in CTA order (the same sum whichever segment finished
 * last); false when another segment will, this one's accumulators left in
 * its slot. */
template <int THREADS, int ROW_ATOMS, int COL_ATOMS>
static __device__ __forceinline__ bool flashc_bwd_tail_gather(const flashc_bwd_params &p, int tile,
                                                           float (&acc)[2][ROW_ATOMS][COL_ATOMS][4]) {
    constexpr int SLOT_FLOAT4 = 2 * ROW_ATOMS * COL_ATOMS;
    const flashc_tail_ctas ctas = flashc_tail_ctas_of(p.tail, tile);
    if (ctas.last == ctas.first) return true; /* the whole tile ran here */
    const bool last = flashc_tail_arrive<THREADS, SLOT_FLOAT4>(p.tail, p.tail_slots, p.tail_counts, tile,
                                                              [&](float4 *mine) {
#pragma unroll
        for (int w = 0; w < 2; ++w)
#pragma unroll
            for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
                for (int j = 0; j < COL_ATOMS; ++j)
                    __stcg(mine + ((w * ROW_ATOMS + i) * COL_ATOMS + j) * THREADS,
                           make_float4(acc[w][i][j][0], acc[w][i][j][1], acc[w][i][j][2], acc[w][i][j][3]));
    });
    if (!last) return false;
    /* acc = sum over the tile's CTAs in order, this one's from registers */
    const int me = blockIdx.x;
#pragma unroll
    for (int w = 0; w < 2; ++w)
#pragma unroll
        for (int i = 0; i < ROW_ATOMS; ++i)
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j) {
                const int k = (w * ROW_ATOMS + i) * COL_ATOMS + j;
                float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
                for (int q = ctas.first; q <= ctas.last; ++q) {
                    const float4 x =
                        q == me ? make_float4(acc[w][i][j][0], acc[w][i][j][1], acc[w][i][j][2], acc[w][i][j][3])
                                : __ldcg(flashc_tail_slot_at<THREADS, SLOT_FLOAT4>(p.tail_slots, q, tile) +
                                         k * THREADS);
                    sum.x += x.x;
                    sum.y += x.y;
                    sum.z += x.z;
                    sum.w += x.w;
                }
                acc[w][i][j][0] = sum.x;
                acc[w][i][j][1] = sum.y;
                acc[w][i][j][2] = sum.z;
                acc[w][i][j][3] = sum.w;
            }
    return true;
}

template <typename T, int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int S_WARPS_M, int KV_WARPS_N,
          int Q_WARPS_M, int DQ_CHUNK, bool DQ_IN_KV, bool SWIZZLE, bool GENERAL, bool TAIL>
__global__ void __launch_bounds__(WARPS * 32, 1)
    flashc_bwd_kernel(const flashc_bwd_params p, const flashc_tile_schedule sched, int stages) {
    constexpr int THREADS = WARPS * 32;
    typedef flashc_smem_tile<HEAD_DIM, SWIZZLE> LD; /* Q, dO, K, V tiles */
    constexpr int SD = LD::ROW_BYTES / (int)sizeof(T); /* their rows (elements) */
    /* P, dS tiles: swizzled with the others at 128 keys (unpadded 256-byte
     * rows: what lets d64 / d128 keep two stages in A100's 163 KiB), else
     * rows padded by 16 bytes (at d256, 64 keys, swizzled P / dS made ptxas
     * spill 56 bytes) */
    constexpr bool P_SWIZZLED = flashc_smem_is_swizzled<LD>::value && BLOCK_N % 128 == 0;
    constexpr int SP = P_SWIZZLED ? BLOCK_N : BLOCK_N + 8; /* P, dS rows (elements) */
    constexpr int SP_BYTES = SP * (int)sizeof(T);
    typedef typename std::conditional<P_SWIZZLED, flashc_smem_swizzled<SP_BYTES>, flashc_smem_plain<SP_BYTES>>::type
        LP;

    /* S, dP: warp tile S_ROWS x S_COLS */
    constexpr int S_WARPS_N = WARPS / S_WARPS_M;
    constexpr int S_ROWS = BLOCK_M / S_WARPS_M, S_COLS = BLOCK_N / S_WARPS_N;
    constexpr int S_ROW_ATOMS = S_ROWS / 16, S_COL_ATOMS = S_COLS / 8;
    /* dK, dV: warp tile KV_KEYS x KV_DIMS */
    constexpr int KV_WARPS_D = WARPS / KV_WARPS_N;
    constexpr int KV_KEYS = BLOCK_N / KV_WARPS_N, KV_DIMS = HEAD_DIM / KV_WARPS_D;
    constexpr int KV_ROW_ATOMS = KV_KEYS / 16, KV_COL_ATOMS = KV_DIMS / 8;
    /* dQ: warp tile Q_ROWS x Q_DIMS, DQ_CHUNK columns at a time */
    constexpr int Q_WARPS_D = WARPS / Q_WARPS_M;
    constexpr int Q_ROWS = BLOCK_M / Q_WARPS_M, Q_DIMS = HEAD_DIM / Q_WARPS_D;
    constexpr int Q_ROW_ATOMS = Q_ROWS / 16, DQ_COL_ATOMS = DQ_CHUNK / 8;
    static_assert(S_ROWS % 16 == 0 && S_COLS % 16 == 0, "S warp tiles of whole 16 x 16 atoms");
    static_assert(KV_KEYS % 16 == 0 && KV_DIMS % 16 == 0, "dK / dV warp tiles of whole 16 x 16 atoms");
    static_assert(Q_ROWS % 16 == 0 && Q_DIMS % DQ_CHUNK == 0 && DQ_CHUNK % 16 == 0, "dQ warp tiles");
    static_assert(BLOCK_M % 4 == 0 && BLOCK_M / 2 <= THREADS, "LSE / D rows load as 16-byte chunks, one per thread");
    static_assert(!(GENERAL && TAIL), "the shared last wave runs the plain variant only (bwd_workspace.h)");
    /* swizzled tiles (smem_tile.cuh): each starts on a 128-byte line, and
     * a lane's chunk offset within a warp tile shares no bit with the
     * GEMM's chunk steps (2 jp < KV_DIMS / 8, 2 jp < DQ_CHUNK / 8) */
    static_assert(!flashc_smem_is_swizzled<LD>::value ||
                      ((BLOCK_M * SP_BYTES) % 128 == 0 && (KV_DIMS / 8 & (KV_DIMS / 8 - 1)) == 0 &&
                       (DQ_CHUNK / 8 & (DQ_CHUNK / 8 - 1)) == 0),
                  "swizzled tile layout");
    /* swizzled P / dS: the score stores step 8-column atoms from a chunk
     * that is a multiple of their count, the dV / dK GEMMs 16-key atoms
     * from a multiple of theirs */
    static_assert(!P_SWIZZLED || ((S_COL_ATOMS & (S_COL_ATOMS - 1)) == 0 && S_COL_ATOMS <= 8 &&
                                  (KV_ROW_ATOMS & (KV_ROW_ATOMS - 1)) == 0),
                  "swizzled P / dS layout");

    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *smem = flashc_tile_base<LD>(smem_raw);
    T *sK = reinterpret_cast<T *>(smem);
    T *sV = sK + BLOCK_N * SD;
    T *sP = sV + BLOCK_N * SD;
    T *sdS = sP + BLOCK_M * SP;
    T *sQ0 = sdS + BLOCK_M * SP; /* stage s: sQ0 + s * 2 * BLOCK_M * SD, dO right after its Q */
    float *sRows0 = reinterpret_cast<float *>(sQ0 + stages * 2 * BLOCK_M * SD); /* stage s: LSE2, D */

#if __CUDA_ARCH__ >= 900
    /* the tail grid (a programmatic dependent launch) may be scheduled
     * once every CTA of this one has started */
    if constexpr (!TAIL) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    /* TAIL: this CTA's segments, first the end of one tile, then the start
     * of the next */
    const int segments = TAIL ? flashc_tail_segments(p.tail, blockIdx.x) : 1;
    for (int segment = 0; segment < segments; ++segment) {
        /* the tile (tile_schedule.h): rank 0 is the first chunk, whose keys
         * the most queries see under a causal mask; a pair is a (batch, kv
         * head, head split), the split walking its share of the group's query
         * heads */
        int chunk, pair;
        flashc_tail_segment tail_seg = {0, 0, 0};
        if constexpr (TAIL) {
            tail_seg = flashc_tail_segment_of(p.tail, blockIdx.x, segment);
            flashc_schedule_tile(sched, (int)(p.tail.first + tail_seg.tile), &chunk, &pair);
        } else {
            flashc_schedule_tile(sched, blockIdx.x, &chunk, &pair);
        }
        const int head_k = pair / p.head_splits % p.fwd.nheads_k, batch = pair / p.head_splits / p.fwd.nheads_k;
        const flashc_bwd_heads heads = flashc_bwd_heads_of(p, head_k, pair % p.head_splits);
        const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
        const int shift = seq.sk - seq.sq;
        const int64_t ws_row0 = flashc_bwd_ws_row0(p, batch, seq, p.tile_m);
        float *dq_accum = p.dq_accum + (p.deterministic ? (int64_t)chunk * p.dq_slice_stride : 0);

        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int g = lane / 4, t = lane % 4;
        const int s_row0 = (warp / S_WARPS_N) * S_ROWS, s_col0 = (warp % S_WARPS_N) * S_COLS;
        const int kv_key0 = (warp / KV_WARPS_D) * KV_KEYS, kv_dim0 = (warp % KV_WARPS_D) * KV_DIMS;
        const int q_row0 = (warp / Q_WARPS_D) * Q_ROWS, q_dim0 = (warp % Q_WARPS_D) * Q_DIMS;

        const T *k_seq = reinterpret_cast<const T *>(p.fwd.k) + batch * p.fwd.k_batch_stride +
                         seq.k_start * p.fwd.k_row_stride + head_k * p.fwd.k_head_stride;
        const T *v_seq = reinterpret_cast<const T *>(p.fwd.v) + batch * p.fwd.v_batch_stride +
                         seq.k_start * p.fwd.v_row_stride + head_k * p.fwd.v_head_stride;

        for (int n_block = chunk; n_block * BLOCK_N < seq.sk; n_block += p.nchunks) {
            const int n0 = n_block * BLOCK_N;
            const int keys = min(BLOCK_N, seq.sk - n0);
            int first_row, last_row;
            flashc_bwd_rows_seeing(n0, n0 + keys, seq.sq, seq.sk, p.fwd.window_left, p.fwd.window_right, &first_row,
                                   &last_row);
            const int m_first = first_row / BLOCK_M;
            const int m_count = last_row >= first_row ? last_row / BLOCK_M - m_first + 1 : 0;
            const int iters = heads.count * m_count;
            /* TAIL: the segment's iterations (every tail tile has the plan's
             * count, so the clamps only guard) */
            const int it_begin = TAIL ? min(tail_seg.lo, iters) : 0;
            const int it_end = TAIL ? min(tail_seg.hi, iters) : iters;

            float acc_dvdk[2][KV_ROW_ATOMS][KV_COL_ATOMS][4];
            float (&acc_dv)[KV_ROW_ATOMS][KV_COL_ATOMS][4] = acc_dvdk[0];
            float (&acc_dk)[KV_ROW_ATOMS][KV_COL_ATOMS][4] = acc_dvdk[1];
            flashc_zero_acc(acc_dk);
            flashc_zero_acc(acc_dv);

            /* Queue the loads of the iteration over query head `head`, rows from
             * m0, into stage `stage`: Q and dO (rows past the sequence
             * zero-filled), LSE2 and D rows (the preprocess wrote the whole
             * tile, +inf / 0 past the sequence). A whole tile (every row and
             * column real, all but a sequence's last row block) copies without
             * per-row tests. */
            auto load_iteration = [&](int head, int m0, int stage) {
                const int rows = min(BLOCK_M, seq.sq - m0);
                T *sQ = sQ0 + stage * 2 * BLOCK_M * SD;
                T *sdO = sQ + BLOCK_M * SD;
                float *sRows = sRows0 + stage * 2 * BLOCK_M;
                const T *q = reinterpret_cast<const T *>(p.fwd.q) + batch * p.fwd.q_batch_stride +
                             (seq.q_start + m0) * p.fwd.q_row_stride + head * p.fwd.q_head_stride;
                const T *dout = reinterpret_cast<const T *>(p.dout) + batch * p.do_batch_stride +
                                (seq.q_start + m0) * p.do_row_stride + head * p.do_head_stride;
                if (rows == BLOCK_M && p.fwd.head_dim == HEAD_DIM && p.fwd.head_dim_v == HEAD_DIM) {
                    flashc_load_tile_async<T, BLOCK_M, HEAD_DIM, THREADS, LD, false>(sQ, q, p.fwd.q_row_stride, 0, 0);
                    flashc_load_tile_async<T, BLOCK_M, HEAD_DIM, THREADS, LD, false>(sdO, dout, p.do_row_stride, 0, 0);
                } else {
                    flashc_load_tile_async<T, BLOCK_M, HEAD_DIM, THREADS, LD>(sQ, q, p.fwd.q_row_stride, rows,
                                                                         p.fwd.head_dim);
                    flashc_load_tile_async<T, BLOCK_M, HEAD_DIM, THREADS, LD>(sdO, dout, p.do_row_stride, rows,
                                                                         p.fwd.head_dim_v);
                }
                constexpr int ROW_CHUNKS = BLOCK_M / 4; /* 16-byte chunks of one row buffer */
                if (threadIdx.x < 2 * ROW_CHUNKS) {
                    const int which = threadIdx.x / ROW_CHUNKS, c = threadIdx.x % ROW_CHUNKS;
                    const float *src = (which ? p.dsum : p.lse2) + head * p.ws_rows + ws_row0 + m0 + 4 * c;
                    flashc_cp_async16(flashc_smem_addr(sRows + which * BLOCK_M + 4 * c), src, true);
                }
                flashc_cp_async_commit();
            };

            /* iteration it: query head heads.first + it / m_count, row block
             * m_first + it % m_count, stepped rather than divided */
            int head = heads.first, m_block = m_first;
            if constexpr (TAIL) {
                if (it_begin > 0) {
                    head += it_begin / m_count;
                    m_block += it_begin % m_count;
                }
            }

            __syncthreads(); /* the previous key block's reads of sK / sV are done */
            if (it_end > it_begin) {
                flashc_load_tile_async<T, BLOCK_N, HEAD_DIM, THREADS, LD>(sK, k_seq + n0 * p.fwd.k_row_stride,
                                                                     p.fwd.k_row_stride, keys, p.fwd.head_dim);
                flashc_load_tile_async<T, BLOCK_N, HEAD_DIM, THREADS, LD>(sV, v_seq + n0 * p.fwd.v_row_stride,
                                                                     p.fwd.v_row_stride, keys, p.fwd.head_dim_v);
                /* commits K, V and the first iteration as one group (iteration it
                 * goes to stage it & 1) */
                load_iteration(head, m_block * BLOCK_M, stages == 2 ? (it_begin & 1) : 0);
            }

            const uint32_t sK_addr = flashc_smem_addr(sK), sV_addr = flashc_smem_addr(sV);
            const uint32_t sP_addr = flashc_smem_addr(sP), sdS_addr = flashc_smem_addr(sdS);
            for (int it = it_begin; it < it_end; ++it) {
                const int stage = stages == 2 ? (it & 1) : 0;
                const int m0 = m_block * BLOCK_M;
                int next_head = head, next_m_block = m_block + 1;
                if (next_m_block == m_first + m_count) {
                    next_m_block = m_first;
                    ++next_head;
                }
                T *sQ = sQ0 + stage * 2 * BLOCK_M * SD;
                T *sdO = sQ + BLOCK_M * SD;
                const float *sRows = sRows0 + stage * 2 * BLOCK_M;
                const uint32_t sQ_addr = flashc_smem_addr(sQ), sdO_addr = flashc_smem_addr(sdO);

                flashc_cp_async_wait<0>();
                __syncthreads(); /* (A) */
                if (stages == 2 && it + 1 < it_end) load_iteration(next_head, next_m_block * BLOCK_M, stage ^ 1);

                /* S = Q K^T, dP = dO V^T */
                float acc_sdp[2][S_ROW_ATOMS][S_COL_ATOMS][4];
                float (&acc_s)[S_ROW_ATOMS][S_COL_ATOMS][4] = acc_sdp[0];
                float (&acc_dp)[S_ROW_ATOMS][S_COL_ATOMS][4] = acc_sdp[1];
                flashc_zero_acc(acc_s);
                flashc_zero_acc(acc_dp);
                {
                    const uint32_t a_sdp[2] = {FLASHC_LANE_ADDR(LD, false, false, sQ_addr, lane, s_row0, 0),
                                               FLASHC_LANE_ADDR(LD, false, false, sdO_addr, lane, s_row0, 0)};
                    const uint32_t b_sdp[2] = {FLASHC_LANE_ADDR(LD, true, false, sK_addr, lane, s_col0, 0),
                                               FLASHC_LANE_ADDR(LD, true, false, sV_addr, lane, s_col0, 0)};
                    flashc_warp_gemms<T, false, false, S_ROW_ATOMS, S_COL_ATOMS / 2, HEAD_DIM / 16, LD, LD,
                                      2>(acc_sdp, a_sdp, b_sdp);
                }

                /* P, dS -> shared memory */
                {
                    float lse2[2 * S_ROW_ATOMS], dsum[2 * S_ROW_ATOMS];
#pragma unroll
                    for (int r = 0; r < 2 * S_ROW_ATOMS; ++r) {
                        const int row = s_row0 + 16 * (r / 2) + 8 * (r % 2) + g;
                        lse2[r] = sRows[row];
                        dsum[r] = sRows[BLOCK_M + row];
                    }
                    flashc_tile_pos pos;
                    pos.row0 = m0 + s_row0 + g;
                    pos.col0 = n0 + s_col0 + 2 * t;
                    pos.shift = shift;
                    pos.sk = seq.sk;
                    const bool masked = flashc_tile_needs_mask(m0, min(BLOCK_M, seq.sq - m0), n0, BLOCK_N, seq.sk,
                                                               shift, p.fwd.window_left, p.fwd.window_right);
                    /* this lane's element of the warp's tile (byte offset; the
                     * tiles start on a 128-byte line) */
                    const uint32_t at = LP::offset(s_row0 + g, s_col0 / 8) + 4 * t;
                    unsigned char *sP_bytes = reinterpret_cast<unsigned char *>(sP);
                    unsigned char *sdS_bytes = reinterpret_cast<unsigned char *>(sdS);
                    if (GENERAL) {
                        /* one copy of the score code per softcap / dropout combination, picked per tile */
                        const float slope = flashc_alibi_slope_log2(p.fwd, batch, head);
                        auto scores = [&](auto softcap, auto dropout) {
                            flashc_bwd_scores<T, S_ROW_ATOMS, S_COL_ATOMS, LP, true, decltype(softcap)::value,
                                              decltype(dropout)::value>(acc_s, acc_dp, lse2, dsum, p.fwd, pos, masked,
                                                                        slope, batch, head, sP_bytes, sdS_bytes, at);
                        };
                        constexpr std::true_type on{};
                        constexpr std::false_type off{};
                        const bool softcap = p.fwd.softcap_inv_scale != 0.0f, dropout = p.fwd.dropout_threshold != 0u;
                        if (softcap && dropout)
                            scores(on, on);
                        else if (softcap)
                            scores(on, off);
                        else if (dropout)
                            scores(off, on);
                        else
                            scores(off, off);
                    } else if (masked) /* plain: the mask test compiled only into tiles that need it */
                        flashc_bwd_scores<T, S_ROW_ATOMS, S_COL_ATOMS, LP, false>(acc_s, acc_dp, lse2, dsum, p.fwd, pos,
                                                                                  true, 0.0f, batch, head, sP_bytes,
                                                                                  sdS_bytes, at);
                    else
                        flashc_bwd_scores<T, S_ROW_ATOMS, S_COL_ATOMS, LP, false>(acc_s, acc_dp, lse2, dsum, p.fwd, pos,
                                                                                  false, 0.0f, batch, head, sP_bytes,
                                                                                  sdS_bytes, at);
                }
                __syncthreads(); /* (B) */

                /* dV += P^T dO, dK += dS^T Q, dQ += dS K (DQ_IN_KV: bwd_config.h).
                 * The two branches spell their lane addresses and dQ chunk loops
                 * out separately on purpose: each is the source its kernels were
                 * measured with. One shared loop (checked 2026-12-03) keeps the
                 * sm_90 plain kernels' SASS but changes the general, SMALL and
                 * sm_80 ones, so folding it needs its own A/B. */
                if constexpr (DQ_IN_KV) {
                    /* dQ's first chunk's k-loop inside dV's, its second inside
                     * dK's, each chunk's adds after its loop; the other chunks
                     * and the zeros past the head dim as below */
                    typedef flashc_warp_frags<T, true, true, KV_ROW_ATOMS, KV_COL_ATOMS / 2, LP, LD> kv_frags;
                    typedef flashc_warp_frags<T, false, true, Q_ROW_ATOMS, DQ_COL_ATOMS / 2, LP, LD> dq_frags;
                    const uint32_t a_kv[2] = {FLASHC_LANE_ADDR(LP, false, true, sP_addr, lane, 0, kv_key0),
                                              FLASHC_LANE_ADDR(LP, false, true, sdS_addr, lane, 0, kv_key0)};
                    const uint32_t b_kv[2] = {FLASHC_LANE_ADDR(LD, true, true, sdO_addr, lane, 0, kv_dim0),
                                              FLASHC_LANE_ADDR(LD, true, true, sQ_addr, lane, 0, kv_dim0)};
                    const uint32_t a_q = FLASHC_LANE_ADDR(LP, false, false, sdS_addr, lane, q_row0, 0);
                    float *dq_rows = dq_accum + ((int64_t)head * p.ws_rows + ws_row0 + m0) * HEAD_DIM;
                    float *dq_lane = dq_rows + q_row0 * HEAD_DIM + 8 * q_dim0 + FLASHC_BWD_DQ_LANE * lane;
                    static_assert(Q_DIMS >= 2 * DQ_CHUNK && BLOCK_M == BLOCK_N,
                                  "two dQ chunks, whose k-loops (keys) are as long as dK / dV's (query rows)");
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        float acc_dq[Q_ROW_ATOMS][DQ_COL_ATOMS][4];
                        flashc_zero_acc(acc_dq);
                        const uint32_t b_q = FLASHC_LANE_ADDR(LD, true, true, sK_addr, lane, 0, q_dim0 + c * DQ_CHUNK);
                        flashc_warp_gemms_interleaved<BLOCK_M / 16, kv_frags, dq_frags, 1>(acc_dvdk + c, a_kv + c,
                                                                                        b_kv + c, acc_dq, a_q, b_q);
                        flashc_bwd_add_dq<Q_ROW_ATOMS, DQ_COL_ATOMS, HEAD_DIM>(dq_lane + 8 * c * DQ_CHUNK, acc_dq);
                    }
#pragma unroll 1
                    for (int c0 = 2 * DQ_CHUNK; c0 < Q_DIMS; c0 += DQ_CHUNK) {
                        const int dim0 = q_dim0 + c0;
                        if (dim0 >= p.fwd.head_dim) break; /* uniform per warp */
                        float acc_dq[1][Q_ROW_ATOMS][DQ_COL_ATOMS][4];
                        flashc_zero_acc(acc_dq[0]);
                        const uint32_t a_q1[1] = {a_q};
                        const uint32_t b_q[1] = {FLASHC_LANE_ADDR(LD, true, true, sK_addr, lane, 0, dim0)};
                        flashc_warp_gemms<T, false, true, Q_ROW_ATOMS, DQ_COL_ATOMS / 2, BLOCK_N / 16, LP, LD, 1>(
                            acc_dq, a_q1, b_q);
                        flashc_bwd_add_dq<Q_ROW_ATOMS, DQ_COL_ATOMS, HEAD_DIM>(dq_lane + 8 * c0, acc_dq[0]);
                    }
                } else {
                    /* dV += Pd^T dO, dK += dS^T Q */
                    {
                        const uint32_t a_kv[2] = {FLASHC_LANE_ADDR(LP, false, true, sP_addr, lane, 0, kv_key0),
                                                  FLASHC_LANE_ADDR(LP, false, true, sdS_addr, lane, 0, kv_key0)};
                        const uint32_t b_kv[2] = {FLASHC_LANE_ADDR(LD, true, true, sdO_addr, lane, 0, kv_dim0),
                                                  FLASHC_LANE_ADDR(LD, true, true, sQ_addr, lane, 0, kv_dim0)};
                        flashc_warp_gemms<T, true, true, KV_ROW_ATOMS, KV_COL_ATOMS / 2, BLOCK_M / 16, LP, LD,
                                          2>(acc_dvdk, a_kv, b_kv);
                    }

                    /* dQ += dS K, a chunk of columns at a time; rows past the
                     * sequence and columns past the head dim add zeros into the
                     * workspace's padding (bwd_workspace.h), so they need no test */
                    float *dq_rows = dq_accum + ((int64_t)head * p.ws_rows + ws_row0 + m0) * HEAD_DIM;
                    /* one chunk at a time, each chunk's adds right after its
                     * products (all chunks' products first, with the adds bunched
                     * at the end, measured 4 % slower at d128) */
#pragma unroll 1
                    for (int c0 = 0; c0 < Q_DIMS; c0 += DQ_CHUNK) {
                        const int dim0 = q_dim0 + c0;
                        if (dim0 >= p.fwd.head_dim) break; /* uniform per warp */
                        float acc_dq[1][Q_ROW_ATOMS][DQ_COL_ATOMS][4];
                        flashc_zero_acc(acc_dq[0]);
                        const uint32_t a_q[1] = {FLASHC_LANE_ADDR(LP, false, false, sdS_addr, lane, q_row0, 0)};
                        const uint32_t b_q[1] = {FLASHC_LANE_ADDR(LD, true, true, sK_addr, lane, 0, dim0)};
                        flashc_warp_gemms<T, false, true, Q_ROW_ATOMS, DQ_COL_ATOMS / 2, BLOCK_N / 16, LP, LD, 1>(
                            acc_dq, a_q, b_q);
                        flashc_bwd_add_dq<Q_ROW_ATOMS, DQ_COL_ATOMS, HEAD_DIM>(
                            dq_rows + q_row0 * HEAD_DIM + 8 * dim0 + FLASHC_BWD_DQ_LANE * lane, acc_dq[0]);
                    }
                }

                if (stages == 1 && it + 1 < it_end) {
                    __syncthreads(); /* every warp is done with the one stage */
                    load_iteration(next_head, next_m_block * BLOCK_M, 0);
                }
                head = next_head;
                m_block = next_m_block;
            }

            /* Epilogue: dK * scale and dV, straight from the fragments. Keys of
             * the block no query row sees get zeros. With head splits, this
             * CTA's share: float32 partials (dK unscaled) in rows of the packed
             * keys, which flashc_bwd_combine_dkv sums. */
            auto each_key_grad = [&](auto store_k, auto store_v) {
#pragma unroll
                for (int i = 0; i < KV_ROW_ATOMS; ++i)
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const int key = kv_key0 + 16 * i + 8 * half + g;
                        if (key >= keys) continue;
#pragma unroll
                        for (int j = 0; j < KV_COL_ATOMS; ++j) {
                            const int col = kv_dim0 + 8 * j + 2 * t;
                            if (col < p.fwd.head_dim)
                                store_k(key, col, acc_dk[i][j][2 * half], acc_dk[i][j][2 * half + 1]);
                            if (col < p.fwd.head_dim_v)
                                store_v(key, col, acc_dv[i][j][2 * half], acc_dv[i][j][2 * half + 1]);
                        }
                    }
            };
            if constexpr (TAIL) {
                if (!flashc_bwd_tail_gather<THREADS>(p, tail_seg.tile, acc_dvdk)) continue;
            }
            if (p.head_splits > 1) {
                const flashc_bwd_parts parts = flashc_bwd_parts_of(p, batch, seq, n0, heads.split, head_k);
                each_key_grad(
                    [&](int key, int col, float a, float b) {
                        *reinterpret_cast<float2 *>(parts.dk + key * parts.dk_stride + col) = make_float2(a, b);
                    },
                    [&](int key, int col, float a, float b) {
                        *reinterpret_cast<float2 *>(parts.dv + key * parts.dv_stride + col) = make_float2(a, b);
                    });
                continue;
            }
            T *dk = reinterpret_cast<T *>(p.dk) + batch * p.dk_batch_stride + (seq.k_start + n0) * p.dk_row_stride +
                    head_k * p.dk_head_stride;
            T *dv = reinterpret_cast<T *>(p.dv) + batch * p.dv_batch_stride + (seq.k_start + n0) * p.dv_row_stride +
                    head_k * p.dv_head_stride;
            each_key_grad(
                [&](int key, int col, float a, float b) {
                    *reinterpret_cast<uint32_t *>(dk + key * p.dk_row_stride + col) =
                        flashc_pack2<T>(a * p.scale, b * p.scale);
                },
                [&](int key, int col, float a, float b) {
                    *reinterpret_cast<uint32_t *>(dv + key * p.dv_row_stride + col) = flashc_pack2<T>(a, b);
                });
        }
    } /* segment */
    flashc_cp_async_wait<0>();
#if __CUDA_ARCH__ >= 900
    /* the tail grid ends after the main one (the kernels after it in the
     * stream wait for this grid only) */
    if constexpr (TAIL) asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

#endif
