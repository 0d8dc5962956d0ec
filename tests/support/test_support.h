/*
 * Shared machinery of the flashc C tests: seeded random numbers, tensors
 * over poisoned allocations (contiguous, padded, permuted or packed views),
 * whole attention problems built from a small config, and their comparison
 * with the independent double-precision reference.
 *
 * Every output and workspace is filled with NaN (all bytes 0xFF, a NaN in
 * every float dtype) before each call; every element of every output is
 * checked, and the bytes of an allocation outside its views must still be
 * poison afterwards.
 */
#ifndef FLASHC_TEST_SUPPORT_H
#define FLASHC_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "flashc.h"
#include "flashc_reference.h"

/* ---- Environment ------------------------------------------------------ */

/* FLASHC_TEST_QUICK=1 shrinks the big cases (sanitizer builds). */
int test_quick(void);
/* FLASHC_TEST_VERBOSE=1: per-case progress and timings on stderr. */
int test_verbose(void);
/* Base seed: FLASHC_TEST_SEED or a fixed default. */
uint64_t test_base_seed(void);
/* A fresh seed for the n-th check of a test (distinct per name and n). */
uint64_t test_seed(const char *test_name, uint64_t n);

/* ---- Parallel loops --------------------------------------------------- */

/* Calls fn(i, ctx) for every i in [0, n), in any order, on the OpenMP
 * threads; returns when every call has returned. Inside a parallel region
 * the calls become tasks of that region (cases run as tasks of one region
 * share the threads with the checks inside them), elsewhere they get a
 * region of their own. */
void test_parallel_for(int64_t n, void (*fn)(int64_t i, void *ctx), void *ctx);

/* ---- Random numbers --------------------------------------------------- */

typedef struct test_rng {
    uint64_t state;
} test_rng;

void test_rng_init(test_rng *rng, uint64_t seed);
uint64_t test_rng_u64(test_rng *rng);
double test_rng_uniform(test_rng *rng, double lo, double hi); /* [lo, hi) */
double test_rng_normal(test_rng *rng);                          /* N(0, 1) */
int64_t test_rng_int(test_rng *rng, int64_t lo, int64_t hi);    /* [lo, hi] */

/* ---- Tensors over poisoned allocations -------------------------------- */

typedef enum test_layout {
    TEST_LAYOUT_CONTIGUOUS = 0,
    TEST_LAYOUT_PADDED,     /* every dim padded, view offset into it */
    TEST_LAYOUT_HEAD_MAJOR, /* memory (b, h, s, d) / (h, t, d) */
    TEST_LAYOUT_SEQ_MAJOR,  /* memory (s, b, h, d); varlen: padded */
    TEST_LAYOUT_PACKED      /* q, k, v (and dq, dk, dv) as views of one
                               (b, s, h + 2 hk, d) / (t, h + 2 hk, d)
                               buffer: needs d == dv and sq == sk */
} test_layout;

const char *test_layout_name(test_layout layout);

/* One allocation (filled with 0xFF) and up to three views into it. */
typedef struct test_alloc {
    unsigned char *bytes;
    size_t size;
} test_alloc;

void test_alloc_init(test_alloc *a, size_t size);
void test_alloc_free(test_alloc *a);
void test_alloc_poison(test_alloc *a);

/* A view of `rank` logical dims over `a`: physical dims `alloc_shape`
 * (row-major), logical dim i is physical dim perm[i], starting at physical
 * index `origin`. */
flashc_tensor test_view(test_alloc *a, flashc_dtype dtype, int rank, const int64_t *shape,
                        const int64_t *alloc_shape, const int *perm, const int64_t *origin);

/* Allocate a tensor of `shape` in `layout` (PACKED is treated as PADDED
 * here): the tensor describes a view into `a`, which it owns. The
 * permuted layouts apply to sequence tensors (q/k/v-like, seq_tensor != 0);
 * other tensors take them as PADDED. */
flashc_tensor test_tensor_new(test_alloc *a, flashc_dtype dtype, int rank, const int64_t *shape,
                              test_layout layout, int seq_tensor);

/* Number of elements of a tensor's logical shape. */
int64_t test_numel(const flashc_tensor *t);
/* Calls fn(index) for every logical index of t. */
void test_for_each(const flashc_tensor *t, void (*fn)(const int64_t *index, void *ctx),
                   void *ctx);
/* Fill every element of the view with N(0,1) * scale (rounded to dtype). */
void test_fill_normal(flashc_tensor *t, test_rng *rng, double scale);
/* Bytes of `a` outside every view in `views` (count of them) that are not
 * poison anymore. Returns their number (0 = untouched). */
