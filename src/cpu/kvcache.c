/* The CPU backend's KV-cache call (flashc_attention_kvcache): append the
 * new rows into the cache (k_new rotated), rotate q into the workspace,
 * then run the forward over the cache. Element work only, in double, each
 * result rounded once to the tensors' dtype. */
#include <omp.h>

#define FLASHC_CPU_REAL_DOUBLE 1
#define FLASHC_CPU_VBYTES 16
#include "vec.h"
#include "convert.h"

#include "core/backend.h"

/* Rotary on one row of n elements at `pos`: pairs (x, x + 1) interleaved,
 * else (x, x + rotary_dim / 2); the other elements copied. src and dst are
 * rows of `dtype` (dst may be another tensor's row). */
static void rotate_row(const flashc_kvcache_problem *kp, const void *src, void *dst,
                       flashc_dtype dtype, int64_t n, int64_t pos) {
    int64_t half = kp->rotary_dim / 2;
    for (int64_t x = kp->rotary_dim; x < n; ++x) fc_store_one(dst, dtype, x, fc_load_one(src, dtype, x));
    if (!half) return;
    int64_t row = pos * kp->rotary_row_stride;
    for (int64_t i = 0; i < half; ++i) {
        double c = fc_load_one(kp->rotary_cos, dtype, row + i);
        double s = fc_load_one(kp->rotary_sin, dtype, row + i);
        int64_t a = kp->rotary_interleaved ? 2 * i : i;
        int64_t b = kp->rotary_interleaved ? 2 * i + 1 : i + half;
        double xa = fc_load_one(src, dtype, a), xb = fc_load_one(src, dtype, b);
        fc_store_one(dst, dtype, a, xa * c - xb * s);
        fc_store_one(dst, dtype, b, xb * c + xa * s);
    }
}

static void copy_row(const void *src, void *dst, flashc_dtype dtype, int64_t n) {
    for (int64_t x = 0; x < n; ++x) fc_store_one(dst, dtype, x, fc_load_one(src, dtype, x));
}

static char *element(const flashc_seq_tensor *t, int64_t offset) {
    return (char *)t->data + offset * (int64_t)flashc_dtype_size(t->dtype);
}

/* Threads of an element loop of `units` items: the problem's count, or
 * none of their own (the caller's thread) for work smaller than a region's
 * start-up. */
static int loop_threads(const flashc_problem *p, int64_t units) {
    if (units <= 64) return 1;
    return p->num_threads > 0 ? p->num_threads : omp_get_max_threads();
}

/* k_new / v_new rows into the cache at cache_seqlens[b] + r, in one
 * parallel region. Sequences that share a cache batch (repeated
 * cache_batch_idx) write in sequence order (a barrier after each), so the
 * last one's rows stay, whatever the thread count. */
static void append_rows(const flashc_kvcache_problem *kp) {
    const flashc_problem *p = &kp->attn;
    int64_t rows = p->kv.new_rows, hk_count = p->nheads_k;
    int64_t units = rows * hk_count;
    int nt = loop_threads(p, p->batch * units);
    #pragma omp parallel num_threads(nt) if (nt > 1)
    for (int64_t b = 0; b < p->batch; ++b) {
        flashc_seq_info seq = flashc_problem_seq(p, b);
        int64_t first = p->kv.cache_seqlens[b];
        #pragma omp for schedule(static)
        for (int64_t u = 0; u < units; ++u) {
            int64_t r = u / hk_count, hk = u % hk_count;
            int64_t c = first + r;
            const char *kn = element(&kp->k_new, b * kp->k_new.batch_stride + r * kp->k_new.row_stride + hk * kp->k_new.head_stride);
            const char *vn = element(&kp->v_new, b * kp->v_new.batch_stride + r * kp->v_new.row_stride + hk * kp->v_new.head_stride);
            char *kc = element(&p->k, flashc_problem_key_offset(p, &p->k, b, seq.k_batch, c) + hk * p->k.head_stride);
            char *vc = element(&p->v, flashc_problem_key_offset(p, &p->v, b, seq.k_batch, c) + hk * p->v.head_stride);
            rotate_row(kp, kn, kc, p->dtype, p->head_dim, c);
            copy_row(vn, vc, p->dtype, p->head_dim_v);
        }
    }
}

/* q rotated into kp->q_rotated (contiguous (b, sq, h, d)), which becomes
 * the problem's q. */
static void rotate_queries(flashc_kvcache_problem *kp) {
    flashc_problem *p = &kp->attn;
    int64_t sq = p->seqlen_q, h = p->nheads, d = p->head_dim;
    flashc_seq_tensor out = {kp->q_rotated, p->dtype, sq * h * d, h * d, d};
    int64_t units = p->batch * sq * h;
    int nt = loop_threads(p, units);
    #pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int64_t u = 0; u < units; ++u) {
        int64_t b = u / (sq * h), r = (u / h) % sq, head = u % h;
        int64_t pos = p->kv.cache_seqlens[b] + (kp->rotary_q_per_row ? r : 0);
        const char *src = element(&p->q, b * p->q.batch_stride + r * p->q.row_stride + head * p->q.head_stride);
        rotate_row(kp, src, element(&out, b * out.batch_stride + r * out.row_stride + head * d), p->dtype, d, pos);
    }
    p->q = out;
}

flashc_status flashc_cpu_kvcache(flashc_kvcache_problem *kp) {
    if (kp->k_new.data && kp->attn.kv.new_rows > 0) append_rows(kp);
    if (kp->rotary_dim) rotate_queries(kp);
    return flashc_cpu_forward(&kp->attn);
}
