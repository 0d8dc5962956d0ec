/* Launching one forward configuration: the six kernels of a head dim
 * (float16 / bfloat16 x plain / general / plain tail), the shared-memory
 * opt-in, and the grid of the tile schedule; with a shared last wave
 * (tail_split.h) the main grid stops after its last full wave and the
 * tail grid shares out the last row blocks. Each fwd_hdim*.cu
 * instantiates one configuration, so the head dims compile in parallel. */
#ifndef FLASHC_CUDA_FWD_LAUNCH_CUH
#define FLASHC_CUDA_FWD_LAUNCH_CUH

#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "backend_shared.h"
#include "dependent_launch.cuh"
#include "fwd_kernel.cuh"
#include "fwd_launch.h"
#include "smem_optin.cuh"
#include "tile_schedule.h"

/* The grid of the tile schedule (fwd_kernel.cuh, flashc_fwd_find_row_block):
 * (pairs per section, row blocks, sections), sections of more than one
 * pair only under a mask, widened where the pairs would need more than the
 * FLASHC_GRID_YZ_MAX sections a grid may have. Past FLASHC_GRID_YZ_MAX row
 * blocks (sequences of millions of queries) the row blocks take x and the
 * pairs y and z: pair after pair, as the schedule runs without a mask. */
static inline dim3 flashc_fwd_grid(const flashc_tile_schedule &s) {
    if (s.tiles == 0) return dim3(0, 0, 0);
    if (s.ranks > FLASHC_GRID_YZ_MAX) {
        const long long y = s.pairs < FLASHC_GRID_YZ_MAX ? s.pairs : FLASHC_GRID_YZ_MAX;
        /* ranks * pairs < 2^31: z <= y */
        return dim3((unsigned)s.ranks, (unsigned)y, (unsigned)((s.pairs + y - 1) / y));
    }
    long long width = s.section; /* >= 1 */
    if ((s.pairs + width - 1) / width > FLASHC_GRID_YZ_MAX)
        width = (s.pairs + FLASHC_GRID_YZ_MAX - 1) / FLASHC_GRID_YZ_MAX;
    return dim3((unsigned)width, (unsigned)s.ranks, (unsigned)((s.pairs + width - 1) / width));
}

/* The keys per step of a variant (fwd_config.h): the plain kernel's, the
 * general one's, or the general one's with dropout. */
template <int HEAD_DIM, bool GENERAL, bool DROPOUT>
static constexpr int flashc_fwd_block_n() {
    typedef flashc_fwd_config<HEAD_DIM> C;
    return !GENERAL ? C::BLOCK_N : DROPOUT ? C::BLOCK_N_DROPOUT : C::BLOCK_N_GENERAL;
}

template <typename T, int HEAD_DIM, bool GENERAL, bool TAIL, bool DROPOUT = false>
static constexpr auto flashc_fwd_kernel_of() {
    typedef flashc_fwd_config<HEAD_DIM> C;
    return flashc_fwd_kernel<T, HEAD_DIM, C::BLOCK_M, flashc_fwd_block_n<HEAD_DIM, GENERAL, DROPOUT>(), C::WARPS,
                             C::CTAS_PER_SM, C::EARLY_K_LOAD, GENERAL, TAIL>;
}

template <typename T, int HEAD_DIM, bool GENERAL, bool DROPOUT = false>
static constexpr int flashc_fwd_smem_of() {
    typedef flashc_fwd_config<HEAD_DIM> C;
    return flashc_fwd_smem_bytes<T, HEAD_DIM, C::BLOCK_M, flashc_fwd_block_n<HEAD_DIM, GENERAL, DROPOUT>()>();
}

/* CTAs of `kernel` one SM of the current device holds at once (0 if
 * unknown), asked once per device. */
static inline int flashc_fwd_ctas_per_sm(const void *kernel, int threads, int smem, int device, int (&known)[64]) {
    if (device >= 0 && device < 64 && known[device]) return known[device];
    int ctas = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, threads, (size_t)smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (device >= 0 && device < 64) known[device] = ctas;
    return ctas;
}

/* The shared last wave of the plain kernel (tail_split.h): where every
 * row block costs the same (no mask or window, not varlen) and the grid
 * is one pair's row blocks after another, the plan over the device's CTA
 * slots, and the scratch it needs (slots, then one counter per tail
 * tile); none where FLASHC_CUDA_FWD_TAIL=0 (for benchmarks of the
 * choice). */
template <typename T, int HEAD_DIM>
static flashc_tail flashc_fwd_tail_of(const flashc_fwd_params &p, const flashc_tile_schedule &s, int device,
                                      size_t *slots_bytes, size_t *bytes) {
    typedef flashc_fwd_config<HEAD_DIM> C;
    constexpr int THREADS = C::WARPS * 32;
    constexpr int SLOT_BYTES = (C::BLOCK_M / C::WARPS / 16) * (HEAD_DIM / 8 + 1) * 16 * THREADS;
    flashc_tail none = flashc_tail_plan(0, 0, 0, 0, 0);
    const char *env = getenv("FLASHC_CUDA_FWD_TAIL");
    if ((env && strcmp(env, "0") == 0) || flashc_tiles_vary(p) || p.cu_seqlens_q || p.seqlen_k <= 0 ||
        (s.ranks <= FLASHC_GRID_YZ_MAX && s.pairs > FLASHC_GRID_YZ_MAX))
        return none;
    static int known[64];
    const int per_sm = flashc_fwd_ctas_per_sm((const void *)flashc_fwd_kernel_of<T, HEAD_DIM, false, true>(),
                                              THREADS, flashc_fwd_smem_of<T, HEAD_DIM, false>(), device, known);
    const long long iters = ((long long)p.seqlen_k + C::BLOCK_N - 1) / C::BLOCK_N;
    const flashc_tail t = flashc_tail_plan(s.tiles, iters, per_sm * flashc_cuda_device_sms(device),
                                           FLASHC_FWD_TILE_START, FLASHC_FWD_TAIL_SLOT);
    if (!t.ctas) return none;
    *slots_bytes = ((size_t)t.ctas + (size_t)t.tiles) * SLOT_BYTES;
    *bytes = *slots_bytes + (size_t)t.tiles * sizeof(int);
    return t;
}

