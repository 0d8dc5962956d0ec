/* The small public helpers: status strings, version, dtype sizes,
 * contiguous descriptors, option defaults, and the thread-local message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "test_support.h"

static void status_strings(void **state) {
    (void)state;
    static const struct {
        flashc_status status;
        const char *name;
    } all[] = {
        {FLASHC_SUCCESS, "FLASHC_SUCCESS"},
        {FLASHC_ERROR_NULL_POINTER, "FLASHC_ERROR_NULL_POINTER"},
        {FLASHC_ERROR_DTYPE, "FLASHC_ERROR_DTYPE"},
        {FLASHC_ERROR_DEVICE, "FLASHC_ERROR_DEVICE"},
        {FLASHC_ERROR_RANK, "FLASHC_ERROR_RANK"},
        {FLASHC_ERROR_SHAPE, "FLASHC_ERROR_SHAPE"},
        {FLASHC_ERROR_STRIDE, "FLASHC_ERROR_STRIDE"},
        {FLASHC_ERROR_HEAD_DIM, "FLASHC_ERROR_HEAD_DIM"},
        {FLASHC_ERROR_HEAD_GROUPS, "FLASHC_ERROR_HEAD_GROUPS"},
        {FLASHC_ERROR_CU_SEQLENS, "FLASHC_ERROR_CU_SEQLENS"},
        {FLASHC_ERROR_DROPOUT, "FLASHC_ERROR_DROPOUT"},
        {FLASHC_ERROR_WINDOW, "FLASHC_ERROR_WINDOW"},
        {FLASHC_ERROR_SOFTCAP, "FLASHC_ERROR_SOFTCAP"},
        {FLASHC_ERROR_SCALE, "FLASHC_ERROR_SCALE"},
        {FLASHC_ERROR_WORKSPACE, "FLASHC_ERROR_WORKSPACE"},
        {FLASHC_ERROR_ARGUMENT, "FLASHC_ERROR_ARGUMENT"},
        {FLASHC_ERROR_UNSUPPORTED, "FLASHC_ERROR_UNSUPPORTED"},
        {FLASHC_ERROR_BACKEND, "FLASHC_ERROR_BACKEND"},
    };
    size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; ++i) {
        const char *s = flashc_status_string(all[i].status);
        assert_non_null(s);
        if (!strstr(s, all[i].name)) fail_msg("status %d: \"%s\" does not name %s", (int)all[i].status, s, all[i].name);
        /* the name is followed by a description, and no two share a string */
        if (strlen(s) <= strlen(all[i].name)) fail_msg("status %s has no description", all[i].name);
        for (size_t j = 0; j < i; ++j) assert_string_not_equal(s, flashc_status_string(all[j].status));
        /* a longer name must not be the match: e.g. ..._ERROR_HEAD_DIM vs ..._HEAD_GROUPS */
        for (size_t j = 0; j < n; ++j)
            if (j != i && strlen(all[j].name) > strlen(all[i].name) && strstr(s, all[j].name))
                fail_msg("status %s string \"%s\" names %s", all[i].name, s, all[j].name);
    }
    const char *unknown = flashc_status_string((flashc_status)1000);
    assert_non_null(unknown);
    assert_true(strlen(unknown) > 0);
    unknown = flashc_status_string((flashc_status)-1);
    assert_non_null(unknown);
    assert_true(strlen(unknown) > 0);
}

static void version(void **state) {
    (void)state;
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", FLASHC_VERSION_MAJOR, FLASHC_VERSION_MINOR,
             FLASHC_VERSION_PATCH);
    assert_non_null(flashc_version());
    assert_string_equal(flashc_version(), want);
}

static void dtype_sizes(void **state) {
    (void)state;
    assert_int_equal(flashc_dtype_size(FLASHC_DTYPE_FLOAT32), 4);
    assert_int_equal(flashc_dtype_size(FLASHC_DTYPE_FLOAT16), 2);
    assert_int_equal(flashc_dtype_size(FLASHC_DTYPE_BFLOAT16), 2);
    assert_int_equal(flashc_dtype_size(FLASHC_DTYPE_FLOAT64), 8);
    assert_int_equal(flashc_dtype_size(FLASHC_DTYPE_INT32), 4);
    assert_int_equal(flashc_dtype_size((flashc_dtype)77), 0);
}

