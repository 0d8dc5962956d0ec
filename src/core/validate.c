#include "validate.h"

#include <math.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "semantics.h"
#include "tensor_checks.h"
#include "validate_parts.h"

/* ---- views --------------------------------------------------------------- */

flashc_seq_tensor flashc_seq_view(const flashc_tensor *t, int varlen) {
    flashc_seq_tensor v;
    v.data = t->data;
    v.dtype = t->dtype;
    if (varlen) {
        v.batch_stride = 0;
        v.row_stride = t->stride[0];
        v.head_stride = t->stride[1];
    } else {
        v.batch_stride = t->stride[0];
        v.row_stride = t->stride[1];
        v.head_stride = t->stride[2];
    }
    return v;
}

flashc_row_tensor flashc_row_view(const flashc_tensor *t, int varlen) {
    flashc_row_tensor v;
    memset(&v, 0, sizeof v);
    if (!t) return v;
    v.data = t->data;
    v.dtype = t->dtype;
    if (varlen) {
        v.batch_stride = 0;
        v.head_stride = t->stride[0];
        v.row_stride = t->stride[1];
    } else {
        v.batch_stride = t->stride[0];
        v.head_stride = t->stride[1];
        v.row_stride = t->stride[2];
    }
    return v;
}

/* ---- devices and memory ------------------------------------------------- */

/* All tensors on one device; CUDA only when the CUDA backend is built. */
flashc_status flashc_check_devices(const named_tensor *ts, int n, flashc_problem *p) {
    const named_tensor *first = NULL;
    for (int i = 0; i < n; ++i) {
        if (!ts[i].t) continue;
        if (!first) {
            first = &ts[i];
            continue;
        }
        if (ts[i].t->device.type != first->t->device.type ||
            ts[i].t->device.index != first->t->device.index)
            return flashc_fail(FLASHC_ERROR_DEVICE,
                               "%s is on %s:%d but %s is on %s:%d: all tensors must be on one "
                               "device",
                               ts[i].name,
                               ts[i].t->device.type == FLASHC_DEVICE_CUDA ? "cuda" : "cpu",
                               ts[i].t->device.index, first->name,
                               first->t->device.type == FLASHC_DEVICE_CUDA ? "cuda" : "cpu",
                               first->t->device.index);
    }
    p->is_cuda = first->t->device.type == FLASHC_DEVICE_CUDA;
    p->device_index = first->t->device.index;
#ifndef FLASHC_HAVE_CUDA
    if (p->is_cuda)
        return flashc_fail(FLASHC_ERROR_UNSUPPORTED,
                           "%s: is a CUDA tensor, but this library was built without the CUDA "
                           "backend",
                           first->name);
#else
    if (p->is_cuda) {
        int devices = flashc_cuda_device_count();
        if (devices == 0)
            return flashc_fail(FLASHC_ERROR_UNSUPPORTED,
                               "%s: is a CUDA tensor, but no CUDA device is usable here (no GPU "
                               "or no driver)",
                               first->name);
        if (p->device_index < 0 || p->device_index >= devices)
            return flashc_fail(FLASHC_ERROR_DEVICE, "%s: CUDA device %d does not exist (%d present)",
                               first->name, p->device_index, devices);
    }
#endif
    if (!p->is_cuda && p->device_index != 0)
        return flashc_fail(FLASHC_ERROR_DEVICE, "%s: CPU tensors have device index 0, got %d",
                           first->name, p->device_index);
    return FLASHC_SUCCESS;
}

/* An output must not share memory with any input (the kernels read inputs
 * while writing outputs) nor with another output of a different buffer. */
