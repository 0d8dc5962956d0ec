/* The reference checked on its own, before it judges the library: Philox
 * against the published Random123 known answers, dtype conversions, the
 * mask rule on hand-worked cases, closed-form forward cases, and its
 * backward against finite differences of its own forward. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Random123 tests/kat_vectors, "philox4x32 10" lines: counter, key, output. */
static void philox_known_answers(void **state) {
    (void)state;
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int v = 0; v < 3; ++v) {
        uint32_t out[4];
        flashc_ref_philox4x32_10(&kat[v][0], &kat[v][4], out);
        for (int w = 0; w < 4; ++w) assert_int_equal(out[w], kat[v][6 + w]);
    }
}

/* The keep decision reads word (col & 3) of the block of counter col >> 2,
 * and every coordinate, the seed and the offset (both halves) matter. */
static void dropout_keep_layout(void **state) {
    (void)state;
    uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
    uint32_t counter[4] = {(uint32_t)(13 >> 2), 7, (uint32_t)(2 * 5 + 3), (uint32_t)offset};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ (uint32_t)(offset >> 32)};
    uint32_t words[4];
    flashc_ref_philox4x32_10(counter, key, words);
    for (int lane = 0; lane < 4; ++lane) {
        int64_t col = 12 + lane;
        double p = 0.37;
        int expect = (double)words[lane] >= floor(p * 4294967296.0);
        assert_int_equal(flashc_ref_dropout_keep(seed, offset, p, 2, 3, 5, 7, col), expect);
    }
    /* Over many entries each change of an input changes the mask. */
    int differ[6] = {0};
    for (int64_t j = 0; j < 256; ++j) {
        int base = flashc_ref_dropout_keep(seed, offset, 0.5, 1, 2, 4, 3, j);
        differ[0] += base != flashc_ref_dropout_keep(seed ^ 1, offset, 0.5, 1, 2, 4, 3, j);
        differ[1] += base != flashc_ref_dropout_keep(seed ^ (1ull << 40), offset, 0.5, 1, 2, 4, 3, j);
        differ[2] += base != flashc_ref_dropout_keep(seed, offset ^ 1, 0.5, 1, 2, 4, 3, j);
        differ[3] += base != flashc_ref_dropout_keep(seed, offset ^ (1ull << 40), 0.5, 1, 2, 4, 3, j);
        differ[4] += base != flashc_ref_dropout_keep(seed, offset, 0.5, 0, 2, 4, 3, j);
        differ[5] += base != flashc_ref_dropout_keep(seed, offset, 0.5, 1, 2, 4, 4, j);
    }
    for (int i = 0; i < 6; ++i) assert_true(differ[i] > 64); /* ~128 expected */
    assert_int_equal(flashc_ref_dropout_keep(seed, offset, 0.0, 0, 0, 1, 0, 0), 1);
}

/* Kept fraction of the reference's own mask: within 5 sigma of 1 - p. */
static void dropout_keep_fraction(void **state) {
    (void)state;
    const double ps[] = {0.1, 0.5, 0.9};
    for (int t = 0; t < 3; ++t) {
        int64_t kept = 0, n = 0;
        for (int64_t i = 0; i < 200; ++i)
            for (int64_t j = 0; j < 200; ++j, ++n)
                kept += flashc_ref_dropout_keep(42, 7, ps[t], 1, 3, 8, i, j);
        double frac = (double)kept / (double)n;
        double sigma = sqrt(ps[t] * (1 - ps[t]) / (double)n);
        if (fabs(frac - (1 - ps[t])) > 5 * sigma)
            fail_msg("p=%g kept %.5f, expected %.5f +- %.5f", ps[t], frac, 1 - ps[t], 5 * sigma);
    }
}

