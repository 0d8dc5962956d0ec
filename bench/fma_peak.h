/* Calibration: the machine's float32 FMA peak, measured with a loop of
 * independent FMA chains per ISA (AVX-512 zmm, AVX2 ymm), on 1..n threads. */
#ifndef FLASHC_BENCH_FMA_PEAK_H
#define FLASHC_BENCH_FMA_PEAK_H

typedef struct flashc_fma_peak {
    const char *isa;       /* "avx512" or "avx2" */
    int threads;
    double gflops;         /* best of the trials */
} flashc_fma_peak;

/* Whether the CPU runs `isa` ("avx512", "avx2"). */
int flashc_fma_isa_supported(const char *isa);

/* Best GFLOP/s of `trials` runs of about `seconds` each, all `threads`
 * threads running the loop at once (OpenMP). 0 when the ISA is absent. */
double flashc_fma_measure(const char *isa, int threads, double seconds, int trials);

#endif
