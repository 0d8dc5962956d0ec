/* The plain same-precision computation (see test_plain.h). */
#include "test_plain.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double rnd(flashc_dtype dt, double x) { return flashc_ref_round(dt, x); }
static double f32(double x) { return (float)x; }

/* acc[j] = sum over x < len of a[x] * bt[x * stride + j], in float32,
 * rounded after every step, for j < n: n dot products side by side. */
static void f32_dots(const double *a, const double *bt, int64_t len, int64_t stride, int64_t n,
                     double *acc) {
    for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
    for (int64_t x = 0; x < len; ++x) {
        const double ax = a[x], *row = bt + x * stride;
        for (int64_t j = 0; j < n; ++j) acc[j] = f32(acc[j] + ax * row[j]);
    }
}

/* One more step of n float32 sums: acc[x] += w * row[x], rounded. */
static void f32_axpy(double w, const double *row, int64_t n, double *acc) {
    for (int64_t x = 0; x < n; ++x) acc[x] = f32(acc[x] + w * row[x]);
}

static double resolved_scale(const test_case *tc) {
    double s = tc->cfg.options.softmax_scale;
    return s != 0.0 ? s : 1.0 / sqrt((double)tc->cfg.d);
}

static double alibi_slope(const test_case *tc, int64_t b, int64_t h) {
    if (!tc->cfg.alibi) return 0.0;
    int64_t index[2];
    if (tc->cfg.alibi == 1) index[0] = h;
    else {
        index[0] = b;
        index[1] = h;
    }
    return flashc_ref_load(&tc->alibi, index);
}

/* ---- Decoded rows ------------------------------------------------------ */

static double *alloc_doubles(int64_t n) { return malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }

/* Rows [0, rows) of head h of a q/k/v/out-like tensor (sequence b, first
 * packed row `start`): rows x dim, and dim x rows when `transposed`. */
static double *load_rows(const test_case *tc, const flashc_tensor *t, int64_t b, int64_t start,
                         int64_t rows, int64_t h, int64_t dim, int transposed) {
    double *out = alloc_doubles(rows * dim);
    if (!out) return NULL;
    int64_t index[4];
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t x = 0; x < dim; ++x) {
            flashc_ref_seq_element(tc->cfg.varlen, b, start, r, h, x, index);
            out[transposed ? x * rows + r : r * dim + x] = flashc_ref_load(t, index);
        }
    return out;
}

int plain_rows_load(plain_rows *r, const test_case *tc, int64_t b, int64_t h,
                    const flashc_ref_seq *seq) {
    const test_config *c = &tc->cfg;
    int64_t hk = h / (c->nheads / c->nheads_k);
    memset(r, 0, sizeof *r);
    r->sq = seq->len_q;
    r->sk = seq->len_k;
    r->d = c->d;
    r->dv = c->dv;
    r->q = load_rows(tc, &tc->q, b, seq->q_start, r->sq, h, r->d, 0);
    r->out = load_rows(tc, &tc->out, b, seq->q_start, r->sq, h, r->dv, 0);
    r->dout = load_rows(tc, &tc->dout, b, seq->q_start, r->sq, h, r->dv, 0);
    r->k = load_rows(tc, &tc->k, b, seq->k_start, r->sk, hk, r->d, 0);
    r->v = load_rows(tc, &tc->v, b, seq->k_start, r->sk, hk, r->dv, 0);
    r->kt = load_rows(tc, &tc->k, b, seq->k_start, r->sk, hk, r->d, 1);
    r->vt = load_rows(tc, &tc->v, b, seq->k_start, r->sk, hk, r->dv, 1);
    if (r->q && r->out && r->dout && r->k && r->v && r->kt && r->vt) return 0;
    plain_rows_free(r);
    return -1;
}

void plain_rows_free(plain_rows *r) {
    free(r->q);
    free(r->out);
    free(r->dout);
    free(r->k);
    free(r->v);
    free(r->kt);
    free(r->vt);
    memset(r, 0, sizeof *r);
}

/* ---- Probabilities ------------------------------------------------------ */

void plain_head_free(plain_head *ph) {
    free(ph->s);
    free(ph->t);
    free(ph->p);
    free(ph->pd);
    free(ph->z);
    free(ph->visible);
    free(ph->m);
    free(ph->lse);
    memset(ph, 0, sizeof *ph);
}

