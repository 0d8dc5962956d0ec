#include "cli_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/device.h"
#include "common/measure.h"

static int tensor_create(flashc_cli_tensor *t, flashc_cli_problem *p, flashc_dtype dtype,
                         int rank, const int64_t *shape, const char *name) {
    memset(t, 0, sizeof *t);
    if (flashc_tool_buffer_alloc(&t->host, dtype, rank, shape, &p->allocated_bytes) != 0) {
        fprintf(stderr, "flashc run: cannot allocate %s (out of memory)\n", name);
        return -1;
    }
    t->desc = t->host.desc;
    if (p->on_cuda) {
        if (flashc_tool_device_alloc(&t->device_data, t->host.bytes, name) != 0) return -1;
        p->allocated_bytes += t->host.bytes;
        t->desc.data = t->device_data;
        t->desc.device.type = FLASHC_DEVICE_CUDA;
        t->desc.device.index = 0;
    }
    return 0;
}

static int tensor_upload(flashc_cli_tensor *t, int on_cuda) {
    if (!on_cuda) return 0;
    return flashc_tool_device_copy_to(t->device_data, t->host.data, t->host.bytes);
}

static int tensor_download(flashc_cli_tensor *t, int on_cuda) {
    if (!on_cuda) return 0;
    return flashc_tool_device_copy_from(t->host.data, t->device_data, t->host.bytes);
}

static void tensor_destroy(flashc_cli_tensor *t) {
    if (t->device_data) flashc_tool_device_free(t->device_data);
    flashc_tool_buffer_free(&t->host);
    memset(t, 0, sizeof *t);
}

/* Sequence lengths: equal in batched mode; given or random in varlen. */
static int setup_lengths(flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_tool_rng *rng) {
    int64_t b = p->batch;
    p->len_q = calloc((size_t)b, sizeof(int64_t));
    p->len_k = calloc((size_t)b, sizeof(int64_t));
    p->start_q = calloc((size_t)b, sizeof(int64_t));
    p->start_k = calloc((size_t)b, sizeof(int64_t));
    if (!p->len_q || !p->len_k || !p->start_q || !p->start_k) {
        fprintf(stderr, "flashc run: out of memory\n");
        return -1;
    }
    for (int64_t i = 0; i < b; ++i) {
        if (!opt->varlen) {
            p->len_q[i] = opt->seqlen_q;
            p->len_k[i] = opt->seqlen_k;
        } else if (opt->varlen_random) {
            /* Uniform in [1, seqlen]: lengths that are not tile multiples. */
            p->len_q[i] = 1 + (int64_t)(flashc_tool_rng_uniform(rng) * (double)opt->seqlen_q);
            p->len_k[i] = 1 + (int64_t)(flashc_tool_rng_uniform(rng) * (double)opt->seqlen_k);
        } else {
            p->len_q[i] = opt->varlen_q[i];
            p->len_k[i] = opt->varlen_k[i];
        }
    }
    p->total_q = p->total_k = 0;
    p->max_seqlen_q = p->max_seqlen_k = 0;
    for (int64_t i = 0; i < b; ++i) {
        p->start_q[i] = p->total_q;
        p->start_k[i] = p->total_k;
        p->total_q += p->len_q[i];
        p->total_k += p->len_k[i];
        if (p->len_q[i] > p->max_seqlen_q) p->max_seqlen_q = p->len_q[i];
        if (p->len_k[i] > p->max_seqlen_k) p->max_seqlen_k = p->len_k[i];
    }
    if (opt->varlen && (p->total_q > INT32_MAX || p->total_k > INT32_MAX)) {
        fprintf(stderr, "flashc run: option --varlen: total length exceeds int32 cu_seqlens\n");
        return -1;
    }
    p->forward_flops = 0.0;
    for (int64_t i = 0; i < b; ++i)
        p->forward_flops += flashc_tool_forward_flops(p->heads, p->len_q[i], p->len_k[i],
                                                      p->hdim, p->hdim_v, opt->causal);
    return 0;
}

/* Geometric ALiBi slopes 2^(-8(i+1)/h); per (batch, head) they vary a
 * little with the batch so (b, h) slopes are distinguishable. */
