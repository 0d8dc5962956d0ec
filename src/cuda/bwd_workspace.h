/* The CUDA backward's plan (which configuration, how key blocks are dealt
 * to CTAs) and its workspace layout, shared by the size query and the
 * launch so both always agree:
 *
 *   lse2      [nheads][ws_rows]                    float32  LSE * log2(e)
 *   dsum      [nheads][ws_rows]                    float32  D = rowsum(dO * O) - dLSE
 *   dq_accum  [dq_slices][nheads][ws_rows][D]      float32  dQ before the scale (D: the plan's head_dim);
 *                                                           each 8-row group in 8 x 8 blocks where the
 *                                                           portable kernel ran (bwd_params.h, dq_blocked)
 *   dq_order  [nheads][ws_rows / dq_order_rows]    int32    deterministic on the Hopper path only:
 *                                                           per query block, the key blocks that
 *                                                           have added into its dQ rows
 *   dk_part   [head_splits][key rows][hk][d]       float32  with head splits > 1 only:
 *   dv_part   [head_splits][key rows][hk][dv]      float32  each split's dK (unscaled) and dV
 *   tail_slots  [tail ctas + tail tiles][2 BLOCK_N D] float32  with a tail (tail_split.h) only:
 *   tail_counts [tail tiles]                         int32    segments' dV / dK, and the count of
 *                                                             each tile's segments done
 *
 * ws_rows = flashc_padded_rows(total_q, batch, tile_m): sequence b's rows
 * start at flashc_padded_row_offset(first row of b, b, tile_m) (batched
 * problems: first row b * seqlen_q), so the tile_m-row tiles of one
 * sequence never reach the next one's rows. tile_m is the largest BLOCK_M
 * of the main kernels that may run the problem (the portable configuration
 * the plan picks and the Hopper one of the same head dim, both powers of
 * two, so each divides it), and is passed to every kernel that touches
 * these buffers: the preprocess and the dQ conversion walk tile_m-row
 * tiles, a main kernel its own BLOCK_M-row blocks inside them. */
#ifndef FLASHC_CUDA_BWD_WORKSPACE_H
#define FLASHC_CUDA_BWD_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../core/problem.h"
#include "../core/semantics.h"
#include "bwd_config.h"
#include "tail_split.h"
#include "hopper_bwd_config.h"
#include "kernel_variant.h"
#include "bwd_visibility.h"
#include "tile_schedule.h"

/* The portable backward's costs in iterations (one query block against
 * the CTA's key block): a tile's start (K, V and the first Q / dO loads;
 * also the simulation of the tiles below), and a tail segment's slot
 * written and read back (tail_split.h). */
#define FLASHC_BWD_TILE_START 2
#define FLASHC_BWD_TAIL_SLOT 2

/* Deterministic mode on the Hopper path: one key block per CTA and one
 * accumulator, the CTAs' additions into a query block's dQ rows in a
 * fixed order (hopper_bwd_kernel.cuh), dq_order counting them.
 *
 * Deterministic mode on the portable path: aim for about this many CTAs (two per SM of an
 * H100 / H200), each owning every nchunks-th key block of its (sequence,
 * kv head) and its own dQ slice; at most this many bytes of slices (2 GiB:
 * one head-dim-256 problem of batch 1, 8 heads, 16k rows still gets 16
 * slices, 128 CTAs: the Hopper kernel's one wave; with 1 GiB it ran on 64
 * SMs at half the speed). */
#define FLASHC_BWD_DET_TARGET_CTAS 264
#define FLASHC_BWD_DET_SLICES_CAP ((int64_t)2 << 30)

typedef struct flashc_bwd_plan {
    int head_dim;       /* the configuration's HEAD_DIM; also dq_accum's row, in floats: the
                           portable kernel adds its columns past d (zeros) without a test
                           each, the Hopper kernel columns inside d at the same stride (and the
                           portable kernel may run a Hopper plan the Hopper kernel declined) */
    int small;          /* its SMALL configuration (a device with 99 KiB per CTA) */
    int tile_m;         /* the workspace's row tile: a multiple of every main kernel's BLOCK_M */
    int block_n;        /* its BLOCK_N */
    int block_m;        /* its BLOCK_M */
    int64_t key_blocks; /* ceil(seqlen_k / block_n), seqlen_k the bound on every sequence */
    int nchunks;        /* key-block stride per CTA (= key_blocks unless deterministic) */
    int dq_slices;      /* 1, or nchunks when deterministic on the portable path */
    int dq_order_rows;  /* deterministic on the Hopper path: query rows per dq_order entry (its
                           BLOCK_M); else 0 */
    int head_splits;    /* Hopper path: CTAs sharing one (key block, kv head)'s query heads */
    flashc_tail tail; /* portable path: the last partial wave shared out (ctas 0: none) */
} flashc_bwd_plan;