flashc_status flashc_check_disjoint(const named_tensor *outputs, int n_out,
                                    const named_tensor *others, int n_other) {
    for (int i = 0; i < n_out; ++i) {
        if (!outputs[i].t) continue;
        flashc_span a = flashc_tensor_span(outputs[i].t);
        if (a.begin == a.end) continue;
        for (int j = 0; j < n_other; ++j) {
            if (!others[j].t || others[j].t == outputs[i].t) continue;
            flashc_span b = flashc_tensor_span(others[j].t);
            if (b.begin == b.end) continue;
            if (a.begin < b.end && b.begin < a.end)
                return flashc_fail(FLASHC_ERROR_ARGUMENT, "%s: overlaps the memory of %s",
                                   outputs[i].name, others[j].name);
        }
    }
    return FLASHC_SUCCESS;
}

/* ---- options -------------------------------------------------------------- */

static flashc_status check_options(const flashc_attention_options *o) {
    if (!isfinite(o->softmax_scale))
        return flashc_fail(FLASHC_ERROR_SCALE, "softmax_scale: must be finite, got %g",
                           o->softmax_scale);
    if (!isfinite(o->softcap) || o->softcap < 0.0)
        return flashc_fail(FLASHC_ERROR_SOFTCAP,
                           "softcap: must be finite and >= 0 (0 disables), got %g", o->softcap);
    if (o->window_left < -1)
        return flashc_fail(FLASHC_ERROR_WINDOW, "window_left: must be >= -1, got %lld",
                           (long long)o->window_left);
    if (o->window_right < -1)
        return flashc_fail(FLASHC_ERROR_WINDOW, "window_right: must be >= -1, got %lld",
                           (long long)o->window_right);
    if (!(o->dropout_p >= 0.0 && o->dropout_p < 1.0))
        return flashc_fail(FLASHC_ERROR_DROPOUT, "dropout_p: must be in [0, 1), got %g",
                           o->dropout_p);
    if (o->num_threads < 0)
        return flashc_fail(FLASHC_ERROR_ARGUMENT, "num_threads: must be >= 0, got %d",
                           o->num_threads);
    return FLASHC_SUCCESS;
}

/* ---- q, k, v and the batch layout ---------------------------------------- */

