/* Each chain is acc = acc * a + b with a < 1, so values converge to a
 * fixed point (no overflow, no denormals). 16 independent chains cover
 * the FMA latency (4 cycles) times the FMA ports (2) with room to spare,
 * so the loop runs at the FMA throughput limit. */
#include "fma_peak.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "common/measure.h"

#define CHAINS 16

__attribute__((target("avx512f"), noinline)) static float fma_loop_avx512(long iters) {
    __m512 acc[CHAINS];
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; ++i) {
        acc[0] = _mm512_fmadd_ps(acc[0], a, b);
        acc[1] = _mm512_fmadd_ps(acc[1], a, b);
        acc[2] = _mm512_fmadd_ps(acc[2], a, b);
        acc[3] = _mm512_fmadd_ps(acc[3], a, b);
        acc[4] = _mm512_fmadd_ps(acc[4], a, b);
        acc[5] = _mm512_fmadd_ps(acc[5], a, b);
        acc[6] = _mm512_fmadd_ps(acc[6], a, b);
        acc[7] = _mm512_fmadd_ps(acc[7], a, b);
        acc[8] = _mm512_fmadd_ps(acc[8], a, b);
        acc[9] = _mm512_fmadd_ps(acc[9], a, b);
        acc[10] = _mm512_fmadd_ps(acc[10], a, b);
        acc[11] = _mm512_fmadd_ps(acc[11], a, b);
        acc[12] = _mm512_fmadd_ps(acc[12], a, b);
        acc[13] = _mm512_fmadd_ps(acc[13], a, b);
        acc[14] = _mm512_fmadd_ps(acc[14], a, b);
        acc[15] = _mm512_fmadd_ps(acc[15], a, b);
    }
    __m512 sum = acc[0];
    for (int c = 1; c < CHAINS; ++c) sum = _mm512_add_ps(sum, acc[c]);
    return _mm512_reduce_add_ps(sum);
}

__attribute__((target("avx2,fma"), noinline)) static float fma_loop_avx2(long iters) {
    __m256 acc[CHAINS];
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (int c = 0; c < CHAINS; ++c) acc[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; ++i) {
        acc[0] = _mm256_fmadd_ps(acc[0], a, b);
        acc[1] = _mm256_fmadd_ps(acc[1], a, b);
        acc[2] = _mm256_fmadd_ps(acc[2], a, b);
        acc[3] = _mm256_fmadd_ps(acc[3], a, b);
        acc[4] = _mm256_fmadd_ps(acc[4], a, b);
        acc[5] = _mm256_fmadd_ps(acc[5], a, b);
        acc[6] = _mm256_fmadd_ps(acc[6], a, b);
        acc[7] = _mm256_fmadd_ps(acc[7], a, b);
        acc[8] = _mm256_fmadd_ps(acc[8], a, b);
        acc[9] = _mm256_fmadd_ps(acc[9], a, b);
        acc[10] = _mm256_fmadd_ps(acc[10], a, b);
        acc[11] = _mm256_fmadd_ps(acc[11], a, b);
        acc[12] = _mm256_fmadd_ps(acc[12], a, b);
        acc[13] = _mm256_fmadd_ps(acc[13], a, b);
        acc[14] = _mm256_fmadd_ps(acc[14], a, b);
        acc[15] = _mm256_fmadd_ps(acc[15], a, b);
    }
    __m256 sum = acc[0];
    for (int c = 1; c < CHAINS; ++c) sum = _mm256_add_ps(sum, acc[c]);
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    return lanes[0] + lanes[1] + lanes[2] + lanes[3] + lanes[4] + lanes[5] + lanes[6] + lanes[7];
}

int flashc_fma_isa_supported(const char *isa) {
    __builtin_cpu_init();
    if (strcmp(isa, "avx512") == 0) return __builtin_cpu_supports("avx512f");
    if (strcmp(isa, "avx2") == 0) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return 0;
}

static volatile float fma_sink;

/* Runs the loop on every thread; returns the wall time. */
static double run_once(int avx512, int threads, long iters) {
    double start = flashc_tool_now();
#pragma omp parallel num_threads(threads)
    {
        float r = avx512 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
        fma_sink = r; /* keeps the loop alive */
    }
    return flashc_tool_now() - start;
}

double flashc_fma_measure(const char *isa, int threads, double seconds, int trials) {
    if (!flashc_fma_isa_supported(isa)) return 0.0;
    const int avx512 = strcmp(isa, "avx512") == 0;
    const double flops_per_iter = CHAINS * (avx512 ? 16 : 8) * 2.0;
    /* Size the loop: grow until one run takes a tenth of the target. */
    long iters = 1 << 16;
    double t = run_once(avx512, threads, iters);
    while (t < seconds / 10 && iters < (1L << 40)) {
        iters *= 2;
        t = run_once(avx512, threads, iters);
    }
    iters = (long)((double)iters * seconds / (t > 0 ? t : 1e-9));
    if (iters < 1) iters = 1;
    double best = 0.0;
    for (int i = 0; i < trials; ++i) {
        double s = run_once(avx512, threads, iters);
        double g = flops_per_iter * (double)iters * threads / s * 1e-9;
        if (g > best) best = g;
    }
    return best;
}
