/* Attention over a KV cache or paged keys (mma.sync, sm_80+), with the
 * keys split across CTAs.
 *
 * One CTA owns BLOCK_M tile rows of one (sequence, KV head) and one split
 * of the key blocks those rows see. Tile row m is query row m / group of
 * query head head_k * group + m % group: the query heads of a GQA group
 * share the CTA, so each K / V block is read once for all of them (decode
 * has one query row, and its group fills the rows of one mma atom).
 *
 * Key blocks stream through STAGES shared-memory stages (cp.async). The
 * cache rows are addressed one by one, through the block table when paged
 * (no gather copy): the rows of a block are computed one iteration before
 * its load starts, a thread per row, into a ring of offsets in shared
 * memory, so the load itself is plain 16-byte copies:
 *
 *   wait for step i's block; barrier
 *   start loading step i + STAGES - 1's (its offsets are ready)
 *   offsets of step i + STAGES's         (block-table reads)
 *   S = Q K^T on this warp's keys, logit rule and mask
 *   online softmax, P rounded, O += P V
 *
 * The warps of a row block (WARPS_N) hold partial softmax states over
 * different keys; the epilogue merges them through shared memory and
 * writes out and LSE, or (num_splits > 1) float32 partials for the combine
 * kernel (kvcache_combine.cu). */
#ifndef FLASHC_CUDA_KVCACHE_KERNEL_CUH
#define FLASHC_CUDA_KVCACHE_KERNEL_CUH

#include <limits.h>
#include <math.h>

#include "../core/semantics.h"
#include "fwd_kernel.cuh"
#include "fwd_softmax.cuh"
#include "kvcache_append_rows.cuh"
#include "kvcache_config.h"
#include "kvcache_params.h"
#include "kvcache_seq.cuh"
#include "ptx.cuh"
#include "smem_tile.cuh"

/* What a thread knows of its two fragment rows (g and g + 8 of its warp's
 * 16): the query row, the visible keys [lo, hi), the ALiBi slope; and the
 * keys [plain_lo, plain_hi) whose logits are the scaled dot product alone
 * (visible to both rows, no softcap, no ALiBi; empty when either applies). */
struct flashc_kvc_rows {
    int row[2];
    int lo[2], hi[2];
    float alibi_log2[2];
    int plain_lo, plain_hi;
};

/* Raw dot products of this warp's S tile -> logits in the log2 domain,
 * hidden keys -> -inf. col0: the key of this thread's column 0. */
template <int COL_ATOMS>
static __device__ __forceinline__ void flashc_kvc_scores(float (&acc)[1][COL_ATOMS][4], const flashc_kvc_params &p,
                                                         const flashc_kvc_rows &rows, int col0, int shift) {
    /* Away from the window's and the cache's edges, the mask, softcap and
     * ALiBi are skipped: the step's path from S to the row maximum is what
     * a CTA alone on an SM waits on (bench/NOTES.md). */
    if (col0 >= rows.plain_lo && col0 + 8 * (COL_ATOMS - 1) + 1 < rows.plain_hi) {
#pragma unroll
        for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[0][j][e] *= p.scale_log2;
        return;
    }
#pragma unroll
    for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int h = e / 2, col = col0 + 8 * j + e % 2;
            float x = acc[0][j][e];
            x = p.softcap_inv_scale != 0.0f ? p.softcap_log2 * flashc_tanh(x * p.softcap_inv_scale) : x * p.scale_log2;
            if (rows.alibi_log2[h] != 0.0f) x -= rows.alibi_log2[h] * (float)abs(rows.row[h] + shift - col);
            acc[0][j][e] = col >= rows.lo[h] && col < rows.hi[h] ? x : -INFINITY;
        }
}

/* The CTA's place in the flat grid: row block fastest, then split, KV
 * head, sequence. */
struct flashc_kvc_cta {
    int m_block, split, head_k, b;
};

static __device__ __forceinline__ flashc_kvc_cta flashc_kvc_cta_of(const flashc_kvc_params &p, int block_m) {
    const int m_blocks = (p.seqlen_q * p.group + block_m - 1) / block_m;
    int cta = blockIdx.x;
    flashc_kvc_cta c;
    c.m_block = cta % m_blocks;
    cta /= m_blocks;
    c.split = cta % p.num_splits;
    cta /= p.num_splits;
    c.head_k = cta % p.nheads_k;
    c.b = cta / p.nheads_k;
    return c;
}

