/* The Hopper backward's scores: bwd_scores.cuh's rules on the transposed
 * tiles S^T = K Q^T and dP^T = V dO^T, whose accumulator rows are keys and
 * columns queries (wgmma m64n64 layout, hopper_ptx.cuh: element e of
 * acc[0][j][e] is key row g + 8 (e / 2), query column 8 j + 2 (lane % 4) +
 * e % 2 of the warp's 16 x 64 slice). Per element, with the query as the
 * row of the forward's rules and the key as its column:
 *
 *   logit  = the forward's rule, same float formulas (softcap, ALiBi), log2 domain
 *   P      = 2^(logit - LSE2[query])     0 where hidden, and on queries with LSE = +inf
 *   dropout (the forward's Philox words):  Pd = P / (1 - p) where kept, else 0;
 *                                          dPd = dP / (1 - p) where kept, else 0
 *   dS     = P (dPd - D[query])  (softcap: times 1 - tanh^2)
 *
 * Pd overwrites S^T (the A operand of dV += Pd^T dO), dS overwrites dP^T
 * (A of dK += dS^T Q, and through shared memory of dQ = dS K). The softmax
 * scale is left out of dS, as in the portable kernel. The plain variant
 * (no softcap, no dropout; masks and ALiBi are in both) splits the work in
 * two so that P^T is computed while dP^T is still being multiplied. */
#ifndef FLASHC_CUDA_HOPPER_BWD_SCORES_CUH
#define FLASHC_CUDA_HOPPER_BWD_SCORES_CUH

#include <math.h>

#include "../core/semantics.h"
#include "fwd_params.h"
#include "ptx.cuh"

/* Where this thread's elements sit in the sequence. */
typedef struct flashc_hopper_bwd_pos {
    int key0;   /* key of accumulator rows g (e / 2 = 0); rows g + 8 are key0 + 8 */
    int query0; /* query of column 2 (lane % 4) of column atom 0 */
    int shift;  /* sk - sq */
    int sk;
} flashc_hopper_bwd_pos;

/* The logit of one element in the log2 domain (th: tanh of the softcap,
 * for its derivative), -inf where the mask hides it. */
template <bool SOFTCAP>
static __device__ __forceinline__ float flashc_hopper_bwd_logit(float x, const flashc_fwd_params &p, int query,
                                                                int key, int shift, bool hidden,
                                                                float alibi_slope_log2, float *th) {
    float logit;
    if (SOFTCAP) {
        *th = flashc_tanh(x * p.softcap_inv_scale);
        logit = p.softcap_log2 * *th;
    } else {
        logit = x * p.scale_log2;
    }
    if (alibi_slope_log2 != 0.0f) logit -= alibi_slope_log2 * (float)abs(query + shift - key);
    return hidden ? -INFINITY : logit;
}

/* Visible keys [*lo, *hi) of a query (the forward's window rule). */
static __device__ __forceinline__ void flashc_hopper_bwd_window(const flashc_fwd_params &p, int query, int shift,
                                                                int sk, int *lo, int *hi) {
    const int diag = query + shift;
    *lo = p.window_left >= 0 ? diag - p.window_left : 0;
    *hi = p.window_right >= 0 ? min(diag + p.window_right + 1, sk) : sk;
}

/* Plain variant (no softcap, no dropout), first half: S^T -> P^T, run
 * while dP^T is still on the tensor cores. lse2: the query block's LSE *
 * log2 e rows in shared memory, indexed by the query's column in the
 * block; col0 = 2 (lane % 4). RULES = false: the tile needs no mask and
 * has no ALiBi (the caller checked), so an element is one multiply-add
 * and one exponential; the compiler would otherwise predicate the mask
 * and ALiBi work of every element rather than skip it, and the scores
 * would issue several times the instructions. */
template <int Q_ATOMS, bool RULES>
static __device__ __forceinline__ void flashc_hopper_bwd_probs(float (&s)[1][Q_ATOMS][4], const float *lse2, int col0,
                                                               const flashc_fwd_params &p, flashc_hopper_bwd_pos pos,
                                                               bool masked, float alibi_slope_log2) {
#pragma unroll
    for (int j = 0; j < Q_ATOMS; ++j) {
        const float2 lse2_pair = *reinterpret_cast<const float2 *>(lse2 + col0 + 8 * j);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float row_lse2 = e ? lse2_pair.y : lse2_pair.x;
            if (!RULES) {
#pragma unroll
                for (int half = 0; half < 2; ++half)
                    s[0][j][2 * half + e] = flashc_exp2(s[0][j][2 * half + e] * p.scale_log2 - row_lse2);
                continue;
            }
            const int query = pos.query0 + 8 * j + e;
            int lo, hi;
            flashc_hopper_bwd_window(p, query, pos.shift, pos.sk, &lo, &hi);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int key = pos.key0 + 8 * half;
                const bool hidden = masked && (key < lo || key >= hi);
                const float logit = flashc_hopper_bwd_logit<false>(s[0][j][2 * half + e], p, query, key, pos.shift,
                                                                   hidden, alibi_slope_log2, nullptr);
                s[0][j][2 * half + e] = flashc_exp2(logit - row_lse2);
            }
        }
    }
}

/* Plain variant, second half: dS^T = P^T (dP^T - D[query]) into dp. */
template <int Q_ATOMS>
static __device__ __forceinline__ void flashc_hopper_bwd_dscores(const float (&prob)[1][Q_ATOMS][4],
                                                                 float (&dp)[1][Q_ATOMS][4], const float *dsum,
                                                                 int col0) {
#pragma unroll
    for (int j = 0; j < Q_ATOMS; ++j) {
        const float2 dsum_pair = *reinterpret_cast<const float2 *>(dsum + col0 + 8 * j);
#pragma unroll
        for (int at = 0; at < 4; ++at)
            dp[0][j][at] = prob[0][j][at] * (dp[0][j][at] - (at % 2 ? dsum_pair.y : dsum_pair.x));
    }
}

