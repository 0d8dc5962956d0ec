/* One attention problem as the CLI runs it: host buffers filled with
 * seeded random data, their device mirrors, and the forward/backward
 * argument structs that point at them. */
#ifndef FLASHC_TOOLS_CLI_PROBLEM_H
#define FLASHC_TOOLS_CLI_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "cli_options.h"
#include "common/device.h"
#include "common/host_data.h"
#include "flashc.h"

/* A tensor of the problem: host storage, optional device mirror, and the
 * descriptor handed to the library (over the device mirror when on CUDA). */
typedef struct flashc_cli_tensor {
    flashc_tool_buffer host;
    void *device_data;         /* NULL on the CPU */
    flashc_tensor desc;        /* what the library sees */
} flashc_cli_tensor;

typedef struct flashc_cli_problem {
    int on_cuda;
    void *stream;              /* CUDA: the stream every call runs on */
    int64_t batch, heads, kv_heads, hdim, hdim_v;
    int64_t max_seqlen_q, max_seqlen_k, total_q, total_k;
    /* Per-sequence lengths and starts (batched mode: equal lengths). */
    int64_t *len_q, *len_k, *start_q, *start_k;

    flashc_cli_tensor q, k, v, out, lse, dout, dq, dk, dv;
    flashc_cli_tensor alibi, cu_seqlens_q, cu_seqlens_k;
    void *workspace;           /* device (or host) memory */
    size_t workspace_bytes;
    flashc_tool_scratch scratch; /* the forward's, CUDA (flashc_attention_forward_allocating) */
    /* Not empty when the backward was asked for but the library cannot
     * run it on this device (FLASHC_ERROR_UNSUPPORTED): the library's
     * message. The forward still runs and is checked. */
    char backward_unavailable[512];

    flashc_forward_args fwd;   /* over the library-side descriptors */
    flashc_backward_args bwd;
    flashc_forward_args fwd_host;  /* the same problem over the host copies */
    flashc_backward_args bwd_host;

    size_t allocated_bytes;    /* host + device bytes of every buffer */
    double forward_flops;      /* project convention (DESIGN.md) */
} flashc_cli_problem;

/* Build the problem. Returns 0, or -1 after printing the reason (library
 * errors with flashc_status_string and flashc_last_error_message). */
int flashc_cli_problem_create(flashc_cli_problem *p, const flashc_cli_options *opt);
void flashc_cli_problem_destroy(flashc_cli_problem *p);

/* Record that the library reported FLASHC_ERROR_UNSUPPORTED for the
 * backward on this device, with its message. */
void flashc_cli_problem_backward_unavailable(flashc_cli_problem *p, const char *message);

/* Copy the outputs (out, lse; and dq, dk, dv when `backward`) from the
 * device to the host copies. No-op on the CPU. */
int flashc_cli_problem_fetch_outputs(flashc_cli_problem *p, int backward);

#endif
