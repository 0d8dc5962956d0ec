/* Comparison of flashc's outputs with the double-precision reference. The
 * low-precision tolerance follows DESIGN.md: flashc's largest error may be
 * at most twice that of a plain computation in the same precision (float32
 * accumulation, every intermediate rounded to the input dtype, as an eager
 * framework computes it) plus one unit in the last place. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static int mantissa_bits(flashc_dtype dt) {
    switch (dt) {
        case FLASHC_DTYPE_FLOAT16: return 10;
        case FLASHC_DTYPE_BFLOAT16: return 7;
        case FLASHC_DTYPE_FLOAT32: return 23;
        default: return 52;
    }
}

double test_allowed_error(flashc_dtype dtype, double naive_err, double ref_max, double lse_max) {
    if (dtype == FLASHC_DTYPE_FLOAT64) return 1e-10 * (ref_max > 1.0 ? ref_max : 1.0);
    if (dtype != FLASHC_DTYPE_FLOAT32) {
        /* low precision (DESIGN.md): twice the plain computation's error,
         * plus one ulp since both round their result to the dtype */
        return 2.0 * naive_err + ldexp(ref_max, -mantissa_bits(dtype));
    }
    /* float32 is not low precision in DESIGN.md's sense: the plain
     * computation's error there is a few ulp, and the FlashAttention
     * pipeline adds errors of its own of the same order: the forward's
     * online softmax rescales partial sums (about 8 ulp in all), and the
     * backward recomputes every probability as exp2(s*scale*log2(e) -
     * LSE*log2(e)) from the float32 LSE: each of those roundings is
     * relative to |LSE| (or |s|, the same size where the probability
     * matters), so a probability carries about |LSE| ulp of relative
     * error where the plain softmax exp(s - max) has about |s|. |LSE| is
     * 2..8 for plain scores but reaches ~100 with ALiBi at long distances.
     * lse_max is 0 for the forward. A real defect (mask, scale, offsets,
     * dropout, a missed tile) is orders of magnitude larger. */
    return 2.0 * naive_err + (8.0 + lse_max) * ldexp(ref_max, -mantissa_bits(dtype));
}

/* ---- Error accumulation ----------------------------------------------- */

typedef struct err_acc {
    const char *name;
    double lib_err, naive_err, ref_max;
    double term_max; /* largest magnitude of the terms summed (see below) */
    int64_t count, nan_count, exact_failures;
    char worst[192];
    char first_problem[192];
} err_acc;

static void acc_init(err_acc *a, const char *name) {
    memset(a, 0, sizeof *a);
    a->name = name;
}

static void acc_add(err_acc *a, double lib, double ref, double naive, const char *where) {
    ++a->count;
    if (isnan(lib)) {
        if (a->nan_count++ == 0 && !a->first_problem[0])
            snprintf(a->first_problem, sizeof a->first_problem, "NaN at %s (ref %.9g)", where, ref);
        return;
    }
    double e = fabs(lib - ref);
    if (!(e <= a->lib_err)) {
        a->lib_err = e;
        snprintf(a->worst, sizeof a->worst, "%s: flashc %.9g ref %.9g", where, lib, ref);
    }
    if (fabs(naive - ref) > a->naive_err) a->naive_err = fabs(naive - ref);
    if (fabs(ref) > a->ref_max) a->ref_max = fabs(ref);
}

/* An element that must hold exactly `want` (0 for hidden/padding, +inf for
 * the LSE of a row that sees nothing). */
static void acc_exact(err_acc *a, double lib, double want, const char *where) {
    ++a->count;
    if (lib == want) return;
    if (a->exact_failures++ == 0 && !a->first_problem[0])
        snprintf(a->first_problem, sizeof a->first_problem, "%s: flashc %.9g, must be %.9g", where,
                 lib, want);
}