typedef struct flashc_bwd_layout {
    int64_t ws_rows;
    int64_t dq_slice_stride; /* floats */
    int64_t dq_order_entries;
    int64_t part_rows; /* key rows of the dK / dV partials */
    size_t lse2_offset, dsum_offset, dq_offset, dq_order_offset, dk_part_offset, dv_part_offset;
    size_t tail_slots_offset, tail_counts_offset, bytes;
} flashc_bwd_layout;

static inline size_t flashc_bwd_align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Head splits: at most this many bytes of dK / dV partials. */
#define FLASHC_BWD_PARTS_CAP ((int64_t)1 << 30)

/* Rows of the packed keys (the partials' rows). */
static inline int64_t flashc_bwd_key_rows(const flashc_problem *p) {
    return p->is_varlen ? p->total_k : p->batch * p->seqlen_k;
}

/* The Hopper kernel's head splits (p.head_splits). A CTA walks every query
 * head of its kv head's group, so with GQA there are group times fewer
 * tiles, each group times longer, than without. Splitting the group over
 * S CTAs (S a divisor of it) costs float32 partials of dK and dV, written
 * once and summed by one more kernel (2 S times their bytes of traffic).
 * Two cases pay for it (measured on the H200, bench/NOTES.md b15):
 *   - too few tiles for the GPU (fewer than two per SM): the smallest S
 *     that gives two per SM (GQA 4 at 4k, batch 1: 1.58x);
 *   - under a causal mask or a window, few tiles per L2 section
 *     (tile_schedule.h: the longest tiles of a section start first, but
 *     with a section of one or two pairs the last section's long tiles
 *     still run alone at the end): S = 2, or 4 while a section still holds
 *     fewer tiles than half the SMs (GQA 8 at 4k, batch 2, causal: 1.18x
 *     at S = 4; GQA 4 at 8k, batch 1: 1.19x at S = 2), as long as the
 *     partials' traffic stays under 6 % of the kernel's estimated time. */
static inline int flashc_bwd_head_splits(const flashc_problem *p, int64_t key_blocks, int sms) {
    const int64_t group = p->nheads_k > 0 ? p->nheads / p->nheads_k : 1;
    if (group <= 1 || sms <= 0 || key_blocks <= 0) return 1;
    const int64_t pairs = p->nheads_k * p->batch, ctas = key_blocks * pairs;
    const int64_t split_bytes =
        flashc_bwd_key_rows(p) * p->nheads_k * (p->head_dim + p->head_dim_v) * (int64_t)sizeof(float);
    if (ctas < 2 * (int64_t)sms) {
        for (int64_t s = 2; s <= group; ++s) {
            if (group % s != 0) continue;
            if (s * split_bytes > FLASHC_BWD_PARTS_CAP) return 1;
            if (ctas * s >= 2 * (int64_t)sms || s == group) return (int)s;
        }
        return 1;
    }
    if (p->window_left < 0 && p->window_right < 0) return 1;
    /* tiles per L2 section with s splits: the launch's schedule (a grid
     * too large to launch does not split) */
    auto section_tiles = [&](int64_t s) {
        flashc_tile_schedule sched;
        const long long pair_bytes =
            flashc_bwd_pair_bytes(p->seqlen_q, (group + s - 1) / s, p->head_dim, p->head_dim_v);
        if (!flashc_schedule_plan(key_blocks, pairs * s, pair_bytes, true, &sched)) return (int64_t)INT64_MAX;
        return (int64_t)sched.section * key_blocks;
    };
    /* the kernel at about 400 TFLOP/s (half the work under a causal mask),
     * the partials at about 3 TB/s */
    const double kernel_s = 2.5 * 4.0 * (double)p->batch * (double)p->nheads * (double)p->seqlen_q *
                            (double)p->seqlen_k * (double)(p->head_dim + p->head_dim_v) / 2.0 * 0.5 / 4e14;
    auto affordable = [&](int64_t s) {
        return s * split_bytes <= FLASHC_BWD_PARTS_CAP && 2.0 * (double)(s * split_bytes) / 3e12 <= 0.06 * kernel_s;
    };
    if (section_tiles(1) >= 2 * (int64_t)sms || group % 2 != 0 || !affordable(2)) return 1;
    if (group % 4 == 0 && section_tiles(2) < sms / 2 && affordable(4)) return 4;
    return 2;
}

