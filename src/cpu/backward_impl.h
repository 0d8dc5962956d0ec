/* Backward kernel body, compiled once per variant (see variant.h).
 *
 * Recomputation, partitioned over (sequence, kv head, key-tile chunk):
 * chunk c of a (sequence, kv head) owns the key tiles c, c + nchunks, ...
 * (round-robin, so causal work spreads evenly). A preprocess writes D,
 * LSE in log2 units and the transposed query / dO tiles to the workspace.
 * Each task then walks every query head of its group and every row tile,
 * and meets the row tile with each of its own key tiles the tile sees: P
 * is recomputed from the saved LSE, dK and dV accumulate in the task's own
 * workspace rows, dQ in a tile that is added once per row tile to the
 * chunk's own workspace partial. Partials are summed in chunk order at the
 * end (workspace.h), so the result does not depend on the thread count. */
#ifndef FLASHC_CPU_BACKWARD_IMPL_H
#define FLASHC_CPU_BACKWARD_IMPL_H

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "workspace.h"

typedef struct fc_bwd_scratch {
    real *Q, *dO, *K, *V, *P, *dP, *Pd, *T, *dQ, *lse2, *dsum;
    real *row_a, *row_b;
} fc_bwd_scratch;

/* Regions of the backward's per-thread scratch, sized by the problem's
 * largest tile (bm rows, bn columns: fc_tile_extents). */
#define FC_BWD_FIELDS(X)                                                                      \
    X(Q, bm *dp) X(dO, bm *dvp) X(K, bn *dp) X(V, bn *dv) X(P, bn *FC_BM) X(dP, bn *FC_BM)     \
    X(Pd, bn *FC_BM) X(T, bn *FC_BM) X(dQ, bm *dp) X(lse2, FC_BM) X(dsum, FC_BM)              \
    X(row_a, dmax) X(row_b, dmax)

#define FC_BWD_SIZES(p)                                                                       \
    int64_t dv = (p)->head_dim_v, dp = fc_round_vl((p)->head_dim), dvp = fc_round_vl(dv);     \
    int64_t dmax = dp > dvp ? dp : dvp, bm, bn;                                               \
    fc_tile_extents(p, 1, &bm, &bn)

FC_DEFINE_SCRATCH(fc_bwd_scratch, fc_bwd, FC_BWD_FIELDS, FC_BWD_SIZES)

/* Row of sequence b, local row r, in the workspace's [total_q] index. */
static inline int64_t fc_ws_row(const flashc_problem *p, int64_t b, const flashc_seq_info *seq,
                                int64_t r) {
    return (p->is_varlen ? seq->q_start : b * p->seqlen_q) + r;
}

static inline real *fc_ws_region(const flashc_problem *p, size_t offset) {
    return (real *)((char *)p->workspace + offset);
}

/* The transposed (and, for Q, pre-scaled) query and dO tiles of every
 * (sequence, head, row tile), written once and read by every chunk. */
static void fc_bwd_transpose_tiles(const flashc_problem *p, const flashc_cpu_bwd_layout *L,
                                   fc_bwd_scratch *s) {
    int64_t d = p->head_dim, dv = p->head_dim_v;
    int64_t nrb = (p->seqlen_q + FC_BM - 1) / FC_BM;
    real qscale = fc_query_scale(p);
    #pragma omp for schedule(dynamic, 4)
    for (int64_t task = 0; task < p->batch * p->nheads * nrb; ++task) {
        int64_t b = task / (p->nheads * nrb), h = (task / nrb) % p->nheads, rb = task % nrb;
        flashc_seq_info seq = flashc_problem_seq(p, b);
        int64_t r0 = rb * FC_BM;
        if (r0 >= seq.sq) continue;
        fc_tile_ctx t = {.sq = seq.sq};
        fc_set_row_tile(&t, r0);
        int64_t tile_row = flashc_cpu_bwd_query_row(p, b) + r0;
        fc_pack_rows_transposed(fc_ws_region(p, L->qt_offset) + (h * L->query_rows + tile_row) * d,
                                &p->q, b, seq.q_start + r0, t.rows, t.rows_pad, h, 1, d, qscale,
                                s->row_a);
        fc_pack_rows_transposed(fc_ws_region(p, L->dot_offset) + (h * L->query_rows + tile_row) * dv,
                                &p->dout, b, seq.q_start + r0, t.rows, t.rows_pad, h, 1, dv, 1,
                                s->row_a);
    }
}

