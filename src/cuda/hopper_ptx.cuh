/* Thin wrappers over the sm_90a instructions of the Hopper forward: wgmma
 * (warpgroup matrix multiply, operands read from shared memory through
 * matrix descriptors), the bulk tensor copy (TMA) and the mbarriers it
 * completes on. Each wrapper is one instruction (or one wait loop). Only
 * the hopper_*.cu translation units include this; they are compiled for
 * sm_90a alone.
 *
 * Shared-memory tiles use the 128-byte swizzle that TMA writes and wgmma
 * reads: a tile of R rows x 64 columns (16-bit) is R rows of 128 bytes in
 * which the 16-byte chunk c of row r sits at chunk c ^ (r % 8); wider tiles
 * are several such column blocks one after the other. Every tile starts on
 * a 1024-byte boundary (8 rows), so descriptors need no base offset. */
#ifndef FLASHC_CUDA_HOPPER_PTX_CUH
#define FLASHC_CUDA_HOPPER_PTX_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* Matrix descriptor (PTX ISA, "matrix descriptor") of a 128-byte-swizzled
 * operand at shared address `addr`: bits 0-13 address / 16; 16-29 the
 * leading byte offset / 16 (`lbo`: for an MN-major operand the distance
 * between its 64-column blocks; unused for K-major ones); 32-45 the stride
 * byte offset / 16 (1024: the next 8 rows); 62-63 the swizzle (1 = 128 B). */
static __device__ __forceinline__ uint64_t flashc_wgmma_desc(uint32_t addr, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* The descriptor of address addr + bytes from addr's: the start address
 * field holds address / 16 in 14 bits, and shared addresses stay below
 * 256 KiB, so adding bytes / 16 never carries out of it. One add instead
 * of rebuilding the descriptor per k-step. */
static __device__ __forceinline__ uint64_t flashc_wgmma_desc_add(uint64_t desc, uint32_t bytes) {
    return desc + (bytes >> 4);
}

/* Before the first wgmma of a batch whose accumulator or A registers were
 * written by ordinary instructions. */
static __device__ __forceinline__ void flashc_wgmma_fence(void) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void flashc_wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Wait until at most N committed batches are still running. */
template <int N>
static __device__ __forceinline__ void flashc_wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Tells the compiler these registers change here, so no read of a wgmma
 * result is hoisted above the wait that makes it valid. */
template <int N>
static __device__ __forceinline__ void flashc_fence_registers(float *r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

/* Shared memory written by ordinary stores, read next by wgmma or TMA. */
static __device__ __forceinline__ void flashc_fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* This thread's global stores ordered before later TMA loads (the async
 * proxy) of the same memory. */
static __device__ __forceinline__ void flashc_fence_proxy_async_global(void) {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads. */
static __device__ __forceinline__ void flashc_named_barrier(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* Counts the calling warps towards named barrier `id` of `threads` threads
 * without waiting for it. */
static __device__ __forceinline__ void flashc_named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* Lower / raise this warpgroup's register allocation (all its warps run
 * it; the kernel needs a register cap at entry: __launch_bounds__(n, 1)). */
template <int REGISTERS>
static __device__ __forceinline__ void flashc_setmaxnreg_dec(void) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
}

template <int REGISTERS>
static __device__ __forceinline__ void flashc_setmaxnreg_inc(void) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
}

/* ---- mbarriers ----------------------------------------------------------- */

static __device__ __forceinline__ void flashc_mbarrier_init(uint32_t bar, uint32_t arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}

