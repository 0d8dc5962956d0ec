/* Forward kernel body, compiled once per variant (see variant.h).
 *
 * One task = (sequence, query heads, tile of FC_BM query rows, key split):
 * one head per tile, or a kv head's group of query heads packed per row
 * position when the queries are few (fc_fwd_packed_heads). The task packs
 * its queries transposed (pre-scaled so logits come out in log2 units),
 * then walks the key tiles its rows can see (monotone mask bounds: hidden
 * tiles are never touched), with an online softmax kept as vectors over
 * the rows. Masking runs only on tiles the mask cuts. O is accumulated in
 * a real tile; memory is O(tile), never O(N^2). Few row tiles split their
 * keys into tasks combined through the LSE (fc_fwd_key_splits); a decoding
 * step runs one task per sequence and split over all its head groups
 * (fc_fwd_plan's whole rows). */
#ifndef FLASHC_CPU_FORWARD_IMPL_H
#define FLASHC_CPU_FORWARD_IMPL_H

#include <omp.h>
#include <stdlib.h>

#include "core/error.h"

typedef struct fc_fwd_scratch {
    real *Qt, *Qr, *K, *V, *S, *O, *m, *l, *alpha, *row_tmp, *groups;
} fc_fwd_scratch;

/* Regions of the forward's per-thread scratch, sized by the problem's
 * largest tile (bm rows, bn columns: fc_tile_extents). */
#define FC_FWD_FIELDS(X)                                                                      \
    X(Qt, d *FC_BM) X(Qr, bm *d) X(K, bn *d) X(V, bn *dvp) X(S, bn *FC_BM) X(O, bm *dvp) X(m, FC_BM)       \
    X(l, FC_BM) X(alpha, FC_BM) X(row_tmp, dmax) X(groups, groups)

/* Query heads of a kv head's group packed into each row tile
 * (fc_tile_ctx): the most that divide the group and fit the longest
 * sequence's rows of all of them in one tile, so a decoding step (a few
 * queries per sequence) reads each key and value tile once per group, with
 * the row lanes filled. Dropout and S_dmask address their rows by one head
 * and stay unpacked; so do sequences too long for two heads in a tile,
 * which fill their tiles alone. */
static int64_t fc_fwd_packed_heads(const flashc_problem *p) {
    int64_t group = p->nheads / p->nheads_k, sq = p->seqlen_q > 0 ? p->seqlen_q : 1;
    if (group <= 1 || p->dropout_p > 0 || p->s_dmask.data) return 1;
    for (int64_t heads = group; heads > 1; --heads)
        if (group % heads == 0 && heads * sq <= FC_BM) return heads;
    return 1;
}

/* Key splits of each row tile: a decoding step has too few row tiles
 * (batch x head groups) to keep many cores busy, so each tile's visible
 * key tiles are cut into splits computed as tasks of their own and
 * combined exactly through their LSEs. Chosen from the shape alone, never
 * from the thread count, so results stay the same on any number of
 * threads: enough splits for FC_SPLIT_TASKS tasks, at least
 * FC_SPLIT_MIN_TILES key tiles each. A KV-cache call's num_splits, when
 * given, decides (1 = none). S_dmask needs each row's final maximum while
 * it writes and is never split. */
#define FC_SPLIT_TASKS 128
#define FC_SPLIT_MIN_TILES 8
/* A given num_splits is taken up to 128 (as the CUDA backend takes it) and
 * to FC_MAX_SPLIT_TASKS tasks in all, which bounds the partials' memory. */
#define FC_MAX_SPLITS 128
#define FC_MAX_SPLIT_TASKS 1024
static int64_t fc_fwd_key_splits(const flashc_problem *p, int64_t row_tiles) {
    int64_t key_tiles = (p->seqlen_k + FC_BN - 1) / FC_BN, splits;
    /* no row tiles (batch 0, or no query rows): nothing to split */
    if (p->s_dmask.data || key_tiles <= 1 || row_tiles <= 0) return 1;
    if (p->key_splits > 0) {
        splits = p->key_splits < FC_MAX_SPLITS ? p->key_splits : FC_MAX_SPLITS;
        if (splits * row_tiles > FC_MAX_SPLIT_TASKS) splits = FC_MAX_SPLIT_TASKS / row_tiles;
    } else {
        if (row_tiles >= FC_SPLIT_TASKS) return 1;
        splits = (FC_SPLIT_TASKS + row_tiles - 1) / row_tiles;
        if (splits > key_tiles / FC_SPLIT_MIN_TILES) splits = key_tiles / FC_SPLIT_MIN_TILES;
    }
    if (splits > key_tiles) splits = key_tiles;
    return splits > 1 ? splits : 1;
}

static int fc_fwd_rows_as_dots(const fc_tile_ctx *t, int64_t d);

/* How the forward is cut into tasks. `whole_rows`: a decoding step whose
 * every head group fits one row tile of few rows (fc_fwd_rows_as_dots) runs
 * one task per (sequence, key split) over all its head groups, reading
 * each key and value row of the cache across all kv heads in address
 * order: one head's rows alone are a few hundred bytes every few KiB,
 * which the hardware prefetchers cannot follow (NOTES: 9 GB/s per thread
 * against 13 in order). Dropout and S_dmask keep the per-tile path. */