/* The portable kernel's tiles, simulated: each (batch, kv head, head
 * split) pair's key blocks started in the schedule's order
 * (tile_schedule.h) on whichever SM frees first, one CTA per SM (8 warps at
 * up to 255 registers), each costing its iterations (query heads x row
 * blocks that see its keys, bwd_visibility.h) plus
 * FLASHC_BWD_TILE_START of them. Returns when the last one ends, in
 * iterations; 0 where the simulation would take too long
 * (FLASHC_BWD_SIM_TILES) or the device has more SMs than it holds. */
#define FLASHC_BWD_SIM_TILES 8192
#define FLASHC_BWD_SIM_SMS 512
static inline double flashc_bwd_simulated_end(const flashc_problem *p, const flashc_bwd_plan *plan, int64_t splits,
                                              int sms) {
    const int64_t group = p->nheads / p->nheads_k, pairs = p->batch * p->nheads_k * splits;
    if (sms <= 0 || sms > FLASHC_BWD_SIM_SMS || pairs * plan->key_blocks > FLASHC_BWD_SIM_TILES) return 0.0;
    flashc_tile_schedule sched;
    const long long pair_bytes = flashc_bwd_pair_bytes(p->seqlen_q, group / splits, p->head_dim, p->head_dim_v);
    if (!flashc_schedule_plan(plan->key_blocks, pairs, pair_bytes, true, &sched)) return 0.0;
    double ends[FLASHC_BWD_SIM_SMS] = {0.0}; /* a min-heap of the SMs' finishing times */
    double last = 0.0;
    for (int64_t first = 0; first < pairs; first += sched.section) {
        const int64_t width = pairs - first < sched.section ? pairs - first : sched.section;
        for (int64_t rank = 0; rank < plan->key_blocks; ++rank) {
            const int64_t n0 = rank * plan->block_n;
            const int64_t n1 = n0 + plan->block_n < p->seqlen_k ? n0 + plan->block_n : p->seqlen_k;
            int first_row, last_row;
            flashc_bwd_rows_seeing(n0, n1, p->seqlen_q, p->seqlen_k, p->window_left, p->window_right, &first_row,
                                   &last_row);
            const int64_t blocks = last_row >= first_row ? last_row / plan->block_m - first_row / plan->block_m + 1 : 0;
            const double cost = (double)(group / splits * blocks) + FLASHC_BWD_TILE_START;
            for (int64_t k = 0; k < width; ++k) {
                /* the tile starts on the SM that frees first: the heap's top */
                double t = ends[0] + cost;
                if (t > last) last = t;
                int i = 0;
                for (;;) {
                    int c = 2 * i + 1;
                    if (c >= sms) break;
                    if (c + 1 < sms && ends[c + 1] < ends[c]) ++c;
                    if (ends[c] >= t) break;
                    ends[i] = ends[c];
                    i = c;
                }
                ends[i] = t;
            }
        }
    }
    return last;
}

/* The portable kernel's head splits under a causal mask or a window
 * (where the tiles of a pair differ in cost; with too few tiles for the
 * GPU, varlen, or no mask: as the Hopper kernel's): the split count (1 or
 * a divisor of the group up to 8) with the soonest end, simulated
 * (flashc_bwd_simulated_end), an
 * iteration costing its products at 2 TFLOP/s per SM and the partials
 * their traffic (written, then read by one more kernel) at 2.5 TB/s: on the
 * H200 this ranked 1, 2 and 4 splits as measured on four GQA shapes (best:
 * 4k causal GQA 4 2 splits, GQA 8 4; 8k causal GQA 4 at d64 none, with a
 * window 4; bench/NOTES.md, "the portable backward's tile schedule"). */
static inline int flashc_bwd_simulated_head_splits(const flashc_problem *p, const flashc_bwd_plan *plan, int sms) {
    const int64_t group = p->nheads / p->nheads_k;
    const int64_t ctas = plan->key_blocks * p->nheads_k * p->batch;
    const double iteration_s = 2.0 * plan->block_m * plan->block_n * (3.0 * p->head_dim + 2.0 * p->head_dim_v) / 2e12;
    const int64_t split_bytes =
        flashc_bwd_key_rows(p) * p->nheads_k * (p->head_dim + p->head_dim_v) * (int64_t)sizeof(float);
    /* with tiles too many to simulate even two splits, the tiles even out
     * by themselves */
    if (2 * ctas > FLASHC_BWD_SIM_TILES) return 1;
    int best = 1;
    double best_s = 0.0;
    for (int64_t s = 1; s <= group && s <= 8; ++s) {
        if (group % s != 0 || s * split_bytes > FLASHC_BWD_PARTS_CAP) continue;
        const double end = flashc_bwd_simulated_end(p, plan, s, sms);
        if (end <= 0.0) break; /* too many tiles to simulate */
        const double total = end * iteration_s + (s > 1 ? 2.0 * (double)(s * split_bytes) / 2.5e12 : 0.0);
        if (s == 1 || total < best_s) {
            best = (int)s;
            best_s = total;
        }
    }
    return best;
}

