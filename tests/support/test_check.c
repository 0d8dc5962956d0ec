/* Comparison of flashc's outputs with the double-precision reference. The
 * low-precision tolerance follows DESIGN.md: flashc's largest error may be
 * at most twice that of a plain computation in the same precision (float32
 * accumulation, every intermediate rounded to the input dtype, as an eager
 * framework computes it: test_plain.c) plus one unit in the last place.
 * Each (sequence, head) is checked on its own, the heads spread over the
 * threads, and the results are merged in order: the report is the same for
 * any number of threads. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_plain.h"
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

/* Where an element is: fmt takes `name` and up to four integers. Formatted
 * only when the element is reported. */
typedef struct elem_at {
    const char *fmt, *name;
    long long i[4];
} elem_at;

static elem_at at(const char *fmt, const char *name, int64_t a, int64_t b, int64_t c, int64_t d) {
    elem_at w = {fmt, name, {(long long)a, (long long)b, (long long)c, (long long)d}};
    return w;
}

static void describe_at(char *buf, size_t size, const elem_at *w) {
    snprintf(buf, size, w->fmt, w->name, w->i[0], w->i[1], w->i[2], w->i[3]);
}

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

static void acc_add(err_acc *a, double lib, double ref, double naive, const elem_at *w) {
    ++a->count;
    char where[128];
    double e = fabs(lib - ref);
    /* a NaN error (NaN in flashc's output, or in a reference fed with
     * it) fails the check; no error below is ever NaN */
    if (isnan(e)) {
        if (a->nan_count++ == 0 && !a->first_problem[0]) {
            describe_at(where, sizeof where, w);
            snprintf(a->first_problem, sizeof a->first_problem, "NaN at %s: flashc %.9g ref %.9g",
                     where, lib, ref);
        }
        return;
    }
    if (e > a->lib_err) {
        a->lib_err = e;
        describe_at(where, sizeof where, w);
        snprintf(a->worst, sizeof a->worst, "%s: flashc %.9g ref %.9g", where, lib, ref);
    }
    if (fabs(naive - ref) > a->naive_err) a->naive_err = fabs(naive - ref);
    if (fabs(ref) > a->ref_max) a->ref_max = fabs(ref);
}

/* An element that must hold exactly `want` (0 for hidden/padding, +inf for
 * the LSE of a row that sees nothing). */
static void acc_exact(err_acc *a, double lib, double want, const elem_at *w) {
    ++a->count;
    if (lib == want) return;
    if (a->exact_failures++ == 0 && !a->first_problem[0]) {
        char where[128];
        describe_at(where, sizeof where, w);
        snprintf(a->first_problem, sizeof a->first_problem, "%s: flashc %.9g, must be %.9g", where,
                 lib, want);
    }
}

/* A check that could not be made (the reference failed, no memory). */
static void acc_broken(err_acc *a, const char *why) {
    if (a->exact_failures++ == 0 && !a->first_problem[0])
        snprintf(a->first_problem, sizeof a->first_problem, "%s", why);
}

/* Adds `later` (the elements checked after those of `a`) to `a`: the result
 * is what `a` would hold had it seen all of them in that order. */