static void fill_alibi(flashc_cli_problem *p, const flashc_cli_options *opt) {
    int64_t rows = opt->alibi == FLASHC_CLI_ALIBI_PER_BATCH_HEAD ? p->batch : 1;
    float *s = p->alibi.host.data;
    for (int64_t b = 0; b < rows; ++b)
        for (int64_t h = 0; h < p->heads; ++h)
            s[b * p->heads + h] = (float)(pow(2.0, -8.0 * (double)(h + 1) / (double)p->heads) *
                                          (1.0 + 0.25 * (double)b / (double)rows));
}

/* The same arguments over the host copies: what the reference reads. */
static void make_host_args(flashc_cli_problem *p) {
    p->fwd_host = p->fwd;
    p->fwd_host.q = &p->q.host.desc;
    p->fwd_host.k = &p->k.host.desc;
    p->fwd_host.v = &p->v.host.desc;
    p->fwd_host.out = &p->out.host.desc;
    p->fwd_host.lse = &p->lse.host.desc;
    if (p->fwd.options.alibi_slopes) p->fwd_host.options.alibi_slopes = &p->alibi.host.desc;
    if (p->fwd.varlen.cu_seqlens_q) {
        p->fwd_host.varlen.cu_seqlens_q = &p->cu_seqlens_q.host.desc;
        p->fwd_host.varlen.cu_seqlens_k = &p->cu_seqlens_k.host.desc;
    }
    p->bwd_host = p->bwd;
    if (!p->bwd.dq) return;
    p->bwd_host.dout = &p->dout.host.desc;
    p->bwd_host.q = &p->q.host.desc;
    p->bwd_host.k = &p->k.host.desc;
    p->bwd_host.v = &p->v.host.desc;
    p->bwd_host.out = &p->out.host.desc;
    p->bwd_host.lse = &p->lse.host.desc;
    p->bwd_host.dq = &p->dq.host.desc;
    p->bwd_host.dk = &p->dk.host.desc;
    p->bwd_host.dv = &p->dv.host.desc;
    p->bwd_host.options = p->fwd_host.options;
    p->bwd_host.varlen = p->fwd_host.varlen;
    p->bwd_host.workspace = NULL;
    p->bwd_host.workspace_bytes = 0;
}

