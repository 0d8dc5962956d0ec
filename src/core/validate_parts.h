/* The checks validate.c (forward, backward) and validate_kvcache.c share.
 * Each returns a status naming the argument; none writes anything but the
 * problem it fills. */
#ifndef FLASHC_CORE_VALIDATE_PARTS_H
#define FLASHC_CORE_VALIDATE_PARTS_H

#include "problem.h"

#define CHECK(expr)                                                \
    do {                                                           \
        flashc_status check_status_ = (expr);                      \
        if (check_status_ != FLASHC_SUCCESS) return check_status_; \
    } while (0)

/* A tensor argument and the name it has in flashc.h. */
typedef struct named_tensor {
    const flashc_tensor *t;
    const char *name;
} named_tensor;

/* Views of a (b, s, h, d) / (total, h, d) tensor and of a (b, h, s) /
 * (h, total) one (NULL gives an empty view). */
flashc_seq_tensor flashc_seq_view(const flashc_tensor *t, int varlen);
flashc_row_tensor flashc_row_view(const flashc_tensor *t, int varlen);

/* All given tensors (NULL entries skipped) on one device, which this build
 * can use; sets p->is_cuda and p->device_index. */
flashc_status flashc_check_devices(const named_tensor *ts, int n, flashc_problem *p);

/* No output overlaps the memory of another listed tensor. */
flashc_status flashc_check_disjoint(const named_tensor *outputs, int n_out,
                                    const named_tensor *others, int n_other);

/* q, k, v present, of ranks q_rank / kv_rank, one float dtype, contiguous
 * head dims in range, q's heads a multiple of k's; fills p->dtype, nheads,
 * nheads_k, head_dim, head_dim_v. names: how the three are called. */
flashc_status flashc_check_qkv(const flashc_tensor *q, const flashc_tensor *k,
                               const flashc_tensor *v, const char *const names[3], int q_rank,
                               int kv_rank, flashc_problem *p);

/* The options (and ALiBi's shape against p->batch, p->nheads), resolved
 * into p; the window normalised against p->seqlen_q / p->seqlen_k. */
flashc_status flashc_apply_options(const flashc_attention_options *o, flashc_problem *p);

/* An int32 (batch, max_blocks) block table over the blocks of k (k_name:
 * its name), (num_blocks, block_size, ...); fills p->kv's paged fields and
 * capacity. */
flashc_status flashc_check_block_table(const flashc_tensor *bt, int64_t batch,
                                       const flashc_tensor *k, const char *k_name,
                                       flashc_problem *p);

/* The entries sequence b uses for cache indices [first, end) name existing
 * blocks (host tables only; a no-op on CUDA or when not paged). */
flashc_status flashc_check_block_table_contents(const flashc_problem *p, int64_t b, int64_t first,
                                                int64_t end);

/* lse-shaped: (b, h, sq) or (h, total_q), float32 (float64 for float64). */
flashc_status flashc_check_lse_like(const flashc_tensor *t, const char *name,
                                    const flashc_problem *p);

#endif
