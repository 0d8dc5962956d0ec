/* The sm_90a instructions the Hopper backward needs beyond hopper_ptx.cuh:
 * wgmma with B MN-major and A MN-major (dQ = dS K, with dS stored as dS^T
 * and K as stored, keys x head dim) or K-major (P^T, dS^T from shared
 * memory), the plain bulk copy that brings the
 * LSE / D rows in on the same mbarrier as the Q / dO tiles, and the bulk
 * and vector reductions that add dQ into its float32 accumulator, and the
 * counters that order the CTAs' additions in deterministic mode. */
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

/* global[0, bytes) += shared[0, bytes) as float32 (a multiple of 16 bytes,
 * both 16-byte aligned), an asynchronous bulk reduction in this thread's
 * bulk group; each element is added atomically. */
static __device__ __forceinline__ void flashc_bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void flashc_bulk_commit(void) {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

/* Wait until this thread's bulk groups have read their shared memory
 * (READ_ONLY) or have completed. */
template <bool READ_ONLY>
static __device__ __forceinline__ void flashc_bulk_wait_all(void) {
    if constexpr (READ_ONLY)
        asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

/* addr[0 .. 3] += a, b, c, d: one vector reduction (address 16-byte
 * aligned). */
static __device__ __forceinline__ void flashc_red_add_f32x4(float *addr, float a, float b, float c, float d) {
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
                 : "memory");
}

/* m64nNk16 with B MN-major (read from a [K rows x N columns] tile) and A
 * either MN-major too (TRANS_A = 1: a [K rows x M columns] tile; dQ = dS K
 * with dS stored as dS^T) or K-major (TRANS_A = 0: dV += P^T dO and
 * dK += dS^T Q with P^T, dS^T in shared memory, at head dim 256; widths
 * 64 and 128). scale_d
 * = 0 overwrites D (the first k-step), 1 accumulates. One wrapper per width
 * and type: the accumulator list is part of the instruction. */
template <typename T, int TRANS_A>
static __device__ __forceinline__ void flashc_wgmma_ss_bmn_n32(float *d, uint64_t desc_a, uint64_t desc_b,
                                                               int scale_d);
template <typename T, int TRANS_A>
static __device__ __forceinline__ void flashc_wgmma_ss_bmn_n64(float *d, uint64_t desc_a, uint64_t desc_b,
                                                               int scale_d);
template <typename T, int TRANS_A>
static __device__ __forceinline__ void flashc_wgmma_ss_bmn_n128(float *d, uint64_t desc_a, uint64_t desc_b,
                                                                int scale_d);

#define FLASHC_WGMMA_SS_BMN(N, TYPE, PTX_TYPE, ACC, ACC_OPERANDS, A, B, S, TA)                                  \
    template <>                                                                                                  \
    __device__ __forceinline__ void flashc_wgmma_ss_bmn_n##N<TYPE, TA>(float *d, uint64_t desc_a,                \
                                                                       uint64_t desc_b, int scale_d) {           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n"                                            \
                     "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " " ACC             \
                     ", %" #A ", %" #B ", p, 1, 1, " #TA ", 1;\n}\n"                                             \
                     : ACC_OPERANDS(d)                                                                           \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                  \
    }
#define FLASHC_WGMMA_SS_BMN_TYPES(N, ACC, ACC_OPERANDS, A, B, S, TA)                                      \
    FLASHC_WGMMA_SS_BMN(N, __nv_bfloat16, "bf16", ACC, ACC_OPERANDS, A, B, S, TA)                         \
    FLASHC_WGMMA_SS_BMN(N, __half, "f16", ACC, ACC_OPERANDS, A, B, S, TA)
FLASHC_WGMMA_SS_BMN_TYPES(32, FLASHC_WGMMA_ACC16, FLASHC_WGMMA_ACC16_OPERANDS, 16, 17, 18, 1)
FLASHC_WGMMA_SS_BMN_TYPES(64, FLASHC_WGMMA_ACC32, FLASHC_WGMMA_ACC32_OPERANDS, 32, 33, 34, 1)
FLASHC_WGMMA_SS_BMN_TYPES(64, FLASHC_WGMMA_ACC32, FLASHC_WGMMA_ACC32_OPERANDS, 32, 33, 34, 0)
FLASHC_WGMMA_SS_BMN_TYPES(128, FLASHC_WGMMA_ACC64, FLASHC_WGMMA_ACC64_OPERANDS, 64, 65, 66, 1)
FLASHC_WGMMA_SS_BMN_TYPES(128, FLASHC_WGMMA_ACC64, FLASHC_WGMMA_ACC64_OPERANDS, 64, 65, 66, 0)
#undef FLASHC_WGMMA_SS_BMN_TYPES
#undef FLASHC_WGMMA_SS_BMN

/* Dispatch on the width; TRANS_A as above. */
template <typename T, int N, int TRANS_A>
static __device__ __forceinline__ void flashc_wgmma_ss_bmn(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 32 || N == 64 || N == 128, "compiled widths with B MN-major: 32, 64, 128");
    static_assert(TRANS_A == 1 || N >= 64, "A K-major is compiled at widths 64 and 128");
    if constexpr (N == 32) flashc_wgmma_ss_bmn_n32<T, TRANS_A>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 64) flashc_wgmma_ss_bmn_n64<T, TRANS_A>(d, desc_a, desc_b, scale_d);
    if constexpr (N == 128) flashc_wgmma_ss_bmn_n128<T, TRANS_A>(d, desc_a, desc_b, scale_d);
}

/* Ordered additions across CTAs (deterministic dQ): wait until *counter
 * reads `value` (acquire: what the CTAs before wrote is visible after it).
 * A counter that never gets there would mean a CTA before this one never
 * ran (the hardware starts CTAs in blockIdx order, so it cannot happen on
 * a GPU of its own): after two seconds the wait gives up rather than hang,
 * and the sums stay right, only their order unfixed. */
static __device__ __forceinline__ void flashc_wait_counter(const int *counter, int value) {
    uint64_t start = 0;
    for (unsigned polls = 1;; ++polls) {
        int v;
        asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(counter) : "memory");
        if (v == value) break;
        if (polls % 1024 == 0) {
            uint64_t now;
            asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(now));
            if (start == 0)
                start = now;
            else if (now - start > 2000000000ull)
                break;
        }
    }
    /* the bulk reductions after it are in the async proxy */
    asm volatile("fence.proxy.async;\n" ::: "memory");
}

/* *counter += 1, released after every write of this thread and (through
 * a barrier before it) of the threads it synchronised with, including
 * completed bulk reductions. */
static __device__ __forceinline__ void flashc_release_increment(int *counter) {
    asm volatile("fence.proxy.async;\n"
                 "fence.acq_rel.gpu;\n"
                 "red.relaxed.gpu.global.add.s32 [%0], 1;\n" ::"l"(counter)
                 : "memory");
}

#endif