flashc_status flashc_check_qkv(const flashc_tensor *q, const flashc_tensor *k,
                               const flashc_tensor *v, const char *const names[3], int q_rank,
                               int kv_rank, flashc_problem *p) {
    if (!q) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: tensor descriptor is NULL", names[0]);
    if (!k) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: tensor descriptor is NULL", names[1]);
    if (!v) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: tensor descriptor is NULL", names[2]);
    CHECK(flashc_check_tensor(q, names[0], q_rank));
    CHECK(flashc_check_tensor(k, names[1], kv_rank));
    CHECK(flashc_check_tensor(v, names[2], kv_rank));

    flashc_dtype dt = q->dtype;
    if (dt == FLASHC_DTYPE_INT32)
        return flashc_fail(FLASHC_ERROR_DTYPE,
                           "%s: dtype must be float32, float16, bfloat16 or float64, got int32",
                           names[0]);
    if (k->dtype != dt)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype %s differs from %s's dtype %s", names[1],
                           flashc_dtype_name(k->dtype), names[0], flashc_dtype_name(dt));
    if (v->dtype != dt)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype %s differs from %s's dtype %s", names[2],
                           flashc_dtype_name(v->dtype), names[0], flashc_dtype_name(dt));
    if (dt == FLASHC_DTYPE_FLOAT64 && q->device.type != FLASHC_DEVICE_CPU)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: float64 is supported on the CPU only", names[0]);
    p->dtype = dt;

    CHECK(flashc_check_last_dim_contiguous(q, names[0]));
    CHECK(flashc_check_last_dim_contiguous(k, names[1]));
    CHECK(flashc_check_last_dim_contiguous(v, names[2]));

    int64_t h = q->shape[q_rank - 2], d = q->shape[q_rank - 1];
    int64_t hk = k->shape[kv_rank - 2], dv = v->shape[kv_rank - 1];
    if (d < 1 || d > FLASHC_MAX_HEAD_DIM)
        return flashc_fail(FLASHC_ERROR_HEAD_DIM, "%s: head dim must be in [1, %d], got %lld",
                           names[0], FLASHC_MAX_HEAD_DIM, (long long)d);
    if (dv < 1 || dv > FLASHC_MAX_HEAD_DIM)
        return flashc_fail(FLASHC_ERROR_HEAD_DIM, "%s: head dim must be in [1, %d], got %lld",
                           names[2], FLASHC_MAX_HEAD_DIM, (long long)dv);
    if (h < 1)
        return flashc_fail(FLASHC_ERROR_SHAPE, "%s: number of heads must be >= 1, got %lld",
                           names[0], (long long)h);
    if (hk < 1)
        return flashc_fail(FLASHC_ERROR_SHAPE, "%s: number of heads must be >= 1, got %lld",
                           names[1], (long long)hk);
    if (h % hk != 0)
        return flashc_fail(FLASHC_ERROR_HEAD_GROUPS,
                           "%s: %s's number of heads (%lld) must be a multiple of %s's (%lld)",
                           names[1], names[0], (long long)h, names[1], (long long)hk);
    p->nheads = h;
    p->nheads_k = hk;
    p->head_dim = d;
    p->head_dim_v = dv;
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_block_table(const flashc_tensor *bt, int64_t batch,
                                       const flashc_tensor *k, const char *k_name,
                                       flashc_problem *p) {
    CHECK(flashc_check_tensor(bt, "block_table", 2));
    if (bt->dtype != FLASHC_DTYPE_INT32)
        return flashc_fail(FLASHC_ERROR_DTYPE, "block_table: dtype must be int32");
    if (bt->shape[0] != batch)
        return flashc_fail(FLASHC_ERROR_SHAPE,
                           "block_table: expected %lld rows (one per sequence), got %lld",
                           (long long)batch, (long long)bt->shape[0]);
    if (bt->shape[1] > 1 && bt->stride[1] != 1)
        return flashc_fail(FLASHC_ERROR_STRIDE, "block_table: the last dimension must be contiguous");
    if (k->shape[1] < 1)
        return flashc_fail(FLASHC_ERROR_SHAPE, "%s: paged blocks need block_size >= 1, got %lld",
                           k_name, (long long)k->shape[1]);
    p->kv.block_table = (const int32_t *)bt->data;
    p->kv.block_table_stride = bt->stride[0];
    p->kv.block_size = k->shape[1];
    p->kv.num_blocks = k->shape[0];
    p->kv.capacity = bt->shape[1] * k->shape[1];
    return FLASHC_SUCCESS;
}

flashc_status flashc_check_block_table_contents(const flashc_problem *p, int64_t b, int64_t first,
                                                int64_t end) {
    const flashc_kv_layout *kv = &p->kv;
    if (!kv->block_table || p->is_cuda || end <= first) return FLASHC_SUCCESS;
    const int32_t *row = kv->block_table + b * kv->block_table_stride;
    for (int64_t blk = first / kv->block_size; blk <= (end - 1) / kv->block_size; ++blk)
        if (row[blk] < 0 || row[blk] >= kv->num_blocks)
            return flashc_fail(FLASHC_ERROR_ARGUMENT,
                               "block_table: entry (%lld, %lld) is %d, outside [0, %lld) (the "
                               "blocks of k_cache)",
                               (long long)b, (long long)blk, row[blk], (long long)kv->num_blocks);
    return FLASHC_SUCCESS;
}

/* Checks q, k, v and the varlen arguments, and fills the problem's
 * dimensions and views. */
