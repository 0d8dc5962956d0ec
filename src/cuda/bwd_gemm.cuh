/* One warp's share of a GEMM on tiles in shared memory: C (float32 mma
 * fragments, M_ATOMS x 16 rows by N_PAIRS x 16 columns) += A B, with A and
 * B read by ldmatrix, each stored either in its natural orientation or
 * transposed. The backward needs all four combinations:
 *
 *   S = Q K^T, dP = dO V^T   A = Q, dO  stored [m][k]   B = K, V  stored [n][k]
 *   dV += P^T dO, dK += dS^T Q
 *                            A = P^T, dS^T  stored [k][m] (P, dS are [query][key])
 *                                           B = dO, Q  stored [k][n]
 *   dQ = dS K                A = dS     stored [m][k]   B = K     stored [k][n]
 *
 * Lane addresses (the forward's, proven on the device): ldmatrix.x4 takes
 * the row address of matrix l / 8 from lane l.
 *   A [m][k], plain:  row lane % 16, column 8 * (lane / 16)             (the forward's Q)
 *   A [k][m], .trans: row (lane % 8) + 8 * (lane / 16), column 8 * ((lane / 8) % 2)
 *   B [n][k], plain:  row (lane % 8) + 8 * (lane / 16), column 8 * ((lane / 8) % 2)   (the forward's K)
 *   B [k][n], .trans: row (lane % 8) + 8 * ((lane / 8) % 2), column 8 * (lane / 16)   (the forward's V)
 * For A stored [k][m] the four matrices must come back as (m 0-7, k 0-7),
 * (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15): the same addresses
 * as a plain B stored [n][k], with m in the role of n. */
#ifndef FLASHC_CUDA_BWD_GEMM_CUH
#define FLASHC_CUDA_BWD_GEMM_CUH

#include <stdint.h>

#include "ptx.cuh"
#include "smem_tile.cuh"

/* This lane's ldmatrix row and 16-byte chunk within a 16 x 16 atom. */
struct flashc_lane_rc {
    int row, chunk;
};

template <bool TRANS>
static __device__ __forceinline__ flashc_lane_rc flashc_lane_a(int lane) {
    return TRANS ? flashc_lane_rc{(lane % 8) + 8 * (lane / 16), (lane / 8) % 2}
                 : flashc_lane_rc{lane % 16, lane / 16};
}

template <bool TRANS>
static __device__ __forceinline__ flashc_lane_rc flashc_lane_b(int lane) {
    return TRANS ? flashc_lane_rc{(lane % 8) + 8 * ((lane / 8) % 2), lane / 16}
                 : flashc_lane_rc{(lane % 8) + 8 * (lane / 16), (lane / 8) % 2};
}

/* The same lane positions as one byte offset, for rows of row_bytes with
 * the chunks in place (padded tiles). */
template <bool TRANS>
static __device__ __forceinline__ uint32_t flashc_lane_offset_a(int lane, int row_bytes) {
    return TRANS ? (uint32_t)(((lane % 8) + 8 * (lane / 16)) * row_bytes + ((lane / 8) % 2) * 16)
                 : (uint32_t)((lane % 16) * row_bytes + (lane / 16) * 16);
}

template <bool TRANS>
static __device__ __forceinline__ uint32_t flashc_lane_offset_b(int lane, int row_bytes) {
    return TRANS ? (uint32_t)(((lane % 8) + 8 * ((lane / 8) % 2)) * row_bytes + (lane / 16) * 16)
                 : (uint32_t)(((lane % 8) + 8 * (lane / 16)) * row_bytes + ((lane / 8) % 2) * 16);
}

template <class L, bool B_OPERAND, bool TRANS>
static __device__ __forceinline__ uint32_t flashc_lane_addr_swizzled(uint32_t tile, int lane, int row0, int col0) {
    const flashc_lane_rc rc = B_OPERAND ? flashc_lane_b<TRANS>(lane) : flashc_lane_a<TRANS>(lane);
    return tile + (uint32_t)(row0 * L::ROW_BYTES) + L::offset(rc.row, (int)((unsigned)col0 / 8) + rc.chunk);
}

/* This lane's ldmatrix address for operand A or B (B_OPERAND), read plain
 * or transposed, in a tile of layout L (smem_tile.cuh) at shared address
 * `tile`, for the warp tile that starts at row row0, column col0 (row0 a
 * multiple of 8, col0 of 16; in a swizzled tile col0's chunk must share no
 * bit with the GEMM's chunk steps). A macro because for padded tiles it
 * must expand to the one sum (tile + corner) + lane offset written out at
 * the call: the same address formed in a function, or from the row /
 * chunk form, made ptxas allocate the d64 backward's registers worse (8
 * more bytes spilled, 5 % slower on the H200). */