int plain_probabilities(plain_head *ph, const test_case *tc, int64_t b, int64_t h,
                        const plain_rows *r) {
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->fwd.options;
    flashc_dtype dt = c->dtype;
    int64_t sq = r->sq, sk = r->sk;
    size_t n = (size_t)(sq * sk > 0 ? sq * sk : 1);
    memset(ph, 0, sizeof *ph);
    ph->sq = sq;
    ph->sk = sk;
    ph->s = calloc(n, sizeof(double));
    ph->t = calloc(n, sizeof(double));
    ph->p = calloc(n, sizeof(double));
    ph->pd = calloc(n, sizeof(double));
    ph->z = calloc(n, sizeof(double));
    ph->visible = calloc(n, 1);
    ph->m = calloc((size_t)(sq > 0 ? sq : 1), sizeof(double));
    ph->lse = calloc((size_t)(sq > 0 ? sq : 1), sizeof(double));
    double *dots = alloc_doubles(sk);
    if (!ph->s || !ph->t || !ph->p || !ph->pd || !ph->z || !ph->visible || !ph->m || !ph->lse ||
        !dots) {
        free(dots);
        plain_head_free(ph);
        return -1;
    }
    double scale = resolved_scale(tc), slope = alibi_slope(tc, b, h), cap = o->softcap;
    for (int64_t i = 0; i < sq; ++i) {
        /* the visible columns of a row are one interval: [lo, hi] */
        int64_t lo = sk, hi = -1;
        for (int64_t j = 0; j < sk; ++j) {
            ph->visible[i * sk + j] = (unsigned char)flashc_ref_visible(o, sq, sk, i, j);
            if (!ph->visible[i * sk + j]) continue;
            if (j < lo) lo = j;
            hi = j;
        }
        if (hi >= lo) f32_dots(r->q + i * r->d, r->kt + lo, r->d, sk, hi - lo + 1, dots + lo);
        double m = -INFINITY;
        for (int64_t j = lo; j <= hi; ++j) {
            int64_t e = i * sk + j;
            if (!ph->visible[e]) continue;
            double s = rnd(dt, rnd(dt, dots[j]) * scale);
            if (cap > 0.0) {
                ph->t[e] = rnd(dt, tanh(s / cap));
                s = rnd(dt, cap * ph->t[e]);
            }
            s = rnd(dt, s - slope * (double)llabs(i + sk - sq - j));
            ph->s[e] = s;
            if (s > m) m = s;
            ph->z[e] = o->dropout_p > 0.0
                           ? (flashc_ref_dropout_keep(o->dropout_seed, o->dropout_offset,
                                                      o->dropout_p, b, h, c->nheads, i, j)
                                  ? 1.0 / (1.0 - o->dropout_p)
                                  : 0.0)
                           : 1.0;
        }
        ph->m[i] = m;
        if (m == -INFINITY) {
            ph->lse[i] = INFINITY;
            continue;
        }
        double sum = 0.0;
        for (int64_t j = lo; j <= hi; ++j)
            if (ph->visible[i * sk + j]) sum = f32(sum + f32(exp(ph->s[i * sk + j] - m)));
        ph->lse[i] = f32(m + log(sum));
        for (int64_t j = lo; j <= hi; ++j) {
            int64_t e = i * sk + j;
            if (!ph->visible[e]) continue;
            ph->p[e] = rnd(dt, f32(exp(ph->s[e] - m)) / sum);
            ph->pd[e] = rnd(dt, ph->p[e] * ph->z[e]);
        }
    }
    free(dots);
    return 0;
}

void plain_out_row(const plain_head *ph, const plain_rows *r, flashc_dtype dt, int64_t i,
                   double *out) {
    for (int64_t x = 0; x < r->dv; ++x) out[x] = 0.0;
    for (int64_t j = 0; j < r->sk; ++j) {
        double w = ph->pd[i * r->sk + j];
        if (w != 0.0) f32_axpy(w, r->v + j * r->dv, r->dv, out);
    }
    for (int64_t x = 0; x < r->dv; ++x) out[x] = rnd(dt, out[x]);
}

/* ---- Gradients ----------------------------------------------------------- */

/* dS of every visible entry, rounded as computed, and the magnitude of its
 * terms |P| (|dP| + |D|) |softcap'|. */
