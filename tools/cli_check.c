#include "cli_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/measure.h"
#include "flashc_reference.h"

/* Tolerances relative to the largest reference magnitude of the tensor.
 * Low precision inputs are identical on both sides (the reference reads the
 * rounded values), so what remains is float32 accumulation plus the
 * rounding of the result to the dtype (2^-8 for bf16, 2^-11 for fp16),
 * with room for sums over thousands of keys. */
static double tolerance_out(flashc_dtype dt) {
    switch (dt) {
        case FLASHC_DTYPE_FLOAT64: return 1e-10;
        case FLASHC_DTYPE_FLOAT32: return 2e-4;
        case FLASHC_DTYPE_FLOAT16: return 5e-3;
        default: return 3e-2;
    }
}

static double tolerance_grad(flashc_dtype dt) {
    switch (dt) {
        case FLASHC_DTYPE_FLOAT64: return 1e-9;
        case FLASHC_DTYPE_FLOAT32: return 1e-3;
        case FLASHC_DTYPE_FLOAT16: return 1e-2;
        default: return 5e-2;
    }
}

/* LSE is float32 (float64 for float64 inputs) and computed from the same
 * rounded inputs, so the absolute error is small for every dtype. */
static double tolerance_lse(flashc_dtype dt) {
    return dt == FLASHC_DTYPE_FLOAT64 ? 1e-10 : 1e-3;
}

static void error_init(flashc_cli_error *e, double tolerance) {
    memset(e, 0, sizeof *e);
    e->tolerance = tolerance;
}

static void error_add(flashc_cli_error *e, double got, double ref) {
    e->checked++;
    if (!isfinite(got) || !isfinite(ref)) {
        if (!(got == ref)) e->mismatched_inf++; /* NaN never equals; +inf == +inf */
        return;
    }
    double diff = fabs(got - ref);
    if (diff > e->max_abs) e->max_abs = diff;
    if (fabs(ref) > e->max_ref) e->max_ref = fabs(ref);
}

static void error_finish(flashc_cli_error *e, int absolute) {
    if (absolute) e->relative = e->max_abs;
    else e->relative = e->max_ref > 0.0 ? e->max_abs / e->max_ref : e->max_abs;
    e->pass = e->mismatched_inf == 0 && e->relative <= e->tolerance;
}

/* Element (global packed row or batch b + local row, head, dim) of a
 * (b, s, h, d) or (total, h, d) tensor. */
static double seq_load(const flashc_tensor *t, int varlen, int64_t b, int64_t row, int64_t head,
                       int64_t x) {
    int64_t idx4[4] = {b, row, head, x};
    int64_t idx3[3] = {row, head, x};
    return flashc_ref_load(t, varlen ? idx3 : idx4);
}

static double lse_load(const flashc_tensor *t, int varlen, int64_t b, int64_t h, int64_t row) {
    int64_t idx3[3] = {b, h, row};
    int64_t idx2[2] = {h, row};
    return flashc_ref_load(t, varlen ? idx2 : idx3);
}

/* Sequences with work, for sampling: the last one first (varlen lengths
 * vary), then evenly spread ones. */
static int64_t sample_batch(const flashc_cli_problem *p, int k, int count) {
    int64_t b = count <= 1 ? p->batch - 1 : (p->batch - 1) - (int64_t)k * (p->batch - 1) / (count - 1);
    for (int64_t tries = 0; tries < p->batch; ++tries) {
        int64_t c = (b + tries) % p->batch;
        if (p->len_q[c] > 0) return c;
    }
    return b;
}

