/* flashc's backward against central finite differences of flashc's own
 * forward, in float64 on small shapes, for every feature: causal, windows,
 * softcap, ALiBi (both shapes), GQA/MQA, dropout with a fixed seed (the mask
 * is then a constant of the function), varlen with empty sequences and
 * seqused_k, rows that see nothing, and dLSE.
 * Loss = sum(dout * out) + sum(dlse * lse over rows with a finite LSE). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "test_support.h"

typedef struct lse_ctx {
    const test_case *tc;
    double sum;
} sum_ctx;

static void add_out(const int64_t *index, void *ctx) {
    sum_ctx *s = ctx;
    s->sum += flashc_ref_load(&s->tc->out, index) * flashc_ref_load(&s->tc->dout, index);
}

static void add_lse(const int64_t *index, void *ctx) {
    sum_ctx *s = ctx;
    double lse = flashc_ref_load(&s->tc->lse, index);
    if (isfinite(lse)) s->sum += lse * flashc_ref_load(&s->tc->dlse, index);
}

static int library_loss(test_case *tc, double *loss) {
    if (test_case_forward(tc) != FLASHC_SUCCESS) return -1;
    sum_ctx s = {tc, 0.0};
    test_for_each(&tc->out, add_out, &s);
    if (tc->cfg.with_dlse) test_for_each(&tc->lse, add_lse, &s);
    *loss = s.sum;
    return 0;
}

typedef struct fd_ctx {
    test_case *tc;
    flashc_tensor *input, *grad;
    const char *name;
    double max_err;
    int errors;
    char worst[200];
} fd_ctx;

static void fd_one(const int64_t *index, void *ctx) {
    fd_ctx *f = ctx;
    const double step = 1e-5;
    double orig = flashc_ref_load(f->input, index), lp = NAN, lm = NAN;
    flashc_ref_store(f->input, index, orig + step);
    f->errors += library_loss(f->tc, &lp) != 0;
    flashc_ref_store(f->input, index, orig - step);
    f->errors += library_loss(f->tc, &lm) != 0;
    flashc_ref_store(f->input, index, orig);
    double fd = (lp - lm) / (2 * step);
    double g = flashc_ref_load(f->grad, index);
    double err = fabs(g - fd) / (1.0 + fabs(fd));
    if (!(err <= f->max_err)) {
        f->max_err = err;
        snprintf(f->worst, sizeof f->worst, "%s[%lld,%lld,%lld,%lld]: backward %.10g, finite difference %.10g",
                 f->name, (long long)index[0], (long long)index[1], (long long)index[2],
                 (long long)(f->grad->rank > 3 ? index[3] : -1), g, fd);
    }
}

static int gradcheck(const test_config *cfg, uint64_t seed) {
    test_case tc;
    test_config c = *cfg;
    c.dtype = FLASHC_DTYPE_FLOAT64;
    c.with_lse = 1;
    if (test_case_init(&tc, &c, seed) != 0) return 1;
    int fails = 0;
    if (test_case_forward(&tc) != FLASHC_SUCCESS || test_case_backward(&tc) != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL call failed: %s\n", flashc_last_error_message());
        test_case_free(&tc);
        return 1;
    }
    flashc_tensor *inputs[3] = {&tc.q, &tc.k, &tc.v}, *grads[3] = {&tc.dq, &tc.dk, &tc.dv};
    const char *names[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; ++w) {
        fd_ctx f = {&tc, inputs[w], grads[w], names[w], 0.0, 0, ""};
        test_for_each(inputs[w], fd_one, &f);
        if (f.errors || f.max_err > 1e-7) {
            char desc[768];
            test_config_describe(&c, desc, sizeof desc);
            fprintf(stderr, "FAIL gradcheck %s [%s] input seed %llu: rel err %.3g; worst %s\n",
                    names[w], desc, (unsigned long long)seed, f.max_err, f.worst);
            ++fails;
        }
    }
    test_case_free(&tc);
    return fails;
}

static test_config small(void) {
    test_config c = test_config_shaped(FLASHC_DTYPE_FLOAT64, 2, 4, 2, 4, 3, 5, 7);
    c.with_dlse = 1;
    c.options.num_threads = 1; /* thousands of tiny calls: no thread start-up */
    return c;
}

static void run_all(const char *name, const test_config *cfgs, int n) {
    int failed = 0;
    for (int k = 0; k < n; ++k) {
        uint64_t seed = test_seed(name, (uint64_t)k);
        if (gradcheck(&cfgs[k], seed)) {
            fprintf(stderr, "  -> %s case %d failed\n", name, k);
            ++failed;
        }
    }
    printf("%s: %d/%d cases passed\n", name, n - failed, n);
    if (failed) fail_msg("%s: %d of %d cases failed", name, failed, n);
}

static void batched_features(void **state) {
    (void)state;
    test_config cfgs[16], c;
    int n = 0;
    cfgs[n++] = small();
    c = small(); c.options.causal = 1; cfgs[n++] = c;
    c = small(); c.options.window_left = 1; c.options.window_right = 2; cfgs[n++] = c;
    c = small(); c.options.window_left = -1; c.options.window_right = 0; c.seqlen_q = 8;
    c.seqlen_k = 3; cfgs[n++] = c; /* rows that see nothing */
    c = small(); c.options.softcap = 0.7; c.input_scale = 1.5; cfgs[n++] = c;
    c = small(); c.alibi = 1; cfgs[n++] = c;
    c = small(); c.alibi = 2; c.options.softmax_scale = 0.8; cfgs[n++] = c;
    c = small(); c.options.dropout_p = 0.3; c.options.dropout_seed = 1234567;
    c.options.dropout_offset = 1ull << 35; cfgs[n++] = c;
    c = small(); c.nheads_k = 1; cfgs[n++] = c;
    c = small(); c.nheads_k = 4; c.with_dlse = 0; cfgs[n++] = c;
    c = small(); c.layout = TEST_LAYOUT_PADDED; c.options.causal = 1; cfgs[n++] = c;
    c = small(); c.options.causal = 1; c.options.window_left = 2; c.options.softcap = 1.2;
    c.alibi = 2; c.options.dropout_p = 0.25; c.options.dropout_seed = 42; c.nheads_k = 1;
    c.seqlen_q = 9; c.seqlen_k = 4; cfgs[n++] = c;
    run_all("gradcheck batched", cfgs, n);
}

static void varlen_features(void **state) {
    (void)state;
    test_config cfgs[8], c = small();
    int n = 0;
    c.varlen = 1;
    c.batch = 4;
    int64_t lq[4] = {3, 0, 5, 2}, lk[4] = {4, 3, 6, 0};
    for (int b = 0; b < 4; ++b) {
        c.lens_q[b] = lq[b];
        c.lens_k[b] = lk[b];
    }
    cfgs[n++] = c;
    test_config k = c; k.options.causal = 1; k.alibi = 2; cfgs[n++] = k;
    k = c; k.use_seqused_k = 1; k.seqused_k[0] = 2; k.seqused_k[1] = 0; k.seqused_k[2] = 6;
    k.seqused_k[3] = 0; k.options.dropout_p = 0.35; k.options.dropout_seed = 8;
    k.options.softcap = 1.1; cfgs[n++] = k;
    k = c; k.layout = TEST_LAYOUT_HEAD_MAJOR; k.options.window_left = 1; k.options.window_right = 0;
    k.nheads_k = 1; cfgs[n++] = k;
    run_all("gradcheck varlen", cfgs, n);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batched_features),
        cmocka_unit_test(varlen_features),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