/* This split's key blocks [*n_begin, *n_end) among those any row of the
 * block [m0, m0 + rows) sees. */
static __device__ __forceinline__ void flashc_kvc_split_blocks(const flashc_kvc_params &p, const flashc_kvc_seq &seq,
                                                               int m0, int rows, int split, int block_n, int *n_begin,
                                                               int *n_end) {
    *n_begin = *n_end = 0;
    if (!seq.valid) return;
    int64_t lo, hi, unused;
    flashc_visible_cols(m0 / p.group, seq.sq, seq.sk, p.window_left, p.window_right, &lo, &unused);
    flashc_visible_cols((m0 + rows - 1) / p.group, seq.sq, seq.sk, p.window_left, p.window_right, &unused, &hi);
    if (hi <= lo) return;
    const int first = (int)(lo / block_n), last = (int)((hi + block_n - 1) / block_n);
    const int per_split = (last - first + p.num_splits - 1) / p.num_splits;
    *n_begin = min(first + split * per_split, last);
    *n_end = min(*n_begin + per_split, last);
}

/* A thread's two fragment rows of the warp's 16 (tile rows warp_m * 16 +
 * lane / 4 and + 8). */
static __device__ __forceinline__ flashc_kvc_rows flashc_kvc_rows_of(const flashc_kvc_params &p,
                                                                    const flashc_kvc_seq &seq, int b, int head_k,
                                                                    int m0, int rows, int warp_m, int lane) {
    flashc_kvc_rows r;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int tr = warp_m * 16 + lane / 4 + 8 * h;
        const int m = m0 + tr;
        r.row[h] = m / p.group;
        int64_t lo = 0, hi = 0;
        if (tr < rows) flashc_visible_cols(r.row[h], seq.sq, seq.sk, p.window_left, p.window_right, &lo, &hi);
        r.lo[h] = (int)lo;
        r.hi[h] = (int)hi;
        const int head = head_k * p.group + m % p.group;
        r.alibi_log2[h] = p.alibi_slopes && tr < rows
                              ? p.alibi_slopes[b * p.alibi_batch_stride + head * p.alibi_head_stride] *
                                    (float)FLASHC_LOG2E
                              : 0.0f;
    }
    /* Rows past the block (zero Q, never written) take the real rows'
     * plain keys, which are all below the cache length. */
    const bool real0 = warp_m * 16 + lane / 4 < rows, real1 = warp_m * 16 + lane / 4 + 8 < rows;
    r.plain_lo = max(real0 ? r.lo[0] : 0, real1 ? r.lo[1] : 0);
    r.plain_hi = min(real0 ? r.hi[0] : seq.sk, real1 ? r.hi[1] : seq.sk);
    if (p.softcap_inv_scale != 0.0f || r.alibi_log2[0] != 0.0f || r.alibi_log2[1] != 0.0f) r.plain_hi = INT_MIN;
    return r;
}

/* The columns of Q and O that tile row m uses: [off, off + width) of
 * width d (q) or dv (o); off is 0 except for the second head of a pair
 * (params.pair_dim), whose row sits in columns [d, 2d). */
struct flashc_kvc_cols {
    int off, width;
};

static __device__ __forceinline__ flashc_kvc_cols flashc_kvc_cols_of(const flashc_kvc_params &p, int m, int dim) {
    flashc_kvc_cols c = {0, dim};
    if (p.pair_dim) c.off = m % p.group >= p.group / 2 ? p.pair_dim : 0, c.width = p.pair_dim;
    return c;
}

/* Start copying the tile's Q rows into sQ (rows SD elements apart; rows
 * past the block and columns past d zero-filled), one 16-byte chunk per
 * thread and row step. The caller commits the group. */
template <typename T, int HEAD_DIM, int BLOCK_M, int THREADS>
static __device__ __forceinline__ void flashc_kvc_load_q(const flashc_kvc_params &p, const flashc_kvc_seq &seq,
                                                         int b, int head_k, int m0, int rows, T *sQ) {
    constexpr int SD = FLASHC_SMEM_ROW(HEAD_DIM), CHUNKS = HEAD_DIM / 8, ROW_STEP = THREADS / CHUNKS;
    const int chunk = threadIdx.x % CHUNKS;
    const T *q = reinterpret_cast<const T *>(p.q) + b * p.q_batch_stride;
    for (int tr = threadIdx.x / CHUNKS; tr < BLOCK_M; tr += ROW_STEP) {
        const int m = m0 + tr;
        const flashc_kvc_cols cols = flashc_kvc_cols_of(p, m, p.head_dim);
        const int col = chunk * 8 - cols.off;
        const bool ok = col >= 0 && col < cols.width && tr < rows;
        const T *src = q + (seq.q_start + m / p.group) * p.q_row_stride +
                       (head_k * p.group + m % p.group) * p.q_head_stride + col;
        flashc_cp_async16(flashc_smem_addr(sQ + tr * SD + chunk * 8), ok ? src : q, ok);
    }
}