int64_t test_untouched_violations(const test_alloc *a, const flashc_tensor *const *views,
                                  int count);
/* Number of NaN elements in the view (it must have been written). */
int64_t test_count_nan(const flashc_tensor *t);

/* ---- Attention problems ----------------------------------------------- */

#define TEST_MAX_BATCH 16

typedef struct test_config {
    flashc_dtype dtype;
    int64_t batch, nheads, nheads_k, d, dv;
    int64_t seqlen_q, seqlen_k; /* batched */
    int varlen;
    int64_t lens_q[TEST_MAX_BATCH], lens_k[TEST_MAX_BATCH]; /* varlen */
    int use_seqused_k;
    /* varlen: packed rows before the first and after the last sequence
     * (cu_seqlens start there); the library writes them as rows that see
     * nothing: out 0, LSE +inf, zero gradients. */
    int64_t varlen_gap_rows;
    /* varlen: k and v rows no sequence uses (gap rows, rows past seqused_k)
     * hold NaN, which must not reach any output. */
    int nan_unused_kv;
    int64_t seqused_k[TEST_MAX_BATCH];
    test_layout layout;
    int alibi;        /* 0 off, 1 slopes (h), 2 slopes (b, h) */
    int with_lse;     /* forward writes lse (backward always uses it) */
    int with_sdmask;  /* forward writes s_dmask */
    int with_dlse;    /* backward takes dlse */
    double input_scale; /* q, k drawn as N(0, input_scale^2); 0 = 1 */
    flashc_attention_options options;
} test_config;

/* Defaults: float64, b 2, h 4, hk 2, d 16, dv 16, sq 17, sk 23, lse on. */
test_config test_config_default(void);
/* The defaults with this dtype and shape. */
test_config test_config_shaped(flashc_dtype dtype, int64_t batch, int64_t nheads, int64_t nheads_k,
                               int64_t d, int64_t dv, int64_t seqlen_q, int64_t seqlen_k);
/* One line describing cfg, for failure messages. */
void test_config_describe(const test_config *cfg, char *buffer, size_t size);

typedef struct test_case {
    test_config cfg;
    uint64_t seed;
    test_alloc a_q, a_k, a_v, a_out, a_lse, a_sdmask, a_dout, a_dlse, a_dq, a_dk, a_dv;
    test_alloc a_cu_q, a_cu_k, a_seqused, a_alibi;
    flashc_tensor q, k, v, out, lse, s_dmask, dout, dlse, dq, dk, dv;
    flashc_tensor cu_q, cu_k, seqused, alibi;
    void *workspace;
    size_t workspace_bytes;
    flashc_forward_args fwd;
    flashc_backward_args bwd;
} test_case;

/* Build every tensor of cfg with fresh random inputs from `seed`. Outputs
 * are poisoned. Returns 0 on success. */
int test_case_init(test_case *tc, const test_config *cfg, uint64_t seed);
void test_case_free(test_case *tc);

/* Poison the forward outputs, run the forward. */
flashc_status test_case_forward(test_case *tc);
/* Poison dq/dk/dv, query the workspace size, allocate and poison the
 * workspace, run the backward (on the forward's out and lse). */
flashc_status test_case_backward(test_case *tc);

/* ---- Checks against the reference ------------------------------------- */

typedef struct test_error_stats {
    double lib_err;   /* max |flashc - reference| */
    double naive_err; /* max |plain same-precision computation - reference| */
    double ref_max;   /* max |reference| */
    double allowed;
    int64_t count;
} test_error_stats;

/* Compare the forward outputs with the reference (and, for low precision,
 * with a plain same-precision computation for the tolerance). Prints every
 * problem (with the config and seed) and returns the number of failures. */
int test_check_forward(const test_case *tc);
/* Same for dq, dk, dv (call after test_case_backward). */
int test_check_backward(const test_case *tc);

/* Run forward (+ backward when `backward`) and check; returns failures. */
int test_run_case(const test_config *cfg, uint64_t seed, int backward);

/* The tolerance rule: low precision (bfloat16, float16): flashc's max
 * error at most twice that of the plain same-precision computation plus
 * one ulp of `dtype` at the largest magnitude; float32: twice the plain
 * error plus (8 + lse_max) ulp (see test_check.c for why; lse_max is the
 * largest |LSE| a backward works from, 0 for the forward); float64: 1e-10
 * relative. */
double test_allowed_error(flashc_dtype dtype, double naive_err, double ref_max, double lse_max);

/* Runs `count` configs, prints a summary line, fails (cmocka) if any
 * failed. */
void test_run_cases(const char *name, const test_config *cfgs, int count, int backward);

#endif /* FLASHC_TEST_SUPPORT_H */
