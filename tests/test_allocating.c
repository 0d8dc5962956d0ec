/* The entry points that take the caller's allocator.
 *
 * flashc_attention_backward_allocating: the backward in one call, its
 * workspace from the caller's allocator or (CPU, allocate NULL) from the
 * library. Its results are those of the workspace-size query followed by
 * flashc_attention_backward, bit for bit, and correct against the
 * reference; the allocator is called once, with the size the query reports
 * and the tensors' device, and only after every argument check passed; a
 * failed allocation, workspace fields that are set, and (CUDA) a missing
 * allocator fail with FLASHC_ERROR_WORKSPACE and write nothing. Every other
 * invalid argument is run through it in test_errors.c.
 *
 * flashc_attention_forward_allocating on the CPU: the same bytes as
 * flashc_attention_forward, the allocator never called (only the CUDA
 * portable kernels take scratch; test_cuda_forward.c checks those). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* An allocator that records its calls and hands out malloc'ed memory (or
 * NULL when `fail` is set); the memory is freed by allocator_release. */
typedef struct recording_allocator {
    int calls;
    size_t bytes;
    flashc_device device;
    int fail;
    void *memory;
} recording_allocator;

static void *recording_allocate(void *context, size_t bytes, flashc_device device) {
    recording_allocator *a = context;
    a->calls += 1;
    a->bytes = bytes;
    a->device = device;
    if (a->fail) return NULL;
    free(a->memory);
    a->memory = malloc(bytes);
    /* the library must not rely on the memory's contents */
    if (a->memory) memset(a->memory, 0xFF, bytes);
    return a->memory;
}

static void allocator_release(recording_allocator *a) {
    free(a->memory);
    a->memory = NULL;
}

static const test_alloc *gradients(const test_case *tc, int i) {
    const test_alloc *all[3] = {&tc->a_dq, &tc->a_dk, &tc->a_dv};
    return all[i];
}

static void poison_gradients(test_case *tc) {
    test_alloc_poison(&tc->a_dq);
    test_alloc_poison(&tc->a_dk);
    test_alloc_poison(&tc->a_dv);
}

/* Whether dq, dk, dv hold exactly the bytes in `saved` (a packed layout
 * keeps all three in dq's allocation: the others are empty). */
static int same_gradients(const test_case *tc, unsigned char *const saved[3]) {
    for (int i = 0; i < 3; ++i) {
        const test_alloc *a = gradients(tc, i);
        if (a->size && memcmp(a->bytes, saved[i], a->size) != 0) return 0;
    }
    return 1;
}

/* The one-call backward (allocate NULL, then a recording allocator) against
 * the two-call backward on the same problem, and against the reference. */
static int check_config(const test_config *cfg, uint64_t seed) {
    char desc[768];
    test_config_describe(cfg, desc, sizeof desc);
    test_case tc;
    if (test_case_init(&tc, cfg, seed) != 0 || test_case_forward(&tc) != FLASHC_SUCCESS ||
        test_case_backward(&tc) != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL setting up [%s]: %s\n", desc, flashc_last_error_message());
        test_case_free(&tc);
        return 1;
    }
    int fails = 0;
    size_t query = tc.workspace_bytes; /* what test_case_backward was told */
    unsigned char *saved[3];
    for (int i = 0; i < 3; ++i) {
        const test_alloc *a = gradients(&tc, i);
        saved[i] = malloc(a->size ? a->size : 1);
        if (a->size) memcpy(saved[i], a->bytes, a->size);
    }
    flashc_backward_args args = tc.bwd;
    args.workspace = NULL;
    args.workspace_bytes = 0;

    poison_gradients(&tc);
    flashc_status st = flashc_attention_backward_allocating(&args, NULL, NULL);
    if (st != FLASHC_SUCCESS || !same_gradients(&tc, saved)) {
        fprintf(stderr, "FAIL allocate NULL [%s]: %s (%s), gradients %s the two-call ones\n",
                desc, flashc_status_string(st), flashc_last_error_message(),
                same_gradients(&tc, saved) ? "equal" : "differ from");
        ++fails;
    }

    recording_allocator rec = {0};
    poison_gradients(&tc);
    st = flashc_attention_backward_allocating(&args, recording_allocate, &rec);
    int calls_expected = query > 0;
    if (st != FLASHC_SUCCESS || !same_gradients(&tc, saved) || rec.calls != calls_expected ||
        (calls_expected && (rec.bytes != query || rec.device.type != FLASHC_DEVICE_CPU ||
                            rec.device.index != 0))) {
        fprintf(stderr,
                "FAIL allocator [%s]: %s (%s); %d call(s) for %zu bytes on device %d:%d "
                "(want %d for %zu on 0:0); gradients %s\n",
                desc, flashc_status_string(st), flashc_last_error_message(), rec.calls, rec.bytes,
                (int)rec.device.type, rec.device.index, calls_expected, query,
                same_gradients(&tc, saved) ? "equal" : "differ");
        ++fails;
    }
    allocator_release(&rec);
    /* the reference, on what the one-call backward wrote */
    fails += test_check_backward(&tc);
    for (int i = 0; i < 3; ++i) free(saved[i]);
    test_case_free(&tc);
    return fails;
}