/* The tile's Q rows rotated from the caller's q into sQ (the Hopper
 * kernel under fused_append), one warp per row; rows past the block and
 * columns past d zeroed. A warp's first BATCH rows (all of them at up to
 * 32 tile rows) are loaded by load_first, which the kernel calls before
 * it issues its prologue's boxes, so their memory latency hides behind
 * those; store_all rotates and stores them after, then loads and stores
 * any rows left (64-row tiles) a batch at a time. Plain stores: the
 * caller's barrier publishes them. */
template <typename T, int HEAD_DIM, int BLOCK_M, int THREADS>
struct flashc_kvc_q_rotation {
    static constexpr int SD = FLASHC_SMEM_ROW(HEAD_DIM), WARPS = THREADS / 32;
    static constexpr int ROWS_PER_WARP = (BLOCK_M + WARPS - 1) / WARPS;
    static constexpr int BATCH = ROWS_PER_WARP < 8 ? ROWS_PER_WARP : 8;
    flashc_kvc_row_pairs<T, FLASHC_KVC_ROW_ITERS(HEAD_DIM)> pairs[BATCH];

    __device__ __forceinline__ void load(const flashc_kvc_params &p, const flashc_kvc_seq &seq, int b, int head_k,
                                         int m0, int rows, int first) {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int tr = first + j * WARPS, m = m0 + tr;
            if (tr < rows) flashc_kvc_load_q_row(p, seq, b, head_k * p.group + m % p.group, m / p.group, pairs[j], lane);
        }
    }
    __device__ __forceinline__ void store(const flashc_kvc_params &p, int rows, int first, T *sQ) const {
        const int lane = threadIdx.x % 32;
#pragma unroll
        for (int j = 0; j < BATCH; ++j) {
            const int tr = first + j * WARPS;
            if (tr >= BLOCK_M) break;
            T *dst = sQ + tr * SD;
            for (int c = (tr < rows ? p.head_dim : 0) + lane; c < HEAD_DIM; c += 32) dst[c] = T(0.0f);
            if (tr < rows) pairs[j].store(dst, lane);
        }
    }
    __device__ __forceinline__ void load_first(const flashc_kvc_params &p, const flashc_kvc_seq &seq, int b,
                                               int head_k, int m0, int rows) {
        load(p, seq, b, head_k, m0, rows, threadIdx.x / 32);
    }
    __device__ __forceinline__ void store_all(const flashc_kvc_params &p, const flashc_kvc_seq &seq, int b,
                                              int head_k, int m0, int rows, T *sQ) {
        const int warp = threadIdx.x / 32;
        store(p, rows, warp, sQ);
        for (int first = warp + WARPS * BATCH; first < BLOCK_M; first += WARPS * BATCH) {
            load(p, seq, b, head_k, m0, rows, first);
            store(p, rows, first, sQ);
        }
    }
};

/* Epilogue: each warp's rows (max, sum, O over its keys) into shared
 * memory at sWork (free for it: the caller synchronised), then every
 * thread merges whole 4-column chunks of rows and writes out and LSE, or
 * (num_splits > 1) the split's float32 partials. */
