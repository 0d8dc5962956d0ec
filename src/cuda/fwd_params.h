/* What the forward kernels receive: a flashc_problem flattened into plain
 * values a kernel can take by value (pointers on the device, strides in
 * elements, scale factors pre-multiplied into the log2 domain). Filled once
 * on the host by fwd_launch.cu. */
#ifndef FLASHC_CUDA_FWD_PARAMS_H
#define FLASHC_CUDA_FWD_PARAMS_H

#include <stdint.h>

#include "tail_split.h"

/* log2(e) and ln(2): scores move to the log2 domain so the softmax uses
 * ex2. One definition for the host (double) and the kernels (float). */
#define FLASHC_LOG2E 1.4426950408889634
#define FLASHC_LN2 0.6931471805599453

typedef struct flashc_fwd_params {
    const void *q, *k, *v;
    void *out;
    float *lse;                     /* NULL: not requested */
    int64_t q_batch_stride, q_row_stride, q_head_stride;
    int64_t k_batch_stride, k_row_stride, k_head_stride;
    int64_t v_batch_stride, v_row_stride, v_head_stride;
    int64_t o_batch_stride, o_row_stride, o_head_stride;
    int64_t lse_batch_stride, lse_head_stride, lse_row_stride;

    int batch, nheads, nheads_k, head_dim, head_dim_v;
    int seqlen_q, seqlen_k;         /* batched: the lengths; varlen: bounds */
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_k; /* varlen, else NULL */
    int64_t total_q, total_k;       /* rows of the packed q / k tensors */

    /* Scores in the log2 domain: plain s2 = dot * scale_log2; with softcap
     * s2 = softcap_log2 * tanh(dot * softcap_inv_scale); ALiBi then adds
     * -slope * log2(e) * |row + sk - sq - col|. */
    float scale_log2;
    float softcap_inv_scale;        /* scale / softcap; 0 = no softcap */
    float softcap_log2;             /* softcap * log2(e) */
    const float *alibi_slopes;      /* device, NULL = off */
    int64_t alibi_batch_stride, alibi_head_stride;

    int window_left, window_right;  /* causal folded in; -1 = unbounded */

    uint32_t dropout_threshold;     /* 0 = no dropout */
    float dropout_rescale;          /* 1 / (1 - p) */
    uint64_t dropout_seed, dropout_offset;

    /* The portable kernel's shared last wave (tail_split.h), chosen at
     * launch (fwd_launch.cuh): tail.ctas 0 = none; else the main grid runs
     * the schedule's first tail.first tiles and the tail grid the rest,
     * with the segments' slots and each tail tile's counter in scratch
     * from the caller's allocator. */
    flashc_tail tail;
    float *tail_slots;
    int *tail_counts;
} flashc_fwd_params;

#endif