/* Makes the initialised barriers visible to the copy engine. */
static __device__ __forceinline__ void flashc_mbarrier_init_fence(void) {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* One arrival that also announces `bytes` of copies completing on `bar`. */
static __device__ __forceinline__ void flashc_mbarrier_expect_bytes(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void flashc_mbarrier_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Wait until the phase with parity `parity` has completed (a fresh
 * barrier counts as having completed the phase of parity 1). */
static __device__ __forceinline__ void flashc_mbarrier_wait(uint32_t bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}

/* ---- TMA ------------------------------------------------------------------ */

/* Copy the box at coordinates (c0, c1, c2, c3) of a 4-d tensor map into
 * shared memory at `dst`, completing `bytes` on `bar`; out-of-bounds
 * elements arrive as zeros. */
static __device__ __forceinline__ void flashc_tma_load_4d(uint32_t dst, const void *map, int c0, int c1, int c2,
                                                          int c3, uint32_t bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, "
        "%5}], [%6];\n" ::"r"(dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}

/* The same with an L2 cache policy (createpolicy). */
static __device__ __forceinline__ void flashc_tma_load_4d_hint(uint32_t dst, const void *map, int c0, int c1, int c2,
                                                               int c3, uint32_t bar, uint64_t policy) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%2, %3, %4, "
        "%5}], [%6], %7;\n" ::"r"(dst),
        "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar), "l"(policy)
        : "memory");
}

/* ---- wgmma ----------------------------------------------------------------
 * m64nNk16 with float32 accumulators, N/2 registers per thread: register i
 * of warp w (of the warpgroup) holds row 16w + lane/4 + 8*((i/2)%2), column
 * 8*(i/4) + 2*(lane%4) + i%2: the mma.sync m16n8 C layout repeated N/8
 * times, so the fragment code of the portable kernel applies unchanged.
 *   ss: A and B both from shared memory, K-major (S = Q K^T); scale_d = 0
 *       overwrites D (the first k-step), 1 accumulates.
 *   rs: A from registers (P, in the mma.sync A layout), B from shared memory
 *       MN-major (V as stored: keys x head dim); always accumulates. */

/* Accumulator operand lists: FLASHC_WGMMA_ACC<R> is the braced list of
 * registers %0 .. %(R-1), FLASHC_WGMMA_ACC<R>_OPERANDS(d) binds d[0 .. R-1]
 * to them; built from runs of eight. */
#define FLASHC_WGMMA_REGS8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define FLASHC_WGMMA_OPERANDS8_0(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FLASHC_WGMMA_REGS8_1 "%8, %9, %10, %11, %12, %13, %14, %15"
#define FLASHC_WGMMA_OPERANDS8_1(d) "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FLASHC_WGMMA_REGS8_2 "%16, %17, %18, %19, %20, %21, %22, %23"
#define FLASHC_WGMMA_OPERANDS8_2(d) "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23])
#define FLASHC_WGMMA_REGS8_3 "%24, %25, %26, %27, %28, %29, %30, %31"
#define FLASHC_WGMMA_OPERANDS8_3(d) "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FLASHC_WGMMA_REGS8_4 "%32, %33, %34, %35, %36, %37, %38, %39"
#define FLASHC_WGMMA_OPERANDS8_4(d) "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define FLASHC_WGMMA_REGS8_5 "%40, %41, %42, %43, %44, %45, %46, %47"
#define FLASHC_WGMMA_OPERANDS8_5(d) "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
#define FLASHC_WGMMA_REGS8_6 "%48, %49, %50, %51, %52, %53, %54, %55"
#define FLASHC_WGMMA_OPERANDS8_6(d) "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55])
#define FLASHC_WGMMA_REGS8_7 "%56, %57, %58, %59, %60, %61, %62, %63"
#define FLASHC_WGMMA_OPERANDS8_7(d) "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define FLASHC_WGMMA_REGS8_8 "%64, %65, %66, %67, %68, %69, %70, %71"
#define FLASHC_WGMMA_OPERANDS8_8(d) "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71])
#define FLASHC_WGMMA_REGS8_9 "%72, %73, %74, %75, %76, %77, %78, %79"
#define FLASHC_WGMMA_OPERANDS8_9(d) "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79])
#define FLASHC_WGMMA_REGS8_10 "%80, %81, %82, %83, %84, %85, %86, %87"
#define FLASHC_WGMMA_OPERANDS8_10(d) "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define FLASHC_WGMMA_REGS8_11 "%88, %89, %90, %91, %92, %93, %94, %95"
#define FLASHC_WGMMA_OPERANDS8_11(d) "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define FLASHC_WGMMA_REGS8_12 "%96, %97, %98, %99, %100, %101, %102, %103"
#define FLASHC_WGMMA_OPERANDS8_12(d) "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103])
#define FLASHC_WGMMA_REGS8_13 "%104, %105, %106, %107, %108, %109, %110, %111"
#define FLASHC_WGMMA_OPERANDS8_13(d) "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define FLASHC_WGMMA_REGS8_14 "%112, %113, %114, %115, %116, %117, %118, %119"
#define FLASHC_WGMMA_OPERANDS8_14(d) "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119])
#define FLASHC_WGMMA_REGS8_15 "%120, %121, %122, %123, %124, %125, %126, %127"
#define FLASHC_WGMMA_OPERANDS8_15(d) "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
#define FLASHC_WGMMA_REGS_8 FLASHC_WGMMA_REGS8_0
#define FLASHC_WGMMA_ACC8_OPERANDS(d) FLASHC_WGMMA_OPERANDS8_0(d)
#define FLASHC_WGMMA_ACC8 "{" FLASHC_WGMMA_REGS_8 "}"
#define FLASHC_WGMMA_REGS_16 FLASHC_WGMMA_REGS_8 ", " FLASHC_WGMMA_REGS8_1
#define FLASHC_WGMMA_ACC16_OPERANDS(d) FLASHC_WGMMA_ACC8_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_1(d)
#define FLASHC_WGMMA_ACC16 "{" FLASHC_WGMMA_REGS_16 "}"
#define FLASHC_WGMMA_REGS_24 FLASHC_WGMMA_REGS_16 ", " FLASHC_WGMMA_REGS8_2
#define FLASHC_WGMMA_ACC24_OPERANDS(d) FLASHC_WGMMA_ACC16_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_2(d)
#define FLASHC_WGMMA_ACC24 "{" FLASHC_WGMMA_REGS_24 "}"
#define FLASHC_WGMMA_REGS_32 FLASHC_WGMMA_REGS_24 ", " FLASHC_WGMMA_REGS8_3
#define FLASHC_WGMMA_ACC32_OPERANDS(d) FLASHC_WGMMA_ACC24_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_3(d)
#define FLASHC_WGMMA_ACC32 "{" FLASHC_WGMMA_REGS_32 "}"
#define FLASHC_WGMMA_REGS_40 FLASHC_WGMMA_REGS_32 ", " FLASHC_WGMMA_REGS8_4
#define FLASHC_WGMMA_ACC40_OPERANDS(d) FLASHC_WGMMA_ACC32_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_4(d)
#define FLASHC_WGMMA_ACC40 "{" FLASHC_WGMMA_REGS_40 "}"
#define FLASHC_WGMMA_REGS_48 FLASHC_WGMMA_REGS_40 ", " FLASHC_WGMMA_REGS8_5
#define FLASHC_WGMMA_ACC48_OPERANDS(d) FLASHC_WGMMA_ACC40_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_5(d)
#define FLASHC_WGMMA_ACC48 "{" FLASHC_WGMMA_REGS_48 "}"
#define FLASHC_WGMMA_REGS_56 FLASHC_WGMMA_REGS_48 ", " FLASHC_WGMMA_REGS8_6
#define FLASHC_WGMMA_ACC56_OPERANDS(d) FLASHC_WGMMA_ACC48_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_6(d)
#define FLASHC_WGMMA_ACC56 "{" FLASHC_WGMMA_REGS_56 "}"
#define FLASHC_WGMMA_REGS_64 FLASHC_WGMMA_REGS_56 ", " FLASHC_WGMMA_REGS8_7
#define FLASHC_WGMMA_ACC64_OPERANDS(d) FLASHC_WGMMA_ACC56_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_7(d)
#define FLASHC_WGMMA_ACC64 "{" FLASHC_WGMMA_REGS_64 "}"
#define FLASHC_WGMMA_REGS_72 FLASHC_WGMMA_REGS_64 ", " FLASHC_WGMMA_REGS8_8
#define FLASHC_WGMMA_ACC72_OPERANDS(d) FLASHC_WGMMA_ACC64_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_8(d)
#define FLASHC_WGMMA_ACC72 "{" FLASHC_WGMMA_REGS_72 "}"
#define FLASHC_WGMMA_REGS_80 FLASHC_WGMMA_REGS_72 ", " FLASHC_WGMMA_REGS8_9
#define FLASHC_WGMMA_ACC80_OPERANDS(d) FLASHC_WGMMA_ACC72_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_9(d)
#define FLASHC_WGMMA_ACC80 "{" FLASHC_WGMMA_REGS_80 "}"
#define FLASHC_WGMMA_REGS_88 FLASHC_WGMMA_REGS_80 ", " FLASHC_WGMMA_REGS8_10
#define FLASHC_WGMMA_ACC88_OPERANDS(d) FLASHC_WGMMA_ACC80_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_10(d)
#define FLASHC_WGMMA_ACC88 "{" FLASHC_WGMMA_REGS_88 "}"
#define FLASHC_WGMMA_REGS_96 FLASHC_WGMMA_REGS_88 ", " FLASHC_WGMMA_REGS8_11
#define FLASHC_WGMMA_ACC96_OPERANDS(d) FLASHC_WGMMA_ACC88_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_11(d)
#define FLASHC_WGMMA_ACC96 "{" FLASHC_WGMMA_REGS_96 "}"
#define FLASHC_WGMMA_REGS_104 FLASHC_WGMMA_REGS_96 ", " FLASHC_WGMMA_REGS8_12
#define FLASHC_WGMMA_ACC104_OPERANDS(d) FLASHC_WGMMA_ACC96_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_12(d)
#define FLASHC_WGMMA_ACC104 "{" FLASHC_WGMMA_REGS_104 "}"
#define FLASHC_WGMMA_REGS_112 FLASHC_WGMMA_REGS_104 ", " FLASHC_WGMMA_REGS8_13
#define FLASHC_WGMMA_ACC112_OPERANDS(d) FLASHC_WGMMA_ACC104_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_13(d)
#define FLASHC_WGMMA_ACC112 "{" FLASHC_WGMMA_REGS_112 "}"
#define FLASHC_WGMMA_REGS_120 FLASHC_WGMMA_REGS_112 ", " FLASHC_WGMMA_REGS8_14
#define FLASHC_WGMMA_ACC120_OPERANDS(d) FLASHC_WGMMA_ACC112_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_14(d)
#define FLASHC_WGMMA_ACC120 "{" FLASHC_WGMMA_REGS_120 "}"
#define FLASHC_WGMMA_REGS_128 FLASHC_WGMMA_REGS_120 ", " FLASHC_WGMMA_REGS8_15
#define FLASHC_WGMMA_ACC128_OPERANDS(d) FLASHC_WGMMA_ACC120_OPERANDS(d), FLASHC_WGMMA_OPERANDS8_15(d)
#define FLASHC_WGMMA_ACC128 "{" FLASHC_WGMMA_REGS_128 "}"

/* One wgmma m64nNk16 of each operand form, per element type and width:
 * ss(d, desc_a, desc_b, scale_d) and rs(d, a, desc_b) as described above.
 * The accumulator list is part of the instruction, so each width is its
 * own specialisation; A, B, S and the four A registers are the operand
 * numbers after the R = N / 2 accumulators. */
template <typename T, int N>
struct flashc_wgmma_op;

#define FLASHC_WGMMA_OP(TYPE, PTX_TYPE, N, R, A, B, S, A0, A1, A2, A3, DB)                                       \
    template <>                                                                                                 \
    struct flashc_wgmma_op<TYPE, N> {                                                                           \
        static __device__ __forceinline__ void ss(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #S ", 0;\n"                                       \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " "            \
                         FLASHC_WGMMA_ACC##R ", %" #A ", %" #B ", p, 1, 1, 0, 0;\n}\n"                          \
                         : FLASHC_WGMMA_ACC##R##_OPERANDS(d)                                                    \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                             \
        }                                                                                                       \
        static __device__ __forceinline__ void rs(float *d, const uint32_t *a, uint64_t desc_b) {              \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " "            \
                         FLASHC_WGMMA_ACC##R ", {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #DB ", 1, 1, 1, 1;\n" \
                         : FLASHC_WGMMA_ACC##R##_OPERANDS(d)                                                    \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b));                            \
        }                                                                                                       \
    };
#define FLASHC_WGMMA_WIDTH(N, R, A, B, S, A0, A1, A2, A3, DB)                        \
    FLASHC_WGMMA_OP(__nv_bfloat16, "bf16", N, R, A, B, S, A0, A1, A2, A3, DB)       \
    FLASHC_WGMMA_OP(__half, "f16", N, R, A, B, S, A0, A1, A2, A3, DB)
/* The widths tiles use: key blocks (S) and value head dims (O). */
FLASHC_WGMMA_WIDTH(32, 16, 16, 17, 18, 16, 17, 18, 19, 20)
FLASHC_WGMMA_WIDTH(48, 24, 24, 25, 26, 24, 25, 26, 27, 28)
FLASHC_WGMMA_WIDTH(64, 32, 32, 33, 34, 32, 33, 34, 35, 36)
FLASHC_WGMMA_WIDTH(80, 40, 40, 41, 42, 40, 41, 42, 43, 44)
FLASHC_WGMMA_WIDTH(96, 48, 48, 49, 50, 48, 49, 50, 51, 52)
FLASHC_WGMMA_WIDTH(112, 56, 56, 57, 58, 56, 57, 58, 59, 60)
FLASHC_WGMMA_WIDTH(128, 64, 64, 65, 66, 64, 65, 66, 67, 68)
FLASHC_WGMMA_WIDTH(144, 72, 72, 73, 74, 72, 73, 74, 75, 76)
FLASHC_WGMMA_WIDTH(160, 80, 80, 81, 82, 80, 81, 82, 83, 84)
FLASHC_WGMMA_WIDTH(176, 88, 88, 89, 90, 88, 89, 90, 91, 92)
FLASHC_WGMMA_WIDTH(192, 96, 96, 97, 98, 96, 97, 98, 99, 100)
FLASHC_WGMMA_WIDTH(208, 104, 104, 105, 106, 104, 105, 106, 107, 108)
FLASHC_WGMMA_WIDTH(224, 112, 112, 113, 114, 112, 113, 114, 115, 116)
FLASHC_WGMMA_WIDTH(256, 128, 128, 129, 130, 128, 129, 130, 131, 132)
#undef FLASHC_WGMMA_WIDTH
#undef FLASHC_WGMMA_OP

/* S tiles are BLOCK_N wide, O tiles D_V wide. */
template <typename T, int N>
static __device__ __forceinline__ void flashc_wgmma_ss(float *d, uint64_t desc_a, uint64_t desc_b, int scale_d) {
    flashc_wgmma_op<T, N>::ss(d, desc_a, desc_b, scale_d);
}

template <typename T, int N>
static __device__ __forceinline__ void flashc_wgmma_rs(float *d, const uint32_t *a, uint64_t desc_b) {
    flashc_wgmma_op<T, N>::rs(d, a, desc_b);
}

/* acc = A B^T as one committed batch of K_COLS / 16 k-steps, both operands
 * K-major from shared memory as TMA stores them: rows of 128 bytes in
 * 64-column blocks, A's blocks A_ROWS * 128 bytes apart, B's B_ROWS * 128;
 * k-step ks reads 32 bytes at (ks % 4) * 32 of block ks / 4. The first
 * k-step overwrites acc. (S = Q K^T; the backward's S^T = K Q^T.) */
template <typename T, int N, int K_COLS, int A_ROWS, int B_ROWS>
static __device__ __forceinline__ void flashc_wgmma_ss_batch(float *acc, uint32_t a_addr, uint32_t b_addr) {
    const uint64_t desc_a0 = flashc_wgmma_desc(a_addr, 16), desc_b0 = flashc_wgmma_desc(b_addr, 16);
    flashc_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < K_COLS / 16; ++ks) {
        const uint32_t step = (ks % 4) * 32;
        const uint64_t desc_a = flashc_wgmma_desc_add(desc_a0, step + (ks / 4) * A_ROWS * 128);
        const uint64_t desc_b = flashc_wgmma_desc_add(desc_b0, step + (ks / 4) * B_ROWS * 128);
        flashc_wgmma_ss<T, N>(acc, desc_a, desc_b, ks > 0);
    }
    flashc_wgmma_commit();
}

/* acc += A B as one committed batch of K_ROWS / 16 k-steps: A from
 * registers (16-bit fragments, a[ks] for k-step ks), B from shared memory
 * MN-major as stored: K_ROWS rows of 128 bytes in each 64-column block,
 * the blocks K_ROWS * 128 bytes apart (O += P V: B = V, K_ROWS = the keys;
 * the backward's dV += P^T dO: B = dO, K_ROWS = the queries). */
template <typename T, int N, int K_ROWS>
static __device__ __forceinline__ void flashc_wgmma_rs_batch(float *acc, const uint32_t (&a)[K_ROWS / 16][4],
                                                             uint32_t b_addr) {
    const uint64_t desc_b0 = flashc_wgmma_desc(b_addr, K_ROWS * 128);
    flashc_wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < K_ROWS / 16; ++ks)
        flashc_wgmma_rs<T, N>(acc, a[ks], flashc_wgmma_desc_add(desc_b0, ks * 16 * 128));
    flashc_wgmma_commit();
}

#endif
