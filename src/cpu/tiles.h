/* Tile sizes and the helpers the forward and backward kernels share:
 * per-thread scratch carving, tile packing (dtype conversion into padded
 * real panels), masking, score transforms and dropout on a score tile.
 *
 * Score tiles are stored column-major over the query rows: S[j * FC_BM + i]
 * for key column j and query row i, so every per-row softmax quantity
 * (max, sum, LSE) is a vector over i. Needs vec.h, convert.h, gemm.h. */
#ifndef FLASHC_CPU_TILES_H
#define FLASHC_CPU_TILES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/problem.h"
#include "core/semantics.h"
#include "philox_simd.h"

/* Query rows per tile (the vector dimension of score tiles) and key columns
 * per tile. Both multiples of MR and of every VL. */
#define FC_BM 64
#define FC_BN 64
/* A tile with fewer rows or columns (the last one of a sequence, or a whole
 * short sequence) is computed over its rows rounded up to FC_ROW_STEP (a
 * whole number of vectors, and of MR when rows are a product's M) and its
 * columns rounded up to MR, not over FC_BM x FC_BN: the entries in between
 * are padding, masked like hidden ones. VL and MR are powers of two. */
#define FC_ROW_STEP (VL > MR ? VL : MR)

static inline int64_t fc_round_vl(int64_t n) { return (n + VL - 1) / VL * VL; }

/* Carve `count` reals from a scratch cursor, 64-byte aligned. */
static inline real *fc_carve(char **cursor, int64_t count) {
    real *p = (real *)*cursor;
    *cursor += ((size_t)count * sizeof(real) + 63) & ~(size_t)63;
    return p;
}

static inline size_t fc_carve_bytes(int64_t count) {
    return ((size_t)count * sizeof(real) + 63) & ~(size_t)63;
}

/* A kernel's per-thread scratch: `type`, a struct of real pointers, one per
 * region of FIELDS(X) (X(name, count): `count` reals), the counts written
 * with the variables SIZES(p) declares. Defines <prefix>_scratch_bytes(p)
 * and <prefix>_carve(base, p), which lays the regions out from base, each
 * one 64-byte aligned. */
#define FC_SCRATCH_ADD(name, count) bytes += fc_carve_bytes(count);
#define FC_SCRATCH_CARVE(name, count) s.name = fc_carve(&base, count);
#define FC_DEFINE_SCRATCH(type, prefix, FIELDS, SIZES)                          \
    static size_t prefix##_scratch_bytes(const flashc_problem *p) {              \
        SIZES(p);                                                                \
        size_t bytes = 0;                                                        \
        FIELDS(FC_SCRATCH_ADD)                                                   \
        return bytes;                                                            \
    }                                                                            \
    static type prefix##_carve(char *base, const flashc_problem *p) {            \
        SIZES(p);                                                                \
        type s;                                                                  \
        FIELDS(FC_SCRATCH_CARVE)                                                 \
        return s;                                                                \
    }

static inline const char *fc_elem(const void *base, flashc_dtype dtype, int64_t offset) {
    return (const char *)base + offset * (int64_t)flashc_dtype_size(dtype);
}

/* Element offset of (batch b, packed row r, head h) of a sequence tensor. */
static inline int64_t fc_seq_offset(const flashc_seq_tensor *t, int64_t b, int64_t r, int64_t h) {
    return b * t->batch_stride + r * t->row_stride + h * t->head_stride;
}

static inline int64_t fc_row_offset(const flashc_row_tensor *t, int64_t b, int64_t r, int64_t h) {
    return b * t->batch_stride + h * t->head_stride + r * t->row_stride;
}

/* rows x n rows of a sequence tensor into dst[i * ld + x] (scaled), rows up
 * to `rows_pad` and columns up to `ld` zero. With heads > 1 the rows are
 * `heads` query heads packed per row position: row i is row row0 + i / heads
 * of head h + i % heads (fc_tile_ctx). */