static int acc_report(const err_acc *a, const test_case *tc, flashc_dtype eps_dtype,
                      double lse_max) {
    /* Rounding errors scale with the terms summed, not with the result: a
     * gradient that cancels to exactly 0 (one visible key: dP - D = 0)
     * still carries rounding noise of the size of its terms. */
    double magnitude = a->term_max > a->ref_max ? a->term_max : a->ref_max;
    double allowed = test_allowed_error(tc->cfg.dtype == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64
                                                                              : eps_dtype,
                                        a->naive_err, magnitude, lse_max);
    int bad = a->nan_count > 0 || a->exact_failures > 0 || a->lib_err > allowed;
    if (!bad) return 0;
    char desc[768];
    test_config_describe(&tc->cfg, desc, sizeof desc);
    fprintf(stderr,
            "FAIL %s [%s] input seed %llu:\n  max err %.3g allowed %.3g (plain %.3g, |ref| max "
            "%.3g, terms max %.3g) over %lld elements; worst %s\n  NaN %lld, exact-value "
            "failures %lld%s%s\n",
            a->name, desc, (unsigned long long)tc->seed, a->lib_err, allowed, a->naive_err,
            a->ref_max, a->term_max, (long long)a->count, a->worst, (long long)a->nan_count,
            (long long)a->exact_failures, a->first_problem[0] ? "; first: " : "",
            a->first_problem);
    return 1;
}

static int untouched_report(const test_case *tc, const char *name, const test_alloc *a,
                            const flashc_tensor *const *views, int count) {
    int64_t bad = test_untouched_violations(a, views, count);
    if (bad == 0) return 0;
    char desc[768];
    test_config_describe(&tc->cfg, desc, sizeof desc);
    fprintf(stderr, "FAIL %s [%s] input seed %llu: %lld bytes outside the view(s) were written\n",
            name, desc, (unsigned long long)tc->seed, (long long)bad);
    return 1;
}

/* ---- Indexing --------------------------------------------------------- */

static void seq_index(const test_case *tc, int64_t b, int64_t start, int64_t r, int64_t h,
                      int64_t x, int64_t *index) {
    flashc_ref_seq_element(tc->cfg.varlen, b, start, r, h, x, index);
}

static double seq_get(const test_case *tc, const flashc_tensor *t, int64_t b, int64_t start,
                      int64_t r, int64_t h, int64_t x) {
    int64_t index[4];
    seq_index(tc, b, start, r, h, x, index);
    return flashc_ref_load(t, index);
}

static double row_get(const test_case *tc, const flashc_tensor *t, int64_t b, int64_t start,
                      int64_t h, int64_t r) {
    int64_t index[3];
    flashc_ref_row_element(tc->cfg.varlen, b, start, h, r, index);
    return flashc_ref_load(t, index);
}

/* ---- Plain same-precision computation ---------------------------------- */

typedef struct plain_head {
    int64_t sq, sk;
    double *s, *t, *p, *pd, *z; /* sq x sk */
    unsigned char *visible;     /* sq x sk */
    double *m, *lse;            /* sq */
} plain_head;

static double rnd(flashc_dtype dt, double x) { return flashc_ref_round(dt, x); }
static double f32(double x) { return (float)x; }

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

static void plain_free(plain_head *ph) {
    free(ph->s);
    free(ph->t);
    free(ph->p);
    free(ph->pd);
    free(ph->z);
    free(ph->visible);
    free(ph->m);
    free(ph->lse);
}