/* The tail grid: p.tail.ctas CTAs after the main grid, dependent on it
 * where the main grid runs (its CTAs then take the SMs as the main grid's
 * last CTAs leave them). */
template <typename T, int HEAD_DIM>
static cudaError_t flashc_fwd_launch_tail(const flashc_fwd_params &p, cudaStream_t stream) {
    return flashc_launch_dependent(flashc_fwd_kernel_of<T, HEAD_DIM, false, true>(), dim3((unsigned)p.tail.ctas),
                                   dim3(flashc_fwd_config<HEAD_DIM>::WARPS * 32),
                                   (size_t)flashc_fwd_smem_of<T, HEAD_DIM, false>(), stream, p.tail.first > 0, p);
}

template <typename T, int HEAD_DIM, bool GENERAL, bool DROPOUT>
static cudaError_t flashc_fwd_launch(const flashc_fwd_params &given, const flashc_fwd_scratch &scratch,
                                     cudaStream_t stream) {
    typedef flashc_fwd_config<HEAD_DIM> C;
    auto kernel = flashc_fwd_kernel_of<T, HEAD_DIM, GENERAL, false, DROPOUT>();
    constexpr int smem = flashc_fwd_smem_of<T, HEAD_DIM, GENERAL, DROPOUT>();
    cudaError_t err;
    if (smem > 48 * 1024) {
        static unsigned long long smem_raised;
        err = flashc_smem_optin((const void *)kernel, smem, &smem_raised);
        if (err != cudaSuccess) return err;
    }
    flashc_tile_schedule sched;
    if (!flashc_fwd_schedule(given, C::BLOCK_M, &sched)) return cudaErrorInvalidConfiguration;
    dim3 grid = flashc_fwd_grid(sched);
    if (grid.x == 0) return cudaSuccess;
    flashc_fwd_params p = given;
    if constexpr (!GENERAL) {
        if (scratch.allocate) {
            int device = 0;
            if ((err = cudaGetDevice(&device)) != cudaSuccess) return err;
            if (smem > 48 * 1024) {
                static unsigned long long smem_raised;
                err = flashc_smem_optin((const void *)flashc_fwd_kernel_of<T, HEAD_DIM, false, true>(), smem,
                                        &smem_raised);
                if (err != cudaSuccess) return err;
            }
            size_t slots_bytes = 0, bytes = 0;
            const flashc_tail t = flashc_fwd_tail_of<T, HEAD_DIM>(p, sched, device, &slots_bytes, &bytes);
            /* the slots' float4 and the counters need 16-byte alignment */
            char *mem = t.ctas ? (char *)scratch.allocate(scratch.context, bytes + 16, scratch.device) : nullptr;
            if (mem) {
                mem += (16 - (uintptr_t)mem % 16) % 16;
                p.tail = t;
                p.tail_slots = (float *)mem;
                p.tail_counts = (int *)(mem + slots_bytes);
                err = cudaMemsetAsync(p.tail_counts, 0, (size_t)t.tiles * sizeof(int), stream);
                if (err != cudaSuccess) return err;
                /* the main grid without the pairs wholly in the tail (one
                 * pair's row blocks after another: y the rank, z the pair) */
                if (sched.ranks <= FLASHC_GRID_YZ_MAX)
                    grid.z = (unsigned)((t.first + sched.ranks - 1) / sched.ranks);
            }
        }
    }
    if (!p.tail.ctas || p.tail.first > 0) {
        kernel<<<grid, C::WARPS * 32, smem, stream>>>(p);
        err = cudaGetLastError();
        if (err != cudaSuccess) return err;
    }
    if constexpr (!GENERAL) {
        if (p.tail.ctas) return flashc_fwd_launch_tail<T, HEAD_DIM>(p, stream);
    }
    return cudaSuccess;
}

/* One dtype's variants: plain, general, general with dropout. */
template <typename T, int HEAD_DIM>
static cudaError_t flashc_fwd_launch_variant(const flashc_fwd_params &p, const flashc_fwd_scratch &scratch,
                                             cudaStream_t stream, int general) {
    if (!general) return flashc_fwd_launch<T, HEAD_DIM, false, false>(p, scratch, stream);
    if (p.dropout_threshold) return flashc_fwd_launch<T, HEAD_DIM, true, true>(p, scratch, stream);
    return flashc_fwd_launch<T, HEAD_DIM, true, false>(p, scratch, stream);
}

/* The run function of one head dim: picks dtype and variant. */
#define FLASHC_FWD_DEFINE_RUN(HEAD_DIM)                                                                      \
    cudaError_t flashc_fwd_run_hdim##HEAD_DIM(const flashc_fwd_params *p, const flashc_fwd_scratch *scratch, \
                                              void *stream, int is_bf16, int general) {                      \
        cudaStream_t s = (cudaStream_t)stream;                                                               \
        return is_bf16 ? flashc_fwd_launch_variant<__nv_bfloat16, HEAD_DIM>(*p, *scratch, s, general)        \
                       : flashc_fwd_launch_variant<__half, HEAD_DIM>(*p, *scratch, s, general);              \
    }

#endif