static flashc_status check_inputs(const flashc_tensor *q, const flashc_tensor *k,
                                  const flashc_tensor *v, const flashc_varlen *vl,
                                  flashc_problem *p) {
    int varlen = vl->cu_seqlens_q || vl->cu_seqlens_k;
    int paged = vl->block_table != NULL;
    int rank = varlen ? 3 : 4;
    p->is_varlen = varlen;

    if (varlen && !vl->cu_seqlens_q)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER,
                           "cu_seqlens_q: is NULL while cu_seqlens_k is given (varlen needs both)");
    if (varlen && !vl->cu_seqlens_k)
        return flashc_fail(FLASHC_ERROR_NULL_POINTER,
                           "cu_seqlens_k: is NULL while cu_seqlens_q is given (varlen needs both)");
    if (!varlen && vl->seqused_k)
        return flashc_fail(FLASHC_ERROR_ARGUMENT,
                           "seqused_k: only allowed with cu_seqlens_q / cu_seqlens_k (varlen)");
    if (!varlen && paged)
        return flashc_fail(FLASHC_ERROR_ARGUMENT,
                           "block_table: only allowed with cu_seqlens_q / cu_seqlens_k (varlen)");

    static const char *const names[3] = {"q", "k", "v"};
    CHECK(flashc_check_qkv(q, k, v, names, rank, paged ? 4 : rank, p));
    int64_t d = p->head_dim, hk = p->nheads_k, dv = p->head_dim_v;

    int64_t b, sq, sk, total_q, total_k;
    if (!varlen) {
        b = q->shape[0];
        sq = q->shape[1];
        sk = k->shape[1];
        total_q = b * sq;
        total_k = b * sk;
        int64_t k_shape[4] = {b, sk, hk, d};
        CHECK(flashc_check_shape(k, "k", k_shape));
        int64_t v_shape[4] = {b, sk, hk, dv};
        CHECK(flashc_check_shape(v, "v", v_shape));
    } else {
        total_q = q->shape[0];
        if (paged) {
            /* (num_blocks, block_size, hk, d): every block holds keys. */
            total_k = k->shape[0] * k->shape[1];
            int64_t k_shape[4] = {k->shape[0], k->shape[1], hk, d};
            CHECK(flashc_check_shape(k, "k", k_shape));
            int64_t v_shape[4] = {k->shape[0], k->shape[1], hk, dv};
            CHECK(flashc_check_shape(v, "v", v_shape));
        } else {
            total_k = k->shape[0];
            int64_t k_shape[3] = {total_k, hk, d};
            CHECK(flashc_check_shape(k, "k", k_shape));
            int64_t v_shape[3] = {total_k, hk, dv};
            CHECK(flashc_check_shape(v, "v", v_shape));
        }

        const flashc_tensor *cq = vl->cu_seqlens_q, *ck = vl->cu_seqlens_k;
        CHECK(flashc_check_tensor(cq, "cu_seqlens_q", 1));
        CHECK(flashc_check_tensor(ck, "cu_seqlens_k", 1));
        if (cq->dtype != FLASHC_DTYPE_INT32)
            return flashc_fail(FLASHC_ERROR_DTYPE, "cu_seqlens_q: dtype must be int32");
        if (ck->dtype != FLASHC_DTYPE_INT32)
            return flashc_fail(FLASHC_ERROR_DTYPE, "cu_seqlens_k: dtype must be int32");
        CHECK(flashc_check_dense_1d(cq, "cu_seqlens_q"));
        CHECK(flashc_check_dense_1d(ck, "cu_seqlens_k"));
        if (cq->shape[0] < 2)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "cu_seqlens_q: needs batch + 1 >= 2 entries, got %lld",
                               (long long)cq->shape[0]);
        if (ck->shape[0] != cq->shape[0])
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "cu_seqlens_k: has %lld entries but cu_seqlens_q has %lld",
                               (long long)ck->shape[0], (long long)cq->shape[0]);
        b = cq->shape[0] - 1;
        if (vl->seqused_k) {
            CHECK(flashc_check_tensor(vl->seqused_k, "seqused_k", 1));
            if (vl->seqused_k->dtype != FLASHC_DTYPE_INT32)
                return flashc_fail(FLASHC_ERROR_DTYPE, "seqused_k: dtype must be int32");
            CHECK(flashc_check_dense_1d(vl->seqused_k, "seqused_k"));
            if (vl->seqused_k->shape[0] != b)
                return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                                   "seqused_k: expected %lld entries (batch), got %lld",
                                   (long long)b, (long long)vl->seqused_k->shape[0]);
        }
        if (vl->max_seqlen_q < 0)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS, "max_seqlen_q: must be >= 0, got %lld",
                               (long long)vl->max_seqlen_q);
        if (vl->max_seqlen_k < 0)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS, "max_seqlen_k: must be >= 0, got %lld",
                               (long long)vl->max_seqlen_k);
        /* cu_seqlens are int32, so no sequence is longer than INT32_MAX. */
        if (vl->max_seqlen_q > INT32_MAX)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "max_seqlen_q: %lld exceeds the int32 range of cu_seqlens",
                               (long long)vl->max_seqlen_q);
        if (vl->max_seqlen_k > INT32_MAX)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "max_seqlen_k: %lld exceeds the int32 range of cu_seqlens",
                               (long long)vl->max_seqlen_k);
        sq = vl->max_seqlen_q;
        sk = vl->max_seqlen_k;
        p->cu_seqlens_q = (const int32_t *)cq->data;
        p->cu_seqlens_k = (const int32_t *)ck->data;
        p->seqused_k = vl->seqused_k ? (const int32_t *)vl->seqused_k->data : NULL;
    }
    p->batch = b;
    p->seqlen_q = sq;
    p->seqlen_k = sk;
    p->total_q = total_q;
    p->total_k = total_k;
    p->q = flashc_seq_view(q, varlen);
    p->k = flashc_seq_view(k, varlen && !paged);
    p->v = flashc_seq_view(v, varlen && !paged);
    if (paged) CHECK(flashc_check_block_table(vl->block_table, b, k, "k", p));
    return FLASHC_SUCCESS;
}


