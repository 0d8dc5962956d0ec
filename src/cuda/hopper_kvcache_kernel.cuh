/* Attention over a KV cache or paged keys on Hopper (sm_90a): the portable
 * kernel's tile, warps, split and epilogue (kvcache_kernel.cuh), with the
 * key blocks brought in by TMA instead of cp.async.
 *
 * Why: a decode step is a stream of the cache through the SMs. On the H200
 * the portable kernel's cp.async stream reads at about 4.15 TB/s, while
 * TMA box copies without L2 promotion read at 4.45-4.5 TB/s, as fast as a
 * plain sequential read (bench/NOTES.md, k4).
 *
 * K and V are 4-d tensor maps over (column, cache row, KV head, cache batch
 * or block); boxes of 64 columns x box_rows rows land 128-byte swizzled
 * (16-byte chunk c of row r at chunk c ^ (r % 8)), which ldmatrix reads
 * without bank conflicts. A 64-key step is one box per 64 columns of K and
 * of V, or, with paged blocks of 16 or 32 rows, one per block. Out-of-range
 * coordinates (a block-table entry naming no block, rows past the cache)
 * arrive as zeros; V rows past the sequence's keys (other sequences' data,
 * or NaN poison) are zeroed in shared memory before P V reads them.
 *
 *   wait for step i's stage (mbarrier); zero its V rows past the keys
 *   barrier
 *   thread 0: step i + STAGES - 1's boxes into the stage step i - 1 used
 *   coordinates of step i + STAGES (block-table reads), a thread per box row
 *   S = Q K^T on this warp's keys (Q fragments held in registers), logit
 *   rule and mask
 *   online softmax, P rounded, O += P V
 * The wide tile (WARPS_N 8, hopper_kvcache.h) is the same code over
 * 128-key steps with eight warps and one CTA per SM.
 * A step is a few hundred instructions per warp and memory-bound only while
 * two CTAs per SM keep their pipelines full, so its path is kept short: no
 * division, Q read from shared memory once, the box issue unrolled. */
#ifndef FLASHC_CUDA_HOPPER_KVCACHE_KERNEL_CUH
#define FLASHC_CUDA_HOPPER_KVCACHE_KERNEL_CUH

#include <cuda.h>

#include "hopper_kvcache_trace.cuh"
#include "hopper_ptx.cuh"
#include "kvcache_kernel.cuh"

/* Shared memory of the TMA variant: Q (padded rows, cp.async), two rings of
 * box coordinates, the stage mbarriers, then 1024-byte aligned stages
 * (swizzled K and V boxes) that the epilogue reuses. */
template <int HEAD_DIM, int WARPS_N>
struct flashc_hopper_kvc_config {
    typedef flashc_kvc_config<HEAD_DIM, WARPS_N> P; /* tile, warps, stages */
    static constexpr int BOXES = HEAD_DIM / 64;     /* 64-column boxes per row */
    static constexpr int BOX_ROWS = 64;             /* the host's boxes of a contiguous cache (hopper_kvcache.cu) */
    static constexpr int MAX_PIECES = P::BLOCK_N / 16; /* box_rows >= 16 */
    static constexpr bool WHOLE_BOXES = P::BLOCK_N % BOX_ROWS == 0; /* a step of whole 64-row boxes */
    static constexpr int K_BYTES = P::BLOCK_N * HEAD_DIM * 2, STAGE_BYTES = 2 * K_BYTES;
    static constexpr int RING_OFFSET = P::Q_BYTES;
    static constexpr int BAR_OFFSET = RING_OFFSET + 2 * MAX_PIECES * 8;
    static constexpr int HEADER_BYTES = BAR_OFFSET + P::STAGES * 8;
    static constexpr int LOOP_BYTES = P::STAGES * STAGE_BYTES;
    static constexpr int BODY_BYTES = LOOP_BYTES > P::EPILOGUE_BYTES ? LOOP_BYTES : P::EPILOGUE_BYTES;
    static constexpr int SMEM_BYTES = HEADER_BYTES + 1024 + BODY_BYTES; /* 1024: alignment of the stages */
    static_assert(HEAD_DIM % 64 == 0, "whole 64-column boxes");
};

