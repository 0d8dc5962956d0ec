/* Moving tiles between global and shared memory: asynchronous 16-byte
 * copies with zero fill past the valid rows / columns. */
#ifndef FLASHC_CUDA_FWD_TILE_IO_CUH
#define FLASHC_CUDA_FWD_TILE_IO_CUH

#include "fwd_config.h"
#include "ptx.cuh"

/* Start copying a ROWS x HEAD_DIM tile whose row r starts at
 * src + r * row_stride into shared memory (row stride
 * FLASHC_SMEM_ROW(HEAD_DIM)). Rows >= valid_rows and columns >= valid_cols
 * are zero-filled without reading global memory; src (row 0, column 0) must
 * be valid. All THREADS threads of the CTA take part. */
template <typename T, int ROWS, int HEAD_DIM, int THREADS>
static __device__ __forceinline__ void flashc_load_tile_async(T *dst, const T *src, int64_t row_stride,
                                                              int valid_rows, int valid_cols) {
    constexpr int CHUNKS = HEAD_DIM / 8;  /* 16-byte chunks per row */
    constexpr int ROW_BYTES = FLASHC_SMEM_ROW(HEAD_DIM) * (int)sizeof(T);
    /* Each thread keeps one column chunk and steps down the rows, so one
     * global pointer and one shared address are live, advanced by
     * constants. When CHUNKS does not divide THREADS, the last few threads
     * sit out. */
    constexpr int ROW_STEP = THREADS / CHUNKS;
    constexpr int ITERS = (ROWS + ROW_STEP - 1) / ROW_STEP;
    const int c = (int)threadIdx.x % CHUNKS;
    const int r0 = (int)threadIdx.x / CHUNKS;
    if (r0 >= ROW_STEP) return;
    const bool col_valid = c * 8 < valid_cols;
    const T *from = src + r0 * row_stride + c * 8;
    const uint32_t to = flashc_smem_addr(dst) + r0 * ROW_BYTES + c * 16;
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
        const int r = r0 + i * ROW_STEP;
        if (ROWS % ROW_STEP != 0 && r >= ROWS) break;
        const bool valid = col_valid && r < valid_rows;
        flashc_cp_async16(to + i * ROW_STEP * ROW_BYTES, valid ? from : src, valid);
        from += ROW_STEP * row_stride;
    }
}

#endif
