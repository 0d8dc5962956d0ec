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

/* Byte offset of this lane's ldmatrix row address from the tile corner. */
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

template <bool TRANS>
static __device__ __forceinline__ void flashc_ldmatrix(uint32_t r[4], uint32_t addr) {
    if (TRANS)
        flashc_ldmatrix_x4_trans(r, addr);
    else
        flashc_ldmatrix_x4(r, addr);
}

/* One k-step's fragments of one GEMM: A (M_ATOMS 16-row atoms) and B
 * (N_PAIRS pairs of 8-column atoms), and their products into acc. */
template <typename T, bool A_TRANS, bool B_TRANS, int M_ATOMS, int N_PAIRS, int A_ROW_BYTES, int B_ROW_BYTES>
struct flashc_warp_frags {
    uint32_t a[M_ATOMS][4], b[N_PAIRS][4];

    __device__ __forceinline__ void load(uint32_t a_addr, uint32_t b_addr, int ks) {
#pragma unroll
        for (int i = 0; i < M_ATOMS; ++i)
            flashc_ldmatrix<A_TRANS>(a[i], a_addr + (A_TRANS ? i * 32 + ks * 16 * A_ROW_BYTES
                                                             : i * 16 * A_ROW_BYTES + ks * 32));
#pragma unroll
        for (int jp = 0; jp < N_PAIRS; ++jp)
            flashc_ldmatrix<B_TRANS>(b[jp], b_addr + (B_TRANS ? jp * 32 + ks * 16 * B_ROW_BYTES
                                                              : jp * 16 * B_ROW_BYTES + ks * 32));
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
 * under). a_addr / b_addr: each warp tile's corner plus the lane offset
 * above (shared-window byte addresses). */
template <typename T, bool A_TRANS, bool B_TRANS, int M_ATOMS, int N_PAIRS, int K_STEPS, int A_ROW_BYTES,
          int B_ROW_BYTES, int NG>
static __device__ __forceinline__ void flashc_warp_gemms(float (&acc)[NG][M_ATOMS][2 * N_PAIRS][4],
                                                         const uint32_t (&a_addr)[NG], const uint32_t (&b_addr)[NG]) {
    flashc_warp_frags<T, A_TRANS, B_TRANS, M_ATOMS, N_PAIRS, A_ROW_BYTES, B_ROW_BYTES> f[NG];
#pragma unroll
    for (int ks = 0; ks < K_STEPS; ++ks) {
#pragma unroll
        for (int g = 0; g < NG; ++g) f[g].load(a_addr[g], b_addr[g], ks);
#pragma unroll
        for (int g = 0; g < NG; ++g) f[g].mma(acc[g]);
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