typedef struct fc_fwd_plan {
    int64_t heads, positions, tiles_h, nrb, ntiles, splits;
    int64_t rows; /* the most rows a tile has */
    int whole_rows;
} fc_fwd_plan;

static fc_fwd_plan fc_fwd_plan_of(const flashc_problem *p) {
    fc_fwd_plan pl;
    pl.heads = fc_fwd_packed_heads(p);
    pl.positions = FC_BM / pl.heads;
    pl.tiles_h = p->nheads / pl.heads;
    pl.nrb = (p->seqlen_q + pl.positions - 1) / pl.positions;
    pl.ntiles = p->batch * pl.tiles_h * pl.nrb;
    fc_tile_ctx first = {.heads = pl.heads, .sq = p->seqlen_q > 0 ? p->seqlen_q : 1};
    fc_set_row_tile(&first, 0); /* a problem's first row tile has its most rows */
    pl.rows = first.rows;
    pl.whole_rows = pl.nrb == 1 && pl.tiles_h > 1 && p->dropout_p == 0 && !p->s_dmask.data &&
                    fc_fwd_rows_as_dots(&first, p->head_dim);
    /* a whole-rows task covers a sequence's head groups: splits for its tasks */
    pl.splits = fc_fwd_key_splits(p, pl.whole_rows ? p->batch : pl.ntiles);
    return pl;
}

/* Reals of one head group's state in the whole-rows path: query rows, m, l,
 * alpha, O and a logit tile. */
static int64_t fc_fwd_group_state(int64_t bm, int64_t d, int64_t dvp) {
    return (bm * d + 3 * bm + bm * dvp + FC_BN * FC_BM + 15) / 16 * 16;
}

#define FC_FWD_SIZES(p)                                                                       \
    int64_t d = (p)->head_dim, dvp = fc_round_vl((p)->head_dim_v), dmax = d > dvp ? d : dvp;  \
    int64_t bm, bn;                                                                           \
    fc_fwd_plan plan = fc_fwd_plan_of(p);                                                     \
    fc_tile_extents(p, plan.heads, &bm, &bn);                                                 \
    int64_t groups = plan.whole_rows ? plan.tiles_h * fc_fwd_group_state(bm, d, dvp) : 0

FC_DEFINE_SCRATCH(fc_fwd_scratch, fc_fwd, FC_FWD_FIELDS, FC_FWD_SIZES)

/* Query pre-scale: logits in log2 units straight out of the product, or
 * the tanh argument when softcap is on. */
static inline real fc_query_scale(const flashc_problem *p) {
    return p->softcap > 0 ? (real)(p->scale / p->softcap) : (real)(p->scale * FC_LOG2E);
}

/* The tile context of rows from r0 on of heads h .. h + heads - 1. */
static fc_tile_ctx fc_make_ctx(const flashc_problem *p, int64_t b, int64_t h, int64_t heads,
                               const flashc_seq_info *seq, int64_t r0) {
    fc_tile_ctx t;
    t.b = b;
    t.h = h;
    t.heads = heads;
    t.sq = seq->sq;
    t.sk = seq->sk;
    fc_set_row_tile(&t, r0);
    t.c0 = t.cols = t.cols_pad = 0;
    t.softcap_log2 = p->softcap > 0 ? (real)(p->softcap * FC_LOG2E) : 0;
    t.alibi = flashc_problem_alibi_slopes(p, b, h);
    t.alibi_step = p->alibi_head_stride;
    return t;
}

/* Range of key tiles [*kb0, *kb1) the rows of tile t can see. */
static void fc_visible_key_tiles(const flashc_problem *p, const fc_tile_ctx *t, int64_t *kb0,
                                 int64_t *kb1) {
    int64_t lo_first, hi_first, lo_last, hi_last;
    flashc_visible_cols(t->r0, t->sq, t->sk, p->window_left, p->window_right, &lo_first, &hi_first);
    flashc_visible_cols(fc_tile_pos(t, t->rows - 1), t->sq, t->sk, p->window_left, p->window_right,
                        &lo_last, &hi_last);
    if (hi_last <= lo_first) {
        *kb0 = *kb1 = 0;
        return;
    }
    *kb0 = lo_first / FC_BN;
    *kb1 = (hi_last + FC_BN - 1) / FC_BN;
}

/* Whether a row tile's products run row by row (fc_dots, fc_rows_times_panel)
 * rather than over whole vectors of rows (fc_gemm): when its few rows would
 * leave most of fc_gemm's row lanes padding. Counted in vector FMAs per key:
 * fc_gemm's logits d * rows_pad / VL, the dots' rows * (d / VL + the
 * horizontal sum, about log2(VL) + 1); the P V product costs rows instead of
 * rows_pad row vectors, never more. */
static int fc_fwd_rows_as_dots(const fc_tile_ctx *t, int64_t d) {
    int64_t hsum = 1;
    for (int l = VL; l > 1; l >>= 1) ++hsum;
    return t->rows * ((d + VL - 1) / VL + hsum) < d * t->rows_pad / VL;
}