static void conversions(void **state) {
    (void)state;
    /* Every finite 16-bit pattern survives a round trip. */
    for (uint32_t bits = 0; bits < 65536; ++bits) {
        double h = flashc_ref_half_to_double((uint16_t)bits);
        double b = flashc_ref_bfloat16_to_double((uint16_t)bits);
        if (!isnan(h)) assert_int_equal(flashc_ref_half_from_double(h), bits);
        if (!isnan(b)) assert_int_equal(flashc_ref_bfloat16_from_double(b), bits);
    }
    /* Ties to even, overflow, subnormals. */
    assert_int_equal(flashc_ref_half_from_double(1.0 + ldexp(1, -11)), 0x3c00);
    assert_int_equal(flashc_ref_half_from_double(1.0 + 3 * ldexp(1, -11)), 0x3c02);
    assert_int_equal(flashc_ref_half_from_double(65504.0), 0x7bff);
    assert_int_equal(flashc_ref_half_from_double(65519.9), 0x7bff);
    assert_int_equal(flashc_ref_half_from_double(65520.0), 0x7c00);
    assert_int_equal(flashc_ref_half_from_double(-ldexp(1, -24)), 0x8001);
    assert_int_equal(flashc_ref_half_from_double(ldexp(1, -25)), 0x0000);
    assert_int_equal(flashc_ref_bfloat16_from_double(1.0 + ldexp(1, -8)), 0x3f80);
    assert_int_equal(flashc_ref_bfloat16_from_double(1.0 + 3 * ldexp(1, -8)), 0x3f82);
    assert_int_equal(flashc_ref_bfloat16_from_double(-2.0), 0xc000);
    assert_true(flashc_ref_round(FLASHC_DTYPE_FLOAT32, 1.0 + ldexp(1, -30)) == 1.0);
    assert_true(flashc_ref_round(FLASHC_DTYPE_FLOAT64, 1.0 + ldexp(1, -30)) != 1.0);
}

/* The mask rule on cases worked by hand. */
static void visibility_rule(void **state) {
    (void)state;
    flashc_attention_options o = flashc_attention_options_default();
    o.causal = 1;
    /* sq = sk = 4: lower triangle */
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) assert_int_equal(flashc_ref_visible(&o, 4, 4, i, j), j <= i);
    /* sq 2, sk 5, bottom-right: row 0 sees 0..3, row 1 sees 0..4 */
    assert_true(flashc_ref_visible(&o, 2, 5, 0, 3));
    assert_false(flashc_ref_visible(&o, 2, 5, 0, 4));
    assert_true(flashc_ref_visible(&o, 2, 5, 1, 4));
    /* sq 5, sk 2: rows 0..2 see nothing, row 3 sees 0, row 4 sees 0..1 */
    for (int j = 0; j < 2; ++j) {
        assert_false(flashc_ref_visible(&o, 5, 2, 2, j));
        assert_int_equal(flashc_ref_visible(&o, 5, 2, 3, j), j == 0);
        assert_true(flashc_ref_visible(&o, 5, 2, 4, j));
    }
    o.causal = 0;
    o.window_left = 0;
    o.window_right = 0; /* the diagonal only */
    for (int i = 0; i < 6; ++i)
        for (int j = 0; j < 6; ++j) assert_int_equal(flashc_ref_visible(&o, 6, 6, i, j), i == j);
    o.window_left = -1;
    o.window_right = 2; /* everything left, two to the right */
    assert_true(flashc_ref_visible(&o, 6, 6, 5, 0));
    assert_true(flashc_ref_visible(&o, 6, 6, 1, 3));
    assert_false(flashc_ref_visible(&o, 6, 6, 1, 4));
    o.window_left = 2;
    o.window_right = -1;
    assert_false(flashc_ref_visible(&o, 6, 6, 5, 2));
    assert_true(flashc_ref_visible(&o, 6, 6, 5, 3));
    assert_true(flashc_ref_visible(&o, 6, 6, 0, 5));
    /* causal with a left window: (2, 0) */
    o.causal = 1;
    o.window_right = -1;
    assert_true(flashc_ref_visible(&o, 6, 6, 4, 2));
    assert_false(flashc_ref_visible(&o, 6, 6, 4, 1));
    assert_false(flashc_ref_visible(&o, 6, 6, 4, 5));
}

/* Closed forms: one key gives out = v and lse = score; equal scores give
 * the mean of v and lse = score + log(n); ALiBi and softcap by hand. */
