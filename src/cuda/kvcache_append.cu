/* Before the attention of a KV-cache call: k_new / v_new written into the
 * cache at cache indices cache_seqlens[b] + r (k_new rotated at those
 * positions), and q rotated into q_rotated. One warp per row of one head;
 * the lanes take element pairs. Rotary is computed as the CPU backend does
 * it (in double, rounded to float, then to the dtype), so both write the
 * same bits. Rows of invalid sequences, and rows whose block-table entry
 * names no block, are not written (kvcache_seq.cuh).
 *
 * On sm_90+ it is a programmatic dependent of the kernel before it (its
 * CTAs wait on the SMs while that one ends) and lets the attention grid
 * start right after its own wait: from then on, everything the attention
 * reads is final except what this kernel writes (the appended rows,
 * q_rotated), so the attention fills its pipeline with the older cache
 * rows while the append runs (params.early_cache_reads,
 * hopper_kvcache_kernel.cuh). */
#include "dependent_launch.cuh"
#include "kvcache_launch.h"
#include "kvcache_seq.cuh"
#include "launch_grid.h"
#include "ptx.cuh"

#define FLASHC_KVC_APPEND_THREADS 128

static __device__ __forceinline__ double flashc_kvc_widen(__half x) { return (double)__half2float(x); }
static __device__ __forceinline__ double flashc_kvc_widen(__nv_bfloat16 x) { return (double)__bfloat162float(x); }

/* Row `src` (n elements) rotated at table row `pos` into `dst`: pairs
 * (2i, 2i + 1) when interleaved, else (i, i + rotary_dim / 2); the
 * elements past rotary_dim copied. Pair index i runs over the lanes. */
template <typename T>
static __device__ void flashc_kvc_rotate_row(const flashc_kvc_params &p, const T *src, T *dst, int n, int64_t pos,
                                             int rotary_dim, int lane) {
    const int half = rotary_dim / 2;
    const T *cos_row = reinterpret_cast<const T *>(p.rotary_cos) + pos * p.rotary_row_stride;
    const T *sin_row = reinterpret_cast<const T *>(p.rotary_sin) + pos * p.rotary_row_stride;
    for (int i = lane; i < n / 2; i += 32) {
        if (i >= half) { /* elements 2i, 2i + 1 lie past rotary_dim (k_new rows need no alignment) */
            dst[2 * i] = src[2 * i];
            dst[2 * i + 1] = src[2 * i + 1];
            continue;
        }
        const int a = p.rotary_interleaved ? 2 * i : i, b = p.rotary_interleaved ? 2 * i + 1 : i + half;
        const double c = flashc_kvc_widen(cos_row[i]), s = flashc_kvc_widen(sin_row[i]);
        const double xa = flashc_kvc_widen(src[a]), xb = flashc_kvc_widen(src[b]);
        /* no contraction into FMAs: the CPU rounds each product */
        const float ya = (float)__dsub_rn(__dmul_rn(xa, c), __dmul_rn(xb, s));
        const float yb = (float)__dadd_rn(__dmul_rn(xb, c), __dmul_rn(xa, s));
        const uint32_t packed = flashc_pack2<T>(ya, yb);
        dst[a] = *reinterpret_cast<const T *>(&packed);
        dst[b] = *(reinterpret_cast<const T *>(&packed) + 1);
    }
}