/* The padding rows and columns of a logit tile the row-by-row products
 * left unwritten, zero (the mask then hides them). */
static void fc_fwd_zero_padding(const fc_tile_ctx *t, real *S) {
    for (int64_t j = 0; j < t->cols_pad; ++j)
        for (int64_t i = j < t->cols ? t->rows : 0; i < t->rows_pad; ++i) S[j * FC_BM + i] = 0;
}

/* Logits (log2 units, masked) of key tile t->c0 against the packed queries
 * (in s->Qr as rows, too, where the tile's products run row by row). */
static void fc_fwd_logit_tile(const flashc_problem *p, const fc_tile_ctx *t, int64_t hk,
                              const flashc_seq_info *seq, fc_fwd_scratch *s) {
    int64_t d = p->head_dim;
    fc_panel k = fc_key_panel(s->K, d, t->cols_pad, p, &p->k, t->b, seq, t->c0, t->cols, hk, d, 0);
    if (fc_fwd_rows_as_dots(t, d)) {
        fc_dots((int)t->rows, (int)t->cols, (int)d, s->Qr, d, k.data, k.ld, s->S, FC_BM);
        fc_fwd_zero_padding(t, s->S);
    } else {
        fc_gemm((int)t->cols_pad, (int)t->rows_pad, (int)d, k.data, k.ld, 1, s->Qt, FC_BM, s->S,
                FC_BM, 0);
    }
    fc_tile_logits(s->S, NULL, t);
    if (!fc_tile_fully_visible(p, t)) fc_tile_mask(s->S, p, t);
}

/* S_dmask rows of this tile: exp2(t - m) where visible, 0 elsewhere and in
 * the padding columns, negated where dropout drops. */
static void fc_fwd_write_sdmask(const flashc_problem *p, fc_tile_ctx t, int64_t hk,
                                const flashc_seq_info *seq, fc_fwd_scratch *s, int64_t kb0,
                                int64_t kb1) {
    const flashc_score_tensor *sd = &p->s_dmask;
    int64_t ntiles = (sd->cols + FC_BN - 1) / FC_BN;
    char *base = (char *)sd->data;
    int64_t esize = (int64_t)flashc_dtype_size(sd->dtype);
    for (int64_t kb = 0; kb < ntiles; ++kb) {
        int64_t c0 = kb * FC_BN;
        int64_t width = sd->cols - c0 < FC_BN ? sd->cols - c0 : FC_BN;
        int live = kb >= kb0 && kb < kb1 && c0 < t.sk;
        if (live) {
            fc_set_key_tile(&t, kb);
            fc_fwd_logit_tile(p, &t, hk, seq, s);
        }
        for (int64_t i = 0; i < t.rows; ++i) {
            real m = s->m[i] == -(real)INFINITY ? 0 : s->m[i];
            char *row = base + (t.b * sd->batch_stride + t.h * sd->head_stride +
                                (t.r0 + i) * sd->row_stride) * esize;
            flashc_philox_u32x4 w = {0, 0, 0, 0};
            int64_t w_group = -1;
            for (int64_t j = 0; j < width; ++j) {
                real v = 0;
                if (live && j < t.cols) {
                    v = sexp2(s->S[j * FC_BM + i] - m);
                    if (p->dropout_p > 0 && v != 0) {
                        if ((c0 + j) >> 2 != w_group) {
                            w = flashc_dropout_words(p->dropout_seed, p->dropout_offset, t.b,
                                                     p->nheads, t.h, t.r0 + i, c0 + j);
                            w_group = (c0 + j) >> 2;
                        }
                        if (flashc_dropout_word_for_col(w, c0 + j) < p->dropout_threshold) v = -v;
                    }
                }
                fc_store_one(row, sd->dtype, (c0 + j) * sd->col_stride, v);
            }
        }
    }
}

/* Online softmax over a logit tile, vectorised over the rows: the tile
 * becomes P = exp2(S - m_new), l and m move on, alpha = exp2(m_old - m_new)
 * per row (for O). */
static void fc_fwd_online_softmax(const fc_tile_ctx *t, real *S, real *m, real *l, real *alpha) {
    const vr neg_inf = vsplat(-(real)INFINITY);
    for (int iv = 0; iv < t->rows_pad; iv += VL) {
        vr mx = neg_inf;
        for (int j = 0; j < t->cols_pad; ++j) mx = vmax(mx, vload(S + j * FC_BM + iv));
        vr m_old = vload(m + iv);
        vr m_new = vmax(m_old, mx);
        /* A row with nothing visible yet keeps m = -inf; subtract 0. */
        vr m_use = vselect(m_new == neg_inf, vsplat(0), m_new);
        vr a = vexp2(m_old - m_use);
        vr sum = vsplat(0);
        for (int j = 0; j < t->cols_pad; ++j) {
            vr pv = vexp2(vload(S + j * FC_BM + iv) - m_use);
            vstore(S + j * FC_BM + iv, pv);
            sum += pv;
        }
        vstore(l + iv, vload(l + iv) * a + sum);
        vstore(m + iv, m_new);
        vstore(alpha + iv, a);
    }
}