/* Problems of every kind the entry points take (five). */
static int sample_configs(test_config cfgs[5]) {
    /* GQA, ALiBi (b, h), dropout, dLSE, causal with sq != sk, lengths
     * that are no multiple of any tile */
    cfgs[0] = test_config_shaped(FLASHC_DTYPE_FLOAT32, 2, 4, 2, 24, 40, 37, 70);
    cfgs[0].alibi = 2;
    cfgs[0].with_dlse = 1;
    cfgs[0].options.causal = 1;
    cfgs[0].options.dropout_p = 0.2;
    cfgs[0].options.dropout_seed = 7;
    /* varlen: an empty sequence, seqused_k, gap rows, a window */
    cfgs[1] = test_config_shaped(FLASHC_DTYPE_BFLOAT16, 3, 2, 1, 64, 64, 0, 0);
    cfgs[1].varlen = 1;
    cfgs[1].lens_q[0] = 65, cfgs[1].lens_q[1] = 0, cfgs[1].lens_q[2] = 3;
    cfgs[1].lens_k[0] = 50, cfgs[1].lens_k[1] = 9, cfgs[1].lens_k[2] = 131;
    cfgs[1].use_seqused_k = 1;
    cfgs[1].seqused_k[0] = 50, cfgs[1].seqused_k[1] = 4, cfgs[1].seqused_k[2] = 100;
    cfgs[1].varlen_gap_rows = 2;
    cfgs[1].options.window_left = 17;
    cfgs[1].options.window_right = 3;
    /* float64, softcap, one row */
    cfgs[2] = test_config_shaped(FLASHC_DTYPE_FLOAT64, 1, 3, 3, 8, 8, 1, 5);
    cfgs[2].options.softcap = 2.5;
    /* q, k, v and dq, dk, dv as views of one buffer, float16 */
    cfgs[3] = test_config_shaped(FLASHC_DTYPE_FLOAT16, 2, 2, 2, 32, 32, 97, 97);
    cfgs[3].layout = TEST_LAYOUT_PACKED;
    /* the smallest problem: one row, one key, head dim 1 */
    cfgs[4] = test_config_shaped(FLASHC_DTYPE_FLOAT32, 1, 1, 1, 1, 1, 1, 1);
    return 5;
}

static void results_equal_the_two_call_backward(void **state) {
    (void)state;
    test_config cfgs[5];
    sample_configs(cfgs);
    int fails = 0;
    for (int i = 0; i < 5; ++i) {
        cfgs[i].with_lse = 1;
        fails += check_config(&cfgs[i], test_seed("backward_allocating", (uint64_t)i));
    }
    if (fails) fail_msg("%d check(s) of the one-call backward failed (details above)", fails);
}

/* A valid CPU problem whose backward needs a workspace, its gradients
 * poisoned. */
static void valid_case(test_case *tc) {
    test_config c = test_config_shaped(FLASHC_DTYPE_FLOAT32, 2, 2, 1, 16, 16, 19, 23);
    c.with_lse = 1;
    assert_int_equal(test_case_init(tc, &c, test_seed("backward_allocating valid", 0)), 0);
    assert_int_equal(test_case_forward(tc), FLASHC_SUCCESS);
    tc->bwd.workspace = NULL;
    tc->bwd.workspace_bytes = 0;
    poison_gradients(tc);
}

