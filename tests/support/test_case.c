/* Attention problems for the tests: every tensor of a config, built over
 * poisoned allocations with fresh random inputs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static int64_t round128(int64_t n) {
    return (n + FLASHC_SDMASK_ROUND - 1) / FLASHC_SDMASK_ROUND * FLASHC_SDMASK_ROUND;
}

test_config test_config_default(void) {
    test_config c;
    memset(&c, 0, sizeof c);
    c.dtype = FLASHC_DTYPE_FLOAT64;
    c.batch = 2;
    c.nheads = 4;
    c.nheads_k = 2;
    c.d = 16;
    c.dv = 16;
    c.seqlen_q = 17;
    c.seqlen_k = 23;
    c.with_lse = 1;
    c.layout = TEST_LAYOUT_CONTIGUOUS;
    c.options = flashc_attention_options_default();
    return c;
}

test_config test_config_shaped(flashc_dtype dtype, int64_t batch, int64_t nheads, int64_t nheads_k,
                               int64_t d, int64_t dv, int64_t seqlen_q, int64_t seqlen_k) {
    test_config c = test_config_default();
    c.dtype = dtype;
    c.batch = batch;
    c.nheads = nheads;
    c.nheads_k = nheads_k;
    c.d = d;
    c.dv = dv;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    return c;
}

void test_config_describe(const test_config *c, char *buf, size_t size) {
    const flashc_attention_options *o = &c->options;
    int n = snprintf(buf, size, "%s b=%lld h=%lld hk=%lld d=%lld dv=%lld ", flashc_dtype_name(c->dtype),
                     (long long)c->batch, (long long)c->nheads, (long long)c->nheads_k,
                     (long long)c->d, (long long)c->dv);
    if (c->varlen) {
        n += snprintf(buf + n, size - (size_t)n, "varlen lens_q/k[/used]=");
        for (int64_t b = 0; b < c->batch && (size_t)n < size; ++b) {
            n += snprintf(buf + n, size - (size_t)n, "%lld/%lld", (long long)c->lens_q[b],
                          (long long)c->lens_k[b]);
            if (c->use_seqused_k && (size_t)n < size)
                n += snprintf(buf + n, size - (size_t)n, "/%lld", (long long)c->seqused_k[b]);
            if ((size_t)n < size) n += snprintf(buf + n, size - (size_t)n, ",");
        }
        if ((size_t)n < size) n += snprintf(buf + n, size - (size_t)n, " ");
    } else {
        n += snprintf(buf + n, size - (size_t)n, "sq=%lld sk=%lld ", (long long)c->seqlen_q,
                      (long long)c->seqlen_k);
    }
    if ((size_t)n >= size) return;
    snprintf(buf + n, size - (size_t)n,
             "layout=%s causal=%d window=(%lld,%lld) softcap=%g scale=%g alibi=%d "
             "dropout=%g seed=%llu offset=%llu lse=%d sdmask=%d dlse=%d in_scale=%g",
             test_layout_name(c->layout), o->causal, (long long)o->window_left,
             (long long)o->window_right, o->softcap, o->softmax_scale, c->alibi, o->dropout_p,
             (unsigned long long)o->dropout_seed, (unsigned long long)o->dropout_offset,
             c->with_lse, c->with_sdmask, c->with_dlse, c->input_scale);
}

/* q, k, v (or dq, dk, dv) as views of one (rows..., h + 2 hk, d) buffer. */
static void packed_views(test_alloc *a, flashc_dtype dtype, int varlen, int64_t batch,
                         int64_t rows, int64_t h, int64_t hk, int64_t d, flashc_tensor *q,
                         flashc_tensor *k, flashc_tensor *v) {
    int64_t heads = h + 2 * hk;
    int perm[4] = {0, 1, 2, 3};
    if (varlen) {
        int64_t alloc_shape[3] = {rows, heads, d};
        test_alloc_init(a, (size_t)(rows * heads * d) * flashc_dtype_size(dtype));
        int64_t sq_shape[3] = {rows, h, d}, skv_shape[3] = {rows, hk, d};
        int64_t o_q[3] = {0, 0, 0}, o_k[3] = {0, h, 0}, o_v[3] = {0, h + hk, 0};
        *q = test_view(a, dtype, 3, sq_shape, alloc_shape, perm, o_q);
        *k = test_view(a, dtype, 3, skv_shape, alloc_shape, perm, o_k);
        *v = test_view(a, dtype, 3, skv_shape, alloc_shape, perm, o_v);
    } else {
        int64_t alloc_shape[4] = {batch, rows, heads, d};
        test_alloc_init(a, (size_t)(batch * rows * heads * d) * flashc_dtype_size(dtype));
        int64_t sq_shape[4] = {batch, rows, h, d}, skv_shape[4] = {batch, rows, hk, d};
        int64_t o_q[4] = {0, 0, 0, 0}, o_k[4] = {0, 0, h, 0}, o_v[4] = {0, 0, h + hk, 0};
        *q = test_view(a, dtype, 4, sq_shape, alloc_shape, perm, o_q);
        *k = test_view(a, dtype, 4, skv_shape, alloc_shape, perm, o_k);
        *v = test_view(a, dtype, 4, skv_shape, alloc_shape, perm, o_v);
    }
}

