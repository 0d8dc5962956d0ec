/* The CPU backend's entry points: pick the SIMD variant the running CPU
 * supports (one binary runs on any x86-64), then run it. float64 problems
 * always take the double-precision variant.
 *
 * FLASHC_CPU_ISA=avx512|avx2|generic in the environment caps the choice
 * (testing every variant on one machine); it never selects an ISA the CPU
 * lacks. The choice is made on the first CPU call and kept: the CPU and
 * the environment variable are read once, not on every call (the variable
 * is read from the environment the process has at that point). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "variants.h"
#include "workspace.h"

typedef flashc_status (*flashc_cpu_kernel)(const flashc_problem *p);

typedef struct flashc_cpu_variant {
    flashc_cpu_kernel forward, backward;
} flashc_cpu_variant;

typedef enum { FLASHC_CPU_GENERIC = 0, FLASHC_CPU_AVX2, FLASHC_CPU_AVX512 } flashc_cpu_isa;

#if defined(FLASHC_CPU_HAVE_X86_VARIANTS)
static flashc_cpu_isa flashc_cpu_detect_isa(void) {
    flashc_cpu_isa isa = FLASHC_CPU_GENERIC;
    __builtin_cpu_init();
    /* Every AVX2 processor has F16C too (which some compilers cannot test). */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) isa = FLASHC_CPU_AVX2;
    if (isa == FLASHC_CPU_AVX2 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq"))
        isa = FLASHC_CPU_AVX512;
    const char *cap = getenv("FLASHC_CPU_ISA");
    if (cap) {
        if (strcmp(cap, "generic") == 0) isa = FLASHC_CPU_GENERIC;
        else if (strcmp(cap, "avx2") == 0 && isa > FLASHC_CPU_AVX2) isa = FLASHC_CPU_AVX2;
    }
    return isa;
}

/* flashc_cpu_detect_isa's answer, -1 until the first call. Threads racing
 * on the first call each compute the same value: the only state the
 * library keeps, and a constant of the process once set. */
static atomic_int flashc_cpu_isa_chosen = -1;

static flashc_cpu_isa flashc_cpu_best_isa(void) {
    int isa = atomic_load_explicit(&flashc_cpu_isa_chosen, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)flashc_cpu_detect_isa();
        atomic_store_explicit(&flashc_cpu_isa_chosen, isa, memory_order_relaxed);
    }
    return (flashc_cpu_isa)isa;
}
#endif

static flashc_cpu_variant flashc_cpu_select(const flashc_problem *p) {
    flashc_cpu_variant v = {flashc_cpu_forward_generic, flashc_cpu_backward_generic};
    if (p->dtype == FLASHC_DTYPE_FLOAT64) {
        v.forward = flashc_cpu_forward_f64;
        v.backward = flashc_cpu_backward_f64;
        return v;
    }
#if defined(FLASHC_CPU_HAVE_X86_VARIANTS)
    switch (flashc_cpu_best_isa()) {
        case FLASHC_CPU_AVX512:
            v.forward = flashc_cpu_forward_avx512;
            v.backward = flashc_cpu_backward_avx512;
            break;
        case FLASHC_CPU_AVX2:
            v.forward = flashc_cpu_forward_avx2;
            v.backward = flashc_cpu_backward_avx2;
            break;
        default:
            break;
    }
#endif
    return v;
}

flashc_status flashc_cpu_forward(const flashc_problem *p) { return flashc_cpu_select(p).forward(p); }

size_t flashc_cpu_backward_workspace_size(const flashc_problem *p) {
    return flashc_cpu_bwd_layout_of(p).bytes;
}

flashc_status flashc_cpu_backward(const flashc_problem *p) {
    return flashc_cpu_select(p).backward(p);
}
