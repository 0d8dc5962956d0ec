/* One sequence of a KV-cache or paged problem, read on the device, and the
 * element offset of its cache rows. The index tensors are not checked on
 * the host for CUDA tensors, so every entry is checked here: a sequence
 * whose range leaves the cache (leftpad > seqlens, seqlens + new rows >
 * capacity, a cache batch that does not exist) is invalid and skipped by
 * every kernel (its rows see no key), and a block-table entry outside the
 * blocks makes its rows read as zeros and never be written. */
#ifndef FLASHC_CUDA_KVCACHE_SEQ_CUH
#define FLASHC_CUDA_KVCACHE_SEQ_CUH

#include "kvcache_params.h"

typedef struct flashc_kvc_seq {
    bool valid;
    int64_t q_start;   /* first packed q row (varlen), else 0 */
    int sq, sk;        /* query rows, keys */
    int k_start;       /* cache index of key 0 */
    int append_at;     /* cache index of the first appended row */
    int k_batch;       /* contiguous cache: the cache batch */
} flashc_kvc_seq;

static __device__ __forceinline__ int64_t flashc_kvc_clamp(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

static __device__ __forceinline__ flashc_kvc_seq flashc_kvc_sequence(const flashc_kvc_params &p, int b) {
    flashc_kvc_seq s;
    s.k_batch = b;
    if (p.cu_seqlens_q) { /* varlen q over paged keys */
        const int64_t q0 = flashc_kvc_clamp(p.cu_seqlens_q[b], 0, p.total_q);
        const int64_t q1 = flashc_kvc_clamp(p.cu_seqlens_q[b + 1], q0, p.total_q);
        const int64_t sk = p.seqused_k ? (int64_t)p.seqused_k[b] : (int64_t)p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b];
        s.q_start = q0;
        s.sq = (int)flashc_kvc_clamp(q1 - q0, 0, p.seqlen_q);
        s.valid = sk >= 0 && sk <= p.capacity;
        s.sk = s.valid ? (int)sk : 0;
        s.k_start = 0;
        s.append_at = 0;
        return s;
    }
    const int64_t end = p.cache_seqlens ? (int64_t)p.cache_seqlens[b] : p.capacity;
    const int64_t start = p.cache_leftpad ? (int64_t)p.cache_leftpad[b] : 0;
    if (p.cache_batch_idx) s.k_batch = p.cache_batch_idx[b];
    s.valid = start >= 0 && start <= end && end + p.new_rows <= p.capacity &&
              (p.block_table || (s.k_batch >= 0 && s.k_batch < p.cache_batch));
    s.q_start = 0;
    s.sq = p.seqlen_q;
    s.k_start = s.valid ? (int)start : 0;
    s.append_at = s.valid ? (int)end : 0;
    s.sk = s.valid ? (int)(end + p.new_rows - start) : 0;
    return s;
}

/* The block (paged: the block-table entry, checked by
 * flashc_kvc_block_exists) or cache batch holding cache index c of
 * sequence b, and the row there. */
static __device__ __forceinline__ void flashc_kvc_find(const flashc_kvc_params &p, int b, const flashc_kvc_seq &s, int c,
                                                       int *block, int *row) {
    if (!p.block_table) {
        *block = s.k_batch;
        *row = c;
        return;
    }
    *block = p.block_table[b * p.block_table_stride + c / p.block_size];
    *row = c % p.block_size;
}

/* Whether a block from flashc_kvc_find exists (a valid sequence's cache
 * batch always does). */
static __device__ __forceinline__ bool flashc_kvc_block_exists(const flashc_kvc_params &p, int block) {
    return !p.block_table || (block >= 0 && block < p.num_blocks);
}

#endif
