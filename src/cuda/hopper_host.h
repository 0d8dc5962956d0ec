/* Host helpers shared by the Hopper forward and backward: whether the
 * current device runs sm_90a code, and the TMA tensor maps of (batch, rows,
 * heads, head dim) tensors. */
#ifndef FLASHC_CUDA_HOPPER_HOST_H
#define FLASHC_CUDA_HOPPER_HOST_H

#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime.h>

/* Device dev (or the current device) is of compute capability 9.0, where
 * sm_90a code runs and nowhere else. */
bool flashc_hopper_device(int dev);
bool flashc_hopper_current_device(void);

/* A 4-d map over (head dim, rows, heads, batch) of 16-bit elements with
 * strides in elements; boxes of 64 columns x box_rows, 128-byte swizzle,
 * zero fill out of bounds. False (nothing to run on) when the driver lacks
 * the encoder or the strides do not suit TMA (multiples of 16 bytes). */
bool flashc_hopper_make_map(CUtensorMap *map, const void *data, int is_bf16, int head_dim, int64_t rows, int heads,
                            int batch, int64_t row_stride, int64_t head_stride, int64_t batch_stride, int box_rows);

#endif