template <typename T>
__global__ void __launch_bounds__(FLASHC_KVC_APPEND_THREADS) flashc_kvc_append_kernel(const flashc_kvc_params p,
                                                                                       int64_t append_units,
                                                                                       int64_t units) {
#if __CUDA_ARCH__ >= 900
    /* every CTA waits before it triggers (or exits): the attention grid
     * starts only after the kernels before this one have completed */
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
    const int64_t unit = ((int64_t)blockIdx.x * FLASHC_KVC_APPEND_THREADS + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (unit >= units) return;
    if (unit < append_units) { /* k_new / v_new row r of (b, head_k) */
        const int head_k = (int)(unit % p.nheads_k);
        const int r = (int)(unit / p.nheads_k % p.new_rows);
        const int b = (int)(unit / p.nheads_k / p.new_rows);
        const flashc_kvc_seq seq = flashc_kvc_sequence(p, b);
        if (!seq.valid) return;
        int block, row;
        flashc_kvc_find(p, b, seq, seq.append_at + r, &block, &row);
        if (!flashc_kvc_block_exists(p, block)) return;
        const T *kn = reinterpret_cast<const T *>(p.k_new) + b * p.kn_batch_stride + r * p.kn_row_stride +
                      head_k * p.kn_head_stride;
        const T *vn = reinterpret_cast<const T *>(p.v_new) + b * p.vn_batch_stride + r * p.vn_row_stride +
                      head_k * p.vn_head_stride;
        T *k = const_cast<T *>(reinterpret_cast<const T *>(p.k)) + block * p.k_batch_stride + row * p.k_row_stride +
               head_k * p.k_head_stride;
        T *v = const_cast<T *>(reinterpret_cast<const T *>(p.v)) + block * p.v_batch_stride + row * p.v_row_stride +
               head_k * p.v_head_stride;
        flashc_kvc_rotate_row(p, kn, k, p.head_dim, seq.append_at + r, p.rotary_dim, lane);
        flashc_kvc_rotate_row(p, vn, v, p.head_dim_v, 0, 0, lane);
        return;
    }
    /* q row r of (b, head), rotated into q_rotated */
    const int64_t u = unit - append_units;
    const int head = (int)(u % p.nheads);
    const int r = (int)(u / p.nheads % p.seqlen_q);
    const int b = (int)(u / p.nheads / p.seqlen_q);
    const flashc_kvc_seq seq = flashc_kvc_sequence(p, b);
    /* Positions past the tables only come from cache_seqlens the host did
     * not check (on the CPU that is an error): clamped, never read beyond.
     * Empty tables (no positions) leave nothing to rotate. */
    if (p.rotary_rows < 1) return;
    const int64_t pos = flashc_kvc_clamp(seq.append_at + (p.rotary_q_per_row ? r : 0), 0, p.rotary_rows - 1);
    const T *q = reinterpret_cast<const T *>(p.q_in) + b * p.qi_batch_stride + r * p.qi_row_stride +
                 head * p.qi_head_stride;
    T *q_rot = reinterpret_cast<T *>(p.q_rotated) + (((int64_t)b * p.seqlen_q + r) * p.nheads + head) * p.head_dim;
    flashc_kvc_rotate_row(p, q, q_rot, p.head_dim, pos, p.rotary_dim, lane);
}

cudaError_t flashc_kvc_append(const flashc_kvc_params *p, void *stream, int is_bf16, int *launched) {
    *launched = 0;
    const int64_t append_units = p->k_new ? (int64_t)p->batch * p->new_rows * p->nheads_k : 0;
    const int64_t q_units = p->rotary_dim ? (int64_t)p->batch * p->seqlen_q * p->nheads : 0;
    const int64_t units = append_units + q_units;
    if (units == 0) return cudaSuccess;
    const int64_t warps_per_cta = FLASHC_KVC_APPEND_THREADS / 32;
    unsigned grid;
    cudaError_t err = flashc_flat_grid((units + warps_per_cta - 1) / warps_per_cta, 1, 1, &grid);
    if (err != cudaSuccess) return err;
    *launched = 1;
    cudaStream_t s = (cudaStream_t)stream;
    if (is_bf16)
        return flashc_launch_dependent(flashc_kvc_append_kernel<__nv_bfloat16>, dim3(grid),
                                       dim3(FLASHC_KVC_APPEND_THREADS), 0, s, true, *p, append_units, units);
    return flashc_launch_dependent(flashc_kvc_append_kernel<__half>, dim3(grid), dim3(FLASHC_KVC_APPEND_THREADS), 0,
                                   s, true, *p, append_units, units);
}
