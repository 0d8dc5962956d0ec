/* Shared-memory layout of the tiles the portable kernels copy in with
 * cp.async (Q, K, V, dO): rows of HEAD_DIM 16-bit elements.
 *
 * Swizzled (the forward at head dims 64, 128, 256; the backward at 256,
 * bwd_config.h): rows unpadded, the 16-byte chunk c of row r at chunk
 * (c & ~7) | ((c ^ r) & 7) of the row. Each cp.async of eight lanes fills
 * one 128-byte line whole, and the 8 rows of one ldmatrix matrix (8
 * consecutive rows, one logical chunk) still hit 8 distinct bank groups.
 * Padded (the other kernels): rows 16 bytes longer, the other way to keep
 * ldmatrix conflict-free; they start off the line boundaries, and the
 * cp.async stores into them cost 10.5 shared wavefronts per instruction
 * against 4 (1.5 times the time of a store-bound copy on the H200,
 * bench/NOTES.md "Swizzled tiles ..."). Only rows of a power-of-two number
 * of lines are swizzled (fwd_config.h): the backward's warp tiles split
 * them into power-of-two chunk ranges, which the steps below need.
 *
 * Lane addresses: a GEMM forms each lane's ldmatrix address once, for its
 * row and its logical chunk (offset), and steps from it by chunks along
 * the row and by whole rows, counts known at compile time once the GEMM
 * loops are unrolled (at). In a swizzled tile a step of C chunks is an XOR
 * of address bits 4-6 plus an add: exact when the tile starts on a
 * 128-byte boundary and the lane's logical chunk has no bit in common
 * with C (then chunk + C == chunk ^ C). The GEMMs' lane chunks are one low bit plus warp offsets
 * above the largest step, so that holds. Steps of whole rows keep r % 8:
 * plain adds of multiples of 8 rows. */
#ifndef FLASHC_CUDA_SMEM_TILE_CUH
#define FLASHC_CUDA_SMEM_TILE_CUH

#include <stdint.h>

#include <type_traits>

#include "fwd_config.h"
#include "ptx.cuh"

/* Rows of ROW_BYTES with chunks in place (padded rows: P and dS of the
 * backward, the tiles of head dims 96 / 192). */
template <int ROW_BYTES_>
struct flashc_smem_plain {
    static constexpr int ROW_BYTES = ROW_BYTES_;
    static __device__ __forceinline__ uint32_t offset(int row, int chunk) {
        return (uint32_t)(row * ROW_BYTES + chunk * 16);
    }
    static __device__ __forceinline__ uint32_t at(uint32_t addr, int chunks, int rows) {
        return addr + (chunks * 16 + rows * ROW_BYTES); /* one immediate */
    }
};

template <int ROW_BYTES_>
struct flashc_smem_swizzled {
    static constexpr int ROW_BYTES = ROW_BYTES_;
    static_assert(ROW_BYTES % 128 == 0, "swizzled rows are whole 128-byte lines");
    static __device__ __forceinline__ uint32_t offset(int row, int chunk) {
        return (uint32_t)(row * ROW_BYTES + ((chunk & ~7) | ((chunk ^ row) & 7)) * 16);
    }
    static __device__ __forceinline__ uint32_t at(uint32_t addr, int chunks, int rows) {
        return (addr ^ (uint32_t)((chunks & 7) * 16)) + (uint32_t)((chunks & ~7) * 16) + rows * ROW_BYTES;
    }
};

/* The layout of a cp.async tile of HEAD_DIM columns: swizzled where the
 * head dim allows it, unless the kernel asks for padded rows (SWIZZLE
 * false: the backward at head dims 64 and 128, bwd_config.h). */
template <int HEAD_DIM, bool SWIZZLE = true>
using flashc_smem_tile = typename std::conditional<SWIZZLE && FLASHC_TILE_SWIZZLED(HEAD_DIM),
                                                   flashc_smem_swizzled<FLASHC_TILE_ROW_BYTES(HEAD_DIM)>,
                                                   flashc_smem_plain<2 * FLASHC_SMEM_ROW(HEAD_DIM)>>::type;
template <class L>
struct flashc_smem_is_swizzled : std::false_type {};
template <int ROW_BYTES>
struct flashc_smem_is_swizzled<flashc_smem_swizzled<ROW_BYTES>> : std::true_type {};

/* Where the kernel's tiles start. Dynamic shared memory is promised
 * 16-byte alignment only, and the swizzle acts on address bits, so the
 * kernels ask for FLASHC_TILE_ALIGN bytes more (fwd_config.h) and swizzled
 * tiles start at the first 128-byte boundary; padded ones (which need no
 * alignment and leave the slack unused) start at the base itself, which keeps their addresses compile-time constants (a
 * run-time base cost the d64 backward 24 bytes more of spills). */
template <class L>
static __device__ __forceinline__ unsigned char *flashc_tile_base(unsigned char *smem) {
    if (!flashc_smem_is_swizzled<L>::value) return smem;
    const uint32_t addr = flashc_smem_addr(smem);
    return smem + ((FLASHC_TILE_ALIGN - addr % FLASHC_TILE_ALIGN) % FLASHC_TILE_ALIGN);
}

#endif