/* Scores and probabilities of (b, h) in the input precision. */
static void plain_probabilities(const test_case *tc, int64_t b, int64_t h, const flashc_ref_seq *seq,
                                plain_head *ph) {
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->fwd.options;
    flashc_dtype dt = c->dtype;
    int64_t sq = seq->len_q, sk = seq->len_k, hk = h / (c->nheads / c->nheads_k);
    size_t n = (size_t)(sq * sk > 0 ? sq * sk : 1);
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
    double scale = resolved_scale(tc), slope = alibi_slope(tc, b, h), cap = o->softcap;
    for (int64_t i = 0; i < sq; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
            int64_t e = i * sk + j;
            ph->visible[e] = (unsigned char)flashc_ref_visible(o, sq, sk, i, j);
            if (!ph->visible[e]) continue;
            double acc = 0.0;
            for (int64_t x = 0; x < c->d; ++x)
                acc = f32(acc + seq_get(tc, &tc->q, b, seq->q_start, i, h, x) *
                                    seq_get(tc, &tc->k, b, seq->k_start, j, hk, x));
            double s = rnd(dt, rnd(dt, acc) * scale);
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
        for (int64_t j = 0; j < sk; ++j)
            if (ph->visible[i * sk + j]) sum = f32(sum + f32(exp(ph->s[i * sk + j] - m)));
        ph->lse[i] = f32(m + log(sum));
        for (int64_t j = 0; j < sk; ++j) {
            int64_t e = i * sk + j;
            if (!ph->visible[e]) continue;
            ph->p[e] = rnd(dt, f32(exp(ph->s[e] - m)) / sum);
            ph->pd[e] = rnd(dt, ph->p[e] * ph->z[e]);
        }
    }
}

/* Varlen packed rows outside every sequence: [0, cu[0]) and [cu[B], total). */
static int outside_sequences(const flashc_tensor *cu, int64_t B, int64_t row) {
    int64_t first[1] = {0}, last[1] = {B};
    return row < (int64_t)flashc_ref_load(cu, first) || row >= (int64_t)flashc_ref_load(cu, last);
}

/* Every element of the packed rows outside every sequence of a varlen
 * tensor (rows, heads, dim) must equal `value`. */
static void check_gap_rows(err_acc *acc, const test_case *tc, const flashc_tensor *t,
                           const flashc_tensor *cu, int64_t B, double value, const char *name) {
    char where[128];
    for (int64_t r = 0; r < t->shape[0]; ++r) {
        if (!outside_sequences(cu, B, r)) continue;
        for (int64_t h = 0; h < t->shape[1]; ++h)
            for (int64_t x = 0; x < t->shape[2]; ++x) {
                int64_t index[3] = {r, h, x};
                snprintf(where, sizeof where, "%s(packed row %lld outside every sequence, h=%lld, "
                         "x=%lld)", name, (long long)r, (long long)h, (long long)x);
                acc_exact(acc, flashc_ref_load(t, index), value, where);
            }
    }
    (void)tc;
}

/* ---- Forward check ---------------------------------------------------- */