/* O rows scaled by their alpha before the tile's P V is added. */
static void fc_fwd_rescale(const fc_tile_ctx *t, real *O, int64_t dvp, const real *alpha) {
    for (int i = 0; i < t->rows_pad; ++i) {
        real a = alpha[i];
        if (a != 1) {
            real *o = O + i * dvp;
            for (int64_t x = 0; x < dvp; ++x) o[x] *= a;
        }
    }
}

/* out and LSE of the tile's rows from their unnormalised O rows (row
 * stride ldo), maxima m and sums l (log2 units). */
static void fc_fwd_store_rows(const flashc_problem *p, const fc_tile_ctx *t, const flashc_seq_info *seq,
                              real *O, int64_t ldo, const real *m, const real *l) {
    int64_t dv = p->head_dim_v, heads = fc_tile_heads(t);
    real keep_scale = (real)(1.0 / (1.0 - p->dropout_p));
    for (int64_t i = 0; i < t->rows; ++i) {
        int64_t row = seq->q_start + t->r0 + i / heads, head = t->h + i % heads;
        char *o = (char *)p->out.data +
                  fc_seq_offset(&p->out, t->b, row, head) * (int64_t)flashc_dtype_size(p->out.dtype);
        real lse;
        if (l[i] > 0) {
            fc_store_row(o, p->out.dtype, O + i * ldo, dv, keep_scale / l[i]);
            lse = (m[i] + slog2(l[i])) * (real)FC_LN2;
        } else {
            for (int64_t x = 0; x < dv; ++x) O[i * ldo + x] = 0;
            fc_store_row(o, p->out.dtype, O + i * ldo, dv, 1);
            lse = (real)INFINITY;
        }
        if (p->lse.data)
            fc_store_one(p->lse.data, p->lse.dtype, fc_row_offset(&p->lse, t->b, row, head), lse);
    }
}

/* One split's partial result of a row tile: its rows' maxima, sums and
 * unnormalised O rows, room for `rows` of each (a tile's most: fc_fwd_plan). */
typedef struct fc_fwd_partial {
    real *m, *l, *O;
} fc_fwd_partial;

static fc_fwd_partial fc_fwd_partial_at(real *base, int64_t index, int64_t rows, int64_t dvp) {
    real *at = base + index * rows * (dvp + 2);
    fc_fwd_partial r = {at, at + rows, at + 2 * rows};
    return r;
}

/* A tile's softmax state before its first key tile: m -inf, l 0, O 0. */
static void fc_fwd_start_rows(const fc_tile_ctx *t, real *m, real *l, real *O, int64_t dvp) {
    for (int64_t i = 0; i < t->rows_pad; ++i) {
        m[i] = -(real)INFINITY;
        l[i] = 0;
    }
    for (int64_t x = 0; x < t->rows_pad * dvp; ++x) O[x] = 0;
}

/* The visible key tiles [kb0, kb1) of a row tile, cut to split `split` of
 * `splits` (nearly equal parts in order; some may be empty). */
static void fc_fwd_split_range(const flashc_problem *p, const fc_tile_ctx *t, int64_t split,
                               int64_t splits, int64_t *kb0, int64_t *kb1) {
    fc_visible_key_tiles(p, t, kb0, kb1);
    if (splits > 1) {
        int64_t n = *kb1 - *kb0, first = *kb0;
        *kb0 = first + n * split / splits;
        *kb1 = first + n * (split + 1) / splits;
    }
}

/* A row tile's result: as out and LSE, or (partial not NULL) as a split's
 * partial result for fc_forward_combine. */
static void fc_fwd_finish_rows(const flashc_problem *p, const fc_tile_ctx *t, const flashc_seq_info *seq,
                               real *O, int64_t dvp, const real *m, const real *l,
                               const fc_fwd_partial *partial) {
    if (!partial) {
        fc_fwd_store_rows(p, t, seq, O, dvp, m, l);
        return;
    }
    for (int64_t i = 0; i < t->rows; ++i) {
        partial->m[i] = m[i];
        partial->l[i] = l[i];
        for (int64_t x = 0; x < dvp; ++x) partial->O[i * dvp + x] = O[i * dvp + x];
    }
}

/* Row tile rb of heads h .. h + heads - 1 of sequence b (rows: fc_tile_ctx),
 * over split `split` of `splits` of its visible key tiles: stored as out
 * and LSE when unsplit, else as the split's partial result. */
