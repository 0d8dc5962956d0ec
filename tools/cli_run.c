#include "cli_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/device.h"
#include "common/measure.h"

void flashc_cli_progress(const flashc_cli_options *opt, double t0, const char *fmt, ...) {
    if (opt->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%8.2f s] ", flashc_tool_now() - t0);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int report_status(const char *what, flashc_status st) {
    if (st == FLASHC_SUCCESS) return 0;
    fprintf(stderr, "flashc run: %s failed: %s\n  %s\n", what, flashc_status_string(st),
            flashc_last_error_message());
    return -1;
}

static flashc_status call(flashc_cli_problem *p, int backward) {
    return backward ? flashc_attention_backward(&p->bwd)
                    : flashc_attention_forward_allocating(&p->fwd, flashc_tool_scratch_allocate, &p->scratch);
}

/* One call, timed from launch to completion: CUDA events around it on the
 * problem's stream, or the wall clock on the CPU. *st is the library's
 * status; returns -1 when the call or the timing failed. */
static int timed_call(flashc_cli_problem *p, flashc_tool_event_timer *timer, int backward,
                      double *seconds, flashc_status *st) {
    if (!p->on_cuda) {
        double start = flashc_tool_now();
        *st = call(p, backward);
        *seconds = flashc_tool_now() - start;
        return *st == FLASHC_SUCCESS ? 0 : -1;
    }
    if (flashc_tool_timer_start(timer) != 0) return -1;
    *st = call(p, backward);
    if (*st != FLASHC_SUCCESS) return -1;
    return flashc_tool_timer_stop(timer, seconds);
}

/* Returns 0, 1 when the library reported the backward unsupported on
 * CUDA at the first call (recorded, nothing timed), -1 on failure. */
static int run_phase(flashc_cli_problem *p, const flashc_cli_options *opt, double t0, int backward,
                     flashc_tool_event_timer *timer, double *median, double *min) {
    const char *name = backward ? "backward" : "forward";
    double *times = malloc((size_t)opt->repeat * sizeof(double));
    if (!times) return -1;
    for (int i = 0; i < opt->warmup + opt->repeat; ++i) {
        double s = 0.0;
        flashc_status st = FLASHC_SUCCESS;
        if (timed_call(p, timer, backward, &s, &st) != 0) {
            if (i == 0 && backward && p->on_cuda && st == FLASHC_ERROR_UNSUPPORTED) {
                flashc_cli_problem_backward_unavailable(p, flashc_last_error_message());
                free(times);
                return 1;
            }
            if (st != FLASHC_SUCCESS) report_status(name, st);
            free(times);
            return -1;
        }
        if (i < opt->warmup) {
            flashc_cli_progress(opt, t0, "%s warm-up %d/%d: %.6f s", name, i + 1, opt->warmup, s);
        } else {
            times[i - opt->warmup] = s;
            flashc_cli_progress(opt, t0, "%s run %d/%d: %.6f s", name, i - opt->warmup + 1,
                                opt->repeat, s);
        }
    }
    *median = flashc_tool_median(times, opt->repeat);
    *min = times[0];
    for (int i = 1; i < opt->repeat; ++i)
        if (times[i] < *min) *min = times[i];
    free(times);
    return 0;
}

static void announce_backward_unavailable(const flashc_cli_problem *p) {
    fprintf(stderr,
            "flashc run: note: the backward is not available on CUDA in this version of the "
            "library\n  (FLASHC_ERROR_UNSUPPORTED: %s);\n  running and checking the forward only\n",
            p->backward_unavailable);
}

int flashc_cli_run_timed(flashc_cli_problem *p, const flashc_cli_options *opt, double t0,
                         flashc_cli_timing *timing) {
    timing->backward_median_s = timing->backward_min_s = 0.0;
    timing->backward_ran = 0;
    flashc_tool_event_timer timer = {NULL, NULL, NULL};
    if (p->on_cuda && flashc_tool_timer_create(&timer, p->stream) != 0) return -1;
    int rc = run_phase(p, opt, t0, 0, &timer, &timing->forward_median_s, &timing->forward_min_s);
    if (rc == 0 && opt->backward) {
        if (p->backward_unavailable[0]) {
            announce_backward_unavailable(p);
        } else {
            rc = run_phase(p, opt, t0, 1, &timer, &timing->backward_median_s,
                           &timing->backward_min_s);
            if (rc == 1) {
                announce_backward_unavailable(p);
                rc = 0;
            } else if (rc == 0) {
                timing->backward_ran = 1;
            }
        }
    }
    flashc_tool_timer_destroy(&timer);
    return rc;
}
