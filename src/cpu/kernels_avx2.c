/* float32 accumulation, AVX2 + FMA + F16C (compiled with those flags on
 * x86-64 only; chosen at run time). */
#if defined(__x86_64__)
#define FLASHC_CPU_VARIANT avx2
#define FLASHC_CPU_REAL_DOUBLE 0
#define FLASHC_CPU_VBYTES 32
#define FLASHC_CPU_MR 4
#define FLASHC_CPU_NV 2
#include "variant.h"
#else
typedef int flashc_cpu_avx2_unused; /* not an empty translation unit */
#endif