static void plain_ds(const test_case *tc, int64_t b, int64_t h, const plain_rows *r,
                     const plain_head *ph, double *ds, double *ds_terms, double *dots) {
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->bwd.options;
    flashc_dtype dt = c->dtype;
    int64_t sq = r->sq, sk = r->sk, DV = r->dv;
    flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->bwd.varlen, b);
    for (int64_t i = 0; i < sq; ++i) {
        if (isinf(ph->lse[i])) continue;
        const double *dout = r->dout + i * DV, *out = r->out + i * DV;
        double Di = 0.0;
        for (int64_t x = 0; x < DV; ++x) Di = f32(Di + dout[x] * out[x]);
        Di = rnd(dt, Di);
        if (c->with_dlse) {
            int64_t index[3];
            flashc_ref_row_element(c->varlen, b, seq.q_start, h, i, index);
            Di = rnd(dt, Di - flashc_ref_load(&tc->dlse, index));
        }
        int64_t lo = 0, hi = sk - 1;
        while (lo < sk && !ph->visible[i * sk + lo]) ++lo;
        while (hi >= lo && !ph->visible[i * sk + hi]) --hi;
        if (hi >= lo) f32_dots(dout, r->vt + lo, DV, sk, hi - lo + 1, dots + lo);
        for (int64_t j = lo; j <= hi; ++j) {
            int64_t e = i * sk + j;
            if (!ph->visible[e]) continue;
            double dp = rnd(dt, rnd(dt, dots[j]) * ph->z[e]);
            double d = rnd(dt, ph->p[e] * rnd(dt, dp - Di));
            double terms = ph->p[e] * (fabs(dp) + fabs(Di));
            if (o->softcap > 0.0) {
                d = rnd(dt, d * rnd(dt, 1.0 - ph->t[e] * ph->t[e]));
                terms *= 1.0 - ph->t[e] * ph->t[e];
            }
            ds[e] = d;
            ds_terms[e] = terms;
        }
    }
}

int plain_backward_head(const test_case *tc, int64_t b, int64_t h, const plain_rows *r,
                        const plain_head *ph, double *dq, double *dk, double *dv,
                        plain_terms *terms) {
    const test_config *c = &tc->cfg;
    flashc_dtype dt = c->dtype;
    int64_t G = c->nheads / c->nheads_k, sq = r->sq, sk = r->sk, D = r->d, DV = r->dv;
    double scale = resolved_scale(tc);
    size_t n = (size_t)(sq * sk > 0 ? sq * sk : 1);
    int64_t width = D > DV ? D : DV;
    double *ds = calloc(n, sizeof(double)), *ds_terms = calloc(n, sizeof(double));
    double *dots = alloc_doubles(sk), *acc = alloc_doubles(width), *tsum = alloc_doubles(width);
    if (!ds || !ds_terms || !dots || !acc || !tsum) {
        free(ds);
        free(ds_terms);
        free(dots);
        free(acc);
        free(tsum);
        return -1;
    }
    plain_ds(tc, b, h, r, ph, ds, ds_terms, dots);
    /* Each sum below runs over its index in order; a zero dS adds nothing
     * (and is skipped, as a sparse computation would), a zero term
     * magnitude adds exactly 0 to the term sum. */
    for (int64_t i = 0; i < sq; ++i) {
        for (int64_t x = 0; x < D; ++x) acc[x] = tsum[x] = 0.0;
        for (int64_t j = 0; j < sk; ++j) {
            double w = ds[i * sk + j], tw = ds_terms[i * sk + j];
            const double *k = r->k + j * D;
            if (tw != 0.0)
                for (int64_t x = 0; x < D; ++x) tsum[x] += tw * fabs(k[x]);
            if (w != 0.0) f32_axpy(w, k, D, acc);
        }
        for (int64_t x = 0; x < D; ++x) {
            dq[i * D + x] = rnd(dt, scale * rnd(dt, acc[x]));
            if (fabs(scale) * tsum[x] > terms->dq) terms->dq = fabs(scale) * tsum[x];
        }
    }
    for (int64_t j = 0; j < sk; ++j) {
        for (int64_t x = 0; x < D; ++x) acc[x] = tsum[x] = 0.0;
        for (int64_t i = 0; i < sq; ++i) {
            double w = ds[i * sk + j], tw = ds_terms[i * sk + j];
            const double *q = r->q + i * D;
            if (tw != 0.0)
                for (int64_t x = 0; x < D; ++x) tsum[x] += tw * fabs(q[x]);
            if (w != 0.0) f32_axpy(w, q, D, acc);
        }
        for (int64_t x = 0; x < D; ++x) {
            dk[j * D + x] = f32(dk[j * D + x] + rnd(dt, scale * rnd(dt, acc[x])));
            /* per head; a group sum at most G times that */
            if (G * fabs(scale) * tsum[x] > terms->dk) terms->dk = G * fabs(scale) * tsum[x];
        }
        for (int64_t x = 0; x < DV; ++x) acc[x] = 0.0;
        for (int64_t i = 0; i < sq; ++i) {
            double w = ph->pd[i * sk + j];
            if (w != 0.0) f32_axpy(w, r->dout + i * DV, DV, acc);
        }
        for (int64_t x = 0; x < DV; ++x) dv[j * DV + x] = f32(dv[j * DV + x] + rnd(dt, acc[x]));
    }
    free(ds);
    free(ds_terms);
    free(dots);
    free(acc);
    free(tsum);
    return 0;
}
