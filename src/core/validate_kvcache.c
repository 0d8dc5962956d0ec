/* Validation of flashc_attention_kvcache's arguments (flashc.h): shapes,
 * dtypes and devices of the cache, the appended rows, rotary and the index
 * tensors; on the CPU also the index tensors' contents, so that a bad entry
 * is an error before the cache is touched. */
#include <string.h>

#include "error.h"
#include "tensor_checks.h"
#include "validate.h"
#include "validate_parts.h"

/* An optional int32 (batch) index tensor. */
static flashc_status check_index_vector(const flashc_tensor *t, const char *name, int64_t batch) {
    if (!t) return FLASHC_SUCCESS;
    CHECK(flashc_check_tensor(t, name, 1));
    if (t->dtype != FLASHC_DTYPE_INT32)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype must be int32", name);
    if (t->shape[0] != batch)
        return flashc_fail(FLASHC_ERROR_SHAPE, "%s: expected %lld entries (one per sequence), got %lld",
                           name, (long long)batch, (long long)t->shape[0]);
    return flashc_check_dense_1d(t, name);
}

/* A (b, rows, heads, dim) tensor of q's dtype with a contiguous last dim. */
static flashc_status check_batched(const flashc_tensor *t, const char *name, flashc_dtype dtype,
                                   int64_t b, int64_t rows, int64_t heads, int64_t dim) {
    CHECK(flashc_check_tensor(t, name, 4));
    if (t->dtype != dtype)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype %s differs from q's dtype %s", name,
                           flashc_dtype_name(t->dtype), flashc_dtype_name(dtype));
    int64_t shape[4] = {b, rows, heads, dim};
    CHECK(flashc_check_shape(t, name, shape));
    return flashc_check_last_dim_contiguous(t, name);
}

static flashc_status check_cache(const flashc_kvcache_args *a, flashc_problem *p) {
    const flashc_tensor *kc = a->k_cache;
    int64_t b = p->batch, hk = p->nheads_k;
    int64_t kv_shape[4] = {kc->shape[0], kc->shape[1], hk, p->head_dim};
    CHECK(flashc_check_shape(kc, "k_cache", kv_shape));
    kv_shape[3] = p->head_dim_v;
    CHECK(flashc_check_shape(a->v_cache, "v_cache", kv_shape));
    if (a->block_table) {
        if (a->cache_batch_idx)
            return flashc_fail(FLASHC_ERROR_ARGUMENT,
                               "cache_batch_idx: not allowed with block_table (the block table "
                               "already says where each sequence's keys are)");
        return flashc_check_block_table(a->block_table, b, kc, "k_cache", p);
    }
    if (!a->cache_batch_idx && kc->shape[0] < b)
        return flashc_fail(FLASHC_ERROR_SHAPE,
                           "k_cache: holds %lld cache batches but q has %lld sequences (pass "
                           "cache_batch_idx to map sequences to cache batches)",
                           (long long)kc->shape[0], (long long)b);
    p->kv.capacity = kc->shape[1];
    p->kv.cache_batch = kc->shape[0];
    return FLASHC_SUCCESS;
}

static flashc_status check_new_rows(const flashc_kvcache_args *a, flashc_kvcache_problem *kp) {
    flashc_problem *p = &kp->attn;
    if (!a->k_new && !a->v_new) return FLASHC_SUCCESS;
    if (!a->k_new)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER, "k_new: is NULL while v_new is given");
    if (!a->v_new)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER, "v_new: is NULL while k_new is given");
    if (!a->cache_seqlens)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER,
                           "cache_seqlens: is NULL, but k_new / v_new need it (where to append)");
    CHECK(flashc_check_tensor(a->k_new, "k_new", 4));
    int64_t s_new = a->k_new->shape[1];
    CHECK(check_batched(a->k_new, "k_new", p->dtype, p->batch, s_new, p->nheads_k, p->head_dim));
    CHECK(check_batched(a->v_new, "v_new", p->dtype, p->batch, s_new, p->nheads_k, p->head_dim_v));
    p->kv.new_rows = s_new;
    kp->k_new = flashc_seq_view(a->k_new, 0);
    kp->v_new = flashc_seq_view(a->v_new, 0);
    return FLASHC_SUCCESS;
}