/* Dropout replay: bit 4 j + 2 half + e set where element (j, half, e) is
 * kept, from the forward's Philox words (one call per query and group of
 * four keys). Bits: an unsigned type of at least 4 Q_ATOMS bits.
 *
 * The four lanes whose keys form one group of four (lane / 4 = 4 g + t,
 * same lane % 4) hold the same queries, and each needs word t of the same
 * four calls per atom (two queries e, two key rows half). So each lane
 * makes one of them, combo t = 2 half + e, and the four trade words over
 * three shuffles: one call per four elements, where every lane made all
 * four calls for one word of each. */
static __device__ __forceinline__ uint32_t flashc_philox_word(flashc_philox_u32x4 w, int index) {
    return index == 0 ? w.x : index == 1 ? w.y : index == 2 ? w.z : w.w;
}

template <typename Bits, int Q_ATOMS>
static __device__ __forceinline__ Bits flashc_hopper_bwd_keep_bits(const flashc_fwd_params &p,
                                                                   flashc_hopper_bwd_pos pos, int batch, int head) {
    static_assert(Q_ATOMS * 4 <= (int)sizeof(Bits) * 8, "one bit per element of the thread's slice");
    const int t = (threadIdx.x >> 2) & 3; /* this lane's key within its group (key0 & 3) */
    const uint32_t head_index = (uint32_t)batch * (uint32_t)p.nheads + (uint32_t)head;
    const uint32_t key0 = (uint32_t)p.dropout_seed;
    const uint32_t key1 = (uint32_t)(p.dropout_seed >> 32) ^ (uint32_t)(p.dropout_offset >> 32);
    Bits bits = 0;
#pragma unroll
    for (int j = 0; j < Q_ATOMS; ++j) {
        const int query = pos.query0 + 8 * j + (t & 1), key = pos.key0 + 8 * (t >> 1);
        const flashc_philox_u32x4 counter = {(uint32_t)(key >> 2), (uint32_t)query, head_index,
                                             (uint32_t)p.dropout_offset};
        const flashc_philox_u32x4 w = flashc_philox4x32_10(counter, key0, key1);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            /* word t of combo t ^ m, made by lane ^ (m << 2) */
            const uint32_t word = m == 0 ? flashc_philox_word(w, t)
                                         : __shfl_xor_sync(0xffffffffu, flashc_philox_word(w, t ^ m), m << 2);
            const int combo = t ^ m, e = combo & 1, half = combo >> 1;
            if (word >= p.dropout_threshold) bits |= (Bits)1 << (4 * j + 2 * half + e);
        }
    }
    return bits;
}

/* General variant (softcap and / or dropout switched at run time), once
 * both S^T and dP^T are in: S^T -> Pd^T, dP^T -> dS^T. keep: from
 * flashc_hopper_bwd_keep_bits, or all ones without dropout. RULES: as in
 * flashc_hopper_bwd_probs (false: no mask, no ALiBi on this tile). */
template <typename Bits, int Q_ATOMS, bool RULES>
static __device__ __forceinline__ void flashc_hopper_bwd_scores_general(float (&s)[1][Q_ATOMS][4],
                                                                        float (&dp)[1][Q_ATOMS][4],
                                                                        const float *lse2, const float *dsum,
                                                                        int col0, const flashc_fwd_params &p,
                                                                        flashc_hopper_bwd_pos pos, bool masked,
                                                                        float alibi_slope_log2, Bits keep) {
    const bool softcap = p.softcap_inv_scale != 0.0f;
    const bool dropout = p.dropout_threshold != 0u;
#pragma unroll
    for (int j = 0; j < Q_ATOMS; ++j) {
        const float2 lse2_pair = *reinterpret_cast<const float2 *>(lse2 + col0 + 8 * j);
        const float2 dsum_pair = *reinterpret_cast<const float2 *>(dsum + col0 + 8 * j);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int query = pos.query0 + 8 * j + e;
            int lo = 0, hi = 0;
            if (RULES) flashc_hopper_bwd_window(p, query, pos.shift, pos.sk, &lo, &hi);
            const float alibi = RULES ? alibi_slope_log2 : 0.0f;
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const int key = pos.key0 + 8 * half;
                const int at = 2 * half + e;
                const bool hidden = RULES && masked && (key < lo || key >= hi);
                float th = 0.0f;
                const float logit =
                    softcap ? flashc_hopper_bwd_logit<true>(s[0][j][at], p, query, key, pos.shift, hidden, alibi,
                                                            &th)
                            : flashc_hopper_bwd_logit<false>(s[0][j][at], p, query, key, pos.shift, hidden, alibi,
                                                             nullptr);
                const float prob = flashc_exp2(logit - (e ? lse2_pair.y : lse2_pair.x));
                float pd = prob, dpe = dp[0][j][at];
                if (dropout) {
                    const bool kept = (keep >> (4 * j + at)) & 1u;
                    pd = kept ? prob * p.dropout_rescale : 0.0f;
                    dpe = kept ? dpe * p.dropout_rescale : 0.0f;
                }
                float ds = prob * (dpe - (e ? dsum_pair.y : dsum_pair.x));
                if (softcap) ds *= 1.0f - th * th;
                s[0][j][at] = pd;
                dp[0][j][at] = ds;
            }
        }
    }
}

#endif
