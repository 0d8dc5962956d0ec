/* Thin wrappers over the PTX instructions the kernels are built from:
 * cp.async (global -> shared copies that bypass registers), ldmatrix (shared
 * -> the register fragments of mma), mma.sync m16n8k16 with float32
 * accumulators, ex2.approx and float32 reductions. Each wrapper is one
 * instruction. sm_80+. */
#ifndef FLASHC_CUDA_PTX_CUH
#define FLASHC_CUDA_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

static __device__ __forceinline__ uint32_t flashc_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* Copy 16 bytes global -> shared (32-bit shared-window address); when
 * `valid` is false nothing is read and the 16 shared bytes are zero-filled
 * (out-of-range rows and columns). */
static __device__ __forceinline__ void flashc_cp_async16(uint32_t smem_addr, const void *gmem, bool valid) {
    int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}

/* The same, always reading the 16 bytes. */
static __device__ __forceinline__ void flashc_cp_async16_full(uint32_t smem_addr, const void *gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}

static __device__ __forceinline__ void flashc_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::);
}

/* Wait until at most `N` committed groups are still in flight. */
template <int N>
static __device__ __forceinline__ void flashc_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 b16 matrices; lane l supplies the row address of matrix l / 8.
 * Addresses are 32-bit shared-window offsets: a per-lane base plus a
 * compile-time offset, which ptxas folds into the instruction. */
static __device__ __forceinline__ void flashc_ldmatrix_x4(uint32_t r[4], uint32_t smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

/* The same, each matrix transposed (B operands stored k-major, e.g. V). */
static __device__ __forceinline__ void flashc_ldmatrix_x4_trans(uint32_t r[4], uint32_t smem_addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr));
}

/* D = A(16x16, row) * B(16x8, col) + D in float32, for half or bfloat16. */
template <typename T>
static __device__ __forceinline__ void flashc_mma16816(float d[4], const uint32_t a[4], uint32_t b0,
                                                       uint32_t b1);

template <>
__device__ __forceinline__ void flashc_mma16816<__half>(float d[4], const uint32_t a[4], uint32_t b0,
                                                        uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void flashc_mma16816<__nv_bfloat16>(float d[4], const uint32_t a[4],
                                                               uint32_t b0, uint32_t b1) {
    asm(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats -> one register of two 16-bit values (low = a), rounded. */
template <typename T>
static __device__ __forceinline__ uint32_t flashc_pack2(float a, float b);

template <>
__device__ __forceinline__ uint32_t flashc_pack2<__half>(float a, float b) {
    __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

template <>
__device__ __forceinline__ uint32_t flashc_pack2<__nv_bfloat16>(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t *>(&h);
}

/* The inverse of flashc_pack2: one register of two 16-bit values (low
 * first) -> two floats. */
template <typename T>
static __device__ __forceinline__ float2 flashc_unpack2(uint32_t packed);

template <>
__device__ __forceinline__ float2 flashc_unpack2<__half>(uint32_t packed) {
    return __half22float2(*reinterpret_cast<const __half2 *>(&packed));
}

template <>
__device__ __forceinline__ float2 flashc_unpack2<__nv_bfloat16>(uint32_t packed) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&packed));
}

/* Two float32 atomic adds into addr[0], addr[1] (8-byte aligned global
 * memory): one vector reduction on sm_90+, which carries 8 bytes per lane
 * (full 32-byte sectors from four lanes) at the cost of one; two scalar
 * ones before. */
static __device__ __forceinline__ void flashc_red_add2(float *addr, float a, float b) {
#if __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(addr, a);
    atomicAdd(addr + 1, b);
#endif
}

/* *addr, read with acquire semantics at GPU scope: what the writer of
 * the value (a release, or a fence before its store) wrote before it is
 * visible after this read. */
static __device__ __forceinline__ int flashc_ld_acquire_gpu(const int *addr) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(addr) : "memory");
    return v;
}

/* 2^x, approximate (2 ulp), -inf -> +0: the softmax exponential. */
static __device__ __forceinline__ float flashc_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* tanh(x) = 1 - 2 / (e^(2x) + 1): the softcap's. One EX2, one RCP and
 * three float operations, where tanhf spends the same two MUFU operations
 * and a dozen more on a polynomial for small |x| (its relative accuracy
 * there; a softcapped logit needs only absolute accuracy, about 1e-7
 * here). +-1 past |x| = 44 (e^(2x) is inf or 0), never NaN for finite x. */
static __device__ __forceinline__ float flashc_tanh(float x) {
    float r;
    /* e^(2x) = 2^(2 log2(e) x) */
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(flashc_exp2(x * 2.8853900817779268f) + 1.0f));
    return fmaf(-2.0f, r, 1.0f);
}

#endif