int test_check_forward(const test_case *tc) {
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->fwd.options;
    int lowp = c->dtype != FLASHC_DTYPE_FLOAT64;
    flashc_dtype lse_dt = lowp ? FLASHC_DTYPE_FLOAT32 : FLASHC_DTYPE_FLOAT64;
    err_acc a_out, a_lse, a_sd, a_sign;
    acc_init(&a_out, "forward out");
    acc_init(&a_lse, "forward lse");
    acc_init(&a_sd, "forward s_dmask");
    acc_init(&a_sign, "forward s_dmask dropout sign");
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->fwd.varlen);
    char where[128];
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->fwd.varlen, b);
        int64_t sq = seq.len_q, sk = seq.len_k;
        double *r_out = malloc((size_t)(sq * c->dv + 1) * sizeof(double));
        double *r_lse = malloc((size_t)(sq + 1) * sizeof(double));
        double *r_sd = malloc((size_t)(sq * sk + 1) * sizeof(double));
        for (int64_t h = 0; h < c->nheads; ++h) {
            flashc_ref_forward(&tc->fwd, b, h, r_out, r_lse, r_sd);
            plain_head ph;
            memset(&ph, 0, sizeof ph);
            if (lowp) plain_probabilities(tc, b, h, &seq, &ph);
            for (int64_t i = 0; i < sq; ++i) {
                int masked = isinf(r_lse[i]);
                for (int64_t x = 0; x < c->dv; ++x) {
                    double lib = seq_get(tc, &tc->out, b, seq.q_start, i, h, x);
                    snprintf(where, sizeof where, "out(b=%lld,row=%lld,h=%lld,x=%lld)",
                             (long long)b, (long long)i, (long long)h, (long long)x);
                    if (masked) {
                        acc_exact(&a_out, lib, 0.0, where);
                        continue;
                    }
                    double naive = r_out[i * c->dv + x];
                    if (lowp) {
                        double acc = 0.0;
                        for (int64_t j = 0; j < sk; ++j)
                            if (ph.pd[i * sk + j] != 0.0)
                                acc = f32(acc + ph.pd[i * sk + j] *
                                                    seq_get(tc, &tc->v, b, seq.k_start, j,
                                                            h / (c->nheads / c->nheads_k), x));
                        naive = rnd(c->dtype, acc);
                    }
                    acc_add(&a_out, lib, r_out[i * c->dv + x], naive, where);
                }
                if (c->with_lse) {
                    double lib = row_get(tc, &tc->lse, b, seq.q_start, h, i);
                    snprintf(where, sizeof where, "lse(b=%lld,h=%lld,row=%lld)", (long long)b,
                             (long long)h, (long long)i);
                    if (masked) acc_exact(&a_lse, lib, INFINITY, where);
                    else acc_add(&a_lse, lib, r_lse[i], lowp ? ph.lse[i] : r_lse[i], where);
                }
            }
            if (c->with_sdmask) {
                const flashc_tensor *t = &tc->s_dmask;
                for (int64_t i = 0; i < t->shape[2]; ++i) {
                    for (int64_t j = 0; j < t->shape[3]; ++j) {
                        int64_t index[4] = {b, h, i, j};
                        double lib = flashc_ref_load(t, index);
                        snprintf(where, sizeof where, "s_dmask(b=%lld,h=%lld,%lld,%lld)",
                                 (long long)b, (long long)h, (long long)i, (long long)j);
                        if (i >= sq || j >= sk || !flashc_ref_visible(o, sq, sk, i, j)) {
                            acc_exact(&a_sd, lib, 0.0, where);
                            continue;
                        }
                        double ref = r_sd[i * sk + j];
                        double naive = ref;
                        if (lowp) {
                            naive = rnd(c->dtype, exp(ph.s[i * sk + j] - ph.m[i]));
                            if (ph.z[i * sk + j] == 0.0) naive = -naive;
                        }
                        acc_add(&a_sd, lib, ref, naive, where);
                        /* the sign says kept/dropped: it must match exactly
                         * wherever the magnitude is clearly non-zero */
                        if (fabs(ref) >= 1e-2 && !isnan(lib))
                            acc_exact(&a_sign, signbit(lib) ? -1.0 : 1.0, signbit(ref) ? -1.0 : 1.0,
                                      where);
                    }
                }
            }
            if (lowp) plain_free(&ph);
        }
        free(r_out);
        free(r_lse);
        free(r_sd);
    }
    if (c->varlen) {
        check_gap_rows(&a_out, tc, &tc->out, &tc->cu_q, B, 0.0, "out");
        if (c->with_lse) {
            for (int64_t h = 0; h < c->nheads; ++h)
                for (int64_t r = 0; r < tc->lse.shape[1]; ++r) {
                    if (!outside_sequences(&tc->cu_q, B, r)) continue;
                    snprintf(where, sizeof where, "lse(h=%lld, packed row %lld outside every "
                             "sequence)", (long long)h, (long long)r);
                    acc_exact(&a_lse, row_get(tc, &tc->lse, 0, 0, h, r), INFINITY, where);
                }
        }
    }
    int fails = acc_report(&a_out, tc, c->dtype, 0.0);
    if (c->with_lse) fails += acc_report(&a_lse, tc, lse_dt, 0.0);
    if (c->with_sdmask) {
        fails += acc_report(&a_sd, tc, c->dtype, 0.0);
        fails += acc_report(&a_sign, tc, c->dtype, 0.0);
    }
    const flashc_tensor *out_v[1] = {&tc->out}, *lse_v[1] = {&tc->lse}, *sd_v[1] = {&tc->s_dmask};
    fails += untouched_report(tc, "forward out (outside view)", &tc->a_out, out_v, 1);
    fails += untouched_report(tc, "forward lse (outside view, or not requested)", &tc->a_lse, lse_v,
                              c->with_lse ? 1 : 0);
    fails += untouched_report(tc, "forward s_dmask (outside view, or not requested)",
                              &tc->a_sdmask, sd_v, c->with_sdmask ? 1 : 0);
    return fails;
}

