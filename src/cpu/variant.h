/* One SIMD variant of the CPU kernels. A variant file defines
 *   FLASHC_CPU_VARIANT       the name suffix (avx512, avx2, generic, f64)
 *   FLASHC_CPU_REAL_DOUBLE   1 for the float64 instantiation
 *   FLASHC_CPU_VBYTES        vector bytes
 *   FLASHC_CPU_MR, FLASHC_CPU_NV   register tile: MR rows x NV vectors
 * and includes this file; it is compiled with the variant's target flags
 * and exports flashc_cpu_forward_<suffix> / flashc_cpu_backward_<suffix>. */
#ifndef FLASHC_CPU_VARIANT_H
#define FLASHC_CPU_VARIANT_H

#include "core/problem.h"

#include "vec.h"
#include "convert.h"
#include "gemm.h"
#include "tiles.h"
#include "forward_impl.h"
#include "backward_impl.h"

#define FC_PASTE2(a, b) a##_##b
#define FC_PASTE(a, b) FC_PASTE2(a, b)

flashc_status FC_PASTE(flashc_cpu_forward, FLASHC_CPU_VARIANT)(const flashc_problem *p);
flashc_status FC_PASTE(flashc_cpu_backward, FLASHC_CPU_VARIANT)(const flashc_problem *p);

flashc_status FC_PASTE(flashc_cpu_forward, FLASHC_CPU_VARIANT)(const flashc_problem *p) {
    return fc_forward(p);
}

flashc_status FC_PASTE(flashc_cpu_backward, FLASHC_CPU_VARIANT)(const flashc_problem *p) {
    return fc_backward(p);
}

#endif