static flashc_tensor int32_vector(test_alloc *a, const int64_t *values, int64_t n) {
    int64_t shape[1] = {n};
    flashc_tensor t = test_tensor_new(a, FLASHC_DTYPE_INT32, 1, shape, TEST_LAYOUT_CONTIGUOUS, 0);
    for (int64_t i = 0; i < n; ++i) ((int32_t *)t.data)[i] = (int32_t)values[i];
    return t;
}

/* NaN in every k and v row outside [cu_seqlens_k[b], cu_seqlens_k[b] +
 * used_k[b]) for all b (see test_config.nan_unused_kv). */
static void poison_unused_kv_rows(test_case *tc) {
    const test_config *c = &tc->cfg;
    int64_t start = c->varlen_gap_rows;
    int64_t total = tc->k.shape[0];
    for (int64_t r = 0; r < total; ++r) {
        int used = 0;
        int64_t s0 = start;
        for (int64_t b = 0; b < c->batch && !used; ++b) {
            int64_t len = c->use_seqused_k ? c->seqused_k[b] : c->lens_k[b];
            used = r >= s0 && r < s0 + len;
            s0 += c->lens_k[b];
        }
        if (used) continue;
        flashc_tensor *kv[2] = {&tc->k, &tc->v};
        for (int t = 0; t < 2; ++t)
            for (int64_t h = 0; h < kv[t]->shape[1]; ++h)
                for (int64_t d = 0; d < kv[t]->shape[2]; ++d) {
                    int64_t index[3] = {r, h, d};
                    flashc_ref_store(kv[t], index, NAN);
                }
    }
}

