/* Running the problem: warm-up, timed repeats of forward and backward,
 * progress lines on stderr, library errors reported with their message.
 * On the CPU a call is timed with the wall clock; on CUDA with events
 * recorded on the problem's stream around the call. */
#ifndef FLASHC_TOOLS_CLI_RUN_H
#define FLASHC_TOOLS_CLI_RUN_H

#include "cli_options.h"
#include "cli_problem.h"

typedef struct flashc_cli_timing {
    double forward_median_s, forward_min_s;
    double backward_median_s, backward_min_s;   /* 0 when not run */
    int backward_ran;   /* 0 when not asked for, or unavailable on the device
                           (then p->backward_unavailable says why) */
} flashc_cli_timing;

/* A progress line "[  12.3 s] text" on stderr unless --quiet. `t0` is the
 * program's start time (flashc_tool_now()). */
void flashc_cli_progress(const flashc_cli_options *opt, double t0, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns 0, or -1 after printing the library's status and message. A
 * backward the library reports as unsupported on CUDA is not an error: it
 * is recorded in the problem, announced, and skipped. */
int flashc_cli_run_timed(flashc_cli_problem *p, const flashc_cli_options *opt, double t0,
                         flashc_cli_timing *timing);

#endif