static void acc_merge(err_acc *a, const err_acc *later) {
    if (later->lib_err > a->lib_err) {
        a->lib_err = later->lib_err;
        memcpy(a->worst, later->worst, sizeof a->worst);
    }
    if (later->naive_err > a->naive_err) a->naive_err = later->naive_err;
    if (later->ref_max > a->ref_max) a->ref_max = later->ref_max;
    if (later->term_max > a->term_max) a->term_max = later->term_max;
    if (!a->first_problem[0])
        memcpy(a->first_problem, later->first_problem, sizeof a->first_problem);
    a->count += later->count;
    a->nan_count += later->nan_count;
    a->exact_failures += later->exact_failures;
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

static double seq_get(const test_case *tc, const flashc_tensor *t, int64_t b, int64_t start,
                      int64_t r, int64_t h, int64_t x) {
    int64_t index[4];
    flashc_ref_seq_element(tc->cfg.varlen, b, start, r, h, x, index);
    return flashc_ref_load(t, index);
}

static double row_get(const test_case *tc, const flashc_tensor *t, int64_t b, int64_t start,
                      int64_t h, int64_t r) {
    int64_t index[3];
    flashc_ref_row_element(tc->cfg.varlen, b, start, h, r, index);
    return flashc_ref_load(t, index);
}

/* Varlen packed rows outside every sequence: [0, cu[0]) and [cu[B], total). */
static int outside_sequences(const flashc_tensor *cu, int64_t B, int64_t row) {
    int64_t first[1] = {0}, last[1] = {B};
    return row < (int64_t)flashc_ref_load(cu, first) || row >= (int64_t)flashc_ref_load(cu, last);
}

/* Every element of the packed rows outside every sequence of a varlen
 * tensor (rows, heads, dim) must equal `value`. */
static void check_gap_rows(err_acc *acc, const flashc_tensor *t, const flashc_tensor *cu, int64_t B,
                           double value, const char *name) {
    for (int64_t r = 0; r < t->shape[0]; ++r) {
        if (!outside_sequences(cu, B, r)) continue;
        for (int64_t h = 0; h < t->shape[1]; ++h)
            for (int64_t x = 0; x < t->shape[2]; ++x) {
                int64_t index[3] = {r, h, x};
                elem_at w = at("%s(packed row %lld outside every sequence, h=%lld, x=%lld)", name,
                               r, h, x, 0);
                acc_exact(acc, flashc_ref_load(t, index), value, &w);
            }
    }
}

/* ---- Forward check ---------------------------------------------------- */

/* The checks of one (sequence, head): every (b, h) is checked on its own,
 * on any thread, and the results are merged in (b, h) order. */
typedef struct forward_accs {
    err_acc out, lse, sd, sign;
} forward_accs;

typedef struct forward_job {
    const test_case *tc;
    forward_accs *heads; /* B * nheads */
} forward_job;

static void forward_accs_init(forward_accs *a) {
    acc_init(&a->out, "forward out");
    acc_init(&a->lse, "forward lse");
    acc_init(&a->sd, "forward s_dmask");
    acc_init(&a->sign, "forward s_dmask dropout sign");
}

static void check_forward_head(int64_t item, void *ctx) {
    const forward_job *job = ctx;
    const test_case *tc = job->tc;
    const test_config *c = &tc->cfg;
    const flashc_attention_options *o = &tc->fwd.options;
    int64_t b = item / c->nheads, h = item % c->nheads;
    forward_accs *a = &job->heads[item];
    int lowp = c->dtype != FLASHC_DTYPE_FLOAT64;
    flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->fwd.varlen, b);
    int64_t sq = seq.len_q, sk = seq.len_k;
    double *r_out = malloc((size_t)(sq * c->dv + 1) * sizeof(double));
    double *r_lse = malloc((size_t)(sq + 1) * sizeof(double));
    double *r_sd = c->with_sdmask ? malloc((size_t)(sq * sk + 1) * sizeof(double)) : NULL;
    double *naive_out = malloc((size_t)(c->dv + 1) * sizeof(double));
    plain_rows rows;
    plain_head ph;
    memset(&rows, 0, sizeof rows);
    memset(&ph, 0, sizeof ph);
    if (!r_out || !r_lse || (c->with_sdmask && !r_sd) || !naive_out ||
        (lowp && (plain_rows_load(&rows, tc, b, h, &seq) != 0 ||
                  plain_probabilities(&ph, tc, b, h, &rows) != 0))) {
        acc_broken(&a->out, "out of host memory");
    } else if (flashc_ref_forward(&tc->fwd, b, h, r_out, r_lse, r_sd) != 0) {
        acc_broken(&a->out, "the reference forward could not run");
    } else {
        for (int64_t i = 0; i < sq; ++i) {
            int masked = isinf(r_lse[i]);
            if (lowp && !masked) plain_out_row(&ph, &rows, c->dtype, i, naive_out);
            for (int64_t x = 0; x < c->dv; ++x) {
                double lib = seq_get(tc, &tc->out, b, seq.q_start, i, h, x);
                elem_at w = at("%s(b=%lld,row=%lld,h=%lld,x=%lld)", "out", b, i, h, x);
                double ref = r_out[i * c->dv + x];
                if (masked) acc_exact(&a->out, lib, 0.0, &w);
                else acc_add(&a->out, lib, ref, lowp ? naive_out[x] : ref, &w);
            }
            if (c->with_lse) {
                double lib = row_get(tc, &tc->lse, b, seq.q_start, h, i);
                elem_at w = at("%s(b=%lld,h=%lld,row=%lld)", "lse", b, h, i, 0);
                if (masked) acc_exact(&a->lse, lib, INFINITY, &w);
                else acc_add(&a->lse, lib, r_lse[i], lowp ? ph.lse[i] : r_lse[i], &w);
            }
        }
        if (c->with_sdmask) {
            const flashc_tensor *t = &tc->s_dmask;
            for (int64_t i = 0; i < t->shape[2]; ++i) {
                for (int64_t j = 0; j < t->shape[3]; ++j) {
                    int64_t index[4] = {b, h, i, j};
                    double lib = flashc_ref_load(t, index);
                    elem_at w = at("%s(b=%lld,h=%lld,%lld,%lld)", "s_dmask", b, h, i, j);
                    if (i >= sq || j >= sk || !flashc_ref_visible(o, sq, sk, i, j)) {
                        acc_exact(&a->sd, lib, 0.0, &w);
                        continue;
                    }
                    double ref = r_sd[i * sk + j];
                    double naive = ref;
                    if (lowp) {
                        naive = flashc_ref_round(c->dtype, exp(ph.s[i * sk + j] - ph.m[i]));
                        if (ph.z[i * sk + j] == 0.0) naive = -naive;
                    }
                    acc_add(&a->sd, lib, ref, naive, &w);
                    /* the sign says kept/dropped: it must match exactly
                     * wherever the magnitude is clearly non-zero */
                    if (fabs(ref) >= 1e-2 && !isnan(lib))
                        acc_exact(&a->sign, signbit(lib) ? -1.0 : 1.0, signbit(ref) ? -1.0 : 1.0,
                                  &w);
                }
            }
        }
    }
    plain_head_free(&ph);
    plain_rows_free(&rows);
    free(r_out);
    free(r_lse);
    free(r_sd);
    free(naive_out);
}