static void fc_forward_tile(const flashc_problem *p, int64_t b, int64_t h, int64_t heads, int64_t rb,
                            int64_t split, int64_t splits, const fc_fwd_partial *partial,
                            fc_fwd_scratch *s) {
    flashc_seq_info seq = flashc_problem_seq(p, b);
    int64_t r0 = rb * (FC_BM / heads);
    if (r0 >= seq.sq) return;
    int64_t d = p->head_dim, dv = p->head_dim_v, dvp = fc_round_vl(dv);
    int64_t hk = h / (p->nheads / p->nheads_k);
    fc_tile_ctx t = fc_make_ctx(p, b, h, heads, &seq, r0);

    /* the queries in the layout the logits read: rows for the dots,
     * transposed for fc_gemm */
    const int dots = fc_fwd_rows_as_dots(&t, d);
    if (dots)
        fc_pack_rows(s->Qr, d, t.rows, &p->q, b, seq.q_start + r0, t.rows, h, heads, d, fc_query_scale(p));
    else
        fc_pack_rows_transposed(s->Qt, &p->q, b, seq.q_start + r0, t.rows, t.rows_pad, h, heads, d,
                                fc_query_scale(p), s->row_tmp);
    fc_fwd_start_rows(&t, s->m, s->l, s->O, dvp);

    int64_t kb0, kb1;
    fc_fwd_split_range(p, &t, split, splits, &kb0, &kb1);
    for (int64_t kb = kb0; kb < kb1; ++kb) {
        fc_set_key_tile(&t, kb);
        if (kb + 1 < kb1 && t.rows_pad <= FC_BM / 2) {
            int64_t next = (kb + 1) * FC_BN, cols = t.sk - next < FC_BN ? t.sk - next : FC_BN;
            fc_prefetch_keys(p, &p->k, b, &seq, next, cols, hk, d);
            fc_prefetch_keys(p, &p->v, b, &seq, next, cols, hk, dv);
        }
        fc_fwd_logit_tile(p, &t, hk, &seq, s);
        fc_panel v = fc_key_panel(s->V, dvp, t.cols_pad, p, &p->v, b, &seq, t.c0, t.cols, hk, dv, 1);

        fc_fwd_online_softmax(&t, s->S, s->m, s->l, s->alpha);
        if (p->dropout_p > 0) fc_tile_dropout(p, &t, s->S, NULL, 0);
        fc_fwd_rescale(&t, s->O, dvp, s->alpha);
        if (dots)
            fc_rows_times_panel((int)t.rows, (int)dvp, (int)t.cols_pad, s->S, 1, FC_BM, v.data, v.ld,
                                s->O, dvp);
        else
            fc_gemm((int)t.rows_pad, (int)dvp, (int)t.cols_pad, s->S, 1, FC_BM, v.data, v.ld, s->O,
                    dvp, 1);
    }

    fc_fwd_finish_rows(p, &t, &seq, s->O, dvp, s->m, s->l, partial);
    /* (never split: fc_fwd_key_splits) */
    if (p->s_dmask.data) fc_fwd_write_sdmask(p, t, hk, &seq, s, kb0, kb1);
}

/* Rows no task writes: S_dmask padding rows, and in varlen mode the packed
 * rows before the first and after the last sequence (out 0, LSE +inf, as
 * rows that see nothing). */
static void fc_forward_fill_uncovered(const flashc_problem *p) {
    if (p->s_dmask.data) {
        const flashc_score_tensor *sd = &p->s_dmask;
        #pragma omp for schedule(static)
        for (int64_t bh = 0; bh < p->batch * p->nheads; ++bh) {
            int64_t b = bh / p->nheads, h = bh % p->nheads;
            flashc_seq_info seq = flashc_problem_seq(p, b);
            for (int64_t r = seq.sq; r < sd->rows; ++r)
                for (int64_t c = 0; c < sd->cols; ++c)
                    fc_store_one(sd->data, sd->dtype,
                                 b * sd->batch_stride + h * sd->head_stride + r * sd->row_stride +
                                     c * sd->col_stride,
                                 0);
        }
    }
    if (p->is_varlen) {
        int64_t head = p->cu_seqlens_q[0], tail = p->cu_seqlens_q[p->batch];
        #pragma omp for schedule(static)
        for (int64_t row = 0; row < p->total_q; ++row) {
            if (row >= head && row < tail) continue;
            for (int64_t h = 0; h < p->nheads; ++h) {
                for (int64_t x = 0; x < p->head_dim_v; ++x)
                    fc_store_one(p->out.data, p->out.dtype, fc_seq_offset(&p->out, 0, row, h) + x, 0);
                if (p->lse.data)
                    fc_store_one(p->lse.data, p->lse.dtype, fc_row_offset(&p->lse, 0, row, h),
                                 (real)INFINITY);
            }
        }
    }
}

static inline int fc_thread_count(const flashc_problem *p) {
    return p->num_threads > 0 ? p->num_threads : omp_get_max_threads();
}

/* Whether a call on `nt` threads runs in a parallel region of its own. On
 * one thread it runs on the caller's thread directly: a parallel region's
 * set-up costs more than a small problem's whole work, and its worksharing
 * loops then run as a team of one. Inside a caller's parallel region a
 * region of its own is needed even so, or those loops would be shared out
 * among the caller's threads. */
static inline int fc_parallel_region(int nt) { return nt > 1 || omp_in_parallel(); }

/* One head group's state in the whole-rows path, carved from its
 * fc_fwd_group_state reals. */
typedef struct fc_fwd_group {
    real *Qr, *m, *l, *alpha, *O, *S;
} fc_fwd_group;

static fc_fwd_group fc_fwd_group_at(real *base, int64_t bm, int64_t d, int64_t dvp) {
    fc_fwd_group g;
    g.Qr = base;
    g.m = g.Qr + bm * d;
    g.l = g.m + bm;
    g.alpha = g.l + bm;
    g.O = g.alpha + bm;
    g.S = g.O + bm * dvp;
    return g;
}