/* ---- Backward check --------------------------------------------------- */

int test_check_backward(const test_case *tc) {
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->bwd.options;
    flashc_dtype dt = c->dtype;
    int lowp = dt != FLASHC_DTYPE_FLOAT64;
    int64_t G = c->nheads / c->nheads_k, D = c->d, DV = c->dv;
    double scale = resolved_scale(tc);
    err_acc a_dq, a_dk, a_dv;
    acc_init(&a_dq, "backward dq");
    acc_init(&a_dk, "backward dk");
    acc_init(&a_dv, "backward dv");
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->bwd.varlen);
    char where[128];
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->bwd.varlen, b);
        int64_t sq = seq.len_q, sk = seq.len_k;
        /* rows of k/v that belong to the sequence but are not used
         * (seqused_k): their gradient is exactly 0 */
        int64_t k_rows = sk;
        if (c->varlen) k_rows = c->lens_k[b];
        double *r_dq = malloc((size_t)(G * sq * D + 1) * sizeof(double));
        double *r_dk = malloc((size_t)(sk * D + 1) * sizeof(double));
        double *r_dv = malloc((size_t)(sk * DV + 1) * sizeof(double));
        double *n_dq = calloc((size_t)(G * sq * D + 1), sizeof(double));
        double *n_dk = calloc((size_t)(sk * D + 1), sizeof(double));
        double *n_dv = calloc((size_t)(sk * DV + 1), sizeof(double));
        double *ds = calloc((size_t)(sq * sk + 1), sizeof(double));
        /* |P| (|dP| + |D|) |softcap'|: the magnitude of each dS term */
        double *ds_terms = calloc((size_t)(sq * sk + 1), sizeof(double));
        for (int64_t hk = 0; hk < c->nheads_k; ++hk) {
            flashc_ref_backward(&tc->bwd, b, hk, r_dq, r_dk, r_dv);
            if (lowp) {
                memset(n_dk, 0, (size_t)(sk * D + 1) * sizeof(double));
                memset(n_dv, 0, (size_t)(sk * DV + 1) * sizeof(double));
                for (int64_t g = 0; g < G; ++g) {
                    int64_t h = hk * G + g;
                    plain_head ph;
                    plain_probabilities(tc, b, h, &seq, &ph);
                    memset(ds, 0, (size_t)(sq * sk + 1) * sizeof(double));
                    memset(ds_terms, 0, (size_t)(sq * sk + 1) * sizeof(double));
                    for (int64_t i = 0; i < sq; ++i) {
                        if (isinf(ph.lse[i])) continue;
                        double Di = 0.0;
                        for (int64_t x = 0; x < DV; ++x)
                            Di = f32(Di + seq_get(tc, &tc->dout, b, seq.q_start, i, h, x) *
                                              seq_get(tc, &tc->out, b, seq.q_start, i, h, x));
                        Di = rnd(dt, Di);
                        if (c->with_dlse)
                            Di = rnd(dt, Di - row_get(tc, &tc->dlse, b, seq.q_start, h, i));
                        for (int64_t j = 0; j < sk; ++j) {
                            int64_t e = i * sk + j;
                            if (!ph.visible[e]) continue;
                            double dpd = 0.0;
                            for (int64_t x = 0; x < DV; ++x)
                                dpd = f32(dpd + seq_get(tc, &tc->dout, b, seq.q_start, i, h, x) *
                                                    seq_get(tc, &tc->v, b, seq.k_start, j, hk, x));
                            double dp = rnd(dt, rnd(dt, dpd) * ph.z[e]);
                            double d = rnd(dt, ph.p[e] * rnd(dt, dp - Di));
                            double terms = ph.p[e] * (fabs(dp) + fabs(Di));
                            if (o->softcap > 0.0) {
                                d = rnd(dt, d * rnd(dt, 1.0 - ph.t[e] * ph.t[e]));
                                terms *= 1.0 - ph.t[e] * ph.t[e];
                            }
                            ds[e] = d;
                            ds_terms[e] = terms;
                        }
                    }
                    for (int64_t i = 0; i < sq; ++i)
                        for (int64_t x = 0; x < D; ++x) {
                            double acc = 0.0, terms = 0.0;
                            for (int64_t j = 0; j < sk; ++j) {
                                double kx = seq_get(tc, &tc->k, b, seq.k_start, j, hk, x);
                                terms += ds_terms[i * sk + j] * fabs(kx);
                                if (ds[i * sk + j] != 0.0) acc = f32(acc + ds[i * sk + j] * kx);
                            }
                            n_dq[(g * sq + i) * D + x] = rnd(dt, scale * rnd(dt, acc));
                            if (fabs(scale) * terms > a_dq.term_max) a_dq.term_max = fabs(scale) * terms;
                        }
                    for (int64_t j = 0; j < sk; ++j) {
                        for (int64_t x = 0; x < D; ++x) {
                            double acc = 0.0, terms = 0.0;
                            for (int64_t i = 0; i < sq; ++i) {
                                double qx = seq_get(tc, &tc->q, b, seq.q_start, i, h, x);
                                terms += ds_terms[i * sk + j] * fabs(qx);
                                if (ds[i * sk + j] != 0.0) acc = f32(acc + ds[i * sk + j] * qx);
                            }
                            n_dk[j * D + x] = f32(n_dk[j * D + x] + rnd(dt, scale * rnd(dt, acc)));
                            /* per head; a group sum at most G times that */
                            if (G * fabs(scale) * terms > a_dk.term_max)
                                a_dk.term_max = G * fabs(scale) * terms;
                        }
                        for (int64_t x = 0; x < DV; ++x) {
                            double acc = 0.0;
                            for (int64_t i = 0; i < sq; ++i)
                                if (ph.pd[i * sk + j] != 0.0)
                                    acc = f32(acc + ph.pd[i * sk + j] *
                                                        seq_get(tc, &tc->dout, b, seq.q_start, i, h, x));
                            n_dv[j * DV + x] = f32(n_dv[j * DV + x] + rnd(dt, acc));
                        }
                    }
                    plain_free(&ph);
                }
            }
            for (int64_t g = 0; g < G; ++g) {
                int64_t h = hk * G + g;
                for (int64_t i = 0; i < sq; ++i)
                    for (int64_t x = 0; x < D; ++x) {
                        int64_t e = (g * sq + i) * D + x;
                        snprintf(where, sizeof where, "dq(b=%lld,row=%lld,h=%lld,x=%lld)",
                                 (long long)b, (long long)i, (long long)h, (long long)x);
                        acc_add(&a_dq, seq_get(tc, &tc->dq, b, seq.q_start, i, h, x), r_dq[e],
                                lowp ? n_dq[e] : r_dq[e], where);
                    }
            }
            for (int64_t j = 0; j < k_rows; ++j) {
                for (int64_t x = 0; x < D; ++x) {
                    double lib = seq_get(tc, &tc->dk, b, seq.k_start, j, hk, x);
                    snprintf(where, sizeof where, "dk(b=%lld,row=%lld,hk=%lld,x=%lld)",
                             (long long)b, (long long)j, (long long)hk, (long long)x);
                    if (j >= sk) acc_exact(&a_dk, lib, 0.0, where);
                    else acc_add(&a_dk, lib, r_dk[j * D + x], lowp ? rnd(dt, n_dk[j * D + x]) : r_dk[j * D + x], where);
                }
                for (int64_t x = 0; x < DV; ++x) {
                    double lib = seq_get(tc, &tc->dv, b, seq.k_start, j, hk, x);
                    snprintf(where, sizeof where, "dv(b=%lld,row=%lld,hk=%lld,x=%lld)",
                             (long long)b, (long long)j, (long long)hk, (long long)x);
                    if (j >= sk) acc_exact(&a_dv, lib, 0.0, where);
                    else acc_add(&a_dv, lib, r_dv[j * DV + x], lowp ? rnd(dt, n_dv[j * DV + x]) : r_dv[j * DV + x], where);
                }
            }
        }
        free(r_dq);
        free(r_dk);
        free(r_dv);
        free(n_dq);
        free(n_dk);
        free(n_dv);
        free(ds);
        free(ds_terms);
    }
    /* the largest finite |LSE| the backward works from */
    double lse_max = 0.0;
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->bwd.varlen, b);
        for (int64_t h = 0; h < c->nheads; ++h)
            for (int64_t i = 0; i < seq.len_q; ++i) {
                double l = fabs(row_get(tc, &tc->lse, b, seq.q_start, h, i));
                if (isfinite(l) && l > lse_max) lse_max = l;
            }
    }
    if (c->varlen) {
        check_gap_rows(&a_dq, tc, &tc->dq, &tc->cu_q, B, 0.0, "dq");
        check_gap_rows(&a_dk, tc, &tc->dk, &tc->cu_k, B, 0.0, "dk");
        check_gap_rows(&a_dv, tc, &tc->dv, &tc->cu_k, B, 0.0, "dv");
    }
    int fails = acc_report(&a_dq, tc, dt, lse_max) + acc_report(&a_dk, tc, dt, lse_max) +
                acc_report(&a_dv, tc, dt, lse_max);
    if (fails) fprintf(stderr, "  (largest |LSE| %.3g)\n", lse_max);
    if (c->layout == TEST_LAYOUT_PACKED) {
        const flashc_tensor *views[3] = {&tc->dq, &tc->dk, &tc->dv};
        fails += untouched_report(tc, "backward dq/dk/dv (outside the packed views)", &tc->a_dq,
                                  views, 3);
    } else {
        const flashc_tensor *vq[1] = {&tc->dq}, *vk[1] = {&tc->dk}, *vv[1] = {&tc->dv};
        fails += untouched_report(tc, "backward dq (outside view)", &tc->a_dq, vq, 1);
        fails += untouched_report(tc, "backward dk (outside view)", &tc->a_dk, vk, 1);
        fails += untouched_report(tc, "backward dv (outside view)", &tc->a_dv, vv, 1);
    }
    return fails;
}

