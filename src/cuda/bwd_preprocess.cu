/* The backward's preprocess: per query row, D = rowsum(dO * O) - dLSE and
 * LSE * log2(e), written to the workspace over whole tile_m-row tiles (rows
 * of a tile past the sequence get LSE2 = +inf and D = 0: the main kernel
 * loads whole tiles, and those values make such rows contribute nothing),
 * and zeros over the same tiles of every dQ slice (and of the counts of
 * ordered additions, and of the shared last wave's segments done). One
 * CTA of 8 warps per (32- or 64-row chunk of a tile, head, sequence); a
 * row's 16-byte chunks spread over a group of 8, 16 or 32 lanes, so every
 * lane of a warp loads (2 rows at once at head dim 128, 4 at 64), and the
 * rows' LSE and dLSE are loaded with their O and dO, not after the sums: a
 * CTA waits for one round trip to memory, not two. */
#include <math.h>

#include "bwd_launch.h"
#include "bwd_rows.cuh"
#include "ptx.cuh"
#include "launch_grid.h"

#define FLASHC_BWD_PRE_THREADS 256
/* Rows per warp with ROW_LANES lanes a row: two rows per lane group at 8
 * and 16 lanes, four at 32; 32 or 64 rows per CTA (every plan's tile_m
 * is a multiple of 64). */
#define FLASHC_BWD_PRE_ROWS_PER_WARP(ROW_LANES) ((ROW_LANES) == 32 ? 4 : 64 / (ROW_LANES))
#define FLASHC_BWD_PRE_ROWS(ROW_LANES) (FLASHC_BWD_PRE_ROWS_PER_WARP(ROW_LANES) * FLASHC_BWD_PRE_THREADS / 32)

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

