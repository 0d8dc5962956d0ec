/* Timing and memory measurement shared by the CLI and the benchmark. */
#ifndef FLASHC_TOOLS_MEASURE_H
#define FLASHC_TOOLS_MEASURE_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic wall clock, seconds. */
double flashc_tool_now(void);
/* Peak resident set size of this process so far, bytes (getrusage). */
size_t flashc_tool_peak_rss_bytes(void);
/* Median of n values (sorts a copy; n <= 1024). */
double flashc_tool_median(const double *values, int n);
/* FLOPs of one forward by the project's convention: 2·sq·sk·(d + dv) per
 * (batch, head) (= 4·sq·sk·d when dv == d), halved for causal when
 * sq == sk. The backward counts 2.5 times this. */
double flashc_tool_forward_flops(int64_t nheads, int64_t sq, int64_t sk, int64_t d, int64_t dv,
                                 int causal);

#endif