flashc_status flashc_apply_options(const flashc_attention_options *o, flashc_problem *p) {
    int64_t b = p->batch, h = p->nheads;
    CHECK(check_options(o));
    if (o->alibi_slopes) {
        const flashc_tensor *a = o->alibi_slopes;
        if (a->rank != 1 && a->rank != 2)
            return flashc_fail(FLASHC_ERROR_RANK,
                               "alibi_slopes: expected rank 1 (h) or 2 (b, h), got %d", a->rank);
        CHECK(flashc_check_tensor(a, "alibi_slopes", a->rank));
        if (a->dtype != FLASHC_DTYPE_FLOAT32)
            return flashc_fail(FLASHC_ERROR_DTYPE, "alibi_slopes: dtype must be float32");
        if (a->rank == 1) {
            int64_t shape[1] = {h};
            CHECK(flashc_check_shape(a, "alibi_slopes", shape));
            p->alibi_batch_stride = 0;
            p->alibi_head_stride = a->stride[0];
        } else {
            int64_t shape[2] = {b, h};
            CHECK(flashc_check_shape(a, "alibi_slopes", shape));
            p->alibi_batch_stride = a->stride[0];
            p->alibi_head_stride = a->stride[1];
        }
        p->alibi_slopes = (const float *)a->data;
    }
    p->scale = o->softmax_scale != 0.0 ? o->softmax_scale : 1.0 / sqrt((double)p->head_dim);
    p->softcap = o->softcap;
    p->causal = o->causal != 0;
    p->window_left = o->window_left;
    p->window_right = o->window_right;
    flashc_normalize_window(p->causal, p->seqlen_q, p->seqlen_k, &p->window_left, &p->window_right);
    p->dropout_p = o->dropout_p;
    p->dropout_threshold = flashc_dropout_threshold(o->dropout_p);
    p->dropout_seed = o->dropout_seed;
    p->dropout_offset = o->dropout_offset;
    p->deterministic = o->deterministic != 0;
    p->num_threads = o->num_threads;
    p->stream = o->stream;
    return FLASHC_SUCCESS;
}


/* Varlen contents, readable only where the index arrays live in host
 * memory: non-decreasing offsets inside the packed tensors, lengths within
 * max_seqlen, seqused_k within each key length. */