static void forward_closed_forms(void **state) {
    (void)state;
    test_rng rng;
    test_rng_init(&rng, test_seed("reference_closed_forms", 0));
    double q[3], k[4][3], v[4][2];
    for (int x = 0; x < 3; ++x) q[x] = test_rng_normal(&rng);
    for (int x = 0; x < 3; ++x) {
        double kx = test_rng_normal(&rng);
        for (int j = 0; j < 4; ++j) k[j][x] = kx; /* four identical keys */
    }
    for (int j = 0; j < 4; ++j)
        for (int x = 0; x < 2; ++x) v[j][x] = test_rng_normal(&rng);
    int64_t qs[4] = {1, 1, 1, 3}, ks[4] = {1, 4, 1, 3}, vs[4] = {1, 4, 1, 2};
    flashc_device cpu = {FLASHC_DEVICE_CPU, 0};
    flashc_tensor tq = flashc_tensor_contiguous(q, FLASHC_DTYPE_FLOAT64, cpu, 4, qs);
    flashc_tensor tk = flashc_tensor_contiguous(k, FLASHC_DTYPE_FLOAT64, cpu, 4, ks);
    flashc_tensor tv = flashc_tensor_contiguous(v, FLASHC_DTYPE_FLOAT64, cpu, 4, vs);
    flashc_forward_args a;
    memset(&a, 0, sizeof a);
    a.q = &tq;
    a.k = &tk;
    a.v = &tv;
    a.options = flashc_attention_options_default();
    a.options.softmax_scale = 0.7;
    double dot = q[0] * k[0][0] + q[1] * k[0][1] + q[2] * k[0][2];
    double out[2], lse, sd[4];
    assert_int_equal(flashc_ref_forward(&a, 0, 0, out, &lse, sd), 0);
    assert_true(fabs(lse - (0.7 * dot + log(4.0))) < 1e-13);
    for (int x = 0; x < 2; ++x)
        assert_true(fabs(out[x] - (v[0][x] + v[1][x] + v[2][x] + v[3][x]) / 4) < 1e-13);
    for (int j = 0; j < 4; ++j) assert_true(fabs(sd[j] - 1.0) < 1e-15);

    /* softcap 0.5 and ALiBi slope 0.25: s_j = 0.5 tanh(0.7 dot / 0.5) - 0.25 |3 - j| */
    float slope = 0.25f;
    int64_t ss[1] = {1};
    flashc_tensor ts = flashc_tensor_contiguous(&slope, FLASHC_DTYPE_FLOAT32, cpu, 1, ss);
    a.options.softcap = 0.5;
    a.options.alibi_slopes = &ts;
    double s[4], m = -INFINITY, sum = 0, want[2] = {0, 0};
    for (int j = 0; j < 4; ++j) {
        s[j] = 0.5 * tanh(0.7 * dot / 0.5) - 0.25 * (3 - j);
        if (s[j] > m) m = s[j];
    }
    for (int j = 0; j < 4; ++j) sum += exp(s[j] - m);
    for (int j = 0; j < 4; ++j)
        for (int x = 0; x < 2; ++x) want[x] += exp(s[j] - m) / sum * v[j][x];
    assert_int_equal(flashc_ref_forward(&a, 0, 0, out, &lse, sd), 0);
    assert_true(fabs(lse - (m + log(sum))) < 1e-13);
    for (int x = 0; x < 2; ++x) assert_true(fabs(out[x] - want[x]) < 1e-13);
    for (int j = 0; j < 4; ++j) assert_true(fabs(sd[j] - exp(s[j] - m)) < 1e-14);

    /* window (0, 0) with sq 1 < sk 4: only the last key; sq 1, sk 4, causal
     * sees all. A row seeing nothing: out 0, lse +inf. */
    a.options = flashc_attention_options_default();
    a.options.window_left = 0;
    a.options.window_right = 0;
    assert_int_equal(flashc_ref_forward(&a, 0, 0, out, &lse, sd), 0);
    for (int x = 0; x < 2; ++x) assert_true(fabs(out[x] - v[3][x]) < 1e-14);
    assert_true(sd[0] == 0 && sd[1] == 0 && sd[2] == 0 && sd[3] == 1.0);
    int64_t qs2[4] = {1, 4, 1, 3}, ks2[4] = {1, 1, 1, 3}, vs2[4] = {1, 1, 1, 2};
    double q4[4][3];
    for (int i = 0; i < 4; ++i)
        for (int x = 0; x < 3; ++x) q4[i][x] = test_rng_normal(&rng);
    tq = flashc_tensor_contiguous(q4, FLASHC_DTYPE_FLOAT64, cpu, 4, qs2);
    tk = flashc_tensor_contiguous(k, FLASHC_DTYPE_FLOAT64, cpu, 4, ks2);
    tv = flashc_tensor_contiguous(v, FLASHC_DTYPE_FLOAT64, cpu, 4, vs2);
    a.options.window_left = -1;
    a.options.causal = 1; /* sq 4 > sk 1: rows 0..2 see nothing */
    double out4[4][2], lse4[4];
    assert_int_equal(flashc_ref_forward(&a, 0, 0, &out4[0][0], lse4, NULL), 0);
    for (int i = 0; i < 3; ++i) {
        assert_true(isinf(lse4[i]) && lse4[i] > 0);
        assert_true(out4[i][0] == 0.0 && out4[i][1] == 0.0);
    }
    assert_true(fabs(out4[3][0] - v[0][0]) < 1e-14 && fabs(out4[3][1] - v[0][1]) < 1e-14);
}