template <typename T, int ROW_LANES>
__global__ void __launch_bounds__(FLASHC_BWD_PRE_THREADS) flashc_bwd_preprocess_kernel(const flashc_bwd_params p) {
    constexpr int ROWS = FLASHC_BWD_PRE_ROWS(ROW_LANES), ROWS_PER_WARP = FLASHC_BWD_PRE_ROWS_PER_WARP(ROW_LANES);
    const int tile_m = p.tile_m;
    const int chunks = tile_m / ROWS; /* row chunks per tile */
    const int m_chunks = (p.fwd.seqlen_q + tile_m - 1) / tile_m * chunks;
    const int m_chunk = (int)(blockIdx.x % m_chunks);
    const int head = (int)(blockIdx.x / m_chunks % p.fwd.nheads);
    const int batch = (int)(blockIdx.x / m_chunks / p.fwd.nheads);
    const flashc_fwd_seq seq = flashc_fwd_sequence(p.fwd, batch);
    /* the counts of the shared last wave's segments (tail_split.h) */
    if (p.tail_counts && blockIdx.x == 0)
        for (int i = threadIdx.x; i < p.tail.tiles; i += FLASHC_BWD_PRE_THREADS) p.tail_counts[i] = 0;
    const int m0 = m_chunk / chunks * tile_m;
    if (m0 >= seq.sq) return; /* past the sequence: another sequence's rows */
    const int r0 = m_chunk % chunks * ROWS; /* first row of this chunk in the tile */
    const int64_t ws_row = flashc_bwd_ws_row0(p, batch, seq, tile_m) + m0;
    float *lse2 = p.lse2 + head * p.ws_rows + ws_row;
    float *dsum = p.dsum + head * p.ws_rows + ws_row;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int first = r0 + warp * ROWS_PER_WARP; /* the warp's first row in the tile */
    const int dv = p.fwd.head_dim_v;
    const int group = lane / ROW_LANES, c0 = 8 * (lane % ROW_LANES);
    constexpr int STEPS = ROWS_PER_WARP * ROW_LANES / 32; /* rows one lane group walks */
    constexpr int row_step = 32 / ROW_LANES;

    /* lane r < ROWS_PER_WARP holds the LSE (and dLSE) of the warp's row r */
    float lse = 0.0f, dlse = 0.0f;
    if (lane < ROWS_PER_WARP && m0 + first + lane < seq.sq) {
        const int64_t row = seq.q_start + m0 + first + lane;
        lse = p.fwd.lse[batch * p.fwd.lse_batch_stride + head * p.fwd.lse_head_stride + row * p.fwd.lse_row_stride];
        if (p.dlse) dlse = p.dlse[batch * p.dlse_batch_stride + head * p.dlse_head_stride + row * p.dlse_row_stride];
    }

    /* step s: row first + s * (32 / ROW_LANES) + group; every load issued
     * before the first product */
    const int64_t row0 = seq.q_start + m0 + first + group;
    const T *o_row = reinterpret_cast<const T *>(p.fwd.out) + batch * p.fwd.o_batch_stride +
                     row0 * p.fwd.o_row_stride + head * p.fwd.o_head_stride;
    const T *do_row = reinterpret_cast<const T *>(p.dout) + batch * p.do_batch_stride + row0 * p.do_row_stride +
                      head * p.do_head_stride;
    uint4 o_v[STEPS], do_v[STEPS];
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        o_v[s] = do_v[s] = make_uint4(0u, 0u, 0u, 0u);
        if (m0 + first + s * row_step + group < seq.sq && c0 < dv) {
            o_v[s] = *reinterpret_cast<const uint4 *>(o_row + s * row_step * p.fwd.o_row_stride + c0);
            do_v[s] = *reinterpret_cast<const uint4 *>(do_row + s * row_step * p.do_row_stride + c0);
        }
    }
    float acc[STEPS];
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        acc[s] = flashc_dot8<T>(o_v[s], do_v[s]);
        /* head dims past 256 columns */
        if (m0 + first + s * row_step + group < seq.sq)
            for (int c = c0 + 8 * ROW_LANES; c < dv; c += 8 * ROW_LANES)
                acc[s] += flashc_dot8<T>(*reinterpret_cast<const uint4 *>(o_row + s * row_step * p.fwd.o_row_stride + c),
                                         *reinterpret_cast<const uint4 *>(do_row + s * row_step * p.do_row_stride + c));
        for (int off = ROW_LANES / 2; off > 0; off /= 2) acc[s] += __shfl_xor_sync(0xffffffffu, acc[s], off);
    }
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        const int i = s * row_step + group; /* the row within the warp's */
        const float row_lse = __shfl_sync(0xffffffffu, lse, i);
        const float row_dlse = __shfl_sync(0xffffffffu, dlse, i);
        if (lane % ROW_LANES != 0) continue;
        const int r = first + i;
        if (m0 + r >= seq.sq) {
            lse2[r] = INFINITY;
            dsum[r] = 0.0f;
        } else {
            lse2[r] = row_lse * (float)FLASHC_LOG2E; /* +inf (a row that sees no key) stays +inf */
            dsum[r] = acc[s] - row_dlse;
        }
    }

    /* zeros over the chunk's rows in every dQ slice: ROWS *
     * dq_cols floats, contiguous (the tile's rows are) */
    const int64_t quads = (int64_t)ROWS * p.dq_cols / 4;
    for (int s = 0; s < p.dq_slices; ++s) {
        float4 *acc4 = reinterpret_cast<float4 *>(p.dq_accum + s * p.dq_slice_stride +
                                                  (head * p.ws_rows + ws_row + r0) * p.dq_cols);
        for (int64_t i = threadIdx.x; i < quads; i += FLASHC_BWD_PRE_THREADS) acc4[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    /* and the counts of additions of the query blocks starting in the chunk */
    if (p.dq_order && threadIdx.x < ROWS && (ws_row + r0 + threadIdx.x) % p.dq_order_rows == 0)
        p.dq_order[(head * p.ws_rows + ws_row + r0 + threadIdx.x) / p.dq_order_rows] = 0;
}

template <int ROW_LANES>
static cudaError_t flashc_bwd_preprocess_launch(const flashc_bwd_params *p, int is_bf16, cudaStream_t s) {
    constexpr int ROWS = FLASHC_BWD_PRE_ROWS(ROW_LANES);
    if (p->tile_m % ROWS != 0) return cudaErrorInvalidValue; /* every plan's tile_m is a multiple of 64 */
    unsigned grid;
    const int chunks = (p->fwd.seqlen_q + p->tile_m - 1) / p->tile_m * (p->tile_m / ROWS);
    cudaError_t err = flashc_flat_grid(chunks, p->fwd.nheads, p->fwd.batch, &grid);
    if (err != cudaSuccess || grid == 0) return err;
    if (is_bf16)
        flashc_bwd_preprocess_kernel<__nv_bfloat16, ROW_LANES><<<grid, FLASHC_BWD_PRE_THREADS, 0, s>>>(*p);
    else
        flashc_bwd_preprocess_kernel<__half, ROW_LANES><<<grid, FLASHC_BWD_PRE_THREADS, 0, s>>>(*p);
    return cudaGetLastError();
}

cudaError_t flashc_bwd_preprocess(const flashc_bwd_params *p, int is_bf16, void *stream) {
    /* lanes per row: the fewest of 8, 16, 32 whose 16-byte chunks cover it */
    const int dv = p->fwd.head_dim_v;
    cudaStream_t s = (cudaStream_t)stream;
    if (dv > 128) return flashc_bwd_preprocess_launch<32>(p, is_bf16, s);
    if (dv > 64) return flashc_bwd_preprocess_launch<16>(p, is_bf16, s);
    return flashc_bwd_preprocess_launch<8>(p, is_bf16, s);
}