static flashc_status check_varlen_contents(flashc_problem *p) {
    if (!p->is_varlen || p->is_cuda) return FLASHC_SUCCESS;
    int64_t longest_q = 0, longest_k = 0;
    const int32_t *cq = p->cu_seqlens_q, *ck = p->cu_seqlens_k;
    if (cq[0] < 0)
        return flashc_fail(FLASHC_ERROR_CU_SEQLENS, "cu_seqlens_q: first entry %d is negative",
                           cq[0]);
    if (ck[0] < 0)
        return flashc_fail(FLASHC_ERROR_CU_SEQLENS, "cu_seqlens_k: first entry %d is negative",
                           ck[0]);
    for (int64_t i = 0; i < p->batch; ++i) {
        int64_t lq = (int64_t)cq[i + 1] - cq[i], lk = (int64_t)ck[i + 1] - ck[i];
        if (lq < 0)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "cu_seqlens_q: decreases at entry %lld (%d -> %d)",
                               (long long)i + 1, cq[i], cq[i + 1]);
        if (lk < 0)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "cu_seqlens_k: decreases at entry %lld (%d -> %d)",
                               (long long)i + 1, ck[i], ck[i + 1]);
        if (lq > p->seqlen_q)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "max_seqlen_q: %lld is below the length %lld of sequence %lld",
                               (long long)p->seqlen_q, (long long)lq, (long long)i);
        if (lk > p->seqlen_k)
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "max_seqlen_k: %lld is below the length %lld of sequence %lld",
                               (long long)p->seqlen_k, (long long)lk, (long long)i);
        if (lq > longest_q) longest_q = lq;
        if (lk > longest_k) longest_k = lk;
        if (p->seqused_k && (p->seqused_k[i] < 0 || p->seqused_k[i] > lk))
            return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                               "seqused_k: entry %lld is %d, outside [0, %lld] (the key length)",
                               (long long)i, p->seqused_k[i], (long long)lk);
        if (p->kv.block_table) {
            int64_t used = p->seqused_k ? p->seqused_k[i] : lk;
            if (used > p->kv.capacity)
                return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                                   "block_table: sequence %lld has %lld keys, more than its %lld "
                                   "blocks of %lld hold",
                                   (long long)i, (long long)used,
                                   (long long)(p->kv.capacity / p->kv.block_size),
                                   (long long)p->kv.block_size);
            CHECK(flashc_check_block_table_contents(p, i, 0, used));
        }
    }
    if (cq[p->batch] > p->total_q)
        return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                           "cu_seqlens_q: last entry %d exceeds q's %lld rows", cq[p->batch],
                           (long long)p->total_q);
    /* Paged keys: cu_seqlens_k holds lengths only (blocks may be shared). */
    if (!p->kv.block_table && ck[p->batch] > p->total_k)
        return flashc_fail(FLASHC_ERROR_CU_SEQLENS,
                           "cu_seqlens_k: last entry %d exceeds k's %lld rows", ck[p->batch],
                           (long long)p->total_k);
    /* Size the backend's loops by the real lengths, not by a loose
     * max_seqlen (s_dmask keeps its own rounded extent). */
    p->seqlen_q = longest_q;
    p->seqlen_k = longest_k;
    return FLASHC_SUCCESS;
}

/* A tensor shaped like q (h heads, rows of q) with head dim `dim`. */
static flashc_status check_like_q(const flashc_tensor *t, const char *name,
                                  const flashc_problem *p, int64_t heads, int64_t rows_batched,
                                  int64_t rows_varlen, int64_t dim) {
    if (!t) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "%s: tensor descriptor is NULL", name);
    CHECK(flashc_check_tensor(t, name, p->is_varlen ? 3 : 4));
    if (t->dtype != p->dtype)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype %s differs from q's dtype %s", name,
                           flashc_dtype_name(t->dtype), flashc_dtype_name(p->dtype));
    if (p->is_varlen) {
        int64_t shape[3] = {rows_varlen, heads, dim};
        CHECK(flashc_check_shape(t, name, shape));
    } else {
        int64_t shape[4] = {p->batch, rows_batched, heads, dim};
        CHECK(flashc_check_shape(t, name, shape));
    }
    return flashc_check_last_dim_contiguous(t, name);
}