int test_check_forward(const test_case *tc) {
    const test_config *c = &tc->cfg;
    int lowp = c->dtype != FLASHC_DTYPE_FLOAT64;
    flashc_dtype lse_dt = lowp ? FLASHC_DTYPE_FLOAT32 : FLASHC_DTYPE_FLOAT64;
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->fwd.varlen), items = B * c->nheads;
    forward_accs all;
    forward_accs_init(&all);
    forward_job job = {tc, calloc((size_t)(items > 0 ? items : 1), sizeof(forward_accs))};
    if (!job.heads) {
        acc_broken(&all.out, "out of host memory");
        items = 0;
    }
    for (int64_t e = 0; e < items; ++e) forward_accs_init(&job.heads[e]);
    test_parallel_for(items, check_forward_head, &job);
    for (int64_t e = 0; e < items; ++e) {
        acc_merge(&all.out, &job.heads[e].out);
        acc_merge(&all.lse, &job.heads[e].lse);
        acc_merge(&all.sd, &job.heads[e].sd);
        acc_merge(&all.sign, &job.heads[e].sign);
    }
    free(job.heads);
    if (c->varlen) {
        check_gap_rows(&all.out, &tc->out, &tc->cu_q, B, 0.0, "out");
        if (c->with_lse) {
            for (int64_t h = 0; h < c->nheads; ++h)
                for (int64_t r = 0; r < tc->lse.shape[1]; ++r) {
                    if (!outside_sequences(&tc->cu_q, B, r)) continue;
                    elem_at w = at("%s(h=%lld, packed row %lld outside every sequence)", "lse", h,
                                   r, 0, 0);
                    acc_exact(&all.lse, row_get(tc, &tc->lse, 0, 0, h, r), INFINITY, &w);
                }
        }
    }
    int fails = acc_report(&all.out, tc, c->dtype, 0.0);
    if (c->with_lse) fails += acc_report(&all.lse, tc, lse_dt, 0.0);
    if (c->with_sdmask) {
        fails += acc_report(&all.sd, tc, c->dtype, 0.0);
        fails += acc_report(&all.sign, tc, c->dtype, 0.0);
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

/* The checks of one (sequence, kv head), with the G query heads that share
 * it; merged in (b, hk) order like the forward's. */
typedef struct backward_accs {
    err_acc dq, dk, dv;
} backward_accs;

typedef struct backward_job {
    const test_case *tc;
    backward_accs *groups; /* B * nheads_k */
} backward_job;

static void backward_accs_init(backward_accs *a) {
    acc_init(&a->dq, "backward dq");
    acc_init(&a->dk, "backward dk");
    acc_init(&a->dv, "backward dv");
}

/* The plain computation's dq (G x sq x d) and dk, dv (sums over the group,
 * rounded) of (b, hk); the term magnitudes go to the accumulators. */
static int plain_backward_group(const test_case *tc, int64_t b, int64_t hk,
                                const flashc_ref_seq *seq, double *n_dq, double *n_dk, double *n_dv,
                                backward_accs *a) {
    const test_config *c = &tc->cfg;
    int64_t G = c->nheads / c->nheads_k, sq = seq->len_q, sk = seq->len_k;
    memset(n_dk, 0, (size_t)(sk * c->d + 1) * sizeof(double));
    memset(n_dv, 0, (size_t)(sk * c->dv + 1) * sizeof(double));
    plain_terms terms = {a->dq.term_max, a->dk.term_max};
    for (int64_t g = 0; g < G; ++g) {
        int64_t h = hk * G + g;
        plain_rows rows;
        plain_head ph;
        if (plain_rows_load(&rows, tc, b, h, seq) != 0) return -1;
        int st = plain_probabilities(&ph, tc, b, h, &rows);
        if (st == 0) {
            st = plain_backward_head(tc, b, h, &rows, &ph, n_dq + g * sq * c->d, n_dk, n_dv,
                                     &terms);
            plain_head_free(&ph);
        }
        plain_rows_free(&rows);
        if (st != 0) return -1;
    }
    for (int64_t e = 0; e < sk * c->d; ++e) n_dk[e] = flashc_ref_round(c->dtype, n_dk[e]);
    for (int64_t e = 0; e < sk * c->dv; ++e) n_dv[e] = flashc_ref_round(c->dtype, n_dv[e]);
    a->dq.term_max = terms.dq;
    a->dk.term_max = terms.dk;
    return 0;
}

static void check_backward_group(int64_t item, void *ctx) {
    const backward_job *job = ctx;
    const test_case *tc = job->tc;
    const test_config *c = &tc->cfg;
    int64_t b = item / c->nheads_k, hk = item % c->nheads_k;
    backward_accs *a = &job->groups[item];
    int lowp = c->dtype != FLASHC_DTYPE_FLOAT64;
    int64_t G = c->nheads / c->nheads_k, D = c->d, DV = c->dv;
    flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->bwd.varlen, b);
    int64_t sq = seq.len_q, sk = seq.len_k;
    /* rows of k/v that belong to the sequence but are not used
     * (seqused_k): their gradient is exactly 0 */
    int64_t k_rows = c->varlen ? c->lens_k[b] : sk;
    double *r_dq = malloc((size_t)(G * sq * D + 1) * sizeof(double));
    double *r_dk = malloc((size_t)(sk * D + 1) * sizeof(double));
    double *r_dv = malloc((size_t)(sk * DV + 1) * sizeof(double));
    double *n_dq = lowp ? calloc((size_t)(G * sq * D + 1), sizeof(double)) : r_dq;
    double *n_dk = lowp ? calloc((size_t)(sk * D + 1), sizeof(double)) : r_dk;
    double *n_dv = lowp ? calloc((size_t)(sk * DV + 1), sizeof(double)) : r_dv;
    if (!r_dq || !r_dk || !r_dv || !n_dq || !n_dk || !n_dv) {
        acc_broken(&a->dq, "out of host memory");
    } else if (flashc_ref_backward(&tc->bwd, b, hk, r_dq, r_dk, r_dv) != 0) {
        acc_broken(&a->dq, "the reference backward could not run");
    } else if (lowp && plain_backward_group(tc, b, hk, &seq, n_dq, n_dk, n_dv, a) != 0) {
        acc_broken(&a->dq, "out of host memory");
    } else {
        for (int64_t g = 0; g < G; ++g) {
            int64_t h = hk * G + g;
            for (int64_t i = 0; i < sq; ++i)
                for (int64_t x = 0; x < D; ++x) {
                    int64_t e = (g * sq + i) * D + x;
                    elem_at w = at("%s(b=%lld,row=%lld,h=%lld,x=%lld)", "dq", b, i, h, x);
                    double lib = seq_get(tc, &tc->dq, b, seq.q_start, i, h, x);
                    acc_add(&a->dq, lib, r_dq[e], n_dq[e], &w);
                }
        }
        for (int64_t j = 0; j < k_rows; ++j) {
            for (int64_t x = 0; x < D; ++x) {
                double lib = seq_get(tc, &tc->dk, b, seq.k_start, j, hk, x);
                elem_at w = at("%s(b=%lld,row=%lld,hk=%lld,x=%lld)", "dk", b, j, hk, x);
                if (j >= sk) acc_exact(&a->dk, lib, 0.0, &w);
                else acc_add(&a->dk, lib, r_dk[j * D + x], n_dk[j * D + x], &w);
            }
            for (int64_t x = 0; x < DV; ++x) {
                double lib = seq_get(tc, &tc->dv, b, seq.k_start, j, hk, x);
                elem_at w = at("%s(b=%lld,row=%lld,hk=%lld,x=%lld)", "dv", b, j, hk, x);
                if (j >= sk) acc_exact(&a->dv, lib, 0.0, &w);
                else acc_add(&a->dv, lib, r_dv[j * DV + x], n_dv[j * DV + x], &w);
            }
        }
    }
    if (lowp) {
        free(n_dq);
        free(n_dk);
        free(n_dv);
    }
    free(r_dq);
    free(r_dk);
    free(r_dv);
}