/* The simulation takes 20-30 ns per tile (up to a few hundred us for the
 * largest problems it runs on), and a training step repeats the same
 * shapes (and asks the workspace size before each call): the last few
 * choices are kept, per thread. */
#define FLASHC_BWD_SPLIT_CACHE 8
static inline int flashc_bwd_portable_head_splits(const flashc_problem *p, const flashc_bwd_plan *plan, int sms) {
    const int64_t group = p->nheads_k > 0 ? p->nheads / p->nheads_k : 1;
    if (group <= 1 || sms <= 0 || plan->key_blocks <= 0) return 1;
    const int64_t ctas = plan->key_blocks * p->nheads_k * p->batch;
    if (ctas < 2 * (int64_t)sms || p->is_varlen || (p->window_left < 0 && p->window_right < 0))
        return flashc_bwd_head_splits(p, plan->key_blocks, sms);
    const int64_t key[11] = {p->batch,        p->seqlen_q,    p->seqlen_k,     p->nheads,    p->nheads_k, p->head_dim,
                             p->head_dim_v,   p->window_left, p->window_right, plan->block_m * 4096 + plan->block_n, sms};
    static thread_local int64_t keys[FLASHC_BWD_SPLIT_CACHE][11];
    static thread_local int splits[FLASHC_BWD_SPLIT_CACHE], filled, next;
    for (int i = 0; i < filled; ++i)
        if (memcmp(keys[i], key, sizeof key) == 0) return splits[i];
    const int s = flashc_bwd_simulated_head_splits(p, plan, sms);
    memcpy(keys[next], key, sizeof key);
    splits[next] = s;
    next = (next + 1) % FLASHC_BWD_SPLIT_CACHE;
    if (filled < FLASHC_BWD_SPLIT_CACHE) ++filled;
    return s;
}

/* hopper: the Hopper kernel will run the problem (flashc_hopper_bwd_applies);
 * sms: the device's multiprocessors. */
