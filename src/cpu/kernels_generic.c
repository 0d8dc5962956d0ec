/* float32 accumulation, baseline vectors (SSE2 on x86-64, NEON on arm64). */
#define FLASHC_CPU_VARIANT generic
#define FLASHC_CPU_REAL_DOUBLE 0
#define FLASHC_CPU_VBYTES 16
#define FLASHC_CPU_MR 4
#define FLASHC_CPU_NV 2
#include "variant.h"