flashc_status flashc_check_lse_like(const flashc_tensor *t, const char *name,
                                    const flashc_problem *p) {
    CHECK(flashc_check_tensor(t, name, p->is_varlen ? 2 : 3));
    flashc_dtype want = p->dtype == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64
                                                         : FLASHC_DTYPE_FLOAT32;
    if (t->dtype != want)
        return flashc_fail(FLASHC_ERROR_DTYPE, "%s: dtype must be %s", name,
                           want == FLASHC_DTYPE_FLOAT64 ? "float64 (as the inputs)" : "float32");
    if (p->is_varlen) {
        int64_t shape[2] = {p->nheads, p->total_q};
        return flashc_check_shape(t, name, shape);
    }
    int64_t shape[3] = {p->batch, p->nheads, p->seqlen_q};
    return flashc_check_shape(t, name, shape);
}

flashc_status flashc_validate_forward(const flashc_forward_args *a, flashc_problem *p) {
    memset(p, 0, sizeof *p);
    if (!a) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "args: is NULL");
    CHECK(check_inputs(a->q, a->k, a->v, &a->varlen, p));
    CHECK(flashc_apply_options(&a->options, p));
    CHECK(check_like_q(a->out, "out", p, p->nheads, p->seqlen_q, p->total_q, p->head_dim_v));
    CHECK(flashc_check_no_self_overlap(a->out, "out"));
    if (a->lse) {
        CHECK(flashc_check_lse_like(a->lse, "lse", p));
        CHECK(flashc_check_no_self_overlap(a->lse, "lse"));
    }
    if (a->s_dmask) {
        const flashc_tensor *s = a->s_dmask;
        CHECK(flashc_check_tensor(s, "s_dmask", 4));
        if (s->dtype != p->dtype)
            return flashc_fail(FLASHC_ERROR_DTYPE, "s_dmask: dtype %s differs from q's dtype %s",
                               flashc_dtype_name(s->dtype), flashc_dtype_name(p->dtype));
        int64_t shape[4] = {p->batch, p->nheads,
                            flashc_round_up(p->seqlen_q, FLASHC_SDMASK_ROUND),
                            flashc_round_up(p->seqlen_k, FLASHC_SDMASK_ROUND)};
        CHECK(flashc_check_shape(s, "s_dmask", shape));
        CHECK(flashc_check_no_self_overlap(s, "s_dmask"));
        p->s_dmask.data = s->data;
        p->s_dmask.dtype = s->dtype;
        p->s_dmask.batch_stride = s->stride[0];
        p->s_dmask.head_stride = s->stride[1];
        p->s_dmask.row_stride = s->stride[2];
        p->s_dmask.col_stride = s->stride[3];
        p->s_dmask.rows = shape[2];
        p->s_dmask.cols = shape[3];
    }
    const flashc_varlen *vl = &a->varlen;
    named_tensor inputs[] = {{a->q, "q"},
                             {a->k, "k"},
                             {a->v, "v"},
                             {a->options.alibi_slopes, "alibi_slopes"},
                             {vl->cu_seqlens_q, "cu_seqlens_q"},
                             {vl->cu_seqlens_k, "cu_seqlens_k"},
                             {vl->seqused_k, "seqused_k"},
                             {vl->block_table, "block_table"},
                             {a->out, "out"},
                             {a->lse, "lse"},
                             {a->s_dmask, "s_dmask"}};
    int n_inputs = (int)(sizeof inputs / sizeof inputs[0]);
    CHECK(flashc_check_devices(inputs, n_inputs, p));
    CHECK(flashc_check_disjoint(inputs + 8, 3, inputs, n_inputs));
    CHECK(check_varlen_contents(p));
    p->out = flashc_seq_view(a->out, p->is_varlen);
    p->lse = flashc_row_view(a->lse, p->is_varlen);
    return FLASHC_SUCCESS;
}

