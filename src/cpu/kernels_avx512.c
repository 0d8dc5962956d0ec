/* float32 accumulation, AVX-512 (F, VL, BW, DQ) + FMA + F16C (compiled with
 * those flags on x86-64 only; chosen at run time). */
#if defined(__x86_64__)
#define FLASHC_CPU_VARIANT avx512
#define FLASHC_CPU_REAL_DOUBLE 0
#define FLASHC_CPU_VBYTES 64
#define FLASHC_CPU_MR 8
#define FLASHC_CPU_NV 2
#include "variant.h"
#else
typedef int flashc_cpu_avx512_unused; /* not an empty translation unit */
#endif
