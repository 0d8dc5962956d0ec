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
        case FLASHC_DTYPE_FLOAT32: return 1e-4;
        case FLASHC_DTYPE_FLOAT16: return 2e-3;
        default: return 1e-2;
    }
}

static double tolerance_grad(flashc_dtype dt) {
    switch (dt) {
        case FLASHC_DTYPE_FLOAT64: return 1e-9;
        case FLASHC_DTYPE_FLOAT32: return 1e-4;
        case FLASHC_DTYPE_FLOAT16: return 5e-3;
        default: return 2e-2;
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

/* The reference computes whole heads, row by row, slowly on purpose. To
 * check a large problem it is given a sub-problem that is exactly a part of
 * the real one: the last m query rows of one sequence (all its keys), as a
 * batched problem of one sequence over views of the same memory. Row
 * r0 + i of the sequence (r0 = sq - m) is row i of the view; masks and
 * ALiBi are aligned to the bottom-right corner, and the view's shift
 * sk - m puts row i exactly where row r0 + i was:
 * i + (sk - m) == (r0 + i) + (sk - sq). Masks, ALiBi distances, scores,
 * softmax rows, out, LSE and dQ of those rows are therefore identical.
 * dK/dV of the last m keys are identical too when the right window is 0
 * (causal): no earlier row sees those keys. Dropout draws depend on the
 * row and batch index, which the view changes, so with dropout the whole
 * problem is given to the reference instead. */
typedef struct sub_problem {
    flashc_tensor q, k, v, out, lse, dout, alibi;
    flashc_forward_args fwd;
    flashc_backward_args bwd;
    int64_t r0, m;          /* rows r0 .. r0 + m of the sequence */
} sub_problem;

/* A view of rows [row0, row0 + rows) of sequence b of a (b, s, h, d) or
 * (total, h, d) tensor, as a (1, rows, h, d) tensor. */
static flashc_tensor seq_view(const flashc_tensor *t, int varlen, int64_t b, int64_t row0, int64_t rows) {
    flashc_tensor v = *t;
    size_t es = flashc_dtype_size(t->dtype);
    int64_t off;
    if (varlen) {
        off = row0 * t->stride[0];
        v.rank = 4;
        v.shape[0] = 1;
        v.shape[1] = rows;
        v.shape[2] = t->shape[1];
        v.shape[3] = t->shape[2];
        v.stride[0] = rows * t->stride[0];
        v.stride[1] = t->stride[0];
        v.stride[2] = t->stride[1];
        v.stride[3] = t->stride[2];
    } else {
        off = b * t->stride[0] + row0 * t->stride[1];
        v.shape[0] = 1;
        v.shape[1] = rows;
    }
    v.data = (char *)t->data + off * (int64_t)es;
    return v;
}

/* (1, h, rows) view of an LSE tensor (b, h, s) or (h, total). */
static flashc_tensor lse_view(const flashc_tensor *t, int varlen, int64_t b, int64_t row0, int64_t rows) {
    flashc_tensor v = *t;
    size_t es = flashc_dtype_size(t->dtype);
    int64_t off;
    if (varlen) {
        off = row0 * t->stride[1];
        v.rank = 3;
        v.shape[0] = 1;
        v.shape[1] = t->shape[0];
        v.shape[2] = rows;
        v.stride[0] = 0;
        v.stride[1] = t->stride[0];
        v.stride[2] = t->stride[1];
    } else {
        off = b * t->stride[0] + row0 * t->stride[2];
        v.shape[0] = 1;
        v.shape[2] = rows;
    }
    v.data = (char *)t->data + off * (int64_t)es;
    return v;
}

static void make_sub_problem(const flashc_cli_problem *p, const flashc_cli_options *opt, int64_t b, int64_t m,
                             sub_problem *sp) {
    const int varlen = opt->varlen;
    int64_t sq = p->len_q[b], sk = p->len_k[b];
    int64_t qbase = varlen ? p->start_q[b] : 0, kbase = varlen ? p->start_k[b] : 0;
    sp->m = m;
    sp->r0 = sq - m;
    sp->q = seq_view(&p->q.host.desc, varlen, b, qbase + sp->r0, m);
    sp->out = seq_view(&p->out.host.desc, varlen, b, qbase + sp->r0, m);
    sp->k = seq_view(&p->k.host.desc, varlen, b, kbase, sk);
    sp->v = seq_view(&p->v.host.desc, varlen, b, kbase, sk);
    sp->lse = lse_view(&p->lse.host.desc, varlen, b, qbase + sp->r0, m);
    memset(&sp->fwd, 0, sizeof sp->fwd);
    sp->fwd.q = &sp->q;
    sp->fwd.k = &sp->k;
    sp->fwd.v = &sp->v;
    sp->fwd.options = p->fwd_host.options;
    if (opt->alibi == FLASHC_CLI_ALIBI_PER_BATCH_HEAD) {
        sp->alibi = p->alibi.host.desc;
        sp->alibi.data = (float *)sp->alibi.data + b * sp->alibi.stride[0];
        sp->alibi.shape[0] = 1;
        sp->fwd.options.alibi_slopes = &sp->alibi;
    }
    memset(&sp->bwd, 0, sizeof sp->bwd);
    if (opt->backward) {
        sp->dout = seq_view(&p->dout.host.desc, varlen, b, qbase + sp->r0, m);
        sp->bwd.dout = &sp->dout;
        sp->bwd.q = &sp->q;
        sp->bwd.k = &sp->k;
        sp->bwd.v = &sp->v;
        sp->bwd.out = &sp->out; /* the library's own out, as its backward used */
        sp->bwd.lse = &sp->lse;
        sp->bwd.options = sp->fwd.options;
    }
}

/* Rows of the sequence the check covers: all of them for small heads
 * (cheap) and whenever dropout is on (exactness, see above), else the last
 * --check-rows. */
static int64_t rows_to_check(const flashc_cli_problem *p, const flashc_cli_options *opt, int64_t b) {
    int64_t sq = p->len_q[b], sk = p->len_k[b];
    double cost = (double)sq * (double)sk * (double)(p->hdim + p->hdim_v);
    if (opt->dropout > 0.0 || cost <= 1e7 || opt->check_rows >= sq) return sq;
    return opt->check_rows;
}

/* Output row (global row index, batch index) of row r of sequence b. */
static void out_row(const flashc_cli_problem *p, int varlen, int64_t b, int64_t r, int64_t *bi, int64_t *row) {
    *bi = varlen ? 0 : b;
    *row = (varlen ? p->start_q[b] : 0) + r;
}

static int check_forward(const flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_cli_check *r) {
    const int varlen = opt->varlen;
    int count = opt->check_heads;
    for (int k = 0; k < count; ++k) {
        int64_t b = sample_batch(p, k, count);
        int64_t h = count <= 1 ? p->heads - 1 : (int64_t)k * (p->heads - 1) / (count - 1);
        int64_t m = rows_to_check(p, opt, b);
        int whole = opt->dropout > 0.0;
        sub_problem sp;
        make_sub_problem(p, opt, b, m, &sp);
        double *out = malloc((size_t)(m * p->hdim_v + 1) * sizeof(double));
        double *lse = malloc((size_t)(m + 1) * sizeof(double));
        int rc = !out || !lse ? -1
                 : whole     ? flashc_ref_forward(&p->fwd_host, b, h, out, lse, NULL)
                             : flashc_ref_forward(&sp.fwd, 0, h, out, lse, NULL);
        if (rc != 0) {
            free(out);
            free(lse);
            fprintf(stderr, "flashc run: the reference forward could not run for (batch %lld, head %lld)\n",
                    (long long)b, (long long)h);
            return -1;
        }
        for (int64_t i = 0; i < m; ++i) {
            int64_t bi, row;
            out_row(p, varlen, b, sp.r0 + i, &bi, &row);
            for (int64_t x = 0; x < p->hdim_v; ++x)
                error_add(&r->out, seq_load(&p->out.host.desc, varlen, bi, row, h, x), out[i * p->hdim_v + x]);
            error_add(&r->lse, lse_load(&p->lse.host.desc, varlen, bi, h, row), lse[i]);
        }
        r->rows_checked += m;
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
    int64_t m = rows_to_check(p, opt, b);
    int whole = opt->dropout > 0.0;
    sub_problem sp;
    make_sub_problem(p, opt, b, m, &sp);
    /* Keys whose dK/dV the rows checked determine completely. */
    int right_zero = opt->causal || opt->window_right == 0;
    int64_t keys = m == sq ? sk : (right_zero ? (m < sk ? m : sk) : 0);
    double *dq = malloc((size_t)(group * m * p->hdim + 1) * sizeof(double));
    double *dk = malloc((size_t)(sk * p->hdim + 1) * sizeof(double));
    double *dv = malloc((size_t)(sk * p->hdim_v + 1) * sizeof(double));
    int rc = !dq || !dk || !dv ? -1
             : whole           ? flashc_ref_backward(&p->bwd_host, b, hk, dq, dk, dv)
                               : flashc_ref_backward(&sp.bwd, 0, hk, dq, dk, dv);
    if (rc != 0) {
        free(dq);
        free(dk);
        free(dv);
        fprintf(stderr, "flashc run: the reference backward could not run for (batch %lld, kv head %lld)\n",
                (long long)b, (long long)hk);
        return -1;
    }
    for (int64_t g = 0; g < group; ++g)
        for (int64_t i = 0; i < m; ++i) {
            int64_t bi, row;
            out_row(p, varlen, b, sp.r0 + i, &bi, &row);
            for (int64_t x = 0; x < p->hdim; ++x)
                error_add(&r->dq, seq_load(&p->dq.host.desc, varlen, bi, row, hk * group + g, x),
                          dq[(g * m + i) * p->hdim + x]);
        }
    int64_t kbase = varlen ? p->start_k[b] : 0, bi = varlen ? 0 : b;
    for (int64_t j = sk - keys; j < sk; ++j) {
        for (int64_t x = 0; x < p->hdim; ++x)
            error_add(&r->dk, seq_load(&p->dk.host.desc, varlen, bi, kbase + j, hk, x), dk[j * p->hdim + x]);
        for (int64_t x = 0; x < p->hdim_v; ++x)
            error_add(&r->dv, seq_load(&p->dv.host.desc, varlen, bi, kbase + j, hk, x), dv[j * p->hdim_v + x]);
    }
    r->grad_rows_checked = m;
    r->grad_keys_checked = keys;
    free(dq);
    free(dk);
    free(dv);
    return 0;
}

int flashc_cli_check_run(const flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_cli_check *r) {
    memset(r, 0, sizeof *r);
    if (opt->dropout > 0.0) {
        /* Whole heads: refuse sizes where the naive reference would take
         * minutes rather than run silently for that long. */
        int64_t b = sample_batch(p, 0, 1);
        double cost = (double)p->len_q[b] * (double)p->len_k[b] * (double)(p->hdim + p->hdim_v);
        if (cost > 2.5e8) {
            r->skipped = "with dropout the reference must compute whole heads, which takes minutes at this size "
                         "(check with --seqlen 1024 or less)";
            return 0;
        }
    }
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