static int check_forward(const flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_cli_check *r) {
    const int varlen = opt->varlen;
    int count = opt->check_heads;
    for (int k = 0; k < count; ++k) {
        int64_t b = sample_batch(p, k, count);
        int64_t h = count <= 1 ? p->heads - 1 : (int64_t)k * (p->heads - 1) / (count - 1);
        int64_t sq = p->len_q[b];
        double *out = malloc((size_t)(sq * p->hdim_v + 1) * sizeof(double));
        double *lse = malloc((size_t)(sq + 1) * sizeof(double));
        if (!out || !lse || flashc_ref_forward(&p->fwd_host, b, h, out, lse, NULL) != 0) {
            free(out);
            free(lse);
            fprintf(stderr, "flashc run: the reference forward could not run for (batch %lld, head %lld)\n",
                    (long long)b, (long long)h);
            return -1;
        }
        int64_t row0 = varlen ? p->start_q[b] : 0;
        int64_t bi = varlen ? 0 : b;
        for (int64_t i = 0; i < sq; ++i) {
            for (int64_t x = 0; x < p->hdim_v; ++x)
                error_add(&r->out, seq_load(&p->out.host.desc, varlen, bi, row0 + i, h, x),
                          out[i * p->hdim_v + x]);
            error_add(&r->lse, lse_load(&p->lse.host.desc, varlen, bi, h, row0 + i), lse[i]);
        }
        r->rows_checked += sq;
        free(out);
        free(lse);
    }
    return 0;
}

static int check_backward(const flashc_cli_problem *p, const flashc_cli_options *opt,
                          flashc_cli_check *r) {
    const int varlen = opt->varlen;
    int64_t b = sample_batch(p, 0, 1);
    int64_t hk = p->kv_heads - 1;
    int64_t group = p->heads / p->kv_heads;
    int64_t sq = p->len_q[b], sk = p->len_k[b];
    double *dq = malloc((size_t)(group * sq * p->hdim + 1) * sizeof(double));
    double *dk = malloc((size_t)(sk * p->hdim + 1) * sizeof(double));
    double *dv = malloc((size_t)(sk * p->hdim_v + 1) * sizeof(double));
    if (!dq || !dk || !dv || flashc_ref_backward(&p->bwd_host, b, hk, dq, dk, dv) != 0) {
        free(dq);
        free(dk);
        free(dv);
        fprintf(stderr, "flashc run: the reference backward could not run for (batch %lld, kv head %lld)\n",
                (long long)b, (long long)hk);
        return -1;
    }
    int64_t qrow0 = varlen ? p->start_q[b] : 0, krow0 = varlen ? p->start_k[b] : 0;
    int64_t bi = varlen ? 0 : b;
    for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < sq; ++i)
            for (int64_t x = 0; x < p->hdim; ++x)
                error_add(&r->dq, seq_load(&p->dq.host.desc, varlen, bi, qrow0 + i, hk * group + g, x),
                          dq[(g * sq + i) * p->hdim + x]);
    for (int64_t j = 0; j < sk; ++j) {
        for (int64_t x = 0; x < p->hdim; ++x)
            error_add(&r->dk, seq_load(&p->dk.host.desc, varlen, bi, krow0 + j, hk, x), dk[j * p->hdim + x]);
        for (int64_t x = 0; x < p->hdim_v; ++x)
            error_add(&r->dv, seq_load(&p->dv.host.desc, varlen, bi, krow0 + j, hk, x),
                      dv[j * p->hdim_v + x]);
    }
    free(dq);
    free(dk);
    free(dv);
    return 0;
}

int flashc_cli_check_run(const flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_cli_check *r) {
    memset(r, 0, sizeof *r);
    error_init(&r->out, tolerance_out(opt->dtype));
    error_init(&r->lse, tolerance_lse(opt->dtype));
    error_init(&r->dq, tolerance_grad(opt->dtype));
    error_init(&r->dk, tolerance_grad(opt->dtype));
    error_init(&r->dv, tolerance_grad(opt->dtype));
    if (check_forward(p, opt, r) != 0) return -1;
    r->ran_forward = 1;
    error_finish(&r->out, 0);
    error_finish(&r->lse, 1);
    r->pass = r->out.pass && r->lse.pass;
    if (opt->backward) {
        if (check_backward(p, opt, r) != 0) return -1;
        r->ran_backward = 1;
        error_finish(&r->dq, 0);
        error_finish(&r->dk, 0);
        error_finish(&r->dv, 0);
        r->pass = r->pass && r->dq.pass && r->dk.pass && r->dv.pass;
    }
    return 0;
}