/* D and LSE·log2(e) of every row. */
static void fc_bwd_preprocess(const flashc_problem *p, const flashc_cpu_bwd_layout *L,
                              fc_bwd_scratch *s) {
    real *lse2 = fc_ws_region(p, L->lse2_offset), *dsum = fc_ws_region(p, L->dsum_offset);
    int64_t dv = p->head_dim_v;
    #pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < p->batch * p->nheads; ++bh) {
        int64_t b = bh / p->nheads, h = bh % p->nheads;
        flashc_seq_info seq = flashc_problem_seq(p, b);
        for (int64_t r = 0; r < seq.sq; ++r) {
            int64_t row = seq.q_start + r;
            fc_load_row(s->row_a, fc_elem(p->dout.data, p->dout.dtype, fc_seq_offset(&p->dout, b, row, h)),
                        p->dout.dtype, dv, 1);
            fc_load_row(s->row_b, fc_elem(p->out.data, p->out.dtype, fc_seq_offset(&p->out, b, row, h)),
                        p->out.dtype, dv, 1);
            real acc = 0;
            for (int64_t x = 0; x < dv; ++x) acc += s->row_a[x] * s->row_b[x];
            if (p->dlse.data)
                acc -= fc_load_one(p->dlse.data, p->dlse.dtype, fc_row_offset(&p->dlse, b, row, h));
            real lse = fc_load_one(p->lse.data, p->lse.dtype, fc_row_offset(&p->lse, b, row, h));
            int64_t at = h * p->total_q + fc_ws_row(p, b, &seq, r);
            dsum[at] = acc;
            lse2[at] = lse == (real)INFINITY ? lse : lse * (real)FC_LOG2E;
        }
    }
}

/* Every row of `t` (batch b, packed rows [row0, row0 + n), all heads) to 0. */
static void fc_zero_rows(const flashc_seq_tensor *t, int64_t b, int64_t row0, int64_t n,
                         int64_t nheads, int64_t width) {
    size_t esize = flashc_dtype_size(t->dtype);
    for (int64_t r = row0; r < row0 + n; ++r)
        for (int64_t h = 0; h < nheads; ++h)
            memset((char *)t->data + fc_seq_offset(t, b, r, h) * (int64_t)esize, 0,
                   (size_t)width * esize);
}

/* dK/dV rows no key tile covers (varlen: keys past seqused_k, and packed
 * rows before the first and after the last sequence) are zero gradients. */
static void fc_bwd_zero_unused_keys(const flashc_problem *p) {
    if (!p->is_varlen) return;
    #pragma omp for schedule(static)
    for (int64_t b = -1; b <= p->batch; ++b) {
        int64_t row0, n;
        if (b < 0) {
            row0 = 0;
            n = p->cu_seqlens_k[0];
        } else if (b < p->batch) {
            flashc_seq_info seq = flashc_problem_seq(p, b);
            row0 = seq.k_start + seq.sk;
            n = p->cu_seqlens_k[b + 1] - row0;
        } else {
            row0 = p->cu_seqlens_k[p->batch];
            n = p->total_k - row0;
        }
        if (n <= 0) continue;
        fc_zero_rows(&p->dk, 0, row0, n, p->nheads_k, p->head_dim);
        fc_zero_rows(&p->dv, 0, row0, n, p->nheads_k, p->head_dim_v);
    }
}

/* The query side of one row tile, shared by every key tile it meets. */
typedef struct fc_bwd_rows {
    fc_panel Q, dO;      /* natural layout (B operands of dK, dV) */
    const real *Qt, *dOt; /* transposed (workspace, written by the preprocess) */
    int64_t ws_row0;     /* workspace row of the tile's first row */
} fc_bwd_rows;

