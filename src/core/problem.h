/* A validated attention problem: what the backends receive. Built from the
 * public argument structs by src/core/validate.c after every check passed,
 * so a backend reads it without re-checking anything. */
#ifndef FLASHC_CORE_PROBLEM_H
#define FLASHC_CORE_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "flashc.h"

/* q, k, v, out, dout, dq, dk, dv: element (batch b, row r, head h, dim x)
 * lives at data + b*batch_stride + r*row_stride + h*head_stride + x.
 * In varlen mode batch_stride is 0 and r is the global (packed) row. */
typedef struct flashc_seq_tensor {
    void *data;
    flashc_dtype dtype;
    int64_t batch_stride, row_stride, head_stride;
} flashc_seq_tensor;

/* lse, dlse: element (b, h, r) at data + b*batch_stride + h*head_stride +
 * r*row_stride; varlen: batch_stride 0, r global. data NULL when absent. */
typedef struct flashc_row_tensor {
    void *data;
    flashc_dtype dtype;
    int64_t batch_stride, head_stride, row_stride;
} flashc_row_tensor;

/* s_dmask: element (b, h, r, c), r and c local to the sequence, over the
 * rounded extent rows x cols (padding is written as 0). */
typedef struct flashc_score_tensor {
    void *data;
    flashc_dtype dtype;
    int64_t batch_stride, head_stride, row_stride, col_stride;
    int64_t rows, cols;
} flashc_score_tensor;

/* Where the keys live when they are not the plain rows of k and v: a KV
 * cache (flashc_attention_kvcache) or paged blocks (varlen block_table or
 * a paged cache). Key j of sequence b is cache index c = k_start + j (see
 * flashc_seq_info); paged: row c % block_size of block
 * block_table[b * block_table_stride + c / block_size], blocks
 * k.batch_stride apart; otherwise row c of batch k_batch. All pointers on
 * the tensors' device; everything 0 / NULL for a plain problem. */
typedef struct flashc_kv_layout {
    int is_kvcache;             /* batched q over a cache */
    /* kvcache: cache index one past each sequence's keys before the
     * append (NULL = capacity), its first index (NULL = 0), its cache
     * batch (NULL = b), and the rows appended at cache_seqlens[b]. */
    const int32_t *cache_seqlens;
    const int32_t *cache_leftpad;
    const int32_t *cache_batch_idx;
    int64_t new_rows;
    int64_t capacity;           /* cache indices per sequence */
    int64_t cache_batch;        /* contiguous cache: batches of k_cache */
    const int32_t *block_table; /* NULL = not paged */
    int64_t block_table_stride, block_size, num_blocks;
} flashc_kv_layout;

typedef struct flashc_problem {
    int is_varlen;
    int is_cuda;               /* all tensors on one CUDA device */
    int device_index;
    int64_t batch, nheads, nheads_k, head_dim, head_dim_v;
    /* Batched: the lengths. Varlen: bounds on every sequence's lengths,
     * for sizing loops: the longest sequences where cu_seqlens are in host
     * memory (read during validation), else max_seqlen_q / max_seqlen_k. */
    int64_t seqlen_q, seqlen_k;
    /* Rows of the packed q / k tensors (batched: batch * seqlen). */
    int64_t total_q, total_k;
    /* Varlen only (NULL otherwise); on the tensors' device. */
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k;
    flashc_kv_layout kv;       /* cache / paged keys; zero otherwise */

    flashc_dtype dtype;        /* of q, k, v, out (and dout, dq, dk, dv) */
    flashc_seq_tensor q, k, v, out;
    flashc_row_tensor lse;     /* optional in the forward */
    flashc_score_tensor s_dmask; /* optional, forward only */

    /* Backward only. */
    flashc_seq_tensor dout, dq, dk, dv;
    flashc_row_tensor dlse;    /* optional */
    void *workspace;
    size_t workspace_bytes;

    /* Forward on CUDA (flashc_attention_forward_allocating): where the
     * portable kernel shares out its last wave of tiles it asks this
     * allocator for the scratch, once; NULL (or no memory) runs it
     * without. */
    flashc_workspace_allocator scratch_allocate;
    void *scratch_context;

    /* Options, resolved. */
    double scale;              /* never 0 here: the default is applied */
    double softcap;            /* 0 = off */
    int64_t window_left, window_right; /* causal folded in, -1 = unbounded */
    int causal;                /* as given; already folded into the window */
    const float *alibi_slopes; /* NULL = off */
    int64_t alibi_batch_stride, alibi_head_stride;
    double dropout_p;
    uint32_t dropout_threshold;
    uint64_t dropout_seed, dropout_offset;
    int deterministic;
    int num_threads;
    /* CPU forward: key splits per row tile, 0 = chosen from the shape (a
     * KV-cache call's num_splits; other calls leave it 0). */
    int key_splits;
    void *stream;
} flashc_problem;