int flashc_cli_problem_create(flashc_cli_problem *p, const flashc_cli_options *opt) {
    memset(p, 0, sizeof *p);
    p->on_cuda = opt->device == FLASHC_CLI_DEVICE_CUDA;
    p->batch = opt->batch;
    p->heads = opt->heads;
    p->kv_heads = opt->kv_heads;
    p->hdim = opt->hdim;
    p->hdim_v = opt->hdim_v;
    flashc_tool_rng rng = flashc_tool_rng_seeded(opt->seed);
    if (setup_lengths(p, opt, &rng) != 0) return -1;

    const flashc_dtype dt = opt->dtype;
    const flashc_dtype lse_dt = dt == FLASHC_DTYPE_FLOAT64 ? FLASHC_DTYPE_FLOAT64 : FLASHC_DTYPE_FLOAT32;
    int64_t b = p->batch, h = p->heads, hk = p->kv_heads, d = p->hdim, dv = p->hdim_v;
    int rank = opt->varlen ? 3 : 4;
    int64_t q_shape[4], k_shape[4], v_shape[4], o_shape[4], lse_shape[3];
    if (opt->varlen) {
        int64_t qs[3] = {p->total_q, h, d}, ks[3] = {p->total_k, hk, d};
        int64_t vs[3] = {p->total_k, hk, dv}, os[3] = {p->total_q, h, dv};
        memcpy(q_shape, qs, sizeof qs);
        memcpy(k_shape, ks, sizeof ks);
        memcpy(v_shape, vs, sizeof vs);
        memcpy(o_shape, os, sizeof os);
        lse_shape[0] = h;
        lse_shape[1] = p->total_q;
    } else {
        int64_t sq = opt->seqlen_q, sk = opt->seqlen_k;
        int64_t qs[4] = {b, sq, h, d}, ks[4] = {b, sk, hk, d};
        int64_t vs[4] = {b, sk, hk, dv}, os[4] = {b, sq, h, dv};
        memcpy(q_shape, qs, sizeof qs);
        memcpy(k_shape, ks, sizeof ks);
        memcpy(v_shape, vs, sizeof vs);
        memcpy(o_shape, os, sizeof os);
        lse_shape[0] = b;
        lse_shape[1] = h;
        lse_shape[2] = sq;
    }
    int lse_rank = opt->varlen ? 2 : 3;
    if (tensor_create(&p->q, p, dt, rank, q_shape, "q") || tensor_create(&p->k, p, dt, rank, k_shape, "k") ||
        tensor_create(&p->v, p, dt, rank, v_shape, "v") || tensor_create(&p->out, p, dt, rank, o_shape, "out") ||
        tensor_create(&p->lse, p, lse_dt, lse_rank, lse_shape, "lse"))
        return -1;
    if (opt->backward &&
        (tensor_create(&p->dout, p, dt, rank, o_shape, "dout") || tensor_create(&p->dq, p, dt, rank, q_shape, "dq") ||
         tensor_create(&p->dk, p, dt, rank, k_shape, "dk") || tensor_create(&p->dv, p, dt, rank, v_shape, "dv")))
        return -1;

    flashc_tool_fill_normal(p->q.host.data, dt, flashc_tool_numel(&p->q.host.desc), 1.0, &rng);
    flashc_tool_fill_normal(p->k.host.data, dt, flashc_tool_numel(&p->k.host.desc), 1.0, &rng);
    flashc_tool_fill_normal(p->v.host.data, dt, flashc_tool_numel(&p->v.host.desc), 1.0, &rng);
    flashc_tool_fill_nan(p->out.host.data, dt, flashc_tool_numel(&p->out.host.desc));
    flashc_tool_fill_nan(p->lse.host.data, lse_dt, flashc_tool_numel(&p->lse.host.desc));
    if (tensor_upload(&p->q, p->on_cuda) || tensor_upload(&p->k, p->on_cuda) ||
        tensor_upload(&p->v, p->on_cuda) || tensor_upload(&p->out, p->on_cuda) ||
        tensor_upload(&p->lse, p->on_cuda))
        return -1;
    if (opt->backward) {
        flashc_tool_fill_normal(p->dout.host.data, dt, flashc_tool_numel(&p->dout.host.desc), 1.0, &rng);
        flashc_tool_fill_nan(p->dq.host.data, dt, flashc_tool_numel(&p->dq.host.desc));
        flashc_tool_fill_nan(p->dk.host.data, dt, flashc_tool_numel(&p->dk.host.desc));
        flashc_tool_fill_nan(p->dv.host.data, dt, flashc_tool_numel(&p->dv.host.desc));
        if (tensor_upload(&p->dout, p->on_cuda) || tensor_upload(&p->dq, p->on_cuda) ||
            tensor_upload(&p->dk, p->on_cuda) || tensor_upload(&p->dv, p->on_cuda))
            return -1;
    }

    flashc_attention_options o = flashc_attention_options_default();
    o.softmax_scale = opt->scale;
    o.causal = opt->causal;
    o.window_left = opt->window_left;
    o.window_right = opt->window_right;
    o.softcap = opt->softcap;
    o.dropout_p = opt->dropout;
    o.dropout_seed = opt->seed;
    o.dropout_offset = 0;
    o.deterministic = opt->deterministic;
    o.num_threads = opt->threads;
    if (p->on_cuda) {
        /* A stream of its own: the library must launch where it is told. */
        if (flashc_tool_stream_create(&p->stream) != 0) return -1;
        o.stream = p->stream;
    }
    if (opt->alibi != FLASHC_CLI_ALIBI_OFF) {
        int64_t s2[2] = {b, h}, s1[1] = {h};
        int per_bh = opt->alibi == FLASHC_CLI_ALIBI_PER_BATCH_HEAD;
        if (tensor_create(&p->alibi, p, FLASHC_DTYPE_FLOAT32, per_bh ? 2 : 1, per_bh ? s2 : s1, "alibi slopes"))
            return -1;
        fill_alibi(p, opt);
        if (tensor_upload(&p->alibi, p->on_cuda)) return -1;
        o.alibi_slopes = &p->alibi.desc;
    }

    flashc_varlen vl;
    memset(&vl, 0, sizeof vl);
    if (opt->varlen) {
        int64_t cu_shape[1] = {b + 1};
        if (tensor_create(&p->cu_seqlens_q, p, FLASHC_DTYPE_INT32, 1, cu_shape, "cu_seqlens_q") ||
            tensor_create(&p->cu_seqlens_k, p, FLASHC_DTYPE_INT32, 1, cu_shape, "cu_seqlens_k"))
            return -1;
        int32_t *cq = p->cu_seqlens_q.host.data, *ck = p->cu_seqlens_k.host.data;
        for (int64_t i = 0; i < b; ++i) {
            cq[i] = (int32_t)p->start_q[i];
            ck[i] = (int32_t)p->start_k[i];
        }
        cq[b] = (int32_t)p->total_q;
        ck[b] = (int32_t)p->total_k;
        if (tensor_upload(&p->cu_seqlens_q, p->on_cuda) || tensor_upload(&p->cu_seqlens_k, p->on_cuda))
            return -1;
        vl.cu_seqlens_q = &p->cu_seqlens_q.desc;
        vl.cu_seqlens_k = &p->cu_seqlens_k.desc;
        vl.max_seqlen_q = p->max_seqlen_q;
        vl.max_seqlen_k = p->max_seqlen_k;
    }

    memset(&p->fwd, 0, sizeof p->fwd);
    p->fwd.q = &p->q.desc;
    p->fwd.k = &p->k.desc;
    p->fwd.v = &p->v.desc;
    p->fwd.out = &p->out.desc;
    p->fwd.lse = &p->lse.desc;
    p->fwd.varlen = vl;
    p->fwd.options = o;

    memset(&p->bwd, 0, sizeof p->bwd);
    if (opt->backward) {
        p->bwd.dout = &p->dout.desc;
        p->bwd.q = &p->q.desc;
        p->bwd.k = &p->k.desc;
        p->bwd.v = &p->v.desc;
        p->bwd.out = &p->out.desc;
        p->bwd.lse = &p->lse.desc;
        p->bwd.dq = &p->dq.desc;
        p->bwd.dk = &p->dk.desc;
        p->bwd.dv = &p->dv.desc;
        p->bwd.varlen = vl;
        p->bwd.options = o;
        flashc_status st = flashc_attention_backward_workspace_size(&p->bwd, &p->workspace_bytes);
        if (st == FLASHC_ERROR_UNSUPPORTED && p->on_cuda) {
            flashc_cli_problem_backward_unavailable(p, flashc_last_error_message());
            p->workspace_bytes = 0;
        } else if (st != FLASHC_SUCCESS) {
            fprintf(stderr, "flashc run: backward workspace query failed: %s: %s\n",
                    flashc_status_string(st), flashc_last_error_message());
            return -1;
        } else if (p->on_cuda) {
            if (flashc_tool_device_alloc(&p->workspace, p->workspace_bytes, "the backward workspace") ||
                flashc_tool_device_fill(p->workspace, 0xFF, p->workspace_bytes))
                return -1;
        } else {
            p->workspace = aligned_alloc(64, (p->workspace_bytes + 63) / 64 * 64 + 64);
            if (!p->workspace) {
                fprintf(stderr, "flashc run: cannot allocate the backward workspace (%zu bytes)\n",
                        p->workspace_bytes);
                return -1;
            }
            /* Poison: a kernel that reads workspace it did not write shows. */
            memset(p->workspace, 0xFF, p->workspace_bytes);
        }
        p->allocated_bytes += p->workspace_bytes;
        p->bwd.workspace = p->workspace;
        p->bwd.workspace_bytes = p->workspace_bytes;
    }
    make_host_args(p);
    return 0;
}