int test_case_init(test_case *tc, const test_config *cfg, uint64_t seed) {
    memset(tc, 0, sizeof *tc);
    tc->cfg = *cfg;
    tc->seed = seed;
    test_rng rng;
    test_rng_init(&rng, seed);
    const test_config *c = &tc->cfg;
    flashc_dtype dt = c->dtype;
    flashc_dtype lse_dt = dt == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32;
    int64_t B = c->batch, H = c->nheads, HK = c->nheads_k, D = c->d, DV = c->dv;
    test_layout L = c->layout;
    if (c->varlen && B > TEST_MAX_BATCH) return -1;
    int packed = L == TEST_LAYOUT_PACKED;

    if (!c->varlen) {
        int64_t sq = c->seqlen_q, sk = c->seqlen_k;
        if (packed && (sq != sk || D != DV)) return -1;
        int64_t q_shape[4] = {B, sq, H, D}, k_shape[4] = {B, sk, HK, D}, v_shape[4] = {B, sk, HK, DV};
        int64_t o_shape[4] = {B, sq, H, DV}, lse_shape[3] = {B, H, sq};
        int64_t sd_shape[4] = {B, H, round128(sq), round128(sk)};
        if (packed) {
            packed_views(&tc->a_q, dt, 0, B, sq, H, HK, D, &tc->q, &tc->k, &tc->v);
            packed_views(&tc->a_dq, dt, 0, B, sq, H, HK, D, &tc->dq, &tc->dk, &tc->dv);
        } else {
            tc->q = test_tensor_new(&tc->a_q, dt, 4, q_shape, L, 1);
            tc->k = test_tensor_new(&tc->a_k, dt, 4, k_shape, L, 1);
            tc->v = test_tensor_new(&tc->a_v, dt, 4, v_shape, L, 1);
            tc->dq = test_tensor_new(&tc->a_dq, dt, 4, q_shape, L, 1);
            tc->dk = test_tensor_new(&tc->a_dk, dt, 4, k_shape, L, 1);
            tc->dv = test_tensor_new(&tc->a_dv, dt, 4, v_shape, L, 1);
        }
        tc->out = test_tensor_new(&tc->a_out, dt, 4, o_shape, L, 1);
        tc->dout = test_tensor_new(&tc->a_dout, dt, 4, o_shape, L, 1);
        tc->lse = test_tensor_new(&tc->a_lse, lse_dt, 3, lse_shape, L, 0);
        tc->dlse = test_tensor_new(&tc->a_dlse, lse_dt, 3, lse_shape, L, 0);
        tc->s_dmask = test_tensor_new(&tc->a_sdmask, dt, 4, sd_shape, L, 0);
    } else {
        int64_t cu_q[TEST_MAX_BATCH + 1], cu_k[TEST_MAX_BATCH + 1];
        int64_t max_q = 0, max_k = 0;
        cu_q[0] = cu_k[0] = c->varlen_gap_rows;
        for (int64_t b = 0; b < B; ++b) {
            cu_q[b + 1] = cu_q[b] + c->lens_q[b];
            cu_k[b + 1] = cu_k[b] + c->lens_k[b];
            if (c->lens_q[b] > max_q) max_q = c->lens_q[b];
            if (c->lens_k[b] > max_k) max_k = c->lens_k[b];
        }
        int64_t tq = cu_q[B] + c->varlen_gap_rows, tk = cu_k[B] + c->varlen_gap_rows;
        if (packed && (tq != tk || D != DV)) return -1;
        tc->cu_q = int32_vector(&tc->a_cu_q, cu_q, B + 1);
        tc->cu_k = int32_vector(&tc->a_cu_k, cu_k, B + 1);
        if (c->use_seqused_k) tc->seqused = int32_vector(&tc->a_seqused, c->seqused_k, B);
        int64_t q_shape[3] = {tq, H, D}, k_shape[3] = {tk, HK, D}, v_shape[3] = {tk, HK, DV};
        int64_t o_shape[3] = {tq, H, DV}, lse_shape[2] = {H, tq};
        int64_t sd_shape[4] = {B, H, round128(max_q), round128(max_k)};
        if (packed) {
            packed_views(&tc->a_q, dt, 1, B, tq, H, HK, D, &tc->q, &tc->k, &tc->v);
            packed_views(&tc->a_dq, dt, 1, B, tq, H, HK, D, &tc->dq, &tc->dk, &tc->dv);
        } else {
            tc->q = test_tensor_new(&tc->a_q, dt, 3, q_shape, L, 1);
            tc->k = test_tensor_new(&tc->a_k, dt, 3, k_shape, L, 1);
            tc->v = test_tensor_new(&tc->a_v, dt, 3, v_shape, L, 1);
            tc->dq = test_tensor_new(&tc->a_dq, dt, 3, q_shape, L, 1);
            tc->dk = test_tensor_new(&tc->a_dk, dt, 3, k_shape, L, 1);
            tc->dv = test_tensor_new(&tc->a_dv, dt, 3, v_shape, L, 1);
        }
        tc->out = test_tensor_new(&tc->a_out, dt, 3, o_shape, L, 1);
        tc->dout = test_tensor_new(&tc->a_dout, dt, 3, o_shape, L, 1);
        tc->lse = test_tensor_new(&tc->a_lse, lse_dt, 2, lse_shape, L, 0);
        tc->dlse = test_tensor_new(&tc->a_dlse, lse_dt, 2, lse_shape, L, 0);
        tc->s_dmask = test_tensor_new(&tc->a_sdmask, dt, 4, sd_shape, L, 0);
        tc->fwd.varlen.cu_seqlens_q = &tc->cu_q;
        tc->fwd.varlen.cu_seqlens_k = &tc->cu_k;
        tc->fwd.varlen.seqused_k = c->use_seqused_k ? &tc->seqused : NULL;
        tc->fwd.varlen.max_seqlen_q = max_q;
        tc->fwd.varlen.max_seqlen_k = max_k;
    }
    if (c->alibi) {
        int64_t shape1[1] = {H}, shape2[2] = {B, H};
        tc->alibi = c->alibi == 1
                        ? test_tensor_new(&tc->a_alibi, FLASHC_DTYPE_FLOAT32, 1, shape1, L, 0)
                        : test_tensor_new(&tc->a_alibi, FLASHC_DTYPE_FLOAT32, 2, shape2, L, 0);
        int64_t n = c->alibi == 1 ? H : B * H;
        for (int64_t e = 0; e < n; ++e) {
            int64_t index[2];
            if (c->alibi == 1) index[0] = e;
            else {
                index[0] = e / H;
                index[1] = e % H;
            }
            flashc_ref_store(&tc->alibi, index, test_rng_uniform(&rng, 0.02, 0.6));
        }
    }

    double in_scale = c->input_scale > 0 ? c->input_scale : 1.0;
    test_fill_normal(&tc->q, &rng, in_scale);
    test_fill_normal(&tc->k, &rng, in_scale);
    test_fill_normal(&tc->v, &rng, 1.0);
    test_fill_normal(&tc->dout, &rng, 1.0);
    test_fill_normal(&tc->dlse, &rng, 1.0);
    if (c->varlen && c->nan_unused_kv) poison_unused_kv_rows(tc);

    tc->fwd.q = &tc->q;
    tc->fwd.k = &tc->k;
    tc->fwd.v = &tc->v;
    tc->fwd.out = &tc->out;
    tc->fwd.lse = c->with_lse ? &tc->lse : NULL;
    tc->fwd.s_dmask = c->with_sdmask ? &tc->s_dmask : NULL;
    tc->fwd.options = c->options;
    tc->fwd.options.alibi_slopes = c->alibi ? &tc->alibi : NULL;

    tc->bwd.dout = &tc->dout;
    tc->bwd.q = &tc->q;
    tc->bwd.k = &tc->k;
    tc->bwd.v = &tc->v;
    tc->bwd.out = &tc->out;
    tc->bwd.lse = &tc->lse;
    tc->bwd.dlse = c->with_dlse ? &tc->dlse : NULL;
    tc->bwd.dq = &tc->dq;
    tc->bwd.dk = &tc->dk;
    tc->bwd.dv = &tc->dv;
    tc->bwd.varlen = tc->fwd.varlen;
    tc->bwd.options = tc->fwd.options;
    return 0;
}