/* Where sequence b lives: its first row in the packed q / k row dimension
 * (0 in batched mode, where batch_stride does the work) and its lengths
 * (seqused_k applied). With a KV cache or paged keys k_start is the first
 * cache index of the sequence and k_batch its cache batch (see
 * flashc_kv_layout). Host pointers only: the CPU backend's helper. */
typedef struct flashc_seq_info {
    int64_t q_start, k_start;
    int64_t sq, sk;
    int64_t k_batch;           /* batch of k / v (b, or cache_batch_idx[b]) */
} flashc_seq_info;

static inline flashc_seq_info flashc_problem_seq(const flashc_problem *p, int64_t b) {
    flashc_seq_info s;
    s.k_batch = b;
    if (p->kv.is_kvcache) {
        const flashc_kv_layout *kv = &p->kv;
        int64_t end = kv->cache_seqlens ? kv->cache_seqlens[b] : kv->capacity;
        s.q_start = 0;
        s.k_start = kv->cache_leftpad ? kv->cache_leftpad[b] : 0;
        s.sq = p->seqlen_q;
        s.sk = end + kv->new_rows - s.k_start;
        if (kv->cache_batch_idx) s.k_batch = kv->cache_batch_idx[b];
        return s;
    }
    if (!p->is_varlen) {
        s.q_start = 0;
        s.k_start = 0;
        s.sq = p->seqlen_q;
        s.sk = p->seqlen_k;
        return s;
    }
    s.q_start = p->cu_seqlens_q[b];
    /* Paged keys are addressed through the block table, from index 0. */
    s.k_start = p->kv.block_table ? 0 : p->cu_seqlens_k[b];
    s.sq = p->cu_seqlens_q[b + 1] - p->cu_seqlens_q[b];
    s.sk = p->seqused_k ? p->seqused_k[b] : p->cu_seqlens_k[b + 1] - p->cu_seqlens_k[b];
    return s;
}

/* Element offset of cache index c of sequence b (k_batch its batch) in a
 * key or value tensor t, head 0. */
static inline int64_t flashc_problem_key_offset(const flashc_problem *p,
                                                const flashc_seq_tensor *t, int64_t b,
                                                int64_t k_batch, int64_t c) {
    const flashc_kv_layout *kv = &p->kv;
    if (kv->block_table) {
        int64_t block = kv->block_table[b * kv->block_table_stride + c / kv->block_size];
        return block * t->batch_stride + (c % kv->block_size) * t->row_stride;
    }
    return k_batch * t->batch_stride + c * t->row_stride;
}

/* ALiBi slopes of sequence b from head h on (head h + k's at
 * [k * alibi_head_stride]), NULL when ALiBi is off. */
static inline const float *flashc_problem_alibi_slopes(const flashc_problem *p, int64_t b, int64_t h) {
    if (!p->alibi_slopes) return NULL;
    return p->alibi_slopes + b * p->alibi_batch_stride + h * p->alibi_head_stride;
}

#endif