static void fc_pack_rows(real *dst, int64_t ld, int64_t rows_pad, const flashc_seq_tensor *t,
                         int64_t b, int64_t row0, int64_t rows, int64_t h, int64_t heads, int64_t n,
                         real scale) {
    for (int64_t i = 0; i < rows_pad; ++i) {
        real *d = dst + i * ld;
        int64_t x = 0;
        if (i < rows) {
            int64_t offset = fc_seq_offset(t, b, row0 + i / heads, h + i % heads);
            fc_load_row(d, fc_elem(t->data, t->dtype, offset), t->dtype, n, scale);
            x = n;
        }
        for (; x < ld; ++x) d[x] = 0;
    }
}

#if FLASHC_CPU_REAL_DOUBLE
#define FC_NATIVE_DTYPE FLASHC_DTYPE_FLOAT64
#else
#define FC_NATIVE_DTYPE FLASHC_DTYPE_FLOAT32
#endif

/* A tile of rows of a sequence tensor as a real panel (element (i, x) at
 * data[i * ld + x]). When the tensor already holds reals and the tile has
 * all `rows_pad` rows, the panel is the tensor itself (no copy; row_stride
 * as ld); `vector_rows` also asks that rows be read as whole vectors, which
 * needs n % VL == 0. Otherwise the rows are packed into dst (ld_packed). */
typedef struct fc_panel {
    const real *data;
    ptrdiff_t ld;
} fc_panel;

static fc_panel fc_tile_panel(real *dst, int64_t ld_packed, int64_t rows_pad,
                              const flashc_seq_tensor *t, int64_t b, int64_t row0, int64_t rows,
                              int64_t h, int64_t n, int vector_rows) {
    fc_panel panel;
    if (t->dtype == FC_NATIVE_DTYPE && rows == rows_pad && (!vector_rows || n % VL == 0)) {
        panel.data = (const real *)t->data + fc_seq_offset(t, b, row0, h);
        panel.ld = (ptrdiff_t)t->row_stride;
    } else {
        fc_pack_rows(dst, ld_packed, rows_pad, t, b, row0, rows, h, 1, n, 1);
        panel.data = dst;
        panel.ld = (ptrdiff_t)ld_packed;
    }
    return panel;
}

/* Key j of sequence b (seq: flashc_problem_seq), head h, of k or v: its
 * first element, from the sequence's cache batch or through the block
 * table. */
static const char *fc_key_row(const flashc_problem *p, const flashc_seq_tensor *t, int64_t b,
                              const flashc_seq_info *seq, int64_t j, int64_t h) {
    int64_t offset = flashc_problem_key_offset(p, t, b, seq->k_batch, seq->k_start + j) + h * t->head_stride;
    return fc_elem(t->data, t->dtype, offset);
}

/* Keys j0 .. j0 + rows - 1 of sequence b (seq: flashc_problem_seq) of k or
 * v as a real panel, as fc_tile_panel does for plain rows: from the
 * sequence's cache batch, or through the block table when the keys are
 * paged (a tile inside one block is read in place like plain rows; one
 * across blocks is packed row by row). */
static fc_panel fc_key_panel(real *dst, int64_t ld_packed, int64_t rows_pad, const flashc_problem *p,
                             const flashc_seq_tensor *t, int64_t b, const flashc_seq_info *seq,
                             int64_t j0, int64_t rows, int64_t h, int64_t n, int vector_rows) {
    int64_t c0 = seq->k_start + j0;
    const flashc_kv_layout *kv = &p->kv;
    if (!kv->block_table)
        return fc_tile_panel(dst, ld_packed, rows_pad, t, seq->k_batch, c0, rows, h, n, vector_rows);
    int64_t bs = kv->block_size;
    if (rows > 0 && c0 / bs == (c0 + rows - 1) / bs) {
        int64_t block = kv->block_table[b * kv->block_table_stride + c0 / bs];
        return fc_tile_panel(dst, ld_packed, rows_pad, t, block, c0 % bs, rows, h, n, vector_rows);
    }
    for (int64_t i = 0; i < rows_pad; ++i) {
        real *d = dst + i * ld_packed;
        int64_t x = 0;
        if (i < rows) {
            fc_load_row(d, fc_key_row(p, t, b, seq, j0 + i, h), t->dtype, n, 1);
            x = n;
        }
        for (; x < ld_packed; ++x) d[x] = 0;
    }
    fc_panel panel = {dst, (ptrdiff_t)ld_packed};
    return panel;
}