/* Every byte of dq, dk, dv still the poison (test_alloc_poison). */
static void assert_gradients_untouched(const test_case *tc) {
    for (int i = 0; i < 3; ++i) {
        const test_alloc *a = gradients(tc, i);
        for (size_t x = 0; x < a->size; ++x) assert_int_equal(a->bytes[x], 0xFF);
    }
}

static void failed_allocation_writes_nothing(void **state) {
    (void)state;
    test_case tc;
    valid_case(&tc);
    size_t bytes = 0;
    assert_int_equal(flashc_attention_backward_workspace_size(&tc.bwd, &bytes), FLASHC_SUCCESS);
    assert_true(bytes > 0);
    recording_allocator rec = {.fail = 1};
    assert_int_equal(flashc_attention_backward_allocating(&tc.bwd, recording_allocate, &rec),
                     FLASHC_ERROR_WORKSPACE);
    assert_non_null(strstr(flashc_last_error_message(), "allocate"));
    assert_int_equal(rec.calls, 1);
    assert_int_equal(rec.bytes, bytes);
    assert_gradients_untouched(&tc);
    test_case_free(&tc);
}

static void workspace_fields_must_be_empty(void **state) {
    (void)state;
    test_case tc;
    valid_case(&tc);
    unsigned char spare[256];
    for (int which = 0; which < 3; ++which) {
        flashc_backward_args args = tc.bwd;
        args.workspace = which != 1 ? spare : NULL;
        args.workspace_bytes = which != 0 ? sizeof spare : 0;
        recording_allocator rec = {0};
        assert_int_equal(flashc_attention_backward_allocating(&args, recording_allocate, &rec),
                         FLASHC_ERROR_WORKSPACE);
        assert_non_null(strstr(flashc_last_error_message(), "workspace"));
        assert_int_equal(rec.calls, 0);
        assert_int_equal(flashc_attention_backward_allocating(&args, NULL, NULL),
                         FLASHC_ERROR_WORKSPACE);
        assert_gradients_untouched(&tc);
    }
    test_case_free(&tc);
}

static void null_arguments_never_allocate(void **state) {
    (void)state;
    recording_allocator rec = {0};
    assert_int_equal(flashc_attention_backward_allocating(NULL, recording_allocate, &rec),
                     FLASHC_ERROR_NULL_POINTER);
    assert_true(strlen(flashc_last_error_message()) > 0);
    assert_int_equal(rec.calls, 0);
    test_case tc;
    valid_case(&tc);
    tc.bwd.dq = NULL;
    assert_int_equal(flashc_attention_backward_allocating(&tc.bwd, recording_allocate, &rec),
                     FLASHC_ERROR_NULL_POINTER);
    assert_non_null(strstr(flashc_last_error_message(), "dq"));
    assert_int_equal(rec.calls, 0);
    assert_gradients_untouched(&tc);
    test_case_free(&tc);
}

/* A successful call clears the message of a failed one. */
static void success_clears_the_message(void **state) {
    (void)state;
    test_case tc;
    valid_case(&tc);
    assert_int_equal(flashc_attention_backward_allocating(NULL, NULL, NULL),
                     FLASHC_ERROR_NULL_POINTER);
    assert_int_equal(flashc_attention_backward_allocating(&tc.bwd, NULL, NULL), FLASHC_SUCCESS);
    assert_string_equal(flashc_last_error_message(), "");
    test_case_free(&tc);
}

/* CUDA tensors: the allocator is asked for memory on their device, and
 * without one the call fails; both before anything is launched (the
 * tensors' pointers are never dereferenced here: every call fails before
 * a kernel could read them). Skipped without a usable GPU. */
