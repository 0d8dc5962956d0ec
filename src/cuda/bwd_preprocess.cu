/* The backward's preprocess: per query row, D = rowsum(dO * O) - dLSE and
 * LSE * log2(e), written to the workspace over whole tile_m-row tiles (rows
 * of a tile past the sequence get LSE2 = +inf and D = 0: the main kernel
 * loads whole tiles, and those values make such rows contribute nothing),
 * and zeros over the same tiles of every dQ slice (and of the counts of
 * ordered additions). One CTA per
 * (16-row chunk of a tile, head, sequence); a warp per row, 8 elements per
 * lane. */
#include <math.h>

#include "bwd_launch.h"
#include "bwd_rows.cuh"
#include "ptx.cuh"
#include "launch_grid.h"

#define FLASHC_BWD_PRE_THREADS 128

/* Sum of the products of 8 packed 16-bit pairs. */
template <typename T>
static __device__ __forceinline__ float flashc_dot8(uint4 a, uint4 b) {
    const uint32_t *x = reinterpret_cast<const uint32_t *>(&a), *y = reinterpret_cast<const uint32_t *>(&b);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 u = flashc_unpack2<T>(x[i]), v = flashc_unpack2<T>(y[i]);
        s = fmaf(u.x, v.x, s);
        s = fmaf(u.y, v.y, s);
    }
    return s;
}

/* Rows per CTA: each of the 4 warps takes 4 rows at once, so their loads
 * are in flight together. A CTA per whole tile walked its rows one after
 * another: 19.6 us for one 128-row tile on an H200, latency alone. */
#define FLASHC_BWD_PRE_ROWS 16
#define FLASHC_BWD_PRE_ROWS_PER_WARP (FLASHC_BWD_PRE_ROWS / (FLASHC_BWD_PRE_THREADS / 32))

template <typename T>
__global__ void __launch_bounds__(FLASHC_BWD_PRE_THREADS) flashc_bwd_preprocess_kernel(const flashc_bwd_params p) {
    const int tile_m = p.tile_m;
    const int chunks = tile_m / FLASHC_BWD_PRE_ROWS; /* row chunks per tile */
    const int m_chunks = (p.fwd.seqlen_q + tile_m - 1) / tile_m * chunks;
    const int m_chunk = (int)(blockIdx.x % m_chunks);
    const int head = (int)(blockIdx.x / m_chunks % p.fwd.nheads);
    const int batch = (int)(blockIdx.x / m_chunks / p.fwd.nheads);
    const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
    const int m0 = m_chunk / chunks * tile_m;
    if (m0 >= seq.sq) return; /* past the sequence: another sequence's rows */
    const int r0 = m_chunk % chunks * FLASHC_BWD_PRE_ROWS; /* first row of this chunk in the tile */
    const int64_t ws_row = flashc_bwd_ws_row0(p, batch, seq, tile_m) + m0;
    float *lse2 = p.lse2 + head * p.ws_rows + ws_row;
    float *dsum = p.dsum + head * p.ws_rows + ws_row;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first = r0 + warp * FLASHC_BWD_PRE_ROWS_PER_WARP;
    float acc[FLASHC_BWD_PRE_ROWS_PER_WARP];
#pragma unroll
    for (int i = 0; i < FLASHC_BWD_PRE_ROWS_PER_WARP; ++i) {
        acc[i] = 0.0f;
        if (m0 + first + i >= seq.sq) continue;
        const int64_t row = seq.q_start + m0 + first + i;
        const T *o = reinterpret_cast<const T *>(p.fwd.out) + batch * p.fwd.o_batch_stride + row * p.fwd.o_row_stride +
                     head * p.fwd.o_head_stride;
        const T *d_o = reinterpret_cast<const T *>(p.dout) + batch * p.do_batch_stride + row * p.do_row_stride +
                       head * p.do_head_stride;
        for (int c = 8 * lane; c < p.fwd.head_dim_v; c += 256)
            acc[i] += flashc_dot8<T>(*reinterpret_cast<const uint4 *>(o + c), *reinterpret_cast<const uint4 *>(d_o + c));
    }
#pragma unroll
    for (int i = 0; i < FLASHC_BWD_PRE_ROWS_PER_WARP; ++i) {
        const int r = first + i;
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
        if (lane != 0) continue;
        if (m0 + r >= seq.sq) {
            lse2[r] = INFINITY;
            dsum[r] = 0.0f;
            continue;
        }
        const int64_t row = seq.q_start + m0 + r;
        if (p.dlse)
            acc[i] -= p.dlse[batch * p.dlse_batch_stride + head * p.dlse_head_stride + row * p.dlse_row_stride];
        const float lse =
            p.fwd.lse[batch * p.fwd.lse_batch_stride + head * p.fwd.lse_head_stride + row * p.fwd.lse_row_stride];
        lse2[r] = lse * (float)FLASHC_LOG2E; /* +inf (a row that sees no key) stays +inf */
        dsum[r] = acc[i];
    }

    /* zeros over the chunk's rows in every dQ slice: FLASHC_BWD_PRE_ROWS *
     * dq_cols floats, contiguous (the tile's rows are) */
    const int64_t quads = (int64_t)FLASHC_BWD_PRE_ROWS * p.dq_cols / 4;
    for (int s = 0; s < p.dq_slices; ++s) {
        float4 *acc4 = reinterpret_cast<float4 *>(p.dq_accum + s * p.dq_slice_stride +
                                                  (head * p.ws_rows + ws_row + r0) * p.dq_cols);
        for (int64_t i = threadIdx.x; i < quads; i += FLASHC_BWD_PRE_THREADS) acc4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* and the count of additions of the query block starting here */
    if (p.dq_order && threadIdx.x == 0 && (ws_row + r0) % p.dq_order_rows == 0)
        p.dq_order[(head * p.ws_rows + ws_row + r0) / p.dq_order_rows] = 0;
}

cudaError_t flashc_bwd_preprocess(const flashc_bwd_params *p, int is_bf16, void *stream) {
    unsigned grid;
    if (p->tile_m % FLASHC_BWD_PRE_ROWS != 0) return cudaErrorInvalidValue; /* every plan's tile_m is a multiple of 64 */
    const int chunks = (p->fwd.seqlen_q + p->tile_m - 1) / p->tile_m * (p->tile_m / FLASHC_BWD_PRE_ROWS);
    cudaError_t err = flashc_flat_grid(chunks, p->fwd.nheads, p->fwd.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        flashc_bwd_preprocess_kernel<__nv_bfloat16><<<grid, FLASHC_BWD_PRE_THREADS, 0, s>>>(*p);
    else
        flashc_bwd_preprocess_kernel<__half><<<grid, FLASHC_BWD_PRE_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}
