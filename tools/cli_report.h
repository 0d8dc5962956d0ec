/* The report `flashc run` prints on stdout. */
#ifndef FLASHC_TOOLS_CLI_REPORT_H
#define FLASHC_TOOLS_CLI_REPORT_H

#include "cli_check.h"
#include "cli_options.h"
#include "cli_problem.h"
#include "cli_run.h"

void flashc_cli_report_problem(const flashc_cli_problem *p, const flashc_cli_options *opt);
void flashc_cli_report_results(const flashc_cli_problem *p, const flashc_cli_options *opt,
                               const flashc_cli_timing *timing, const flashc_cli_check *check);

#endif