flashc_status flashc_validate_backward(const flashc_backward_args *a, flashc_problem *p) {
    memset(p, 0, sizeof *p);
    if (!a) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "args: is NULL");
    if (a->varlen.block_table)
        return flashc_fail(FLASHC_ERROR_UNSUPPORTED,
                           "block_table: the backward of a paged (block_table) forward is not "
                           "supported");
    CHECK(check_inputs(a->q, a->k, a->v, &a->varlen, p));
    CHECK(flashc_apply_options(&a->options, p));
    CHECK(check_like_q(a->out, "out", p, p->nheads, p->seqlen_q, p->total_q, p->head_dim_v));
    CHECK(check_like_q(a->dout, "dout", p, p->nheads, p->seqlen_q, p->total_q, p->head_dim_v));
    if (!a->lse) return flashc_fail(FLASHC_ERROR_NULL_POINTER, "lse: tensor descriptor is NULL");
    CHECK(flashc_check_lse_like(a->lse, "lse", p));
    if (a->dlse) CHECK(flashc_check_lse_like(a->dlse, "dlse", p));
    CHECK(check_like_q(a->dq, "dq", p, p->nheads, p->seqlen_q, p->total_q, p->head_dim));
    CHECK(check_like_q(a->dk, "dk", p, p->nheads_k, p->seqlen_k, p->total_k, p->head_dim));
    CHECK(check_like_q(a->dv, "dv", p, p->nheads_k, p->seqlen_k, p->total_k, p->head_dim_v));
    CHECK(flashc_check_no_self_overlap(a->dq, "dq"));
    CHECK(flashc_check_no_self_overlap(a->dk, "dk"));
    CHECK(flashc_check_no_self_overlap(a->dv, "dv"));

    const flashc_varlen *vl = &a->varlen;
    named_tensor inputs[] = {{a->q, "q"},
                             {a->k, "k"},
                             {a->v, "v"},
                             {a->out, "out"},
                             {a->dout, "dout"},
                             {a->lse, "lse"},
                             {a->dlse, "dlse"},
                             {a->options.alibi_slopes, "alibi_slopes"},
                             {vl->cu_seqlens_q, "cu_seqlens_q"},
                             {vl->cu_seqlens_k, "cu_seqlens_k"},
                             {vl->seqused_k, "seqused_k"},
                             {a->dq, "dq"},
                             {a->dk, "dk"},
                             {a->dv, "dv"}};
    int n_all = (int)(sizeof inputs / sizeof inputs[0]), n_in = 11;
    CHECK(flashc_check_devices(inputs, n_all, p));
    /* dq, dk, dv may be views of one packed buffer: check each against the
     * inputs only. */
    CHECK(flashc_check_disjoint(inputs + n_in, 3, inputs, n_in));
    CHECK(check_varlen_contents(p));
    p->out = flashc_seq_view(a->out, p->is_varlen);
    p->dout = flashc_seq_view(a->dout, p->is_varlen);
    p->dq = flashc_seq_view(a->dq, p->is_varlen);
    p->dk = flashc_seq_view(a->dk, p->is_varlen);
    p->dv = flashc_seq_view(a->dv, p->is_varlen);
    p->lse = flashc_row_view(a->lse, p->is_varlen);
    p->dlse = flashc_row_view(a->dlse, p->is_varlen);
    return FLASHC_SUCCESS;
}

flashc_status flashc_validate_workspace(const flashc_backward_args *a, size_t required) {
    if (required == 0) return FLASHC_SUCCESS;
    if (!a->workspace)
        return flashc_fail(FLASHC_ERROR_WORKSPACE,
                           "workspace: is NULL but %zu bytes are required "
                           "(flashc_attention_backward_workspace_size)",
                           required);
    if (a->workspace_bytes < required)
        return flashc_fail(FLASHC_ERROR_WORKSPACE,
                           "workspace_bytes: %zu bytes given, %zu required", a->workspace_bytes,
                           required);
    return FLASHC_SUCCESS;
}