static fc_bwd_rows fc_bwd_load_rows(const flashc_problem *p, const fc_tile_ctx *t,
                                    const flashc_seq_info *seq, const flashc_cpu_bwd_layout *L,
                                    fc_bwd_scratch *s) {
    int64_t d = p->head_dim, dv = p->head_dim_v, dp = fc_round_vl(d), dvp = fc_round_vl(dv);
    int64_t b = t->b, h = t->h, row0 = seq->q_start + t->r0;
    fc_bwd_rows r;
    r.Q = fc_tile_panel(s->Q, dp, t->rows_pad, &p->q, b, row0, t->rows, h, d, 1);
    r.dO = fc_tile_panel(s->dO, dvp, t->rows_pad, &p->dout, b, row0, t->rows, h, dv, 1);
    const real *lse2 = fc_ws_region(p, L->lse2_offset) + h * p->total_q;
    const real *dsum = fc_ws_region(p, L->dsum_offset) + h * p->total_q;
    r.ws_row0 = fc_ws_row(p, b, seq, t->r0);
    int64_t tile_row = flashc_cpu_bwd_query_row(p, b) + t->r0;
    r.Qt = fc_ws_region(p, L->qt_offset) + (h * L->query_rows + tile_row) * d;
    r.dOt = fc_ws_region(p, L->dot_offset) + (h * L->query_rows + tile_row) * dv;
    for (int64_t i = 0; i < t->rows_pad; ++i) {
        /* Padding rows: P = exp2(s - inf) = 0, so they add nothing. */
        s->lse2[i] = i < t->rows ? lse2[r.ws_row0 + i] : (real)INFINITY;
        s->dsum[i] = i < t->rows ? dsum[r.ws_row0 + i] : 0;
    }
    return r;
}

/* One (row tile, key tile) pair: dK, dV accumulate into the task's rows of
 * the workspace (ldk, ldv), dQ into s->dQ (overwritten when `first`). */
static void fc_bwd_pair(const flashc_problem *p, const fc_tile_ctx *t, const flashc_seq_info *seq,
                        int64_t hk, const fc_bwd_rows *rows, real *dK, ptrdiff_t ldk, real *dV,
                        ptrdiff_t ldv, int first, fc_bwd_scratch *s) {
    int64_t d = p->head_dim, dv = p->head_dim_v, dp = fc_round_vl(d), dvp = fc_round_vl(dv);
    int64_t key_row0 = seq->k_start + t->c0;
    int M = (int)t->cols_pad, N = (int)t->rows_pad; /* the computed tile (see FC_ROW_STEP) */
    fc_panel K = fc_tile_panel(s->K, dp, M, &p->k, t->b, key_row0, t->cols, hk, d, 1);
    fc_panel V = fc_tile_panel(s->V, dv, M, &p->v, t->b, key_row0, t->cols, hk, dv, 0);

    /* P = exp2(logit - LSE2), masked entries 0. */
    fc_gemm(M, N, (int)d, K.data, K.ld, 1, rows->Qt, FC_BM, s->P, FC_BM, 0);
    int softcap = p->softcap > 0;
    fc_tile_logits(s->P, softcap ? s->T : NULL, t);
    if (!fc_tile_fully_visible(p, t)) fc_tile_mask(s->P, p, t);
    for (int64_t j = 0; j < M; ++j)
        for (int iv = 0; iv < N; iv += VL)
            vstore(s->P + j * FC_BM + iv, vexp2(vload(s->P + j * FC_BM + iv) - vload(s->lse2 + iv)));

    /* dP = dO V^T; with dropout, P_dropped and dP_dropped. */
    fc_gemm(M, N, (int)dv, V.data, V.ld, 1, rows->dOt, FC_BM, s->dP, FC_BM, 0);
    const real *Pdrop = s->P;
    if (p->dropout_p > 0) {
        real keep_scale = (real)(1.0 / (1.0 - p->dropout_p));
        for (int64_t j = 0; j < M; ++j)
            for (int64_t i = 0; i < N; ++i) s->Pd[j * FC_BM + i] = s->P[j * FC_BM + i] * keep_scale;
        fc_tile_dropout(p, t, s->Pd, s->dP, keep_scale);
        Pdrop = s->Pd;
    }

    /* dV += P_dropped^T dO. */
    fc_gemm(M, (int)dvp, N, Pdrop, FC_BM, 1, rows->dO.data, rows->dO.ld, dV, ldv, 1);

    /* dS = P (dP - D) (softcap: times 1 - tanh^2), times the softmax scale:
     * the gradient w.r.t. the raw dot products. */
    real scale = (real)p->scale;
    for (int64_t j = 0; j < M; ++j)
        for (int iv = 0; iv < N; iv += VL) {
            int64_t at = j * FC_BM + iv;
            vr ds = vload(s->P + at) * (vload(s->dP + at) - vload(s->dsum + iv)) * scale;
            if (softcap) {
                vr th = vload(s->T + at);
                ds = ds * ((real)1 - th * th);
            }
            vstore(s->dP + at, ds);
        }

    /* dK += dS^T Q;  dQ (+)= dS K. */
    fc_gemm(M, (int)dp, N, s->dP, FC_BM, 1, rows->Q.data, rows->Q.ld, dK, ldk, 1);
    fc_gemm(N, (int)dp, M, s->dP, 1, FC_BM, K.data, K.ld, s->dQ, dp, !first);
}