static void contiguous_descriptor(void **state) {
    (void)state;
    float data[1];
    flashc_device cpu = {FLASHC_DEVICE_CPU, 0};
    int64_t shape[4] = {2, 3, 5, 7};
    flashc_tensor t = flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 4, shape);
    assert_ptr_equal(t.data, data);
    assert_int_equal(t.dtype, FLASHC_DTYPE_FLOAT32);
    assert_int_equal(t.device.type, FLASHC_DEVICE_CPU);
    assert_int_equal(t.rank, 4);
    int64_t want_stride[4] = {105, 35, 7, 1};
    for (int i = 0; i < 4; ++i) {
        assert_int_equal(t.shape[i], shape[i]);
        assert_int_equal(t.stride[i], want_stride[i]);
    }
    t = flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 2, shape);
    assert_int_equal(t.rank, 2);
    assert_int_equal(t.stride[0], 3);
    assert_int_equal(t.stride[1], 1);
    assert_int_equal(flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 0, shape).rank, 0);
    assert_int_equal(flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 5, shape).rank, 0);
    assert_int_equal(flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 2, NULL).rank, 0);
    /* an element count beyond int64 is refused the same way */
    int64_t huge[4] = {INT64_MAX / 2, 4, 1, 1};
    assert_int_equal(flashc_tensor_contiguous(data, FLASHC_DTYPE_FLOAT32, cpu, 4, huge).rank, 0);
}

static void option_defaults(void **state) {
    (void)state;
    flashc_attention_options o = flashc_attention_options_default();
    assert_true(o.softmax_scale == 0.0);
    assert_int_equal(o.causal, 0);
    assert_int_equal(o.window_left, -1);
    assert_int_equal(o.window_right, -1);
    assert_true(o.softcap == 0.0);
    assert_null(o.alibi_slopes);
    assert_true(o.dropout_p == 0.0);
    assert_int_equal(o.num_threads, 0);
    assert_null(o.stream);
    int cuda = flashc_cuda_available();
    assert_true(cuda == 0 || cuda == 1);
}

/* A small valid problem for the message tests. */
static void small_case(test_case *tc) {
    test_config c = test_config_default();
    c.seqlen_q = 5;
    c.seqlen_k = 6;
    assert_int_equal(test_case_init(tc, &c, test_seed("api", 0)), 0);
}

static void *other_thread(void *arg) {
    test_case *tc = arg;
    static char result[256];
    /* a fresh thread starts with no message; its own failure does not
     * leak into the thread that started it */
    snprintf(result, sizeof result, "%s", flashc_last_error_message());
    flashc_attention_options saved = tc->fwd.options;
    tc->fwd.options.softcap = -1.0;
    if (flashc_attention_forward(&tc->fwd) != FLASHC_ERROR_SOFTCAP) snprintf(result, sizeof result, "no error");
    tc->fwd.options = saved;
    return result;
}

static void thread_local_message(void **state) {
    (void)state;
    test_case tc;
    small_case(&tc);
    assert_int_equal(test_case_forward(&tc), FLASHC_SUCCESS);
    assert_string_equal(flashc_last_error_message(), "");
    tc.fwd.options.dropout_p = 2.0;
    assert_int_equal(flashc_attention_forward(&tc.fwd), FLASHC_ERROR_DROPOUT);
    char mine[512];
    snprintf(mine, sizeof mine, "%s", flashc_last_error_message());
    assert_non_null(strstr(mine, "dropout_p"));
    tc.fwd.options.dropout_p = 0.0;
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, other_thread, &tc), 0);
    void *theirs = NULL;
    assert_int_equal(pthread_join(thread, &theirs), 0);
    assert_string_equal((const char *)theirs, "");
    assert_string_equal(flashc_last_error_message(), mine);
    /* a successful call clears it */
    assert_int_equal(test_case_forward(&tc), FLASHC_SUCCESS);
    assert_string_equal(flashc_last_error_message(), "");
    test_case_free(&tc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(status_strings),        cmocka_unit_test(version),
        cmocka_unit_test(dtype_sizes),           cmocka_unit_test(contiguous_descriptor),
        cmocka_unit_test(option_defaults),       cmocka_unit_test(thread_local_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
