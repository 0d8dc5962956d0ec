/* Per-CTA timelines of the Hopper KV-cache kernel, for measurement only:
 * built with -DFLASHC_KVC_TRACE, each CTA records its start and end
 * (%globaltimer, ns, from past the wait for the kernel before it to past
 * its epilogue), its SM and its key steps; kvcache_bench dumps the last
 * call's records (FLASHC_KVC_TRACE_OUT) and bench/kvcache_trace_summary.py
 * reads them. Without the macro these compile to nothing. They showed
 * that CTAs of identical work end up to 25 % apart, by SM (bench/NOTES.md). */
#ifndef FLASHC_CUDA_HOPPER_KVCACHE_TRACE_CUH
#define FLASHC_CUDA_HOPPER_KVCACHE_TRACE_CUH

#define FLASHC_KVC_TRACE_CTAS 65536

#ifdef FLASHC_KVC_TRACE
#include <stdio.h>

static __device__ unsigned long long flashc_kvc_trace_buf[FLASHC_KVC_TRACE_CTAS][4];

static __device__ __forceinline__ unsigned long long flashc_kvc_trace_now(void) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Called by every thread of the CTA at its end. */
static __device__ __forceinline__ void flashc_kvc_trace_record(unsigned long long t0, int steps) {
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x < FLASHC_KVC_TRACE_CTAS) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        flashc_kvc_trace_buf[blockIdx.x][0] = t0;
        flashc_kvc_trace_buf[blockIdx.x][1] = flashc_kvc_trace_now();
        flashc_kvc_trace_buf[blockIdx.x][2] = smid;
        flashc_kvc_trace_buf[blockIdx.x][3] = (unsigned long long)steps;
    }
}

/* The host's side, defined in one translation unit (the head dim 128
 * kernels'): clear the records; append the last launch's, one line per
 * CTA ("label cta start end sm steps"), to `path`. */
#define FLASHC_KVC_TRACE_DEFINE_HOST                                                                        \
    extern "C" __attribute__((visibility("default"))) void flashc_kvc_trace_reset(void) {                    \
        static unsigned long long zeros[FLASHC_KVC_TRACE_CTAS][4];                                           \
        cudaMemcpyToSymbol(flashc_kvc_trace_buf, zeros, sizeof zeros);                                       \
    }                                                                                                       \
    extern "C" __attribute__((visibility("default"))) void flashc_kvc_trace_dump(const char *path,           \
                                                                                 const char *label) {       \
        static unsigned long long host[FLASHC_KVC_TRACE_CTAS][4];                                            \
        cudaDeviceSynchronize();                                                                            \
        cudaMemcpyFromSymbol(host, flashc_kvc_trace_buf, sizeof host);                                       \
        FILE *f = fopen(path, "a");                                                                         \
        if (!f) return;                                                                                     \
        for (int i = 0; i < FLASHC_KVC_TRACE_CTAS; ++i)                                                      \
            if (host[i][1])                                                                                 \
                fprintf(f, "%s %d %llu %llu %llu %llu\n", label, i, host[i][0], host[i][1], host[i][2],      \
                        host[i][3]);                                                                        \
        fclose(f);                                                                                          \
    }
#else
static __device__ __forceinline__ unsigned long long flashc_kvc_trace_now(void) { return 0; }
static __device__ __forceinline__ void flashc_kvc_trace_record(unsigned long long, int) {}
#define FLASHC_KVC_TRACE_DEFINE_HOST
#endif

#endif
