/* float64 inputs: the same kernels with double accumulation. */
#define FLASHC_CPU_VARIANT f64
#define FLASHC_CPU_REAL_DOUBLE 1
#define FLASHC_CPU_VBYTES 16
#define FLASHC_CPU_MR 4
#define FLASHC_CPU_NV 2
#include "variant.h"