/* Key c (of the sequence) of kv head hk in k or v (n elements), as the
 * tensor holds it; row c + ahead is prefetched first where it is before
 * `end`. */
static const char *fc_fwd_cache_row(const flashc_problem *p, const flashc_seq_tensor *t,
                                    const flashc_seq_info *seq, int64_t b, int64_t c, int64_t hk, int64_t n,
                                    int64_t ahead, int64_t end) {
    if (c + ahead < end) fc_prefetch_keys(p, t, b, seq, c + ahead, 1, hk, n);
    return fc_key_row(p, t, b, seq, c, hk);
}

/* A cache row as n_pad reals: the row itself where it already is, else
 * widened (and zero-padded) into tmp. */
static const real *fc_fwd_real_row(const char *row, flashc_dtype dtype, int64_t n, int64_t n_pad, real *tmp) {
    if (dtype == FC_NATIVE_DTYPE && n == n_pad) return (const real *)row;
    fc_load_row(tmp, row, dtype, n, 1);
    for (int64_t x = n; x < n_pad; ++x) tmp[x] = 0;
    return tmp;
}

/* How many cache rows ahead the whole-rows path prefetches: about 8 KiB of
 * K (or V) rows, at least one row and at most eight. The rows are read in
 * address order, but each row's kv heads are handled one at a time between
 * other work, and the hardware prefetchers alone left the reads at 7-9
 * GB/s per thread; 2-16 KiB ahead all measured alike, 15-25 % faster
 * (bench/NOTES.md, "Decoding over a KV cache"). */
#define FC_PREFETCH_AHEAD_BYTES 8192
static int64_t fc_rows_ahead(const flashc_problem *p) {
    const int64_t row = p->nheads_k * p->head_dim * (int64_t)flashc_dtype_size(p->k.dtype);
    const int64_t rows = (FC_PREFETCH_AHEAD_BYTES + row - 1) / row;
    return rows < 1 ? 1 : rows > 8 ? 8 : rows;
}

#if !FLASHC_CPU_REAL_DOUBLE
/* The whole-rows path's products over bfloat16 cache rows, four query rows
 * at a time and the rest one by one. Dots: the `rows` query rows (d apart)
 * against one key row, into S column s_col (its sums batched). */
static void fc_fwd_bf16_dots(int rows, int d, const real *Qr, const uint16_t *key, real *s_col, fc_dot_batch *batch) {
    vr dots[4];
    int i = 0;
    for (; i + 4 <= rows; i += 4) {
        fc_dot_rows4_bf16(Qr + i * d, key, d, dots);
        for (int k = 0; k < 4; ++k) fc_dot_batch_add(batch, dots[k], s_col + i + k);
    }
    for (; i < rows; ++i) {
        fc_dot_rows1_bf16(Qr + i * d, key, d, dots);
        fc_dot_batch_add(batch, dots[0], s_col + i);
    }
}

/* O rows (dvp apart) += the weights of S columns s_col .. (keys of them,
 * 1 or 4, FC_BM apart) times `keys` value rows. */
static void fc_fwd_bf16_values(int rows, int keys, int dv, const real *s_col, const uint16_t *const *values, real *O,
                               int64_t dvp) {
    int i = 0;
    for (; i + 4 <= rows; i += 4) {
        if (keys == 4)
            fc_axpy_rows4_keys4_bf16(dv, s_col + i, FC_BM, values, O + i * dvp, dvp);
        else
            fc_axpy_rows4_bf16(dv, s_col + i, FC_BM, values, O + i * dvp, dvp);
    }
    for (; i < rows; ++i) {
        if (keys == 4)
            fc_axpy_rows1_keys4_bf16(dv, s_col + i, FC_BM, values, O + i * dvp, dvp);
        else
            fc_axpy_rows1_bf16(dv, s_col + i, FC_BM, values, O + i * dvp, dvp);
    }
}
#endif

/* The whole-rows path (fc_fwd_plan): split `split` of `splits` of sequence
 * b's keys for all of its head groups. Per key tile: each key row's logits
 * against every group's queries, the rows taken in address order (row j's
 * kv heads side by side); then each group's masks and online softmax; then
 * the value rows, in the same order, into each group's O. Per group the
 * same arithmetic as fc_forward_tile's row-by-row products. */