template <typename T, typename C, int OUT_ATOMS>
static __device__ __forceinline__ void flashc_kvc_epilogue(const flashc_kvc_params &p, const flashc_kvc_seq &seq,
                                                           const flashc_softmax_state<1> &st,
                                                           const float (&acc_o)[1][OUT_ATOMS][4], float *sWork,
                                                           int warp_m, int warp_n, int lane, int m0, int rows,
                                                           int b, int head_k, int split) {
    constexpr int BLOCK_M = C::BLOCK_M, WARPS_N = C::WARPS_N, LDO = C::LDO, THREADS = C::THREADS;
    float *sO = sWork;                              /* [WARPS_N][BLOCK_M][LDO] */
    float *sMax = sO + WARPS_N * BLOCK_M * LDO;     /* [WARPS_N][BLOCK_M] */
    float *sSum = sMax + WARPS_N * BLOCK_M;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int tr = warp_m * 16 + lane / 4 + 8 * h, slot = warp_n * BLOCK_M + tr;
        const float sum = flashc_quad_sum(st.row_sum[h]);
        if (lane % 4 == 0) {
            sMax[slot] = st.row_max[h];
            sSum[slot] = sum;
        }
#pragma unroll
        for (int d = 0; d < OUT_ATOMS; ++d)
            *reinterpret_cast<float2 *>(sO + slot * LDO + 8 * d + 2 * (lane % 4)) =
                make_float2(acc_o[0][d][2 * h], acc_o[0][d][2 * h + 1]);
    }
    __syncthreads();

    constexpr int CHUNKS4 = OUT_ATOMS * 8 / 4;
    for (int idx = threadIdx.x; idx < BLOCK_M * CHUNKS4; idx += THREADS) {
        const int tr = idx / CHUNKS4, m = m0 + tr;
        const flashc_kvc_cols cols = flashc_kvc_cols_of(p, m, p.head_dim_v);
        const int c = 4 * (idx % CHUNKS4) - cols.off; /* the output column */
        if (tr >= rows || c < 0 || c >= cols.width) continue;
        float row_max = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS_N; ++w) row_max = fmaxf(row_max, sMax[w * BLOCK_M + tr]);
        float sum = 0.0f;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int w = 0; w < WARPS_N; ++w) {
            const float m_w = sMax[w * BLOCK_M + tr];
            const float weight = m_w == -INFINITY ? 0.0f : flashc_exp2(m_w - row_max);
            const float4 ow = *reinterpret_cast<const float4 *>(sO + (w * BLOCK_M + tr) * LDO + cols.off + c);
            sum += weight * sSum[w * BLOCK_M + tr];
            o.x += weight * ow.x, o.y += weight * ow.y, o.z += weight * ow.z, o.w += weight * ow.w;
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        o.x *= inv, o.y *= inv, o.z *= inv, o.w *= inv;
        const int r = m / p.group, head = head_k * p.group + m % p.group;
        const float lse2 = row_max + log2f(sum); /* log2 domain; only where sum > 0 */
        if (p.num_splits == 1) {
            T *out = reinterpret_cast<T *>(p.out) + b * p.o_batch_stride + (seq.q_start + r) * p.o_row_stride +
                     head * p.o_head_stride + c;
            *reinterpret_cast<uint2 *>(out) = make_uint2(flashc_pack2<T>(o.x, o.y), flashc_pack2<T>(o.z, o.w));
            if (c == 0 && p.lse)
                p.lse[b * p.lse_batch_stride + head * p.lse_head_stride + (seq.q_start + r) * p.lse_row_stride] =
                    sum > 0.0f ? lse2 * (float)FLASHC_LN2 : INFINITY;
        } else {
            const int64_t row = (int64_t)split * p.partial_rows + ((int64_t)b * p.seqlen_q + r) * p.nheads + head;
            *reinterpret_cast<float4 *>(p.o_partial + row * cols.width + c) = o;
            if (c == 0) p.lse_partial[row] = sum > 0.0f ? lse2 : -INFINITY;
        }
    }
}

/* The order a CTA visits its `steps` key blocks from n_begin: starting at
 * a rotation that differs between sequences and splits, so the CTAs running
 * at once do not walk caches whose strides are large powers of two in step
 * (they would meet on the same memory channels). The sum does not depend on
 * the order beyond rounding; each CTA's order is fixed. */
struct flashc_kvc_order {
    int n_begin, steps, rotation;
    /* step < steps and rotation < steps: one conditional subtract, not a
     * division per step */
    __device__ __forceinline__ int block_of(int step) const {
        const int at = step + rotation;
        return n_begin + (at >= steps ? at - steps : at);
    }
};

static __device__ __forceinline__ flashc_kvc_order flashc_kvc_order_of(int b, int split, int n_begin, int n_end) {
    flashc_kvc_order o;
    o.n_begin = n_begin;
    o.steps = n_end - n_begin;
    o.rotation = o.steps > 0 ? (int)(((uint32_t)b * 2654435761u + (uint32_t)split * 40503u) % (uint32_t)o.steps) : 0;
    return o;
}

/* What a CTA of the flat grid works on: its sequence, row block [m0, m0 +
 * rows) (rows <= 0: past a varlen sequence's rows, nothing to do), the
 * diagonal's shift and its split's key blocks [n_begin, n_end). */