void test_case_free(test_case *tc) {
    test_alloc *all[] = {&tc->a_q,    &tc->a_k,    &tc->a_v,      &tc->a_out,     &tc->a_lse,
                         &tc->a_sdmask, &tc->a_dout, &tc->a_dlse,   &tc->a_dq,      &tc->a_dk,
                         &tc->a_dv,   &tc->a_cu_q, &tc->a_cu_k,   &tc->a_seqused, &tc->a_alibi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) test_alloc_free(all[i]);
    free(tc->workspace);
    tc->workspace = NULL;
}

flashc_status test_case_forward(test_case *tc) {
    test_alloc_poison(&tc->a_out);
    test_alloc_poison(&tc->a_lse);
    test_alloc_poison(&tc->a_sdmask);
    return flashc_attention_forward(&tc->fwd);
}

flashc_status test_case_backward(test_case *tc) {
    test_alloc_poison(&tc->a_dq);
    test_alloc_poison(&tc->a_dk);
    test_alloc_poison(&tc->a_dv);
    size_t bytes = 0;
    tc->bwd.workspace = NULL;
    tc->bwd.workspace_bytes = 0;
    flashc_status st = flashc_attention_backward_workspace_size(&tc->bwd, &bytes);
    if (st != FLASHC_SUCCESS) return st;
    free(tc->workspace);
    /* exactly the reported size, so a sanitizer sees any overrun */
    tc->workspace = malloc(bytes > 0 ? bytes : 1);
    tc->workspace_bytes = bytes;
    if (!tc->workspace) return FLASHC_ERROR_ARGUMENT;
    memset(tc->workspace, 0xFF, bytes > 0 ? bytes : 1);
    tc->bwd.workspace = tc->workspace;
    tc->bwd.workspace_bytes = bytes;
    return flashc_attention_backward(&tc->bwd);
}
