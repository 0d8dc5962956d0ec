/* flashc: the command-line program. `flashc run` runs, times and checks one
 * attention problem; `flashc bench` runs the benchmark grid; `flashc
 * version` prints the library version. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli_check.h"
#include "cli_options.h"
#include "cli_problem.h"
#include "cli_report.h"
#include "cli_run.h"
#include "common/device.h"
#include "common/measure.h"
#include "flashc.h"

static void print_usage(FILE *out) {
    fputs("usage: flashc <command> [options]\n"
          "commands:\n"
          "  run       compute forward and backward of one attention problem, check it\n"
          "            against a double-precision reference, report time and GFLOP/s\n"
          "            (flashc run --help lists the options)\n"
          "  bench     run the benchmark grid (flashc_bench; flashc bench --help)\n"
          "  version   print the library version\n"
          "  help      this text\n",
          out);
}

/* What the CUDA backend takes: float16 / bfloat16 and head dims that are
 * multiples of 8. */
static int cuda_can_run(const flashc_cli_options *opt) {
    int lowp = opt->dtype == FLASHC_DTYPE_FLOAT16 || opt->dtype == FLASHC_DTYPE_BFLOAT16;
    int64_t dv = opt->hdim_v ? opt->hdim_v : opt->hdim;
    return lowp && opt->hdim % 8 == 0 && dv % 8 == 0;
}

/* --device auto: CUDA when a device is there and the problem is one the
 * CUDA backend takes, else the CPU (saying why when a GPU is there). An
 * explicit --device cuda is left to the library to accept or refuse, so
 * its message names the argument. */
static int choose_device(flashc_cli_options *opt, double t0) {
    if (opt->device == FLASHC_CLI_DEVICE_AUTO) {
        int usable = flashc_tool_cuda_usable();
        opt->device = usable && cuda_can_run(opt) ? FLASHC_CLI_DEVICE_CUDA : FLASHC_CLI_DEVICE_CPU;
        if (usable && opt->device == FLASHC_CLI_DEVICE_CPU)
            flashc_cli_progress(opt, t0, "running on the CPU: the CUDA backend takes fp16/bf16 with "
                                         "head dims that are multiples of 8 (--device cuda to try anyway)");
        return 0;
    }
    if (opt->device == FLASHC_CLI_DEVICE_CUDA && !flashc_tool_cuda_usable()) {
        fprintf(stderr, "flashc run: option --device cuda: no CUDA device is available to this build "
                        "(flashc_cuda_available() is %d)\n", flashc_cuda_available());
        return -1;
    }
    return 0;
}

static int command_run(int argc, char **argv) {
    const double t0 = flashc_tool_now();
    flashc_cli_options opt;
    flashc_cli_options_default(&opt);
    int parsed = flashc_cli_parse_run_options(argc, argv, &opt);
    if (parsed != 0) return parsed > 0 ? 0 : 2;
    if (choose_device(&opt, t0) != 0) return 2;

    flashc_cli_problem problem;
    flashc_cli_progress(&opt, t0, "setting up inputs (seed %llu)", (unsigned long long)opt.seed);
    if (flashc_cli_problem_create(&problem, &opt) != 0) {
        flashc_cli_problem_destroy(&problem);
        return 1;
    }
    flashc_cli_progress(&opt, t0, "allocated %.1f MiB", (double)problem.allocated_bytes / 1048576.0);
    flashc_cli_report_problem(&problem, &opt);
    fflush(stdout);

    flashc_cli_timing timing;
    if (flashc_cli_run_timed(&problem, &opt, t0, &timing) != 0 ||
        flashc_cli_problem_fetch_outputs(&problem, timing.backward_ran) != 0) {
        flashc_cli_problem_destroy(&problem);
        return 1;
    }
    /* A backward the device does not offer yet was announced and skipped:
     * check and report what ran. */
    opt.backward = timing.backward_ran;

    flashc_cli_check check;
    int status = 0;
    if (opt.check) {
        flashc_cli_progress(&opt, t0, "checking against the double-precision reference");
        if (flashc_cli_check_run(&problem, &opt, &check) != 0) status = 1;
        else if (!check.skipped && !check.pass) status = 1;
        flashc_cli_progress(&opt, t0, "check done");
    }
    flashc_cli_report_results(&problem, &opt, &timing, opt.check ? &check : NULL);
    flashc_cli_problem_destroy(&problem);
    return status;
}

/* `flashc bench ...` runs flashc_bench from the directory of this program. */
static int command_bench(char **argv) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 32);
    if (n <= 0) {
        fprintf(stderr, "flashc bench: cannot locate this program\n");
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    strcpy(slash ? slash + 1 : self, "flashc_bench");
    argv[0] = self;
    execv(self, argv);
    fprintf(stderr, "flashc bench: cannot run %s (build the flashc_bench target)\n", self);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "run") == 0) return command_run(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return command_bench(argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("flashc %s (CUDA %s)\n", flashc_version(),
               flashc_cuda_available() ? "available" : "not available");
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        print_usage(stdout);
        return 0;
    }
    fprintf(stderr, "flashc: unknown command '%s'\n", cmd);
    print_usage(stderr);
    return 2;
}