static void fc_forward_whole_rows(const flashc_problem *p, int64_t b, const fc_fwd_plan *pl,
                                  int64_t split, real *partials, int64_t bm, fc_fwd_scratch *s) {
    flashc_seq_info seq = flashc_problem_seq(p, b);
    if (seq.sq <= 0) return;
    const int64_t d = p->head_dim, dv = p->head_dim_v, dvp = fc_round_vl(dv);
    const int64_t heads = pl->heads, groups = pl->tiles_h, group_size = p->nheads / p->nheads_k;
    const int64_t stride = fc_fwd_group_state(bm, d, dvp), splits = pl->splits;

    fc_tile_ctx t = fc_make_ctx(p, b, 0, heads, &seq, 0);
    const int rows = (int)t.rows;
    for (int64_t hg = 0; hg < groups; ++hg) {
        fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
        fc_pack_rows(g.Qr, d, t.rows, &p->q, b, seq.q_start, t.rows, hg * heads, heads, d, fc_query_scale(p));
        fc_fwd_start_rows(&t, g.m, g.l, g.O, dvp);
    }

    int64_t kb0, kb1;
    fc_fwd_split_range(p, &t, split, splits, &kb0, &kb1); /* every group's: rows decide */
    const int64_t key_end = kb1 * FC_BN < t.sk ? kb1 * FC_BN : t.sk; /* this split's keys end */
    const int64_t ahead = fc_rows_ahead(p);
#if !FLASHC_CPU_REAL_DOUBLE
    /* up to 8 query rows per group over bfloat16 rows of whole vectors:
     * each cache row is widened in registers inside the products (four
     * query rows at a time) rather than into a staging row first; more
     * rows (MQA) reuse one staged row better than they widen it again */
    const int bf16_rows = rows <= 8 && p->k.dtype == FLASHC_DTYPE_BFLOAT16 &&
                          p->v.dtype == FLASHC_DTYPE_BFLOAT16 && d % VL == 0 && dv == dvp;
#endif
    fc_dot_batch batch; /* the tile's dot products, their lanes summed VL at a time */
    batch.n = 0;
    for (int64_t kb = kb0; kb < kb1; ++kb) {
        fc_set_key_tile(&t, kb);
        for (int64_t j = 0; j < t.cols; ++j)
            for (int64_t hg = 0; hg < groups; ++hg) {
                fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
                const char *row = fc_fwd_cache_row(p, &p->k, &seq, b, t.c0 + j, hg * heads / group_size, d,
                                                   ahead, key_end);
#if !FLASHC_CPU_REAL_DOUBLE
                if (bf16_rows) {
                    fc_fwd_bf16_dots(rows, (int)d, g.Qr, (const uint16_t *)row, g.S + j * FC_BM, &batch);
                    continue;
                }
#endif
                const real *key = fc_fwd_real_row(row, p->k.dtype, d, d, s->row_tmp);
                for (int i = 0; i < rows; ++i)
                    fc_dot_batch_add(&batch, fc_dot_lanes(g.Qr + i * d, key, (int)d), g.S + j * FC_BM + i);
            }
        fc_dot_batch_flush(&batch);
        for (int64_t hg = 0; hg < groups; ++hg) {
            fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
            fc_tile_ctx tg = fc_make_ctx(p, b, hg * heads, heads, &seq, 0);
            fc_set_key_tile(&tg, kb);
            fc_fwd_zero_padding(&tg, g.S);
            fc_tile_logits(g.S, NULL, &tg);
            if (!fc_tile_fully_visible(p, &tg)) fc_tile_mask(g.S, p, &tg);
            fc_fwd_online_softmax(&tg, g.S, g.m, g.l, g.alpha);
            fc_fwd_rescale(&tg, g.O, dvp, g.alpha);
        }
        for (int64_t j = 0; j < t.cols;) {
#if !FLASHC_CPU_REAL_DOUBLE
            /* bfloat16 rows: with 4 or more query rows per group, four keys
             * at a time, each O vector loaded and stored once for the four
             * (rows j .. j + 3 of every kv head, the prefetch at least a
             * block ahead); one row per group (MHA) measured 4 % slower so
             * (four streams through the cache instead of one) */
            if (bf16_rows) {
                const int keys = rows >= 4 && j + 4 <= t.cols ? 4 : 1;
                const int64_t ahead_v = keys == 4 && ahead < 4 ? 4 : ahead;
                for (int64_t hg = 0; hg < groups; ++hg) {
                    fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
                    const uint16_t *vrows[4];
                    for (int k = 0; k < keys; ++k)
                        vrows[k] = (const uint16_t *)fc_fwd_cache_row(p, &p->v, &seq, b, t.c0 + j + k,
                                                                      hg * heads / group_size, dv, ahead_v, key_end);
                    fc_fwd_bf16_values(rows, keys, (int)dv, g.S + j * FC_BM, vrows, g.O, dvp);
                }
                j += keys;
                continue;
            }
#endif
            for (int64_t hg = 0; hg < groups; ++hg) {
                fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
                const char *row = fc_fwd_cache_row(p, &p->v, &seq, b, t.c0 + j, hg * heads / group_size, dv,
                                                   ahead, key_end);
                const real *value = fc_fwd_real_row(row, p->v.dtype, dv, dvp, s->row_tmp);
                fc_rows_times_panel(rows, (int)dvp, 1, g.S + j * FC_BM, 1, FC_BM, value, 0, g.O, dvp);
            }
            ++j;
        }
    }

    for (int64_t hg = 0; hg < groups; ++hg) {
        fc_fwd_group g = fc_fwd_group_at(s->groups + hg * stride, bm, d, dvp);
        fc_tile_ctx tg = fc_make_ctx(p, b, hg * heads, heads, &seq, 0);
        fc_fwd_partial part;
        if (splits > 1) part = fc_fwd_partial_at(partials, (b * groups + hg) * splits + split, pl->rows, dvp);
        fc_fwd_finish_rows(p, &tg, &seq, g.O, dvp, g.m, g.l, splits > 1 ? &part : NULL);
    }
}