/* Ask for keys j0 .. j0 + rows - 1 of sequence b (head h, n elements of
 * each) of k or v to be brought into the cache. A head's key rows lie a
 * whole row of every head apart, too far for the hardware prefetchers to
 * follow, and the product of a tile of few rows (a decoding step's) is
 * too short to hide their misses: the forward prefetches the next tile's
 * rows while it computes on the current one (into L2: a tile of keys and
 * values can outgrow L1). */
static void fc_prefetch_keys(const flashc_problem *p, const flashc_seq_tensor *t, int64_t b,
                             const flashc_seq_info *seq, int64_t j0, int64_t rows, int64_t h,
                             int64_t n) {
    int64_t bytes = n * (int64_t)flashc_dtype_size(t->dtype);
    for (int64_t i = 0; i < rows; ++i) {
        const char *row = fc_key_row(p, t, b, seq, j0 + i, h);
        for (int64_t x = 0; x < bytes; x += 64) __builtin_prefetch(row + x, 0, 2);
    }
}

/* The same rows transposed: dst[x * FC_BM + i], x < n, i < rows_pad (rows
 * beyond `rows` zero). With heads > 1 the rows are `heads` query heads
 * packed per row position: row i is row row0 + i / heads of head
 * h + i % heads (fc_tile_ctx). */
static void fc_pack_rows_transposed(real *dst, const flashc_seq_tensor *t, int64_t b, int64_t row0,
                                    int64_t rows, int64_t rows_pad, int64_t h, int64_t heads, int64_t n,
                                    real scale, real *row_tmp) {
    for (int64_t i = 0; i < rows_pad; ++i) {
        if (i < rows) {
            int64_t offset = fc_seq_offset(t, b, row0 + i / heads, h + i % heads);
            fc_load_row(row_tmp, fc_elem(t->data, t->dtype, offset), t->dtype, n, scale);
            for (int64_t x = 0; x < n; ++x) dst[x * FC_BM + i] = row_tmp[x];
        } else {
            for (int64_t x = 0; x < n; ++x) dst[x * FC_BM + i] = 0;
        }
    }
}

/* The facts about one (row tile, key tile) pair a kernel needs; set by
 * fc_set_row_tile and fc_set_key_tile. A tile's rows are `heads` query
 * heads (h, h + 1, ..., of one kv head's group) at each of its row
 * positions: row i is position r0 + i / heads of head h + i % heads. The
 * forward packs a group's heads so when its sequences are short (decoding:
 * one or a few queries against a long cache), so that the keys and values
 * are read, converted and multiplied once per group and the vector lanes
 * over the rows are filled; everything else runs one head per tile
 * (heads 1; 0 reads as 1). */
typedef struct fc_tile_ctx {
    int64_t b, h;              /* batch (sequence) and (first) query head */
    int64_t heads;             /* query heads per row position */
    int64_t sq, sk;            /* sequence lengths */
    int64_t r0, rows;          /* first row position of the tile, valid rows */
    int64_t c0, cols;          /* first column of the tile, valid columns */
    int64_t rows_pad, cols_pad; /* rows and columns computed (see FC_ROW_STEP) */
    real softcap_log2;         /* softcap * log2(e), 0 = off */
    const float *alibi;        /* head h's ALiBi slope (NULL = off); head h + k's at alibi[k * alibi_step] */
    int64_t alibi_step;
} fc_tile_ctx;

static inline int64_t fc_tile_heads(const fc_tile_ctx *t) { return t->heads > 1 ? t->heads : 1; }