/* The reference's backward against central differences of its forward,
 * loss = sum(dout * out) + sum(dlse * lse over rows that see a key). */
static double reference_loss(const test_case *tc) {
    const test_config *c = &tc->cfg;
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->fwd.varlen);
    double loss = 0.0;
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->fwd.varlen, b);
        double *out = malloc((size_t)(seq.len_q * c->dv + 1) * sizeof(double));
        double *lse = malloc((size_t)(seq.len_q + 1) * sizeof(double));
        for (int64_t h = 0; h < c->nheads; ++h) {
            flashc_ref_forward(&tc->fwd, b, h, out, lse, NULL);
            for (int64_t i = 0; i < seq.len_q; ++i) {
                for (int64_t x = 0; x < c->dv; ++x) {
                    int64_t i4[4] = {b, i, h, x}, i3[3] = {seq.q_start + i, h, x};
                    loss += out[i * c->dv + x] * flashc_ref_load(&tc->dout, c->varlen ? i3 : i4);
                }
                if (c->with_dlse && isfinite(lse[i])) {
                    int64_t i3[3] = {b, h, i}, i2[2] = {h, seq.q_start + i};
                    loss += lse[i] * flashc_ref_load(&tc->dlse, c->varlen ? i2 : i3);
                }
            }
        }
        free(out);
        free(lse);
    }
    return loss;
}

typedef struct fd_ctx {
    test_case *tc;
    flashc_tensor *t;
    int which; /* 0 q, 1 k, 2 v */
    double max_err;
    char worst[160];
} fd_ctx;

static void fd_one(const int64_t *index, void *ctx) {
    fd_ctx *f = ctx;
    test_case *tc = f->tc;
    const test_config *c = &tc->cfg;
    const double step = 1e-5;
    double orig = flashc_ref_load(f->t, index);
    flashc_ref_store(f->t, index, orig + step);
    double lp = reference_loss(tc);
    flashc_ref_store(f->t, index, orig - step);
    double lm = reference_loss(tc);
    flashc_ref_store(f->t, index, orig);
    double fd = (lp - lm) / (2 * step);
    /* the analytic gradient of this element from the reference backward */
    int64_t row = index[c->varlen ? 0 : 1], head = index[c->varlen ? 1 : 2];
    int64_t x = index[c->varlen ? 2 : 3], b = c->varlen ? -1 : index[0];
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->fwd.varlen);
    double grad = 0.0;
    for (int64_t bb = 0; bb < B; ++bb) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->fwd.varlen, bb);
        int64_t local;
        if (c->varlen) {
            int64_t start = f->which == 0 ? seq.q_start : seq.k_start;
            int64_t len = f->which == 0 ? seq.len_q : c->lens_k[bb];
            if (row < start || row >= start + len) continue;
            local = row - start;
        } else {
            if (bb != b) continue;
            local = row;
        }
        int64_t G = c->nheads / c->nheads_k;
        int64_t hk = f->which == 0 ? head / G : head;
        double *dq = calloc((size_t)(G * seq.len_q * c->d + 1), sizeof(double));
        double *dk = calloc((size_t)(seq.len_k * c->d + 1), sizeof(double));
        double *dv = calloc((size_t)(seq.len_k * c->dv + 1), sizeof(double));
        flashc_ref_backward(&tc->bwd, bb, hk, dq, dk, dv);
        if (f->which == 0) grad = dq[((head % G) * seq.len_q + local) * c->d + x];
        else if (local < seq.len_k) grad = f->which == 1 ? dk[local * c->d + x] : dv[local * c->dv + x];
        free(dq);
        free(dk);
        free(dv);
    }
    double err = fabs(grad - fd) / (1.0 + fabs(fd));
    if (err > f->max_err) {
        f->max_err = err;
        snprintf(f->worst, sizeof f->worst, "%s[%lld,%lld,%lld%s]: analytic %.10g fd %.10g",
                 f->which == 0 ? "q" : f->which == 1 ? "k" : "v", (long long)index[0],
                 (long long)index[1], (long long)index[2], c->varlen ? "" : ",..", grad, fd);
    }
}

