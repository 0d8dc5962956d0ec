/* The accuracy check of `flashc run`: sampled heads of the library's
 * outputs against the independent double-precision reference. */
#ifndef FLASHC_TOOLS_CLI_CHECK_H
#define FLASHC_TOOLS_CLI_CHECK_H

#include "cli_options.h"
#include "cli_problem.h"

/* Error of one output tensor over the checked rows. */
typedef struct flashc_cli_error {
    double max_abs;        /* max |flashc - reference| */
    double max_ref;        /* max |reference| over the same elements */
    double relative;       /* max_abs / max_ref (0 when max_ref is 0) */
    double tolerance;      /* pass iff relative <= tolerance */
    long long checked;     /* elements compared */
    long long mismatched_inf; /* +inf / NaN where the other side is finite */
    int pass;
} flashc_cli_error;

typedef struct flashc_cli_check {
    int ran_forward, ran_backward;
    flashc_cli_error out, lse, dq, dk, dv;
    long long rows_checked;   /* query rows compared in the forward */
    long long grad_rows_checked, grad_keys_checked; /* backward: dQ rows, dK/dV rows */
    int pass;
    const char *skipped;      /* non-NULL: why the check did not run */
} flashc_cli_check;

/* Compare the host copies of the outputs (fetched after the runs) with the
 * reference. Returns 0 when the check could run (see result->pass), -1
 * when it could not (message printed). */
int flashc_cli_check_run(const flashc_cli_problem *p, const flashc_cli_options *opt,
                         flashc_cli_check *result);

#endif