/* 16-byte chunk `chunk` (of 16-bit elements, 0 .. HEAD_DIM / 8) of row `row`
 * of a swizzled [box][BLOCK_N rows][128 bytes] tile. */
template <int BLOCK_N>
static __device__ __forceinline__ uint32_t flashc_hopper_kvc_swizzle(int row, int chunk) {
    return (uint32_t)((chunk / 8) * BLOCK_N * 128 + row * 128 + (((chunk % 8) ^ (row % 8)) << 4));
}

/* APPEND: the instance for calls with an append (the early reads behind
 * the append kernel, or the fused append); the other compiles neither, so
 * the calls without one run the plain kernel's code and registers (the
 * append paths in the one kernel cost paged-16 decode 0.6-3 %:
 * bench/NOTES.md). */
template <typename T, int HEAD_DIM, int WARPS_N, bool APPEND>
__global__ void __launch_bounds__(flashc_kvc_config<HEAD_DIM, WARPS_N>::THREADS,
                                  flashc_kvc_config<HEAD_DIM, WARPS_N>::THREADS == 128 ? 2 : 1)
    flashc_hopper_kvc_kernel(const flashc_kvc_params p, const __grid_constant__ CUtensorMap k_map,
                             const __grid_constant__ CUtensorMap v_map) {
    typedef flashc_kvc_config<HEAD_DIM, WARPS_N> C;
    typedef flashc_hopper_kvc_config<HEAD_DIM, WARPS_N> H;
    constexpr int THREADS = C::THREADS, BLOCK_M = C::BLOCK_M, BLOCK_N = C::BLOCK_N;
    constexpr int WARPS_M = C::WARPS_M, STAGES = C::STAGES, KEYS_PER_WARP = C::KEYS_PER_WARP;
    constexpr int COL_ATOMS = KEYS_PER_WARP / 8, OUT_ATOMS = HEAD_DIM / 8, SD = C::SD;

    extern __shared__ __align__(16) unsigned char smem[];
    T *sQ = reinterpret_cast<T *>(smem);
    int2 *sCoords = reinterpret_cast<int2 *>(smem + H::RING_OFFSET); /* [ring][piece]: (row, block) */
    const uint32_t bars = flashc_smem_addr(smem + H::BAR_OFFSET);
    const uint32_t smem_addr = flashc_smem_addr(smem);
    const uint32_t stages_addr = (smem_addr + H::HEADER_BYTES + 1023u) & ~1023u;
    unsigned char *sStages = smem + (stages_addr - smem_addr);

    /* The split combine (a programmatic dependent launch) may be scheduled
     * now: it waits for this grid's completion itself. This grid is one
     * too. After an append (p.early_cache_reads), the kernel before this
     * one is the append, which let this grid start only once everything
     * before it had completed: the lengths, the block table and the cache
     * rows the append does not write are final, so the key boxes of the
     * steps before the appended rows are issued before the wait, hiding
     * the append behind the pipeline's fill; Q (q_rotated), the appended
     * rows and the outputs wait for it. Otherwise everything is read past
     * the wait for the kernel before (the previous layer's), and with
     * p.fused_append this kernel writes the appended rows and rotates Q
     * itself (write_appended below). */
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    const bool early = APPEND && p.early_cache_reads;
    const bool fused = APPEND && p.fused_append, rotate_q = fused && p.rotary_dim > 0;
    if (!early) asm volatile("griddepcontrol.wait;\n" ::: "memory");
    const unsigned long long trace_start = flashc_kvc_trace_now();

    const flashc_kvc_work work = flashc_kvc_work_of(p, BLOCK_M, BLOCK_N);
    if (work.rows <= 0) return; /* varlen: past this sequence's rows (no append there) */
    const int b = work.b, head_k = work.head_k, split = work.split, m0 = work.m0, rows = work.rows;
    const int shift = work.shift, n_begin = work.n_begin, n_end = work.n_end;
    const flashc_kvc_seq &seq = work.seq;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_m = warp % WARPS_M, warp_n = warp / WARPS_M;
    const flashc_kvc_rows frag_rows = flashc_kvc_rows_of(p, seq, b, head_k, m0, rows, warp_m, lane);
    const flashc_kvc_order order = flashc_kvc_order_of(b, split, n_begin, n_end);
    const int steps = order.steps;

    /* Paged blocks of 16 or 32 rows take one box each; a contiguous cache
     * and blocks of 64k rows take whole 64-row boxes. */
    const int box_rows = p.block_table && p.block_size < H::BOX_ROWS ? p.block_size : H::BOX_ROWS;
    const int pieces = BLOCK_N / box_rows;

    /* Coordinates of step `step`'s boxes, thread i's box i: (cache row,
     * block or cache batch); row -1 for a box whose first key is past the
     * sequence (not loaded: its rows are stale and only reach masked
     * scores and zeroed V rows). */
    auto fetch_coords = [&](int step) {
        const int i = threadIdx.x;
        const int key = order.block_of(step) * BLOCK_N + i * box_rows;
        int2 c = make_int2(-1, 0);
        if (key < seq.sk) {
            int block, row;
            flashc_kvc_find(p, b, seq, seq.k_start + key, &block, &row);
            c = make_int2(row, block);
        }
        return c;
    };
    /* ... into ring step % 2 */
    auto compute_coords = [&](int step) {
        if ((int)threadIdx.x >= pieces) return;
        sCoords[(step & 1) * H::MAX_PIECES + threadIdx.x] = fetch_coords(step);
    };
    /* The main loop reads each step's coordinates (a block-table load, a
     * dependent global read) a step before it stores them into the ring:
     * step i + STAGES's, held here through step i - 1. With blocks of 16
     * rows (four table reads per step) this took 3-6 % off the decode time
     * on the H200 (bench/NOTES.md). */
    int2 pending = make_int2(-1, 0);
    /* Where one m-block covers every query row of the group, each K / V
     * byte is read by one CTA once: evict it from L2 first, so it does
     * not push out what the other CTAs' boxes and the partials need. */
    uint64_t policy;
    if ((long long)p.seqlen_q * p.group <= BLOCK_M)
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    else
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
    /* Thread 0: step `step`'s boxes into stage `stage`, completing on its
     * mbarrier. */
    auto issue = [&](int step, int stage) {
        const int2 *ring = sCoords + (step & 1) * H::MAX_PIECES;
        const uint32_t bar = bars + 8u * (uint32_t)stage;
        const uint32_t sK = stages_addr + (uint32_t)stage * H::STAGE_BYTES, sV = sK + H::K_BYTES;
        /* unrolled over the most pieces a step has (pieces is 1, 2 or 4):
         * no loop, and this thread's issue is on every step's path */
        int2 c[H::MAX_PIECES];
        int live = 0;
#pragma unroll
        for (int i = 0; i < H::MAX_PIECES; ++i) {
            c[i] = i < pieces ? ring[i] : make_int2(-1, 0);
            live += c[i].x >= 0;
        }
        flashc_mbarrier_expect_bytes(bar, (uint32_t)(live * box_rows * 128 * 2 * H::BOXES));
#pragma unroll
        for (int i = 0; i < H::MAX_PIECES; ++i) {
            if (c[i].x < 0) continue;
#pragma unroll
            for (int box = 0; box < H::BOXES; ++box) {
                const uint32_t at = (uint32_t)(box * BLOCK_N * 128 + i * box_rows * 128);
                flashc_tma_load_4d_hint(sK + at, &k_map, 64 * box, c[i].x, head_k, c[i].y, bar, policy);
                flashc_tma_load_4d_hint(sV + at, &v_map, 64 * box, c[i].x, head_k, c[i].y, bar, policy);
            }
        }
    };

    /* Keys from first_new_key on are the appended rows. Under fused_append
     * the CTA writes those its steps read, then orders them before the
     * boxes that read them: each thread's proxy fence, then the barrier
     * that precedes every issue. Other CTAs of the head (other m-blocks)
     * may write the same rows, with the same bits. Every appended row is
     * some query's own key, seen by it, as long as the new rows are no
     * more than the query rows; beyond that the first ones may be seen by
     * none, and the CTA of m-block 0 and split 0 writes them all. */
    const int first_new_key = p.new_rows > 0 ? seq.append_at - seq.k_start : seq.sk;
    auto holds_new_keys = [&](int step) { return (order.block_of(step) + 1) * BLOCK_N > first_new_key; };
    auto write_appended = [&]() {
        const bool all = p.new_rows > p.seqlen_q && m0 == 0 && split == 0;
        const int lo = all ? first_new_key : max(first_new_key, n_begin * BLOCK_N);
        const int hi = all ? seq.sk : min(seq.sk, n_end * BLOCK_N);
        for (int key = lo + warp; key < hi; key += THREADS / 32)
            flashc_kvc_append_row<T, HEAD_DIM>(p, b, seq, head_k, key - first_new_key, lane);
        if (hi > lo) flashc_fence_proxy_async_global();
    };

    float acc_o[1][OUT_ATOMS][4];
    flashc_softmax_state<1> st;
    flashc_softmax_start(acc_o, st);

    if (steps > 0) {
        if (threadIdx.x == 0) {
            for (int s = 0; s < STAGES; ++s) flashc_mbarrier_init(bars + 8u * (uint32_t)s, 1);
            flashc_mbarrier_init_fence();
        }
        if (!early && !rotate_q) {
            flashc_kvc_load_q<T, HEAD_DIM, BLOCK_M, THREADS>(p, seq, b, head_k, m0, rows, sQ);
            flashc_cp_async_commit();
        }
        flashc_kvc_q_rotation<T, HEAD_DIM, BLOCK_M, THREADS> q_rotation;
        if (rotate_q) q_rotation.load_first(p, seq, b, head_k, m0, rows); /* in flight through the prologue */
        compute_coords(0);
        /* fused_append: the appended rows go in before the prologue only
         * where one of its steps reads them, else after it (hidden behind
         * its boxes) */
        bool written = false;
        if (fused) {
#pragma unroll
            for (int s = 0; s < STAGES - 1; ++s)
                written |= s < steps && holds_new_keys(s);
            if (written) write_appended();
        }
        /* Prologue: steps 0 .. STAGES - 2 in flight, the coordinates of the
         * next one ready. After an append kernel, a step that holds appended
         * keys is issued past the wait. */
#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            __syncthreads();
            if (threadIdx.x == 0 && s < steps) {
                if (early && holds_new_keys(s))
                    asm volatile("griddepcontrol.wait;\n" ::: "memory");
                issue(s, s);
            }
            if (s + 1 < steps) compute_coords(s + 1);
        }
        if (early) {
            asm volatile("griddepcontrol.wait;\n" ::: "memory");
            flashc_kvc_load_q<T, HEAD_DIM, BLOCK_M, THREADS>(p, seq, b, head_k, m0, rows, sQ);
            flashc_cp_async_commit();
        }
        if (rotate_q) q_rotation.store_all(p, seq, b, head_k, m0, rows, sQ);
        if (fused && !written) write_appended(); /* the main loop's barriers precede the later issues */
        if (STAGES < steps && (int)threadIdx.x < pieces) pending = fetch_coords(STAGES);
        flashc_cp_async_wait<0>();
        __syncthreads(); /* Q visible to all */
        /* This warp's Q fragments, read once: every step's S takes them. */
        uint32_t q_frag[HEAD_DIM / 16][4];
        {
            const uint32_t q_addr = flashc_smem_addr(sQ + (warp_m * 16 + lane % 16) * SD + (lane / 16) * 8);
#pragma unroll
            for (int ks = 0; ks < HEAD_DIM / 16; ++ks) flashc_ldmatrix_x4(q_frag[ks], q_addr + ks * 32);
        }
        /* ldmatrix rows of this lane: K (x4 over two key octets and two
         * column chunks), V transposed (two key octets, two column chunks). */
        const int k_row = warp_n * KEYS_PER_WARP + (lane % 8) + (lane / 16) * 8, k_chunk = (lane / 8) % 2;
        const int v_row = warp_n * KEYS_PER_WARP + (lane % 8) + ((lane / 8) % 2) * 8, v_chunk = lane / 16;

        for (int i = 0; i < steps; ++i) {
            const int stage = i % STAGES, n_block = order.block_of(i);
            const uint32_t sK = stages_addr + (uint32_t)stage * H::STAGE_BYTES, sV = sK + H::K_BYTES;
            flashc_mbarrier_wait(bars + 8u * (uint32_t)stage, (uint32_t)(i / STAGES) & 1u);
            const int valid_keys = seq.sk - n_block * BLOCK_N;
            if (valid_keys < BLOCK_N) { /* V rows past the keys: zeros (P is 0 there, and 0 x NaN is NaN) */
                uint4 *v = reinterpret_cast<uint4 *>(sStages + stage * H::STAGE_BYTES + H::K_BYTES);
                for (int idx = threadIdx.x; idx < H::BOXES * BLOCK_N * 8; idx += THREADS) {
                    const int row = (idx / 8) % BLOCK_N;
                    if (row >= valid_keys) v[idx] = make_uint4(0u, 0u, 0u, 0u);
                }
                flashc_fence_proxy_async(); /* before a later box lands in this stage */
            }
            __syncthreads();
            if (threadIdx.x == 0 && i + STAGES - 1 < steps) issue(i + STAGES - 1, (i + STAGES - 1) % STAGES);
            if ((int)threadIdx.x < pieces) {
                if (i + STAGES < steps) sCoords[((i + STAGES) & 1) * H::MAX_PIECES + threadIdx.x] = pending;
                if (i + STAGES + 1 < steps) pending = fetch_coords(i + STAGES + 1);
            }

            /* S = Q K^T over this warp's keys, the even k-steps into acc_s and
             * the odd ones into acc_s2: four dependent mma chains of four
             * instead of two of eight, since a lone CTA's step is bound by
             * their latency (bench/NOTES.md). */
            float acc_s[1][COL_ATOMS][4], acc_s2[1][COL_ATOMS][4];
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[0][j][e] = acc_s2[0][j][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < HEAD_DIM / 16; ++ks) {
                float (&acc)[1][COL_ATOMS][4] = ks % 2 ? acc_s2 : acc_s;
#pragma unroll
                for (int jp = 0; jp < KEYS_PER_WARP / 16; ++jp) {
                    uint32_t bk[4];
                    flashc_ldmatrix_x4(bk, sK + flashc_hopper_kvc_swizzle<BLOCK_N>(k_row + 16 * jp, 2 * ks + k_chunk));
                    flashc_mma16816<T>(acc[0][2 * jp], q_frag[ks], bk[0], bk[1]);
                    flashc_mma16816<T>(acc[0][2 * jp + 1], q_frag[ks], bk[2], bk[3]);
                }
            }
#pragma unroll
            for (int j = 0; j < COL_ATOMS; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc_s[0][j][e] += acc_s2[0][j][e];
            flashc_kvc_scores(acc_s, p, frag_rows, n_block * BLOCK_N + warp_n * KEYS_PER_WARP + 2 * (lane % 4),
                              shift);
            flashc_softmax_update(st, acc_s, acc_o, 1.0f);
            uint32_t p_frag[1][COL_ATOMS / 2][4];
            flashc_pack_p<T>(p_frag, acc_s);
            /* O += P V over this warp's keys. */
#pragma unroll
            for (int ks = 0; ks < KEYS_PER_WARP / 16; ++ks)
#pragma unroll
                for (int dp = 0; dp < HEAD_DIM / 16; ++dp) {
                    uint32_t bv[4];
                    flashc_ldmatrix_x4_trans(bv, sV + flashc_hopper_kvc_swizzle<BLOCK_N>(v_row + 16 * ks, 2 * dp + v_chunk));
                    flashc_mma16816<T>(acc_o[0][2 * dp], p_frag[0][ks], bv[0], bv[1]);
                    flashc_mma16816<T>(acc_o[0][2 * dp + 1], p_frag[0][ks], bv[2], bv[3]);
                }
        }
        __syncthreads(); /* every box landed and was read: the stages become the epilogue's buffers */
    } else if (early) {
        asm volatile("griddepcontrol.wait;\n" ::: "memory"); /* before the outputs */
    } else if (fused) {
        write_appended(); /* nothing to read here; the CTA of m-block 0 and split 0 still writes */
    }

    flashc_kvc_epilogue<T, C>(p, seq, st, acc_o, reinterpret_cast<float *>(sStages), warp_m, warp_n, lane, m0, rows, b,
                              head_k, split);
    flashc_kvc_trace_record(trace_start, steps);
}

#endif
