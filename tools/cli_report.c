#include "cli_report.h"

#include <stdio.h>

#include "common/device.h"
#include "common/host_data.h"
#include "common/measure.h"

static const char *alibi_name(flashc_cli_alibi a) {
    switch (a) {
        case FLASHC_CLI_ALIBI_PER_HEAD: return "slopes (h)";
        case FLASHC_CLI_ALIBI_PER_BATCH_HEAD: return "slopes (b, h)";
        default: return "off";
    }
}

void flashc_cli_report_problem(const flashc_cli_problem *p, const flashc_cli_options *opt) {
    printf("flashc %s  device %s", flashc_version(), p->on_cuda ? "cuda:0" : "cpu");
    if (p->on_cuda) printf(" (%s)", flashc_tool_cuda_device_name());
    else printf(" (threads %d%s)", opt->threads, opt->threads == 0 ? " = OpenMP default" : "");
    printf("\n");
    printf("problem   batch %lld  heads %lld/%lld (q/kv)  seqlen %lld/%lld (q/k%s)  hdim %lld/%lld (qk/v)  %s\n",
           (long long)p->batch, (long long)p->heads, (long long)p->kv_heads,
           (long long)p->max_seqlen_q, (long long)p->max_seqlen_k, opt->varlen ? " max, varlen" : "",
           (long long)p->hdim, (long long)p->hdim_v, flashc_tool_dtype_name(opt->dtype));
    printf("features  causal %s  window (%lld, %lld)  softcap %g  alibi %s  dropout %g  seed %llu  scale %s",
           opt->causal ? "on" : "off", (long long)opt->window_left, (long long)opt->window_right,
           opt->softcap, alibi_name(opt->alibi), opt->dropout, (unsigned long long)opt->seed,
           opt->scale == 0.0 ? "1/sqrt(hdim)" : "");
    if (opt->scale != 0.0) printf("%g", opt->scale);
    printf("%s\n", opt->deterministic ? "  deterministic" : "");
    if (opt->varlen) {
        printf("varlen    %lld sequences, total q %lld, total k %lld, lengths q:k",
               (long long)p->batch, (long long)p->total_q, (long long)p->total_k);
        int64_t shown = p->batch < 8 ? p->batch : 8;
        for (int64_t i = 0; i < shown; ++i)
            printf(" %lld:%lld", (long long)p->len_q[i], (long long)p->len_k[i]);
        printf("%s\n", shown < p->batch ? " ..." : "");
    }
}

static void report_error_line(const char *name, const flashc_cli_error *e, int absolute) {
    printf("  %-4s max |err| %.3e  %s %.3e  (tolerance %.1e, %lld values%s)  %s\n", name, e->max_abs,
           absolute ? "abs" : "rel", e->relative, e->tolerance, e->checked,
           e->mismatched_inf ? ", inf/NaN mismatches" : "", e->pass ? "ok" : "FAIL");
}

void flashc_cli_report_results(const flashc_cli_problem *p, const flashc_cli_options *opt,
                               const flashc_cli_timing *t, const flashc_cli_check *check) {
    const double gf = p->forward_flops * 1e-9;
    printf("timing    median of %d run%s after %d warm-up%s, %s (FLOPs: forward 4*b*h*sq*sk*d, halved when causal and sq == sk; backward 2.5x)\n",
           opt->repeat, opt->repeat == 1 ? "" : "s", opt->warmup, opt->warmup == 1 ? "" : "s",
           p->on_cuda ? "CUDA events on the call's stream" : "wall clock");
    printf("  forward   %10.3f ms  %10.2f GFLOP/s  (%.2f GFLOP, min %.3f ms)\n", 1e3 * t->forward_median_s,
           gf / t->forward_median_s, gf, 1e3 * t->forward_min_s);
    if (t->backward_ran)
        printf("  backward  %10.3f ms  %10.2f GFLOP/s  (%.2f GFLOP, min %.3f ms)\n", 1e3 * t->backward_median_s,
               2.5 * gf / t->backward_median_s, 2.5 * gf, 1e3 * t->backward_min_s);
    else if (p->backward_unavailable[0])
        printf("  backward  not run: not available on this device in this version of the library\n"
               "            (FLASHC_ERROR_UNSUPPORTED: %s)\n", p->backward_unavailable);
    printf("memory    allocated %.1f MiB (inputs, outputs, gradients, workspace %.1f MiB); peak RSS %.1f MiB\n",
           (double)p->allocated_bytes / 1048576.0, (double)p->workspace_bytes / 1048576.0,
           (double)flashc_tool_peak_rss_bytes() / 1048576.0);
    if (!check) {
        printf("check     skipped (--no-check)\n");
        return;
    }
    if (check->skipped) {
        printf("check     skipped: %s\n", check->skipped);
        return;
    }
    printf("check     against the double-precision reference: forward %lld rows of %d (batch, head) pair%s",
           check->rows_checked, opt->check_heads, opt->check_heads == 1 ? "" : "s");
    if (check->ran_backward)
        printf("; backward one kv-head group: dq %lld rows, dk/dv %lld keys%s", check->grad_rows_checked,
               check->grad_keys_checked,
               check->grad_keys_checked == 0 ? " (none: see below)" : "");
    printf("\n");
    report_error_line("out", &check->out, 0);
    report_error_line("lse", &check->lse, 1);
    if (check->ran_backward) {
        report_error_line("dq", &check->dq, 0);
        if (check->grad_keys_checked > 0) {
            report_error_line("dk", &check->dk, 0);
            report_error_line("dv", &check->dv, 0);
        } else {
            printf("  dk, dv not checked: no key's gradient is determined by the rows checked alone\n"
                   "         (non-causal; --check-rows N with N = seqlen checks whole heads)\n");
        }
    }
    printf("result    %s\n", check->pass ? "PASS" : "FAIL");
}
