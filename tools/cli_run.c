#include "cli_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli_device.h"
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

/* One call, timed from launch to completion (device synchronised). */
static int timed_call(flashc_cli_problem *p, int backward, double *seconds) {
    if (flashc_cli_device_synchronize() != 0) return -1;
    double start = flashc_tool_now();
    flashc_status st = backward ? flashc_attention_backward(&p->bwd) : flashc_attention_forward(&p->fwd);
    if (report_status(backward ? "backward" : "forward", st) != 0) return -1;
    if (flashc_cli_device_synchronize() != 0) return -1;
    *seconds = flashc_tool_now() - start;
    return 0;
}

static int run_phase(flashc_cli_problem *p, const flashc_cli_options *opt, double t0, int backward,
                     double *median, double *min) {
    const char *name = backward ? "backward" : "forward";
    for (int i = 0; i < opt->warmup; ++i) {
        double s;
        if (timed_call(p, backward, &s) != 0) return -1;
        flashc_cli_progress(opt, t0, "%s warm-up %d/%d: %.3f s", name, i + 1, opt->warmup, s);
    }
    double *times = malloc((size_t)opt->repeat * sizeof(double));
    if (!times) return -1;
    for (int i = 0; i < opt->repeat; ++i) {
        if (timed_call(p, backward, &times[i]) != 0) {
            free(times);
            return -1;
        }
        flashc_cli_progress(opt, t0, "%s run %d/%d: %.3f s", name, i + 1, opt->repeat, times[i]);
    }
    *median = flashc_tool_median(times, opt->repeat);
    *min = times[0];
    for (int i = 1; i < opt->repeat; ++i)
        if (times[i] < *min) *min = times[i];
    free(times);
    return 0;
}

int flashc_cli_run_timed(flashc_cli_problem *p, const flashc_cli_options *opt, double t0,
                         flashc_cli_timing *timing) {
    timing->backward_median_s = timing->backward_min_s = 0.0;
    if (run_phase(p, opt, t0, 0, &timing->forward_median_s, &timing->forward_min_s) != 0) return -1;
    if (opt->backward &&
        run_phase(p, opt, t0, 1, &timing->backward_median_s, &timing->backward_min_s) != 0)
        return -1;
    return 0;
}