static inline flashc_bwd_plan flashc_bwd_plan_of(const flashc_problem *p, bool hopper, int sms, int smem_optin) {
    flashc_bwd_plan plan = {0, 0, 0, 0, 0, 0, 1, 1, 0, 1, {0, 0, 0, 0}};
    const int64_t d = p->head_dim > p->head_dim_v ? p->head_dim : p->head_dim_v;
    /* the smallest head dim that holds d and dv; its SMALL configuration
     * where one stage of the other does not fit the device (16-bit types) */
#define FLASHC_BWD_PICK(D, BM, BN, W, SWM, GSWM, KVWN, QWM, DQC, DQKV, SWZ, SM)                          \
    if ((plan.head_dim == 0 || (plan.head_dim == D && SM && !plan.small)) && d <= D &&                  \
        (!SM || FLASHC_BWD_SMEM_BYTES(D, flashc_bwd_config<D>::BLOCK_M, flashc_bwd_config<D>::BLOCK_N,  \
                                      flashc_bwd_config<D>::SWIZZLE, 1) > smem_optin)) {                 \
        plan.head_dim = D;                                                                               \
        plan.small = SM;                                                                                 \
        plan.tile_m = BM > flashc_hopper_bwd_block_m(D) ? BM : flashc_hopper_bwd_block_m(D);               \
        plan.block_n = BN;                                                                               \
        plan.block_m = BM;                                                                               \
    }
    FLASHC_BWD_CONFIGS(FLASHC_BWD_PICK)
#undef FLASHC_BWD_PICK
    if (plan.head_dim == 0) return plan; /* unreachable: validation caps head dims at 256 */
    plan.key_blocks = (p->seqlen_k + plan.block_n - 1) / plan.block_n;
    int64_t chunks = plan.key_blocks > 0 ? plan.key_blocks : 1;
    const int hopper_n = flashc_hopper_bwd_block_n(d);
    const int64_t hopper_key_blocks = (p->seqlen_k + hopper_n - 1) / hopper_n;
    if (p->deterministic && hopper) {
        chunks = hopper_key_blocks > 0 ? hopper_key_blocks : 1;
        plan.dq_order_rows = flashc_hopper_bwd_block_m(d);
    } else if (p->deterministic) {
        const int64_t units = p->batch * p->nheads_k > 0 ? p->batch * p->nheads_k : 1;
        int64_t want = (FLASHC_BWD_DET_TARGET_CTAS + units - 1) / units;
        if (want < chunks) chunks = want;
        const int64_t rows = flashc_padded_rows(p->total_q, p->batch, plan.tile_m);
        const int64_t slice_bytes = p->nheads * rows * plan.head_dim * (int64_t)sizeof(float);
        if (slice_bytes > 0 && chunks * slice_bytes > FLASHC_BWD_DET_SLICES_CAP)
            chunks = FLASHC_BWD_DET_SLICES_CAP / slice_bytes;
        if (chunks < 1) chunks = 1;
        plan.dq_slices = (int)chunks;
    }
    /* the portable kernel's deterministic mode spreads the work over
     * key-block chunks with dQ slices instead */
    if (hopper)
        plan.head_splits = flashc_bwd_head_splits(p, hopper_key_blocks, sms);
    else if (!p->deterministic)
        plan.head_splits = flashc_bwd_portable_head_splits(p, &plan, sms);
    /* tiles of one cost each (no mask, window or varlen; one CTA per key
     * block, each walking the whole group): the last partial wave shared
     * out (tail_split.h). The plain variant only, as in the forward: the
     * general one's tail kernels spilled the most of the backward and took
     * a third of its compile time, for 1-3 % on the problems that take a
     * tail (non-causal, unwindowed, not varlen: bench/NOTES.md, "the clean
     * build's time") */
    if (!hopper && !p->deterministic && plan.head_splits == 1 && !p->is_varlen && p->window_left < 0 &&
        p->window_right < 0 && !flashc_needs_general_kernel(p)) {
        const int64_t m_blocks = (p->seqlen_q + plan.block_m - 1) / plan.block_m;
        plan.tail = flashc_tail_plan(plan.key_blocks * p->batch * p->nheads_k, p->nheads / p->nheads_k * m_blocks,
                                     sms, FLASHC_BWD_TILE_START, FLASHC_BWD_TAIL_SLOT);
    }
    /* the grid holds nchunks * batch * nheads_k (* head_splits) CTAs, checked at launch */
    plan.nchunks = chunks > 0x7fffffff ? 0x7fffffff : (int)chunks;
    return plan;
}

static inline flashc_bwd_layout flashc_bwd_layout_of(const flashc_problem *p, const flashc_bwd_plan *plan) {
    flashc_bwd_layout L;
    L.ws_rows = flashc_padded_rows(p->total_q, p->batch, plan->tile_m);
    const size_t per_head_rows = (size_t)(p->nheads * L.ws_rows) * sizeof(float);
    L.dq_slice_stride = p->nheads * L.ws_rows * plan->head_dim;
    L.lse2_offset = 0;
    L.dsum_offset = flashc_bwd_align256(per_head_rows);
    L.dq_offset = L.dsum_offset + flashc_bwd_align256(per_head_rows);
    L.dq_order_offset = L.dq_offset +
                        flashc_bwd_align256((size_t)plan->dq_slices * (size_t)L.dq_slice_stride * sizeof(float));
    L.dq_order_entries = plan->dq_order_rows ? p->nheads * L.ws_rows / plan->dq_order_rows : 0;
    L.part_rows = flashc_bwd_key_rows(p);
    const size_t parts = plan->head_splits > 1 ? (size_t)plan->head_splits * (size_t)L.part_rows * (size_t)p->nheads_k : 0;
    L.dk_part_offset = L.dq_order_offset + flashc_bwd_align256((size_t)L.dq_order_entries * sizeof(int32_t));
    L.dv_part_offset = L.dk_part_offset + flashc_bwd_align256(parts * (size_t)p->head_dim * sizeof(float));
    L.tail_slots_offset = L.dv_part_offset + flashc_bwd_align256(parts * (size_t)p->head_dim_v * sizeof(float));
    const size_t tail_slots = plan->tail.ctas ? (size_t)plan->tail.ctas + (size_t)plan->tail.tiles : 0;
    L.tail_counts_offset = L.tail_slots_offset + flashc_bwd_align256(tail_slots * 2 * (size_t)plan->block_n *
                                                                     (size_t)plan->head_dim * sizeof(float));
    L.bytes = L.tail_counts_offset +
              flashc_bwd_align256((plan->tail.ctas ? (size_t)plan->tail.tiles : 0) * sizeof(int32_t));
    return L;
}

#endif
