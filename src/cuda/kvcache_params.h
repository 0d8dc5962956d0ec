/* What the KV-cache kernels receive (attention over a cache or paged keys,
 * the append, the split combine): a flashc_kvcache_problem, or a varlen
 * problem with a block table, flattened into plain values a kernel takes
 * by value. Filled on the host by kvcache_backend.cu. */
#ifndef FLASHC_CUDA_KVCACHE_PARAMS_H
#define FLASHC_CUDA_KVCACHE_PARAMS_H

#include <stdint.h>

/* At most this many key splits: the combine kernel keeps one weight per
 * split in shared memory. */
#define FLASHC_KVC_MAX_SPLITS 128

typedef struct flashc_kvc_params {
    const void *q;                  /* the caller's q, or its rotated copy */
    const void *k, *v;              /* the cache (contiguous or paged blocks) */
    void *out;
    float *lse;                     /* NULL: not requested */
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride; /* batch: cache batch or block */
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;
    int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

    int batch, nheads, nheads_k, group; /* group = nheads / nheads_k */
    int head_dim, head_dim_v;
    int seqlen_q;                   /* batched: the length; varlen: a bound */

    /* Where sequence b's keys are (flashc_kv_layout, problem.h). A KV
     * cache: the keys before the append end at cache_seqlens[b] (NULL =
     * capacity), start at cache_leftpad[b] (NULL = 0), live in cache batch
     * cache_batch_idx[b] (NULL = b), and new_rows more follow. Varlen
     * (cu_seqlens_q set): q rows from cu_seqlens_q, key counts from
     * cu_seqlens_k / seqused_k, keys from cache index 0 of the block table. */
    const int32_t *cache_seqlens, *cache_leftpad, *cache_batch_idx;
    int new_rows;
    int capacity;                   /* cache indices per sequence */
    int cache_batch;                /* contiguous cache: batches of k / v */
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k;
    int64_t total_q;
    const int32_t *block_table;     /* NULL = contiguous cache */
    int64_t block_table_stride;
    int block_size, num_blocks;

    /* Scores in the log2 domain, as the forward's (fwd_params.h). */
    float scale_log2;
    float softcap_inv_scale;        /* 0 = no softcap */
    float softcap_log2;
    const float *alibi_slopes;      /* NULL = off */
    int64_t alibi_batch_stride, alibi_head_stride;
    int window_left, window_right;  /* causal folded in; -1 = unbounded */

    /* Key splits: num_splits > 1 writes float32 partials (out rows
     * normalised by their own sums, LSE in the log2 domain) that the
     * combine kernel merges. Partial row index ((b * seqlen_q + r) *
     * nheads + head), split s at s * partial_rows. */
    int num_splits;
    /* Hopper: the 8-warp kernel over 128-key steps, one CTA per SM
     * (flashc_hopper_kvc_wide_applies); the splits were counted for it */
    int wide;
    /* Hopper: 0, or the key of the tall tile for 17-32 rows per KV head
     * (two row warps x four key warps, one CTA per SM:
     * flashc_hopper_kvc_tall_takes) */
    int tall;
    /* Hopper: the append kernel runs just before and lets this grid start
     * once the kernels before it have completed (kvcache_append.cu), so
     * cache rows it does not write may be read before griddepcontrol.wait */
    int early_cache_reads;
    /* Hopper: no append kernel ran; the CTAs write the k_new / v_new rows
     * into the cache themselves before they read them, and rotate their Q
     * rows from q_in (hopper_kvcache_kernel.cuh) */
    int fused_append;
    /* Hopper: the split plan chose head pairs (hopper_kvcache.h), which
     * the kernel takes where the shape allows */
    int head_pairs;
    /* Hopper: 0, or d where the call runs as head pairs (hopper_kvcache.h):
     * the caches seen as nheads_k KV heads of head_dim = 2d columns, two
     * adjacent heads' rows side by side, and group query heads per pair
     * (twice the caller's); tile row m of a pair uses columns [d, 2d) of
     * Q, K, V and O where m % group >= group / 2, else [0, d) */
    int pair_dim;
    float *o_partial;               /* [split][row][head_dim_v] */
    float *lse_partial;             /* [split][row] */
    int64_t partial_rows;           /* batch * seqlen_q * nheads */

    /* The append (kvcache_append.cu): k_new / v_new (b, new_rows, hk, .)
     * and rotary; q rotated into q_rotated (contiguous (b, sq, h, d)). */
    const void *k_new, *v_new;
    int64_t kn_batch_stride, kn_row_stride, kn_head_stride;
    int64_t vn_batch_stride, vn_row_stride, vn_head_stride;
    const void *q_in;               /* the caller's q (rotary source) */
    int64_t qi_batch_stride, qi_row_stride, qi_head_stride;
    void *q_rotated;
    const void *rotary_cos, *rotary_sin;
    int64_t rotary_row_stride, rotary_rows;
    int rotary_dim, rotary_interleaved, rotary_q_per_row;
} flashc_kvc_params;

#endif