static void backward_vs_finite_differences(void **state) {
    (void)state;
    test_config cfgs[6];
    for (int i = 0; i < 6; ++i) {
        cfgs[i] = test_config_default();
        cfgs[i].batch = 2;
        cfgs[i].nheads = 4;
        cfgs[i].nheads_k = 2;
        cfgs[i].d = 3;
        cfgs[i].dv = 2;
        cfgs[i].seqlen_q = 4;
        cfgs[i].seqlen_k = 5;
        cfgs[i].with_dlse = 1;
    }
    cfgs[1].options.causal = 1;
    cfgs[1].options.softcap = 0.8;
    cfgs[1].alibi = 2;
    cfgs[2].options.dropout_p = 0.3;
    cfgs[2].options.dropout_seed = 99;
    cfgs[2].options.window_left = 1;
    cfgs[2].options.window_right = 2;
    cfgs[3].seqlen_q = 6; /* sq > sk with causal: masked rows */
    cfgs[3].seqlen_k = 3;
    cfgs[3].options.causal = 1;
    cfgs[3].nheads_k = 1;
    cfgs[4].varlen = 1;
    cfgs[4].batch = 3;
    cfgs[4].lens_q[0] = 3, cfgs[4].lens_q[1] = 0, cfgs[4].lens_q[2] = 4;
    cfgs[4].lens_k[0] = 4, cfgs[4].lens_k[1] = 2, cfgs[4].lens_k[2] = 5;
    cfgs[4].use_seqused_k = 1;
    cfgs[4].seqused_k[0] = 4, cfgs[4].seqused_k[1] = 2, cfgs[4].seqused_k[2] = 3;
    cfgs[4].options.dropout_p = 0.25;
    cfgs[4].options.dropout_seed = 5;
    cfgs[4].alibi = 1;
    cfgs[5] = cfgs[4];
    cfgs[5].layout = TEST_LAYOUT_PADDED;
    cfgs[5].options.dropout_p = 0;
    cfgs[5].options.softcap = 1.5;
    cfgs[5].options.causal = 1;
    int failed = 0;
    for (int n = 0; n < 6; ++n) {
        test_case tc;
        uint64_t seed = test_seed("reference_fd", (uint64_t)n);
        assert_int_equal(test_case_init(&tc, &cfgs[n], seed), 0);
        tc.bwd.out = NULL; /* the reference's own output for D */
        fd_ctx f = {&tc, NULL, 0, 0.0, ""};
        flashc_tensor *ts[3] = {&tc.q, &tc.k, &tc.v};
        for (int w = 0; w < 3; ++w) {
            f.t = ts[w];
            f.which = w;
            test_for_each(ts[w], fd_one, &f);
        }
        printf("reference gradient case %d: max rel err %.2e\n", n, f.max_err);
        if (f.max_err > 1e-7) {
            char desc[768];
            test_config_describe(&cfgs[n], desc, sizeof desc);
            fprintf(stderr, "FAIL reference gradient [%s] seed %llu: rel err %.3g at %s\n", desc,
                    (unsigned long long)seed, f.max_err, f.worst);
            ++failed;
        }
        test_case_free(&tc);
    }
    assert_int_equal(failed, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(philox_known_answers),
        cmocka_unit_test(dropout_keep_layout),
        cmocka_unit_test(dropout_keep_fraction),
        cmocka_unit_test(conversions),
        cmocka_unit_test(visibility_rule),
        cmocka_unit_test(forward_closed_forms),
        cmocka_unit_test(backward_vs_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
