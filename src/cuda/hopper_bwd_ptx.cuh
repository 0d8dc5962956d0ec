/* The sm_90a instructions the Hopper backward needs beyond hopper_ptx.cuh:
 * wgmma with both operands MN-major (dQ = dS K, with dS stored as dS^T and
 * K as stored, keys x head dim), the plain bulk copy that brings the
 * LSE / D rows in on the same mbarrier as the Q / dO tiles, and the vector
 * reduction that adds dQ into its float32 accumulator. */
#ifndef FLASHC_CUDA_HOPPER_BWD_PTX_CUH
#define FLASHC_CUDA_HOPPER_BWD_PTX_CUH

#include "hopper_ptx.cuh"

/* Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from
 * global to shared memory, completing on `bar`. */
static __device__ __forceinline__ void flashc_bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar)
        : "memory");
}

/* *addr += a, addr[1] += b: one vector reduction (no return value, so no
 * round trip; address 8-byte aligned). */
static __device__ __forceinline__ void flashc_red_add_f32x2(float *addr, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

/* m64nNk16, A and B both MN-major (transpose flags 1, 1): A is read from a
 * [K rows x M columns] tile, B from a [K rows x N columns] tile; scale_d = 0
 * overwrites D (the first k-step), 1 accumulates. */
template <typename T>
static __device__ __forceinline__ void flashc_wgmma_ss_mn_n32(float *d, uint64_t desc_a, uint64_t desc_b,
                                                              int scale_d);
template <typename T>
static __device__ __forceinline__ void flashc_wgmma_ss_mn_n64(float *d, uint64_t desc_a, uint64_t desc_b,
                                                              int scale_d);

#define FLASHC_WGMMA_SS_MN(N, TYPE, PTX_TYPE, ACC, ACC_OPERANDS, A, B, S)                                        \
    template <>                                                                                                  \
    __device__ __forceinline__ void flashc_wgmma_ss_mn_n##N<TYPE>(float *d, uint64_t desc_a, uint64_t desc_b,    \
                                                                  int scale_d) {                                 \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n"                                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " " ACC             \
                     ", %" #A ", %" #B ", p, 1, 1, 1, 1;\n}\n"                                                   \
                     : ACC_OPERANDS(d)                                                                           \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                  \
    }
FLASHC_WGMMA_SS_MN(32, __nv_bfloat16, "bf16", FLASHC_WGMMA_ACC16, FLASHC_WGMMA_ACC16_OPERANDS, 16, 17, 18)
FLASHC_WGMMA_SS_MN(32, __half, "f16", FLASHC_WGMMA_ACC16, FLASHC_WGMMA_ACC16_OPERANDS, 16, 17, 18)
FLASHC_WGMMA_SS_MN(64, __nv_bfloat16, "bf16", FLASHC_WGMMA_ACC32, FLASHC_WGMMA_ACC32_OPERANDS, 32, 33, 34)
FLASHC_WGMMA_SS_MN(64, __half, "f16", FLASHC_WGMMA_ACC32, FLASHC_WGMMA_ACC32_OPERANDS, 32, 33, 34)
#undef FLASHC_WGMMA_SS_MN

template <typename T, int N>
static __device__ __forceinline__ void flashc_wgmma_ss_mn(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 32 || N == 64, "compiled MN-major widths: 32, 64");
    if (N == 32) flashc_wgmma_ss_mn_n32<T>(d, desc_a, desc_b, scale_d);
    if (N == 64) flashc_wgmma_ss_mn_n64<T>(d, desc_a, desc_b, scale_d);
}

#endif