void flashc_cli_problem_backward_unavailable(flashc_cli_problem *p, const char *message) {
    snprintf(p->backward_unavailable, sizeof p->backward_unavailable, "%s",
             message && message[0] ? message : "the library gave no message");
}

int flashc_cli_problem_fetch_outputs(flashc_cli_problem *p, int backward) {
    if (!p->on_cuda) return 0;
    if (tensor_download(&p->out, 1) || tensor_download(&p->lse, 1)) return -1;
    if (backward && (tensor_download(&p->dq, 1) || tensor_download(&p->dk, 1) || tensor_download(&p->dv, 1)))
        return -1;
    return 0;
}

void flashc_cli_problem_destroy(flashc_cli_problem *p) {
    flashc_cli_tensor *all[] = {&p->q, &p->k, &p->v, &p->out, &p->lse, &p->dout, &p->dq, &p->dk,
                                &p->dv, &p->alibi, &p->cu_seqlens_q, &p->cu_seqlens_k};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) tensor_destroy(all[i]);
    if (p->workspace) {
        if (p->on_cuda) flashc_tool_device_free(p->workspace);
        else free(p->workspace);
    }
    flashc_tool_scratch_free(&p->scratch);
    if (p->stream) flashc_tool_stream_destroy(p->stream);
    free(p->len_q);
    free(p->len_k);
    free(p->start_q);
    free(p->start_k);
    memset(p, 0, sizeof *p);
}