int test_check_backward(const test_case *tc) {
    const test_config *c = &tc->cfg;
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->bwd.varlen), items = B * c->nheads_k;
    backward_accs all;
    backward_accs_init(&all);
    backward_job job = {tc, calloc((size_t)(items > 0 ? items : 1), sizeof(backward_accs))};
    if (!job.groups) {
        acc_broken(&all.dq, "out of host memory");
        items = 0;
    }
    for (int64_t e = 0; e < items; ++e) backward_accs_init(&job.groups[e]);
    test_parallel_for(items, check_backward_group, &job);
    for (int64_t e = 0; e < items; ++e) {
        acc_merge(&all.dq, &job.groups[e].dq);
        acc_merge(&all.dk, &job.groups[e].dk);
        acc_merge(&all.dv, &job.groups[e].dv);
    }
    free(job.groups);
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
        check_gap_rows(&all.dq, &tc->dq, &tc->cu_q, B, 0.0, "dq");
        check_gap_rows(&all.dk, &tc->dk, &tc->cu_k, B, 0.0, "dk");
        check_gap_rows(&all.dv, &tc->dv, &tc->cu_k, B, 0.0, "dv");
    }
    flashc_dtype dt = c->dtype;
    int fails = acc_report(&all.dq, tc, dt, lse_max) + acc_report(&all.dk, tc, dt, lse_max) +
                acc_report(&all.dv, tc, dt, lse_max);
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