#define FLASHC_LANE_ADDR(L, B_OPERAND, TRANS, tile, lane, row0, col0)                                   \
    (flashc_smem_is_swizzled<L>::value                                                                 \
         ? flashc_lane_addr_swizzled<L, B_OPERAND, TRANS>(tile, lane, row0, col0)                      \
         : (tile) + (row0) * L::ROW_BYTES + (col0) * 2 +                                               \
               ((B_OPERAND) ? flashc_lane_offset_b<TRANS>(lane, L::ROW_BYTES)                          \
                            : flashc_lane_offset_a<TRANS>(lane, L::ROW_BYTES)))

template <bool TRANS>
static __device__ __forceinline__ void flashc_ldmatrix(uint32_t r[4], uint32_t addr) {
    if (TRANS)
        flashc_ldmatrix_x4_trans(r, addr);
    else
        flashc_ldmatrix_x4(r, addr);
}

/* One k-step's fragments of one GEMM: A (M_ATOMS 16-row atoms) and B
 * (N_PAIRS pairs of 8-column atoms) from tiles of layouts LA and LB, and
 * their products into acc. Steps along a row (the k of a plain operand,
 * the atoms of a transposed one) are chunks of the layout, steps across
 * rows 16 rows (L::at). */
template <typename T, bool A_TRANS, bool B_TRANS, int M_ATOMS, int N_PAIRS, class LA, class LB>
struct flashc_warp_frags {
    uint32_t a[M_ATOMS][4], b[N_PAIRS][4];

    __device__ __forceinline__ void load(uint32_t a_addr, uint32_t b_addr, int ks) {
#pragma unroll
        for (int i = 0; i < M_ATOMS; ++i)
            flashc_ldmatrix<A_TRANS>(a[i], A_TRANS ? LA::at(a_addr, 2 * i, 16 * ks)
                                                   : LA::at(a_addr, 2 * ks, 16 * i));
#pragma unroll
        for (int jp = 0; jp < N_PAIRS; ++jp)
            flashc_ldmatrix<B_TRANS>(b[jp], B_TRANS ? LB::at(b_addr, 2 * jp, 16 * ks)
                                                    : LB::at(b_addr, 2 * ks, 16 * jp));
    }
    __device__ __forceinline__ void mma(float (&acc)[M_ATOMS][2 * N_PAIRS][4]) const {
#pragma unroll
        for (int jp = 0; jp < N_PAIRS; ++jp)
#pragma unroll
            for (int i = 0; i < M_ATOMS; ++i) {
                flashc_mma16816<T>(acc[i][2 * jp], a[i], b[jp][0], b[jp][1]);
                flashc_mma16816<T>(acc[i][2 * jp + 1], a[i], b[jp][2], b[jp][3]);
            }
    }
};

/* acc[g] += A_g B_g for NG GEMMs of one shape over K_STEPS k-steps of 16,
 * their k-loops fused: each GEMM's fragment loads overlap the others'
 * products, and NG times the accumulators are independent (one GEMM of
 * 8 accumulators per warp left ptxas too little to hide each ldmatrix
 * under). a_addr / b_addr: each tile's address plus the lane offset
 * above (shared-window byte addresses). */
template <typename T, bool A_TRANS, bool B_TRANS, int M_ATOMS, int N_PAIRS, int K_STEPS, class LA, class LB,
          int NG>
static __device__ __forceinline__ void flashc_warp_gemms(float (&acc)[NG][M_ATOMS][2 * N_PAIRS][4],
                                                         const uint32_t (&a_addr)[NG], const uint32_t (&b_addr)[NG]) {
    flashc_warp_frags<T, A_TRANS, B_TRANS, M_ATOMS, N_PAIRS, LA, LB> f[NG];
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
#pragma unroll
        for (int g = 0; g < NG; ++g) f[g].load(a_addr[g], b_addr[g], ks);
#pragma unroll
        for (int g = 0; g < NG; ++g) f[g].mma(acc[g]);
    }
}

/* acc0[g] += A0_g B0_g for NG GEMMs of one shape (fragments F0) and
 * acc1 += A1 B1 of another (F1), all over K_STEPS k-steps in one k-loop.
 * A dQ chunk alone has few accumulators per warp (few independent
 * products to cover an ldmatrix with); among the dK / dV products it has
 * theirs. */
template <int K_STEPS, class F0, class F1, int NG, class ACC0, class ACC1>
static __device__ __forceinline__ void flashc_warp_gemms_interleaved(ACC0 *acc0, const uint32_t *a0, const uint32_t *b0,
                                                                     ACC1 &acc1, uint32_t a1, uint32_t b1) {
    F0 f0[NG];
    F1 f1;
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
#pragma unroll
        for (int g = 0; g < NG; ++g) f0[g].load(a0[g], b0[g], ks);
        f1.load(a1, b1, ks);
#pragma unroll
        for (int g = 0; g < NG; ++g) f0[g].mma(acc0[g]);
        f1.mma(acc1);
    }
}

template <int M_ATOMS, int N_ATOMS>
static __device__ __forceinline__ void flashc_zero_acc(float (&acc)[M_ATOMS][N_ATOMS][4]) {
#pragma unroll
    for (int i = 0; i < M_ATOMS; ++i)
#pragma unroll
        for (int j = 0; j < N_ATOMS; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

#endif