/* ---- Running cases ---------------------------------------------------- */

int test_run_case(const test_config *cfg, uint64_t seed, int backward) {
    test_case tc;
    test_config c = *cfg;
    if (backward) c.with_lse = 1;
    char desc[768];
    if (test_case_init(&tc, &c, seed) != 0) {
        test_config_describe(&c, desc, sizeof desc);
        fprintf(stderr, "FAIL invalid test config [%s]\n", desc);
        test_case_free(&tc);
        return 1;
    }
    int fails = 0;
    flashc_status st = test_case_forward(&tc);
    if (st != FLASHC_SUCCESS) {
        test_config_describe(&c, desc, sizeof desc);
        fprintf(stderr, "FAIL forward returned %s (%s) [%s] seed %llu\n", flashc_status_string(st),
                flashc_last_error_message(), desc, (unsigned long long)seed);
        test_case_free(&tc);
        return 1;
    }
    fails += test_check_forward(&tc);
    if (backward) {
        st = test_case_backward(&tc);
        if (st != FLASHC_SUCCESS) {
            test_config_describe(&c, desc, sizeof desc);
            fprintf(stderr, "FAIL backward returned %s (%s) [%s] seed %llu\n",
                    flashc_status_string(st), flashc_last_error_message(), desc,
                    (unsigned long long)seed);
            fails += 1;
        } else {
            fails += test_check_backward(&tc);
        }
    }
    test_case_free(&tc);
    return fails;
}
