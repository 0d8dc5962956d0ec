/*
 * CUDA test support: a test_case (test_support.h) whose every allocation
 * is mirrored on the GPU, so the shared machinery makes the inputs, builds
 * the views and checks the results on the host, while the library runs on
 * device copies of exactly those bytes.
 *
 * A call poisons the device outputs (every byte 0xFF, NaN in every float
 * dtype), runs on the case's stream (options.stream; NULL = the default
 * stream), waits on that stream only, and copies every output allocation
 * back whole, padding included, so test_check_forward sees what the GPU
 * wrote and what it must not have written.
 */
#ifndef FLASHC_TEST_CUDA_SUPPORT_H
#define FLASHC_TEST_CUDA_SUPPORT_H

#include "test_support.h"

/* Non-zero when the library was built with CUDA and this program and the
 * library both see a device. The first such call (made before any case
 * runs) also creates what the cases share. */
int tcuda_available(void);

/* A non-blocking stream shared by the cases (threads may share it: each
 * case waits for the whole stream). */
void *tcuda_side_stream(void);

/* Sets environment variable `name` to `value` (a test forcing a kernel
 * path, e.g. FLASHC_CUDA_FORWARD=portable) and returns its previous
 * value (malloc'ed; NULL where it was unset) for tcuda_env_restore, which
 * puts it back and frees it. */
char *tcuda_env_set(const char *name, const char *value);
void tcuda_env_restore(const char *name, char *saved);

/* A config the CUDA backend takes, from a shared-grid config: float32 and
 * float64 become `lowp`, head dims round up to multiples of 8, thread
 * counts are dropped. A PADDED layout stays PADDED: tcuda_case_init pads
 * by whole 16-byte units (see below). */
test_config tcuda_config(test_config c, flashc_dtype lowp);

/* Re-create the tensor `t` (over allocation `a` of tc) over a new,
 * poisoned allocation whose dims are padded: the last by `pad_last`
 * elements with the view starting `origin_last` into it, every other dim
 * by 1 or 2 with the view starting `origin_other` into it. The values are
 * copied. Aligned padding (16, 8, 1) keeps rows 16-byte aligned for head
 * dims that are multiples of 8; (3, 0, 0) gives misaligned row strides,
 * (8, 1, 0) a misaligned base. */
void tcuda_repad(flashc_tensor *t, test_alloc *a, int64_t pad_last, int64_t origin_last,
                 int64_t origin_other);

#define TCUDA_ALLOCS 15

typedef struct tcuda_case {
    test_case tc;                 /* host: inputs, outputs copied back */
    void *dev[TCUDA_ALLOCS];      /* device mirror of each allocation */
    size_t dev_size[TCUDA_ALLOCS];
    /* The same tensors over the device mirror. */
    flashc_tensor q, k, v, out, lse, s_dmask, dout, dlse, dq, dk, dv, cu_q, cu_k, seqused, alibi;
    flashc_forward_args fwd;      /* over the device tensors */
    flashc_backward_args bwd;
    void *workspace;              /* device */
    size_t workspace_bytes;
    /* The forward's scratch (flashc_attention_forward_allocating), made
     * on its first request and NaN-poisoned on every one. */
    void *scratch;
    size_t scratch_bytes;
    int scratch_requests;         /* forward calls that asked for it */
    void *stream;                 /* options.stream of every call */
} tcuda_case;

/* test_case_init, then (PADDED layout) aligned padding of q, k, v, out,
 * dout, dq, dk, dv and s_dmask and odd padding of lse, dlse and the ALiBi
 * slopes (no alignment is asked of those), then the device mirror.
 * Returns 0 on success. */
int tcuda_case_init(tcuda_case *c, const test_config *cfg, uint64_t seed, void *stream);
/* Upload the host allocations again (after tcuda_repad or host edits). */
int tcuda_case_upload(tcuda_case *c);
void tcuda_case_free(tcuda_case *c);

/* Poison out, lse and s_dmask on the device, run the forward there
 * (flashc_attention_forward_allocating: scratch from the case, poisoned
 * before each use), copy them back into c->tc. A launch or kernel failure
 * is printed and returned as FLASHC_ERROR_BACKEND. */
flashc_status tcuda_forward(tcuda_case *c);
/* Poison dq, dk, dv, size, allocate and poison the workspace on the
 * device, run the backward there, copy dq, dk, dv back into c->tc. */
flashc_status tcuda_backward(tcuda_case *c);

/* Copies of allocation `a` of the case as it is now on the device, for
 * byte comparisons; free() the result. */
unsigned char *tcuda_fetch(const tcuda_case *c, const test_alloc *a);

/* Non-zero when every byte of the device workspace of the last
 * tcuda_backward is still poison (or there was none). */
int tcuda_workspace_untouched(const tcuda_case *c);

/* The forward again on `stream`: out, lse and s_dmask must be
 * byte-identical to what c->tc holds now. Returns the number of failures
 * (printed). */
int tcuda_check_repeatable(tcuda_case *c, void *stream);

/* Statistics of the S_dmask comparison with the CPU backend. */
typedef struct tcuda_mask_stats {
    int64_t visible;     /* visible entries compared */
    int64_t signed_both; /* non-zero on both sides: the sign is the mask */
    int64_t dropped;     /* of those, negative (dropped) */
} tcuda_mask_stats;

/* Run the CPU backend on the same inputs (float32 accumulation) and
 * compare every element of out and lse (and s_dmask: magnitudes close,
 * dropout sign equal bit for bit to the CPU's and to the reference's
 * Philox mask wherever the value is non-zero) with what the GPU wrote
 * (in c->tc). Tolerances, relative to the CPU's largest magnitude: out
 * one ulp of the dtype twice over plus half an ulp of max|v| / (1 - p)
 * (the GPU rounds P to the dtype before P·V); lse 2^-14; s_dmask one ulp
 * at 1. Afterwards c->tc holds the CPU's outputs. Returns failures. */
int tcuda_check_against_cpu(tcuda_case *c, tcuda_mask_stats *stats);

/* Run the CPU backend's backward on the same inputs (and the same out and
 * lse, those now in c->tc) and compare every element of dq, dk, dv with
 * what the GPU wrote (in c->tc): within 4 ulp of the dtype at the
 * tensor's largest magnitude (at least a sixteenth of the largest
 * gradient of the case). Afterwards c->tc holds the CPU's gradients.
 * Returns failures. */
int tcuda_check_backward_against_cpu(tcuda_case *c);

/* One config end to end: forward on the GPU (on `stream`), every element
 * against the reference (test_check_forward), a repeat on the other stream
 * bit for bit, the CPU backend on the same inputs. With `backward`, also
 * the backward on the GPU against the reference and against the CPU
 * backend's. Returns failures. */
int tcuda_run_case(const test_config *cfg, uint64_t seed, void *stream, int backward);

/* Runs the configs (a third of them under FLASHC_TEST_QUICK), every other
 * one on the side stream, several at a time on host threads that also
 * share the heads of each case's reference checks (the slow part); prints
 * a summary and fails (cmocka) if any failed. */
void tcuda_run_cases(const char *name, const test_config *cfgs, int count, int backward);

#endif