static flashc_status check_rotary(const flashc_kvcache_args *a, flashc_kvcache_problem *kp) {
    flashc_problem *p = &kp->attn;
    const flashc_tensor *c = a->rotary_cos, *s = a->rotary_sin;
    if (!c && !s) return FLASHC_SUCCESS;
    if (!c) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "rotary_cos: is NULL while rotary_sin is given");
    if (!s) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "rotary_sin: is NULL while rotary_cos is given");
    if (!a->k_new)
        return flashc_fail(FLASHC_ERROR_ARGUMENT,
                           "rotary_cos: needs k_new / v_new (rotary is applied to the appended keys "
                           "and to q)");
    CHECK(flashc_check_tensor(c, "rotary_cos", 2));
    CHECK(flashc_check_tensor(s, "rotary_sin", 2));
    if (c->dtype != p->dtype)
        return flashc_fail(FLASHC_ERROR_DTYPE, "rotary_cos: dtype %s differs from q's dtype %s",
                           flashc_dtype_name(c->dtype), flashc_dtype_name(p->dtype));
    if (s->dtype != p->dtype)
        return flashc_fail(FLASHC_ERROR_DTYPE, "rotary_sin: dtype %s differs from q's dtype %s",
                           flashc_dtype_name(s->dtype), flashc_dtype_name(p->dtype));
    int64_t half = c->shape[1];
    if (half < 1 || 2 * half > p->head_dim)
        return flashc_fail(FLASHC_ERROR_SHAPE,
                           "rotary_cos: rotary_dim (twice its %lld columns) must be in [2, %lld] "
                           "(the head dim)",
                           (long long)half, (long long)p->head_dim);
    if (c->shape[0] < p->kv.capacity)
        return flashc_fail(FLASHC_ERROR_SHAPE,
                           "rotary_cos: has %lld rows (positions), fewer than the cache's capacity "
                           "%lld",
                           (long long)c->shape[0], (long long)p->kv.capacity);
    CHECK(flashc_check_shape(s, "rotary_sin", c->shape));
    CHECK(flashc_check_last_dim_contiguous(c, "rotary_cos"));
    CHECK(flashc_check_last_dim_contiguous(s, "rotary_sin"));
    if (c->stride[0] != s->stride[0])
        return flashc_fail(FLASHC_ERROR_STRIDE, "rotary_sin: row stride %lld differs from rotary_cos's %lld",
                           (long long)s->stride[0], (long long)c->stride[0]);
    kp->rotary_cos = c->data;
    kp->rotary_sin = s->data;
    kp->rotary_dim = 2 * half;
    kp->rotary_row_stride = c->stride[0];
    kp->rotary_rows = c->shape[0];
    kp->rotary_interleaved = a->rotary_interleaved != 0;
    /* flash_attn's rule: rows at their own positions under a causal mask
     * or a window (one not wider than the cache), else all at the first. */
    const flashc_attention_options *o = &a->options;
    int local = (o->window_left >= 0 && o->window_left < p->kv.capacity) ||
                (o->window_right >= 0 && o->window_right < p->kv.capacity);
    kp->rotary_q_per_row = o->causal || local;
    return FLASHC_SUCCESS;
}

/* The index tensors' contents (host memory only), before anything is
 * written: every sequence's cache range inside the cache, its batch and
 * blocks existing, its rotary positions inside the tables. */
static flashc_status check_contents(const flashc_kvcache_args *a, const flashc_kvcache_problem *kp) {
    const flashc_problem *p = &kp->attn;
    const flashc_kv_layout *kv = &p->kv;
    if (p->is_cuda) return FLASHC_SUCCESS;
    for (int64_t i = 0; i < p->batch; ++i) {
        int64_t end = kv->cache_seqlens ? kv->cache_seqlens[i] : kv->capacity;
        int64_t start = kv->cache_leftpad ? kv->cache_leftpad[i] : 0;
        if (end < 0 || end + kv->new_rows > kv->capacity)
            return flashc_fail(FLASHC_ERROR_ARGUMENT,
                               "cache_seqlens: entry %lld is %lld; with the %lld new rows it must stay "
                               "within [0, %lld] (the cache's capacity)",
                               (long long)i, (long long)end, (long long)kv->new_rows,
                               (long long)kv->capacity);
        if (start < 0 || start > end)
            return flashc_fail(FLASHC_ERROR_ARGUMENT,
                               "cache_leftpad: entry %lld is %lld, outside [0, %lld] (cache_seqlens)",
                               (long long)i, (long long)start, (long long)end);
        if (kv->cache_batch_idx &&
            (kv->cache_batch_idx[i] < 0 || kv->cache_batch_idx[i] >= kv->cache_batch))
            return flashc_fail(FLASHC_ERROR_ARGUMENT,
                               "cache_batch_idx: entry %lld is %d, outside [0, %lld) (the batches of "
                               "k_cache)",
                               (long long)i, kv->cache_batch_idx[i], (long long)kv->cache_batch);
        CHECK(flashc_check_block_table_contents(p, i, start, end + kv->new_rows));
        int64_t positions = kp->rotary_q_per_row ? p->seqlen_q : 1;
        if (kp->rotary_dim && p->seqlen_q > 0 && end + positions > a->rotary_cos->shape[0])
            return flashc_fail(FLASHC_ERROR_SHAPE,
                               "rotary_cos: has %lld rows, but q's rows of sequence %lld sit at "
                               "positions up to %lld",
                               (long long)a->rotary_cos->shape[0], (long long)i,
                               (long long)(end + positions - 1));
    }
    return FLASHC_SUCCESS;
}