/* Row position (query row of the sequence) of tile row i. */
static inline int64_t fc_tile_pos(const fc_tile_ctx *t, int64_t i) { return t->r0 + i / fc_tile_heads(t); }

/* Row tile starting at row position r0 of the sequence (r0 < t->sq). */
static inline void fc_set_row_tile(fc_tile_ctx *t, int64_t r0) {
    int64_t heads = fc_tile_heads(t), positions = FC_BM / heads;
    t->r0 = r0;
    t->rows = (t->sq - r0 < positions ? t->sq - r0 : positions) * heads;
    t->rows_pad = (t->rows + FC_ROW_STEP - 1) / FC_ROW_STEP * FC_ROW_STEP;
}

/* Key tile kb of the sequence (kb * FC_BN < t->sk). */
static inline void fc_set_key_tile(fc_tile_ctx *t, int64_t kb) {
    t->c0 = kb * FC_BN;
    t->cols = t->sk - t->c0 < FC_BN ? t->sk - t->c0 : FC_BN;
    t->cols_pad = (t->cols + MR - 1) / MR * MR;
}

/* The largest rows_pad and cols_pad of any tile of problem p with `heads`
 * query heads per row position (one step at least): the extents its
 * per-thread tile scratch is sized by. */
static inline void fc_tile_extents(const flashc_problem *p, int64_t heads, int64_t *rows_pad,
                                   int64_t *cols_pad) {
    fc_tile_ctx t = {.heads = heads,
                     .sq = p->seqlen_q > 0 ? p->seqlen_q : 1,
                     .sk = p->seqlen_k > 0 ? p->seqlen_k : 1};
    fc_set_row_tile(&t, 0);
    fc_set_key_tile(&t, 0);
    *rows_pad = t.rows_pad;
    *cols_pad = t.cols_pad;
}

/* Turn raw tile dot products (of queries pre-scaled by scale*log2e, or by
 * scale/softcap when softcap is on) into logits in log2 units. With softcap
 * the tanh values are kept in `tanh_out` (for the backward's derivative). */
static void fc_tile_logits(real *S, real *tanh_out, const fc_tile_ctx *t) {
    if (t->softcap_log2 > 0) {
        for (int64_t j = 0; j < t->cols_pad; ++j)
            for (int64_t i = 0; i < t->rows_pad; i += VL) {
                vr th = vtanh(vload(S + j * FC_BM + i));
                if (tanh_out) vstore(tanh_out + j * FC_BM + i, th);
                vstore(S + j * FC_BM + i, th * t->softcap_log2);
            }
    }
    if (t->alibi) {
        for (int64_t i = 0; i < t->rows; ++i) {
            float slope = t->alibi[(i % fc_tile_heads(t)) * t->alibi_step];
            if (slope == 0.0f) continue;
            int64_t row = fc_tile_pos(t, i);
            for (int64_t j = 0; j < t->cols; ++j) {
#if FLASHC_CPU_REAL_DOUBLE
                /* The bias alone, in double: the logit rule with a zero product. */
                real bias = (real)flashc_logit(0.0, 1.0, 0.0, slope, row, t->c0 + j, t->sq, t->sk);
#else
                real bias = flashc_alibi_bias(slope, row, t->c0 + j, t->sq, t->sk);
#endif
                S[j * FC_BM + i] += (real)FC_LOG2E * bias;
            }
        }
    }
}

/* Whether every (row, column) of the computed tile is visible (none of it
 * padding). The bounds of flashc_visible_cols are monotone in the row, so
 * the first and last rows decide. */
static inline int fc_tile_fully_visible(const flashc_problem *p, const fc_tile_ctx *t) {
    if (t->rows != t->rows_pad || t->cols != t->cols_pad) return 0;
    int64_t lo_first, hi_first, lo_last, hi_last;
    flashc_visible_cols(t->r0, t->sq, t->sk, p->window_left, p->window_right, &lo_first, &hi_first);
    flashc_visible_cols(fc_tile_pos(t, t->rows - 1), t->sq, t->sk, p->window_left, p->window_right,
                        &lo_last, &hi_last);
    return lo_last <= t->c0 && hi_first >= t->c0 + t->cols;
}