/* The partial results of a row tile's splits combined: the largest maximum
 * M, l = sum of l_s 2^(m_s - M), O = sum of O_s 2^(m_s - M), then stored
 * as an unsplit tile stores its rows. */
static void fc_forward_combine(const flashc_problem *p, int64_t b, int64_t h, int64_t heads, int64_t rb,
                               int64_t splits, real *partials, int64_t first, int64_t rows,
                               fc_fwd_scratch *s) {
    flashc_seq_info seq = flashc_problem_seq(p, b);
    int64_t r0 = rb * (FC_BM / heads);
    if (r0 >= seq.sq) return;
    int64_t dvp = fc_round_vl(p->head_dim_v);
    fc_tile_ctx t = fc_make_ctx(p, b, h, heads, &seq, r0);
    for (int64_t i = 0; i < t.rows; ++i) {
        real M = -(real)INFINITY, L = 0;
        real *o = s->O + i * dvp;
        for (int64_t sp = 0; sp < splits; ++sp) {
            real m = fc_fwd_partial_at(partials, first + sp, rows, dvp).m[i];
            M = m > M ? m : M;
        }
        for (int64_t x = 0; x < dvp; ++x) o[x] = 0;
        if (M != -(real)INFINITY) {
            for (int64_t sp = 0; sp < splits; ++sp) {
                fc_fwd_partial part = fc_fwd_partial_at(partials, first + sp, rows, dvp);
                if (part.l[i] == 0) continue; /* an empty split (its maximum -inf) */
                real w = sexp2(part.m[i] - M);
                L += w * part.l[i];
                for (int64_t x = 0; x < dvp; ++x) o[x] += w * part.O[i * dvp + x];
            }
        }
        s->m[i] = M;
        s->l[i] = L;
    }
    fc_fwd_store_rows(p, &t, &seq, s->O, dvp, s->m, s->l);
}

/* One thread's part of the forward: the row tiles (each split's partial
 * result, then the combines, where the key tiles are split). */
static void fc_forward_thread(const flashc_problem *p, char *scratch, size_t per_thread, real *partials) {
    fc_fwd_scratch s = fc_fwd_carve(scratch + (size_t)omp_get_thread_num() * per_thread, p);
    const fc_fwd_plan pl = fc_fwd_plan_of(p);
    const int64_t heads = pl.heads, tiles_h = pl.tiles_h, nrb = pl.nrb, ntiles = pl.ntiles;
    const int64_t splits = pl.splits;
    int64_t bm, bn, dvp = fc_round_vl(p->head_dim_v);
    fc_tile_extents(p, heads, &bm, &bn);
    if (pl.whole_rows) {
        #pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < p->batch * splits; ++task)
            fc_forward_whole_rows(p, task / splits, &pl, task % splits, partials, bm, &s);
    } else {
        /* Later row tiles see more keys under a causal mask: start them first. */
        #pragma omp for schedule(dynamic, 1)
        for (int64_t task = 0; task < ntiles * splits; ++task) {
            int64_t tile = task / splits, split = task % splits;
            int64_t b = tile / (tiles_h * nrb);
            int64_t h = (tile / nrb) % tiles_h * heads;
            int64_t rb = nrb - 1 - tile % nrb;
            fc_fwd_partial part;
            if (splits > 1) part = fc_fwd_partial_at(partials, task, pl.rows, dvp);
            fc_forward_tile(p, b, h, heads, rb, split, splits, splits > 1 ? &part : NULL, &s);
        }
    }
    /* partials of tile (b, group, rb) at tile * splits + split on both paths */
    if (splits > 1) {
        #pragma omp for schedule(static)
        for (int64_t tile = 0; tile < ntiles; ++tile)
            fc_forward_combine(p, tile / (tiles_h * nrb), (tile / nrb) % tiles_h * heads, heads,
                               nrb - 1 - tile % nrb, splits, partials, tile * splits, pl.rows, &s);
    }
    fc_forward_fill_uncovered(p);
}

/* Bytes of the split partial results (0 when the key tiles are not split). */
static size_t fc_fwd_partial_bytes(const flashc_problem *p) {
    fc_fwd_plan pl = fc_fwd_plan_of(p);
    if (pl.splits <= 1) return 0;
    return (size_t)(pl.ntiles * pl.splits * pl.rows * (fc_round_vl(p->head_dim_v) + 2)) * sizeof(real);
}

static flashc_status fc_forward(const flashc_problem *p) {
    int nt = fc_thread_count(p);
    size_t per_thread = fc_fwd_scratch_bytes(p), partial_bytes = fc_fwd_partial_bytes(p);
    size_t bytes = per_thread * (size_t)nt + partial_bytes;
    char *scratch = (char *)aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!scratch)
        return flashc_fail(FLASHC_ERROR_BACKEND, "cpu: cannot allocate %zu bytes of tile scratch", bytes);
    real *partials = partial_bytes ? (real *)(scratch + per_thread * (size_t)nt) : NULL;
    if (fc_parallel_region(nt)) {
        #pragma omp parallel num_threads(nt)
        fc_forward_thread(p, scratch, per_thread, partials);
    } else {
        fc_forward_thread(p, scratch, per_thread, partials);
    }
    free(scratch);
    return FLASHC_SUCCESS;
}

#endif