static void cuda_workspace_comes_from_the_caller(void **state) {
    (void)state;
    if (!flashc_cuda_available()) {
        printf("note: no usable CUDA device, skipped\n");
        skip();
    }
    flashc_device gpu = {FLASHC_DEVICE_CUDA, 0};
    int64_t shape[4] = {1, 64, 2, 64}, lse_shape[3] = {1, 2, 64};
    /* distinct, 256-byte aligned fake addresses, far apart */
    char *base = (char *)(uintptr_t)0x7f0000000000ULL;
    flashc_tensor t[9];
    for (int i = 0; i < 9; ++i)
        t[i] = flashc_tensor_contiguous(base + ((size_t)i << 24),
                                        i == 5 ? FLASHC_DTYPE_FLOAT32 : FLASHC_DTYPE_BFLOAT16, gpu,
                                        i == 5 ? 3 : 4, i == 5 ? lse_shape : shape);
    flashc_backward_args args = {0};
    args.dout = &t[0], args.q = &t[1], args.k = &t[2], args.v = &t[3], args.out = &t[4];
    args.lse = &t[5], args.dq = &t[6], args.dk = &t[7], args.dv = &t[8];
    args.options = flashc_attention_options_default();
    size_t bytes = 0;
    assert_int_equal(flashc_attention_backward_workspace_size(&args, &bytes), FLASHC_SUCCESS);
    if (bytes == 0) {
        printf("note: this CUDA backward needs no workspace, skipped\n");
        skip();
    }
    assert_int_equal(flashc_attention_backward_allocating(&args, NULL, NULL),
                     FLASHC_ERROR_WORKSPACE);
    assert_non_null(strstr(flashc_last_error_message(), "allocate"));
    recording_allocator rec = {.fail = 1};
    assert_int_equal(flashc_attention_backward_allocating(&args, recording_allocate, &rec),
                     FLASHC_ERROR_WORKSPACE);
    assert_int_equal(rec.calls, 1);
    assert_int_equal(rec.bytes, bytes);
    assert_int_equal(rec.device.type, FLASHC_DEVICE_CUDA);
    assert_int_equal(rec.device.index, 0);
}

/* The forward with an allocator on the CPU: out and lse bit for bit those
 * of flashc_attention_forward, with or without an allocator, which is
 * never called. */
static void forward_on_the_cpu_takes_no_scratch(void **state) {
    (void)state;
    test_config cfgs[5];
    const int n = sample_configs(cfgs);
    int failed = 0;
    for (int i = 0; i < n; ++i) {
        test_case tc;
        if (test_case_init(&tc, &cfgs[i], test_seed("forward allocating", (uint64_t)i)) != 0 ||
            test_case_forward(&tc) != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL setting up forward case %d: %s\n", i, flashc_last_error_message());
            test_case_free(&tc);
            ++failed;
            continue;
        }
        unsigned char *out = malloc(tc.a_out.size + 1), *lse = malloc(tc.a_lse.size + 1);
        memcpy(out, tc.a_out.bytes, tc.a_out.size);
        memcpy(lse, tc.a_lse.bytes, tc.a_lse.size);
        recording_allocator rec = {0};
        for (int with = 0; with < 2; ++with) {
            test_alloc_poison(&tc.a_out);
            test_alloc_poison(&tc.a_lse);
            const flashc_status st =
                flashc_attention_forward_allocating(&tc.fwd, with ? recording_allocate : NULL, with ? &rec : NULL);
            if (st != FLASHC_SUCCESS || memcmp(out, tc.a_out.bytes, tc.a_out.size) != 0 ||
                memcmp(lse, tc.a_lse.bytes, tc.a_lse.size) != 0 || rec.calls != 0) {
                fprintf(stderr, "FAIL forward case %d (allocator %s): %s (%s), %d allocator call(s), outputs %s\n", i,
                        with ? "given" : "NULL", flashc_status_string(st), flashc_last_error_message(), rec.calls,
                        memcmp(out, tc.a_out.bytes, tc.a_out.size) ? "differ" : "equal");
                ++failed;
            }
        }
        allocator_release(&rec);
        free(out);
        free(lse);
        test_case_free(&tc);
    }
    assert_true(n > 0);
    assert_int_equal(failed, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(results_equal_the_two_call_backward),
        cmocka_unit_test(failed_allocation_writes_nothing),
        cmocka_unit_test(workspace_fields_must_be_empty),
        cmocka_unit_test(null_arguments_never_allocate),
        cmocka_unit_test(success_clears_the_message),
        cmocka_unit_test(cuda_workspace_comes_from_the_caller),
        cmocka_unit_test(forward_on_the_cpu_takes_no_scratch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