struct flashc_kvc_work {
    int b, head_k, split, m0, rows, shift, n_begin, n_end;
    flashc_kvc_seq seq;
};

static __device__ __forceinline__ flashc_kvc_work flashc_kvc_work_of(const flashc_kvc_params &p, int block_m,
                                                                    int block_n) {
    const flashc_kvc_cta cta = flashc_kvc_cta_of(p, block_m);
    flashc_kvc_work w;
    w.b = cta.b, w.head_k = cta.head_k, w.split = cta.split;
    w.seq = flashc_kvc_sequence(p, w.b);
    w.m0 = cta.m_block * block_m;
    w.rows = min(block_m, w.seq.sq * p.group - w.m0);
    w.shift = w.seq.sk - w.seq.sq;
    /* computed either way (no memory access); callers return at rows <= 0 */
    flashc_kvc_split_blocks(p, w.seq, w.m0, w.rows, w.split, block_n, &w.n_begin, &w.n_end);
    return w;
}

template <typename T, int HEAD_DIM, int WARPS_N, bool SMALL>
__global__ void __launch_bounds__(FLASHC_KVC_THREADS, 2) flashc_kvc_kernel(const flashc_kvc_params p) {
    typedef flashc_kvc_config<HEAD_DIM, WARPS_N, SMALL> C;
    constexpr int THREADS = FLASHC_KVC_THREADS, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N;
    constexpr int WARPS_M = C::WARPS_M, STAGES = C::STAGES, KEYS_PER_WARP = C::KEYS_PER_WARP;
    constexpr int COL_ATOMS = KEYS_PER_WARP / 8, OUT_ATOMS = HEAD_DIM / 8;
    constexpr int SD = C::SD, CHUNKS = HEAD_DIM / 8, ROW_STEP = THREADS / CHUNKS;
    typedef flashc_smem_plain<SD * (int)sizeof(T)> LKV; /* K / V / Q rows padded by 16 bytes */

    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = reinterpret_cast<T *>(smem);
    int64_t *sOffsets = reinterpret_cast<int64_t *>(smem + C::Q_BYTES); /* [ring][k, v][BLOCK_N] */
    T *sStages = reinterpret_cast<T *>(smem + C::Q_BYTES + C::OFFSET_BYTES); /* [stage][K, V][BLOCK_N][SD] */

    const flashc_kvc_work work = flashc_kvc_work_of(p, BLOCK_M, BLOCK_N);
    if (work.rows <= 0) return; /* varlen: past this sequence's rows */
    const int b = work.b, head_k = work.head_k, split = work.split, m0 = work.m0, rows = work.rows;
    const int shift = work.shift, n_begin = work.n_begin, n_end = work.n_end;
    const flashc_kvc_seq &seq = work.seq;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const flashc_kvc_rows frag_rows = flashc_kvc_rows_of(p, seq, b, head_k, m0, rows, warp_m, lane);

    const T *k_base = reinterpret_cast<const T *>(p.k) + head_k * p.k_head_stride;
    const T *v_base = reinterpret_cast<const T *>(p.v) + head_k * p.v_head_stride;

    const flashc_kvc_order order = flashc_kvc_order_of(b, split, n_begin, n_end);
    const int steps = order.steps;
    auto block_of = [&](int step) { return order.block_of(step); };

    /* Offsets of the cache rows of step `step`'s block into ring step % 2,
     * one thread per row (-1: past the keys, or a block-table entry naming
     * no block). */
    auto compute_offsets = [&](int step) {
        const int i = threadIdx.x;
        if (i >= BLOCK_N) return;
        int64_t *ring = sOffsets + (step & 1) * 2 * BLOCK_N;
        const int key = block_of(step) * BLOCK_N + i;
        int64_t k_off = -1, v_off = -1;
        int block, row;
        if (key < seq.sk) {
            flashc_kvc_find(p, b, seq, seq.k_start + key, &block, &row);
            if (flashc_kvc_block_exists(p, block)) {
                k_off = block * p.k_batch_stride + row * p.k_row_stride;
                v_off = block * p.v_batch_stride + row * p.v_row_stride;
            }
        }
        ring[i] = k_off;
        ring[BLOCK_N + i] = v_off;
    };
    /* Start copying step `step`'s K and V rows into stage `stage`: each
     * thread keeps one 16-byte column chunk and steps down the rows. */
    static_assert(THREADS % CHUNKS == 0 && BLOCK_N % ROW_STEP == 0 && BLOCK_M % ROW_STEP == 0,
                  "the copies cover whole tiles with every thread");
    const int chunk = threadIdx.x % CHUNKS, chunk_row0 = threadIdx.x / CHUNKS;
    auto start_load = [&](int step, int stage) {
        const int64_t *ring = sOffsets + (step & 1) * 2 * BLOCK_N;
        T *sK = sStages + stage * 2 * BLOCK_N * SD, *sV = sK + BLOCK_N * SD;
        const bool k_col = chunk * 8 < p.head_dim, v_col = chunk * 8 < p.head_dim_v;
#pragma unroll
        for (int step = 0; step < BLOCK_N / ROW_STEP; ++step) {
            const int r = chunk_row0 + step * ROW_STEP;
            const int64_t k_off = ring[r], v_off = ring[BLOCK_N + r];
            const bool k_ok = k_col && k_off >= 0, v_ok = v_col && v_off >= 0;
            flashc_cp_async16(flashc_smem_addr(sK + r * SD + chunk * 8), k_ok ? k_base + k_off + chunk * 8 : k_base,
                              k_ok);
            flashc_cp_async16(flashc_smem_addr(sV + r * SD + chunk * 8), v_ok ? v_base + v_off + chunk * 8 : v_base,
                              v_ok);
        }
    };

    float acc_o[1][OUT_ATOMS][4];
    flashc_softmax_state<1> st;
    flashc_softmax_start(acc_o, st);

    if (steps > 0) {
        flashc_kvc_load_q<T, HEAD_DIM, BLOCK_M, THREADS>(p, seq, b, head_k, m0, rows, sQ);
        /* Prologue: steps 0 .. STAGES - 2 loading (Q in the first group),
         * the offsets of the next one ready. */
        compute_offsets(0);
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            __syncthreads();
            if (s < steps) start_load(s, s);
            flashc_cp_async_commit();
            if (s + 1 < steps) compute_offsets(s + 1);
        }

        flashc_fwd_lane_addrs addr;
        addr.q = flashc_smem_addr(sQ + (warp_m * 16 + lane % 16) * SD + (lane / 16) * 8);
        const uint32_t k_lane = (uint32_t)(((warp_n * KEYS_PER_WARP + (lane % 8) + (lane / 16) * 8) * SD +
                                            ((lane / 8) % 2) * 8) * sizeof(T));
        const uint32_t v_lane = (uint32_t)(((warp_n * KEYS_PER_WARP + (lane % 8) + ((lane / 8) % 2) * 8) * SD +
                                            (lane / 16) * 8) * sizeof(T));
        const uint32_t stages_addr = flashc_smem_addr(sStages);
        constexpr uint32_t STAGE_BYTES = C::STAGE_BYTES, V_BYTES = BLOCK_N * SD * sizeof(T);

        for (int i = 0; i < steps; ++i) {
            flashc_cp_async_wait<STAGES - 2>();
            __syncthreads();
            /* Step i + STAGES - 1 into the stage step i - 1 used (every
             * warp is past it), then the offsets of the step after. */
            if (i + STAGES - 1 < steps) start_load(i + STAGES - 1, (i + STAGES - 1) % STAGES);
            flashc_cp_async_commit();
            if (i + STAGES < steps) compute_offsets(i + STAGES);
            const int n_block = block_of(i);

            const uint32_t stage = stages_addr + (uint32_t)(i % STAGES) * STAGE_BYTES;
            addr.k = stage + k_lane;
            addr.v = stage + V_BYTES + v_lane;
            float acc_s[1][COL_ATOMS][4];
            flashc_gemm_qk<T, HEAD_DIM, KEYS_PER_WARP, 1, LKV>(acc_s, addr);
            flashc_kvc_scores(acc_s, p, frag_rows, n_block * BLOCK_N + warp_n * KEYS_PER_WARP + 2 * (lane % 4),
                              shift);
            flashc_softmax_update(st, acc_s, acc_o, 1.0f);
            uint32_t p_frag[1][COL_ATOMS / 2][4];
            flashc_pack_p<T>(p_frag, acc_s);
            flashc_gemm_pv<T, HEAD_DIM, KEYS_PER_WARP, 1, LKV>(acc_o, p_frag, addr.v);
        }
        flashc_cp_async_wait<0>();
        __syncthreads(); /* the stages become the epilogue's buffers */
    }

    flashc_kvc_epilogue<T, C>(p, seq, st, acc_o, reinterpret_cast<float *>(sStages), warp_m, warp_n, lane, m0, rows, b,
                              head_k, split);
}

#endif
