/* The compiled SIMD variants of the CPU kernels (see variant.h). */
#ifndef FLASHC_CPU_VARIANTS_H
#define FLASHC_CPU_VARIANTS_H

#include "core/problem.h"

flashc_status flashc_cpu_forward_generic(const flashc_problem *p);
flashc_status flashc_cpu_backward_generic(const flashc_problem *p);
flashc_status flashc_cpu_forward_f64(const flashc_problem *p);
flashc_status flashc_cpu_backward_f64(const flashc_problem *p);

#if defined(__x86_64__)
#define FLASHC_CPU_HAVE_X86_VARIANTS 1
flashc_status flashc_cpu_forward_avx2(const flashc_problem *p);
flashc_status flashc_cpu_backward_avx2(const flashc_problem *p);
flashc_status flashc_cpu_forward_avx512(const flashc_problem *p);
flashc_status flashc_cpu_backward_avx512(const flashc_problem *p);
#endif

#endif