flashc_status flashc_validate_kvcache(const flashc_kvcache_args *a, flashc_kvcache_problem *kp) {
    memset(kp, 0, sizeof *kp);
    flashc_problem *p = &kp->attn;
    if (!a) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "args: is NULL");
    static const char *const names[3] = {"q", "k_cache", "v_cache"};
    CHECK(flashc_check_qkv(a->q, a->k_cache, a->v_cache, names, 4, 4, p));
    p->batch = a->q->shape[0];
    p->seqlen_q = a->q->shape[1];
    p->total_q = p->batch * p->seqlen_q;
    p->kv.is_kvcache = 1;

    CHECK(check_cache(a, p));
    CHECK(check_index_vector(a->cache_seqlens, "cache_seqlens", p->batch));
    CHECK(check_index_vector(a->cache_batch_idx, "cache_batch_idx", p->batch));
    CHECK(check_index_vector(a->cache_leftpad, "cache_leftpad", p->batch));
    CHECK(check_new_rows(a, kp));
    CHECK(check_rotary(a, kp));
    if (!a->out) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "out: tensor descriptor is NULL");
    CHECK(check_batched(a->out, "out", p->dtype, p->batch, p->seqlen_q, p->nheads, p->head_dim_v));
    CHECK(flashc_check_no_self_overlap(a->out, "out"));
    if (a->lse) {
        CHECK(flashc_check_lse_like(a->lse, "lse", p));
        CHECK(flashc_check_no_self_overlap(a->lse, "lse"));
    }
    if (a->num_splits < 0)
        return flashc_fail(FLASHC_ERROR_ARGUMENT, "num_splits: must be >= 0 (0 = chosen), got %d",
                           a->num_splits);
    if (a->options.dropout_p != 0.0)
        return flashc_fail(FLASHC_ERROR_DROPOUT,
                           "dropout_p: must be 0 for attention over a KV cache, got %g",
                           a->options.dropout_p);
    /* Every sequence's key count is at most the capacity. */
    p->seqlen_k = p->kv.capacity;
    p->total_k = p->batch * p->kv.capacity;
    CHECK(flashc_apply_options(&a->options, p));

    named_tensor tensors[] = {{a->out, "out"},
                              {a->lse, "lse"},
                              {a->k_cache, "k_cache"},
                              {a->v_cache, "v_cache"},
                              {a->q, "q"},
                              {a->k_new, "k_new"},
                              {a->v_new, "v_new"},
                              {a->cache_seqlens, "cache_seqlens"},
                              {a->cache_batch_idx, "cache_batch_idx"},
                              {a->cache_leftpad, "cache_leftpad"},
                              {a->block_table, "block_table"},
                              {a->rotary_cos, "rotary_cos"},
                              {a->rotary_sin, "rotary_sin"},
                              {a->options.alibi_slopes, "alibi_slopes"}};
    int n = (int)(sizeof tensors / sizeof tensors[0]);
    CHECK(flashc_check_devices(tensors, n, p));
    /* out and lse are written; so is the cache when rows are appended, and
     * then it must not overlap what the call reads (k_cache and v_cache may
     * be interleaved views of one buffer: their elements never meet). */
    CHECK(flashc_check_disjoint(tensors, 2, tensors, n));
    if (a->k_new) {
        CHECK(flashc_check_disjoint(tensors + 2, 1, tensors + 4, n - 4));
        CHECK(flashc_check_disjoint(tensors + 3, 1, tensors + 4, n - 4));
    }

    p->kv.cache_seqlens = a->cache_seqlens ? (const int32_t *)a->cache_seqlens->data : NULL;
    p->kv.cache_batch_idx = a->cache_batch_idx ? (const int32_t *)a->cache_batch_idx->data : NULL;
    p->kv.cache_leftpad = a->cache_leftpad ? (const int32_t *)a->cache_leftpad->data : NULL;
    CHECK(check_contents(a, kp));

    p->q = flashc_seq_view(a->q, 0);
    p->k = flashc_seq_view(a->k_cache, 0);
    p->v = flashc_seq_view(a->v_cache, 0);
    p->out = flashc_seq_view(a->out, 0);
    p->lse = flashc_row_view(a->lse, 0);
    kp->num_splits = a->num_splits;
    p->key_splits = a->num_splits;
    return FLASHC_SUCCESS;
}
