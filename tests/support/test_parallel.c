/* Loops of independent checks spread over the OpenMP threads. */
#include <omp.h>

#include "test_support.h"

/* One task per call (not a taskloop: libgomp runs a whole taskloop on the
 * encountering thread when it would queue more than 64 tasks per thread). */
static void as_tasks(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx) {
    for (int64_t i = 0; i < n; ++i) {
        /* fn and ctx named: clang 14 crashes on an implicitly captured
         * function pointer */
        #pragma omp task firstprivate(i, fn, ctx)
        fn(i, ctx);
    }
    #pragma omp taskwait
}

void test_parallel_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx) {
    if (n == 1) {
        fn(0, ctx);
    } else if (n > 1 && omp_in_parallel()) {
        as_tasks(n, fn, ctx);
    } else if (n > 1) {
        #pragma omp parallel
        #pragma omp single
        as_tasks(n, fn, ctx);
    }
}
