/* Moving tiles between global and shared memory: asynchronous 16-byte
 * copies with zero fill past the valid rows / columns. */
#ifndef FLASHC_CUDA_FWD_TILE_IO_CUH
#define FLASHC_CUDA_FWD_TILE_IO_CUH

#include "ptx.cuh"
#include "smem_tile.cuh"

/* Start copying a ROWS x HEAD_DIM tile whose row r starts at
 * src + r * row_stride into shared memory in layout L (smem_tile.cuh).
 * Rows >= valid_rows and columns >= valid_cols are zero-filled without
 * reading global memory; src (row 0, column 0) must be valid. All THREADS
 * threads of the CTA take part; dst starts on a 128-byte boundary.
 * CHECKED false: the caller knows every row and column is valid (a whole
 * tile), and the copies go without a test or a fallback address each
 * (a loop head's worth of instructions in the backward, bench/NOTES.md). */
template <typename T, int ROWS, int HEAD_DIM, int THREADS, class L = flashc_smem_tile<HEAD_DIM>, bool CHECKED = true>
static __device__ __forceinline__ void flashc_load_tile_async(T *dst, const T *src, int64_t row_stride,
                                                              int valid_rows, int valid_cols) {
    static_assert(sizeof(T) == 2, "tiles of 16-bit elements");
    constexpr bool SWIZZLED = flashc_smem_is_swizzled<L>::value;
    constexpr int CHUNKS = HEAD_DIM / 8; /* 16-byte chunks per row */
    /* Each thread keeps one column chunk and steps down the rows, so one
     * global pointer and one shared address are live, advanced by
     * constants. When CHUNKS does not divide THREADS, the last few threads
     * sit out. */
    constexpr int ROW_STEP = THREADS / CHUNKS;
    constexpr int ITERS = (ROWS + ROW_STEP - 1) / ROW_STEP;
    /* in a swizzled tile, row r + ROW_STEP i has r's chunk order XOR
     * (ROW_STEP i) % 8: a constant per i when ROW_STEP is a multiple of 4 */
    static_assert(!SWIZZLED || ROW_STEP % 4 == 0, "rows a multiple of 4 apart");
    const int c = (int)threadIdx.x % CHUNKS;
    const int r0 = (int)threadIdx.x / CHUNKS;
    if (r0 >= ROW_STEP) return;
    const bool col_valid = c * 8 < valid_cols;
    const T *from = src + r0 * row_stride + c * 8;
    const uint32_t to = flashc_smem_addr(dst) + L::offset(r0, c);
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int r = r0 + i * ROW_STEP;
        if (ROWS % ROW_STEP != 0 && r >= ROWS) break;
        const uint32_t swz = SWIZZLED ? (uint32_t)((i * ROW_STEP) % 8 * 16) : 0u;
        if (CHECKED) {
            const bool valid = col_valid && r < valid_rows;
            flashc_cp_async16((to ^ swz) + i * ROW_STEP * L::ROW_BYTES, valid ? from : src, valid);
        } else
            flashc_cp_async16_full((to ^ swz) + i * ROW_STEP * L::ROW_BYTES, from);
        from += ROW_STEP * row_stride;
    }
}

#endif
