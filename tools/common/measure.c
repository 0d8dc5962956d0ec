#define _POSIX_C_SOURCE 200809L
#include "measure.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

double flashc_tool_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

size_t flashc_tool_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024u; /* Linux reports kilobytes */
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double flashc_tool_median(const double *values, int n) {
    double sorted[1024];
    if (n <= 0) return 0.0;
    if (n > 1024) n = 1024;
    memcpy(sorted, values, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
    return n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

double flashc_tool_forward_flops(int64_t nheads, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                 int causal) {
    double f = 2.0 * (double)nheads * (double)sq * (double)sk * (double)(d + dv);
    if (causal && sq == sk) f *= 0.5;
    return f;
}