static void fc_bwd_task(const flashc_problem *p, const flashc_cpu_bwd_layout *L, int64_t b,
                        int64_t hk, int64_t chunk, fc_bwd_scratch *s) {
    flashc_seq_info seq = flashc_problem_seq(p, b);
    int64_t d = p->head_dim, dv = p->head_dim_v, dp = fc_round_vl(d);
    int64_t group = p->nheads / p->nheads_k, nchunks = L->nchunks;
    int64_t key_tiles = (seq.sk + FC_BN - 1) / FC_BN;
    int64_t row_tiles = (seq.sq + FC_BM - 1) / FC_BM;
    if (chunk >= key_tiles) return;
    real *dq_partial = fc_ws_region(p, L->dq_offset) + chunk * p->total_q * p->nheads * d;
    /* This task's accumulator rows: key j of the sequence at row key_row + j. */
    int64_t key_row = flashc_cpu_bwd_key_row(p, b);
    ptrdiff_t ldk = (ptrdiff_t)(p->nheads_k * L->ld_dk), ldv = (ptrdiff_t)(p->nheads_k * L->ld_dv);
    real *dK = fc_ws_region(p, L->dk_offset) + key_row * ldk + hk * L->ld_dk;
    real *dV = fc_ws_region(p, L->dv_offset) + key_row * ldv + hk * L->ld_dv;
    for (int64_t kb = chunk; kb < key_tiles; kb += nchunks) {
        fc_tile_ctx key = {.sk = seq.sk};
        fc_set_key_tile(&key, kb);
        for (int64_t j = key.c0; j < key.c0 + key.cols_pad; ++j) { /* the rows fc_bwd_pair adds to */
            memset(dK + j * ldk, 0, sizeof(real) * (size_t)L->ld_dk);
            memset(dV + j * ldv, 0, sizeof(real) * (size_t)L->ld_dv);
        }
    }

    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        fc_tile_ctx t = fc_make_ctx(p, b, h, 1, &seq, 0);
        for (int64_t rb = 0; rb < row_tiles; ++rb) {
            fc_set_row_tile(&t, rb * FC_BM);
            int64_t kb0, kb1;
            fc_visible_key_tiles(p, &t, &kb0, &kb1);
            /* First key tile of this chunk at or after kb0. */
            int64_t kb = kb0 + ((chunk - kb0) % nchunks + nchunks) % nchunks;
            if (kb >= kb1) continue;
            fc_bwd_rows rows = fc_bwd_load_rows(p, &t, &seq, L, s);
            for (int first = 1; kb < kb1; kb += nchunks, first = 0) {
                fc_set_key_tile(&t, kb);
                fc_bwd_pair(p, &t, &seq, hk, &rows, dK + t.c0 * ldk, ldk, dV + t.c0 * ldv, ldv,
                            first, s);
            }
            for (int64_t i = 0; i < t.rows; ++i) {
                real *dst = dq_partial + ((rows.ws_row0 + i) * p->nheads + h) * d;
                const real *src = s->dQ + i * dp;
                for (int64_t x = 0; x < d; ++x) dst[x] += src[x];
            }
        }
    }

    for (int64_t kb = chunk; kb < key_tiles; kb += nchunks) {
        int64_t c0 = kb * FC_BN, cols = seq.sk - c0 < FC_BN ? seq.sk - c0 : FC_BN;
        for (int64_t j = c0; j < c0 + cols; ++j) {
            int64_t row = seq.k_start + j;
            fc_store_row((char *)p->dk.data + fc_seq_offset(&p->dk, b, row, hk) *
                                                  (int64_t)flashc_dtype_size(p->dk.dtype),
                         p->dk.dtype, dK + j * ldk, d, 1);
            fc_store_row((char *)p->dv.data + fc_seq_offset(&p->dv, b, row, hk) *
                                                  (int64_t)flashc_dtype_size(p->dv.dtype),
                         p->dv.dtype, dV + j * ldv, dv, 1);
        }
    }
}