/* Set hidden entries (and the padding rows and columns) of the computed
 * part of a logit tile to -inf. */
static void fc_tile_mask(real *S, const flashc_problem *p, const fc_tile_ctx *t) {
    const real neg_inf = -(real)INFINITY;
    /* the visible columns [lo, hi) of each row, tile-relative (empty for
     * the padding rows), then one pass down each column: the tile is
     * column-major, so row by row would store with a stride of FC_BM */
    int32_t lo[FC_BM], hi[FC_BM];
    for (int64_t i = 0; i < t->rows_pad; ++i) {
        int64_t l = 0, h = 0;
        if (i < t->rows) {
            flashc_visible_cols(fc_tile_pos(t, i), t->sq, t->sk, p->window_left, p->window_right, &l, &h);
            l -= t->c0;
            h -= t->c0;
            if (l < 0) l = 0;
            if (l > t->cols) l = t->cols;
            if (h > t->cols) h = t->cols;
            if (h < l) h = l;
        }
        lo[i] = (int32_t)l;
        hi[i] = (int32_t)h;
    }
    for (int64_t j = 0; j < t->cols_pad; ++j) {
        real *col = S + j * FC_BM;
        const int32_t jj = (int32_t)j;
        for (int64_t i = 0; i < t->rows_pad; ++i)
            if (jj < lo[i] || jj >= hi[i]) col[i] = neg_inf;
    }
}

/* Zero the entries of P that dropout drops (P[j * FC_BM + i]); with a
 * non-NULL `second`, scale kept entries of a second tile by `keep_scale`
 * and zero its dropped ones as well. One Philox instance per SIMD lane
 * (a lane per query row), counters from flashc_dropout_counter; the word of
 * column c is component c & 3, as flashc_dropout_word_for_col picks it.
 * One head per tile (the forward packs no heads under dropout). */
static void fc_tile_dropout(const flashc_problem *p, const fc_tile_ctx *t, real *P, real *second,
                            real keep_scale) {
    for (int64_t i0 = 0; i0 < t->rows; i0 += VL) {
        for (int64_t j4 = 0; j4 < t->cols; j4 += 4) {
            uint32_t lanes[4][VL];
            flashc_dropout_input in = {{0, 0, 0, 0}, 0, 0};
            for (int l = 0; l < VL; ++l) {
                in = flashc_dropout_counter(p->dropout_seed, p->dropout_offset, t->b, p->nheads,
                                            t->h, t->r0 + i0 + l, t->c0 + j4);
                lanes[0][l] = in.counter.x;
                lanes[1][l] = in.counter.y;
                lanes[2][l] = in.counter.z;
                lanes[3][l] = in.counter.w;
            }
            fc_philox_lanes c;
            memcpy(&c.x, lanes[0], sizeof c.x);
            memcpy(&c.y, lanes[1], sizeof c.y);
            memcpy(&c.z, lanes[2], sizeof c.z);
            memcpy(&c.w, lanes[3], sizeof c.w);
            fc_philox_lanes w = fc_philox_lanes_10(c, in.key0, in.key1);
            vu32 words[4] = {w.x, w.y, w.z, w.w};
            for (int64_t q = 0; q < 4 && j4 + q < t->cols; ++q) {
                vi32 keep32 = words[(t->c0 + j4 + q) & 3] >= p->dropout_threshold;
                vi keep = __builtin_convertvector(keep32, vi);
                real *pr = P + (j4 + q) * FC_BM + i0;
                vstore(pr, vselect(keep, vload(pr), vsplat(0)));
                if (second) {
                    real *sr = second + (j4 + q) * FC_BM + i0;
                    vstore(sr, vselect(keep, vload(sr) * keep_scale, vsplat(0)));
                }
            }
        }
    }
}

#endif
