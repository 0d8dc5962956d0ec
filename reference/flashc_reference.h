/*
 * flashc_reference — a naive attention reference in double precision.
 *
 * It implements the semantics of DESIGN.md a second time, independently of
 * the library's own semantics header, so that a mistake in one is caught by
 * the other. It is slow on purpose (one row at a time, no tiling, no online
 * softmax) and reads the very argument structs the library takes, so any
 * tensor the library accepts (any dtype, strided views, varlen, every
 * option) can be checked against it.
 *
 * Conventions:
 *   - Every tensor is read through its descriptor (shape/stride/dtype), so
 *     views and non-contiguous layouts need no copies.
 *   - Results are written to plain, dense double arrays owned by the caller.
 *   - Sequence-local indices: row i in [0, len_q), column j in [0, len_k).
 *   - A row that sees no column gives out 0 and LSE +inf.
 *   - Functions return 0 on success and -1 when the arguments do not
 *     describe a problem the reference can compute (missing tensor, index
 *     out of range); they do not validate like the library does.
 */
#ifndef FLASHC_REFERENCE_H
#define FLASHC_REFERENCE_H

#include <stdint.h>

#include "flashc.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Elements --------------------------------------------------------- */

/* Offset (in elements) of `index` (t->rank entries) in `t`. */
int64_t flashc_ref_offset(const flashc_tensor *t, const int64_t *index);

/* Element of any dtype (float32/16, bfloat16, float64, int32) as double. */
double flashc_ref_load(const flashc_tensor *t, const int64_t *index);

/* Store `value` rounded to t->dtype (round to nearest even; int32: nearest). */
void flashc_ref_store(flashc_tensor *t, const int64_t *index, double value);

/* `value` rounded to what `dtype` can hold (the identity for float64). */
double flashc_ref_round(flashc_dtype dtype, double value);

/* Raw conversions (round to nearest even, overflow to inf, NaN kept). */
uint16_t flashc_ref_half_from_double(double value);
double flashc_ref_half_to_double(uint16_t bits);
uint16_t flashc_ref_bfloat16_from_double(double value);
double flashc_ref_bfloat16_to_double(uint16_t bits);

/* ---- Sequences -------------------------------------------------------- */

typedef struct flashc_ref_seq {
    int64_t q_start, k_start; /* first packed row (0 in batched mode) */
    int64_t len_q, len_k;     /* len_k: seqused_k applied */
} flashc_ref_seq;

/* Number of sequences: q->shape[0] batched, cu_seqlens_q length - 1 varlen. */
int64_t flashc_ref_batch_count(const flashc_tensor *q, const flashc_varlen *varlen);

/* Where sequence b lives. Varlen when varlen->cu_seqlens_q is non-NULL. */
flashc_ref_seq flashc_ref_sequence(const flashc_tensor *q, const flashc_tensor *k,
                                   const flashc_varlen *varlen, int64_t b);

/* The index of element (sequence b, local row r, head h, dim x) of a
 * q/k/v/out-like tensor: (start + r, h, x) in varlen mode, (b, r, h, x)
 * batched; `start` is the sequence's first packed row (q_start/k_start). */
void flashc_ref_seq_element(int varlen, int64_t b, int64_t start, int64_t r, int64_t h,
                            int64_t x, int64_t index[4]);

/* The index of element (sequence b, head h, local row r) of an lse-like
 * tensor: (h, start + r) in varlen mode, (b, h, r) batched. */
void flashc_ref_row_element(int varlen, int64_t b, int64_t start, int64_t h, int64_t r,
                            int64_t index[3]);

/* ---- Masks, scores, dropout ------------------------------------------- */

/* Is column j visible from row i (lengths len_q, len_k) under `options`
 * (causal forces window_right to 0, bottom-right aligned)? */
int flashc_ref_visible(const flashc_attention_options *options, int64_t len_q, int64_t len_k,
                       int64_t i, int64_t j);

/* Philox4x32-10 (Salmon et al., SC'11; Random123). */
void flashc_ref_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

/* Dropout keep decision for (batch b, query head h of nheads, row i, col j):
 * counter (j >> 2, i, b * nheads + h, (uint32)offset), key ((uint32)seed,
 * (uint32)(seed >> 32) ^ (uint32)(offset >> 32)), word j & 3 of the output,
 * kept iff word >= floor(p * 2^32). p == 0 keeps everything. */
int flashc_ref_dropout_keep(uint64_t seed, uint64_t offset, double p, int64_t b, int64_t h,
                            int64_t nheads, int64_t i, int64_t j);

/* ---- Attention -------------------------------------------------------- */

/* Forward of one (sequence b, query head h), from args->q/k/v, varlen and
 * options (args->out/lse/s_dmask are not read).
 *   out:     len_q x dv, row-major (may be NULL)
 *   lse:     len_q (may be NULL); +inf for a row without visible columns
 *   s_dmask: len_q x len_k, row-major (may be NULL): exp(s - rowmax) where
 *            visible, negated where dropout drops, 0 where hidden. */
int flashc_ref_forward(const flashc_forward_args *args, int64_t b, int64_t h, double *out,
                       double *lse, double *s_dmask);

/* Backward of one (sequence b, key/value head hk), summed over the
 * group = nheads / nheads_k query heads hk*group .. hk*group+group-1.
 * Probabilities are recomputed exactly from q, k (args->lse is not read).
 * D_i = rowsum(dout_i * out_i) - dlse_i uses args->out when non-NULL (what
 * the library's backward receives), else the reference's own forward
 * output; args->dlse is optional.
 *   dq: group x len_q x d   (query head hk*group+g at dq + g*len_q*d)
 *   dk: len_k x d,  dv: len_k x dv   (any of the three may be NULL) */
int flashc_ref_backward(const flashc_backward_args *args, int64_t b, int64_t hk, double *dq,
                        double *dk, double *dv);

#ifdef __cplusplus
}
#endif

#endif /* FLASHC_REFERENCE_H */
