/* Layout of the CPU backward workspace, shared by the size query and the
 * kernels. Everything depends on the problem's shape only (never on the
 * thread count or the SIMD variant):
 *
 *   lse2   [nheads][total_q]              LSE in log2 units (+inf kept)
 *   dsum   [nheads][total_q]              D = rowsum(dO * O) - dLSE
 *   dq     [nchunks][total_q][nheads][d]  per-chunk dQ partial sums
 *   dk     [key_rows][nheads_k][ld_dk]    dK accumulators
 *   dv     [key_rows][nheads_k][ld_dv]    dV accumulators
 *   qt     [nheads][query_rows / 64][d][64]   queries, pre-scaled, transposed
 *   dot    [nheads][query_rows / 64][dv][64]  dO transposed
 *
 * in the accumulation type (float, or double for float64 inputs), each
 * region 64-byte aligned. Key tiles are dealt round-robin to `nchunks`
 * chunks per (sequence, kv head); a chunk owns its dK/dV rows outright and
 * its own dQ partial, and the partials are summed in chunk order at the
 * end, so the result is bit-identical whatever the thread count.
 * The dK/dV accumulator rows of sequence b start at
 * flashc_padded_row_offset(first key row of b, b, FLASHC_CPU_BWD_KEY_TILE),
 * so whole key tiles of one sequence never reach the next one's rows; the
 * transposed query tiles likewise start at
 * flashc_padded_row_offset(first query row of b, b, FLASHC_CPU_BWD_QUERY_TILE). */
#ifndef FLASHC_CPU_WORKSPACE_H
#define FLASHC_CPU_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "core/problem.h"
#include "core/semantics.h"

/* Key columns per backward key tile (the kernels' FC_BN) and query rows
 * per query tile (FC_BM). */
#define FLASHC_CPU_BWD_KEY_TILE 64
#define FLASHC_CPU_BWD_QUERY_TILE 64
/* Aim for this many independent tasks, so dynamic scheduling can balance
 * causal work on any core count. */
#define FLASHC_CPU_BWD_TASKS 32
/* Cap on the dQ partials, bytes. */
#define FLASHC_CPU_BWD_PARTIAL_CAP ((int64_t)1 << 30)

typedef struct flashc_cpu_bwd_layout {
    int64_t nchunks;
    size_t elem;        /* bytes of the accumulation type */
    int64_t key_rows;   /* padded rows of the dK/dV accumulators */
    int64_t query_rows; /* padded rows of the transposed query tiles */
    int64_t ld_dk, ld_dv;
    size_t lse2_offset, dsum_offset, dq_offset, dk_offset, dv_offset, qt_offset, dot_offset, bytes;
} flashc_cpu_bwd_layout;

/* Accumulator row of the first key of sequence b. */
static inline int64_t flashc_cpu_bwd_key_row(const flashc_problem *p, int64_t b) {
    int64_t first = p->is_varlen ? (int64_t)p->cu_seqlens_k[b] : b * p->seqlen_k;
    return flashc_padded_row_offset(first, b, FLASHC_CPU_BWD_KEY_TILE);
}

/* Transposed-tile row of the first query of sequence b. */
static inline int64_t flashc_cpu_bwd_query_row(const flashc_problem *p, int64_t b) {
    int64_t first = p->is_varlen ? (int64_t)p->cu_seqlens_q[b] : b * p->seqlen_q;
    return flashc_padded_row_offset(first, b, FLASHC_CPU_BWD_QUERY_TILE);
}

static inline size_t flashc_cpu_align64(size_t n) { return (n + 63) & ~(size_t)63; }

static inline flashc_cpu_bwd_layout flashc_cpu_bwd_layout_of(const flashc_problem *p) {
    flashc_cpu_bwd_layout L;
    L.elem = p->dtype == FLASHC_DTYPE_FLOAT64 ? sizeof(double) : sizeof(float);
    int64_t key_tiles = (p->seqlen_k + FLASHC_CPU_BWD_KEY_TILE - 1) / FLASHC_CPU_BWD_KEY_TILE;
    if (key_tiles < 1) key_tiles = 1;
    int64_t units = p->batch * p->nheads_k;
    if (units < 1) units = 1;
    int64_t nchunks = (FLASHC_CPU_BWD_TASKS + units - 1) / units;
    if (nchunks > key_tiles) nchunks = key_tiles;
    int64_t dq_bytes = p->total_q * p->nheads * p->head_dim * (int64_t)L.elem;
    if (dq_bytes > 0 && nchunks * dq_bytes > FLASHC_CPU_BWD_PARTIAL_CAP)
        nchunks = FLASHC_CPU_BWD_PARTIAL_CAP / dq_bytes;
    if (nchunks < 1) nchunks = 1;
    L.nchunks = nchunks;
    size_t rows = (size_t)(p->nheads * p->total_q);
    L.lse2_offset = 0;
    L.dsum_offset = flashc_cpu_align64(rows * L.elem);
    L.dq_offset = L.dsum_offset + flashc_cpu_align64(rows * L.elem);
    int64_t keys = p->is_varlen ? p->total_k : p->batch * p->seqlen_k;
    L.key_rows = flashc_padded_rows(keys, p->batch, FLASHC_CPU_BWD_KEY_TILE);
    /* Rows padded to 16 elements: a whole number of vectors in every variant. */
    L.ld_dk = flashc_round_up(p->head_dim, 16);
    L.ld_dv = flashc_round_up(p->head_dim_v, 16);
    L.dk_offset = L.dq_offset + flashc_cpu_align64((size_t)nchunks * (size_t)dq_bytes);
    L.dv_offset = L.dk_offset +
        flashc_cpu_align64((size_t)(L.key_rows * p->nheads_k * L.ld_dk) * L.elem);
    L.query_rows = flashc_padded_rows(p->total_q, p->batch, FLASHC_CPU_BWD_QUERY_TILE);
    L.qt_offset = L.dv_offset +
        flashc_cpu_align64((size_t)(L.key_rows * p->nheads_k * L.ld_dv) * L.elem);
    L.dot_offset = L.qt_offset +
        flashc_cpu_align64((size_t)(p->nheads * L.query_rows * p->head_dim) * L.elem);
    L.bytes = L.dot_offset +
        flashc_cpu_align64((size_t)(p->nheads * L.query_rows * p->head_dim_v) * L.elem);
    if (L.bytes == 0) L.bytes = 64;
    return L;
}

#endif
