/* Where one sequence's rows live, read on the device: batched problems use
 * the fixed lengths, varlen ones cu_seqlens (and seqused_k). cu_seqlens
 * contents are not validated for device tensors (that would need a copy
 * back), so they are clamped here to the packed tensors' extents: bad
 * offsets give wrong rows, never out-of-bounds accesses. */
#ifndef FLASHC_CUDA_FWD_SEQ_CUH
#define FLASHC_CUDA_FWD_SEQ_CUH

#include "fwd_params.h"

typedef struct flashc_fwd_seq {
    int64_t q_start, k_start;  /* first packed row (0 when batched) */
    int sq, sk;                /* lengths, seqused_k applied */
} flashc_fwd_seq;

static __device__ __forceinline__ int64_t flashc_clamp64(int64_t x, int64_t lo, int64_t hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

static __device__ __forceinline__ flashc_fwd_seq flashc_fwd_sequence(const flashc_fwd_params &p, int b) {
    flashc_fwd_seq s;
    if (!p.cu_seqlens_q) {
        s.q_start = 0;
        s.k_start = 0;
        s.sq = p.seqlen_q;
        s.sk = p.seqlen_k;
        return s;
    }
    int64_t q0 = flashc_clamp64(p.cu_seqlens_q[b], 0, p.total_q);
    int64_t q1 = flashc_clamp64(p.cu_seqlens_q[b + 1], q0, p.total_q);
    int64_t k0 = flashc_clamp64(p.cu_seqlens_k[b], 0, p.total_k);
    int64_t k1 = flashc_clamp64(p.cu_seqlens_k[b + 1], k0, p.total_k);
    int64_t sk = k1 - k0;
    if (p.seqused_k) sk = flashc_clamp64(p.seqused_k[b], 0, sk);
    s.q_start = q0;
    s.k_start = k0;
    s.sq = (int)flashc_clamp64(q1 - q0, 0, p.seqlen_q);
    s.sk = (int)sk;
    return s;
}

#endif