/* dq = sum over chunks (in chunk order) of the partials. */
static void fc_bwd_reduce_dq(const flashc_problem *p, const flashc_cpu_bwd_layout *L,
                             fc_bwd_scratch *s) {
    const real *part = fc_ws_region(p, L->dq_offset);
    int64_t d = p->head_dim, stride = p->total_q * p->nheads * d;
    size_t esize = flashc_dtype_size(p->dq.dtype);
    #pragma omp for schedule(static)
    for (int64_t g = 0; g < p->total_q; ++g) {
        /* Batched rows are (batch, row) flattened; varlen rows are packed. */
        int64_t b = p->is_varlen ? 0 : g / p->seqlen_q;
        int64_t r = p->is_varlen ? g : g % p->seqlen_q;
        for (int64_t h = 0; h < p->nheads; ++h) {
            const real *src = part + (g * p->nheads + h) * d;
            for (int64_t x = 0; x < d; ++x) s->row_a[x] = src[x];
            for (int64_t c = 1; c < L->nchunks; ++c)
                for (int64_t x = 0; x < d; ++x) s->row_a[x] += src[c * stride + x];
            fc_store_row((char *)p->dq.data + fc_seq_offset(&p->dq, b, r, h) * (int64_t)esize,
                         p->dq.dtype, s->row_a, d, 1);
        }
    }
}

/* One thread's part of the backward. */
static void fc_backward_thread(const flashc_problem *p, const flashc_cpu_bwd_layout *L,
                               char *scratch, size_t per_thread) {
    fc_bwd_scratch s = fc_bwd_carve(scratch + (size_t)omp_get_thread_num() * per_thread, p);
    int64_t ntasks = p->batch * p->nheads_k * L->nchunks;
    int64_t partial_count = L->nchunks * p->total_q * p->nheads * p->head_dim;
    real *partials = fc_ws_region(p, L->dq_offset);
    fc_bwd_preprocess(p, L, &s);
    fc_bwd_transpose_tiles(p, L, &s);
    #pragma omp for schedule(static)
    for (int64_t x = 0; x < partial_count; ++x) partials[x] = 0;
    fc_bwd_zero_unused_keys(p);
    /* (implicit barrier: D, LSE2 and zeroed partials are ready) */
    #pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < ntasks; ++task) {
        int64_t b = task / (p->nheads_k * L->nchunks);
        int64_t hk = (task / L->nchunks) % p->nheads_k;
        int64_t chunk = task % L->nchunks;
        fc_bwd_task(p, L, b, hk, chunk, &s);
    }
    fc_bwd_reduce_dq(p, L, &s);
}

static flashc_status fc_backward(const flashc_problem *p) {
    flashc_cpu_bwd_layout L = flashc_cpu_bwd_layout_of(p);
    int nt = fc_thread_count(p);
    size_t per_thread = fc_bwd_scratch_bytes(p);
    char *scratch = (char *)aligned_alloc(64, per_thread * (size_t)nt);
    if (!scratch)
        return flashc_fail(FLASHC_ERROR_BACKEND, "cpu: cannot allocate %zu bytes of tile scratch",
                           per_thread * (size_t)nt);
    if (fc_parallel_region(nt)) {
        #pragma omp parallel num_threads(nt)
        fc_backward_thread(p, &L, scratch, per_thread);
    } else {
        fc_backward_thread(p, &L, scratch, per_thread);
    }
    free(scratch);
    return FLASHC_SUCCESS;
}

#endif
