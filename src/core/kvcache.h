/* A validated KV-cache call (flashc_attention_kvcache): the attention
 * problem over the cache plus what happens before it, the append of
 * k_new / v_new and the rotary embedding. Built by validate_kvcache.c. */
#ifndef FLASHC_CORE_KVCACHE_H
#define FLASHC_CORE_KVCACHE_H

#include "problem.h"

typedef struct flashc_kvcache_problem {
    /* q over the cache after the append: kv.is_kvcache set, k / v the
     * cache tensors (batch_stride between cache batches or blocks), q the
     * caller's q, or its rotated copy once the backend made one. */
    flashc_problem attn;
    /* Rows appended at cache_seqlens[b] (attn.kv.new_rows of them); data
     * NULL when there is no append. Batched: element (b, r, h, x). */
    flashc_seq_tensor k_new, v_new;
    /* Rotary: cos / sin rows of rotary_dim / 2 entries (row_stride apart)
     * in q's dtype; rotary_dim 0 = none. */
    const void *rotary_cos, *rotary_sin;
    int64_t rotary_dim, rotary_row_stride;
    int64_t rotary_rows;        /* positions the tables hold (>= the capacity) */
    int rotary_interleaved;
    /* Query row r is at position cache_seqlens[b] + r (causal or window)
     * or cache_seqlens[b] for every row. */
    int rotary_q_per_row;
    int num_splits;             /* as given: 0 = heuristic, 1 = none */
    /* Scratch for the rotated q: b * sq * h * d elements of q's dtype,
     * contiguous (b, sq, h, d), inside the call's workspace; NULL without
     * rotary. */
    void *q_rotated;
    /* The rest of the workspace, for the backend (split partials). */
    void *workspace;
    size_t workspace_bytes;
} flashc_kvcache_problem;

#endif
