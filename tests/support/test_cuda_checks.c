/* CUDA test cases: configs the CUDA backend takes, aligned strided views,
 * the comparison with the CPU backend on the same inputs, and the runner
 * that puts a case through every check. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv, strdup */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_cuda_support.h"

static int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

test_config tcuda_config(test_config c, flashc_dtype lowp) {
    if (c.dtype != FLASHC_DTYPE_FLOAT16 && c.dtype != FLASHC_DTYPE_BFLOAT16) c.dtype = lowp;
    c.d = round8(c.d);
    c.dv = round8(c.dv);
    c.options.num_threads = 0;
    return c;
}

/* ---- Padded views --------------------------------------------------------- */

typedef struct copy_ctx {
    const flashc_tensor *from;
    flashc_tensor *to;
} copy_ctx;

static void copy_one(const int64_t *index, void *ctx) {
    copy_ctx *c = ctx;
    flashc_ref_store(c->to, index, flashc_ref_load(c->from, index));
}

void tcuda_repad(flashc_tensor *t, test_alloc *a, int64_t pad_last, int64_t origin_last,
                 int64_t origin_other) {
    int64_t alloc_shape[FLASHC_MAX_RANK], origin[FLASHC_MAX_RANK];
    int perm[FLASHC_MAX_RANK] = {0, 1, 2, 3};
    int64_t n = 1;
    for (int i = 0; i < t->rank; ++i) {
        int last = i == t->rank - 1;
        alloc_shape[i] = t->shape[i] + (last ? pad_last : 1 + (i & 1));
        origin[i] = last ? origin_last : origin_other;
        n *= alloc_shape[i];
    }
    test_alloc fresh;
    test_alloc_init(&fresh, (size_t)n * flashc_dtype_size(t->dtype));
    flashc_tensor moved = test_view(&fresh, t->dtype, t->rank, t->shape, alloc_shape, perm, origin);
    copy_ctx ctx = {t, &moved};
    test_for_each(t, copy_one, &ctx);
    test_alloc_free(a);
    *a = fresh;
    *t = moved;
}

/* PADDED on the GPU: rows of q/k/v-like tensors and of s_dmask stay 16-byte
 * aligned (whole 8-element units around them), the float32 tensors (lse,
 * dlse, ALiBi slopes) get odd strides: nothing asks them to be aligned. */
static void pad_for_cuda(test_case *tc) {
    struct {
        flashc_tensor *t;
        test_alloc *a;
        int aligned;
    } all[] = {
        {&tc->q, &tc->a_q, 1},       {&tc->k, &tc->a_k, 1},     {&tc->v, &tc->a_v, 1},
        {&tc->out, &tc->a_out, 1},   {&tc->dout, &tc->a_dout, 1}, {&tc->dq, &tc->a_dq, 1},
        {&tc->dk, &tc->a_dk, 1},     {&tc->dv, &tc->a_dv, 1},   {&tc->s_dmask, &tc->a_sdmask, 1},
        {&tc->lse, &tc->a_lse, 0},   {&tc->dlse, &tc->a_dlse, 0}, {&tc->alibi, &tc->a_alibi, 0},
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        if (!all[i].a->bytes || all[i].t->rank == 0) continue;
        if (all[i].aligned) tcuda_repad(all[i].t, all[i].a, 16, 8, 1);
        else tcuda_repad(all[i].t, all[i].a, 3, 1, 1);
    }
}

/* PACKED: test_case_init packs q/k/v (and dq/dk/dv) and pads the other
 * tensors with odd strides; give out, dout and s_dmask aligned rows. */
static void align_packed_companions(test_case *tc) {
    tcuda_repad(&tc->out, &tc->a_out, 16, 8, 1);
    tcuda_repad(&tc->dout, &tc->a_dout, 16, 8, 1);
    tcuda_repad(&tc->s_dmask, &tc->a_sdmask, 16, 8, 1);
}

int tcuda_case_init(tcuda_case *c, const test_config *cfg, uint64_t seed, void *stream) {
    memset(c, 0, sizeof *c);
    test_config host = *cfg;
    int padded = cfg->layout == TEST_LAYOUT_PADDED;
    if (padded) host.layout = TEST_LAYOUT_CONTIGUOUS;
    if (test_case_init(&c->tc, &host, seed) != 0) return -1;
    if (padded) {
        pad_for_cuda(&c->tc);
        c->tc.cfg.layout = TEST_LAYOUT_PADDED;
    }
    if (cfg->layout == TEST_LAYOUT_PACKED) align_packed_companions(&c->tc);
    c->stream = stream;
    return tcuda_case_upload(c);
}

/* ---- Against the CPU backend ---------------------------------------------- */

static int mantissa_bits(flashc_dtype dt) { return dt == FLASHC_DTYPE_FLOAT16 ? 10 : 7; }

/* t over a copy of its allocation a (bytes `copy`) instead of a itself. */
static flashc_tensor over_copy(const flashc_tensor *t, const test_alloc *a, unsigned char *copy) {
    flashc_tensor r = *t;
    r.data = copy + ((unsigned char *)t->data - a->bytes);
    return r;
}

typedef struct max_ctx {
    const flashc_tensor *t;
    double max;
} max_ctx;

static void max_one(const int64_t *index, void *ctx) {
    max_ctx *m = ctx;
    double v = fabs(flashc_ref_load(m->t, index));
    if (isfinite(v) && v > m->max) m->max = v;
}

static double max_abs(const flashc_tensor *t) {
    max_ctx m = {t, 0.0};
    test_for_each(t, max_one, &m);
    return m.max;
}

typedef struct diff_ctx {
    const flashc_tensor *cpu, *gpu;
    double max_diff, max_cpu;
    int64_t mismatched_special; /* inf/NaN on one side, not the same on the other */
    int64_t worst[FLASHC_MAX_RANK];
    double worst_cpu, worst_gpu;
} diff_ctx;

static void diff_one(const int64_t *index, void *ctx) {
    diff_ctx *d = ctx;
    double a = flashc_ref_load(d->cpu, index), b = flashc_ref_load(d->gpu, index);
    if (!isfinite(a) || !isfinite(b)) {
        if (!(a == b)) ++d->mismatched_special;
        return;
    }
    if (fabs(a) > d->max_cpu) d->max_cpu = fabs(a);
    double e = fabs(a - b);
    if (e > d->max_diff) {
        d->max_diff = e;
        memcpy(d->worst, index, sizeof d->worst);
        d->worst_cpu = a;
        d->worst_gpu = b;
    }
}

static int report_diff(const test_case *tc, const char *name, const diff_ctx *d, double allowed) {
    if (d->mismatched_special == 0 && d->max_diff <= allowed) return 0;
    char desc[768];
    test_config_describe(&tc->cfg, desc, sizeof desc);
    fprintf(stderr,
            "FAIL CUDA vs CPU %s [%s] input seed %llu: max |diff| %.3g allowed %.3g (|cpu| max "
            "%.3g); worst at (%lld,%lld,%lld,%lld): cpu %.9g gpu %.9g; inf/NaN mismatches %lld\n",
            name, desc, (unsigned long long)tc->seed, d->max_diff, allowed, d->max_cpu,
            (long long)d->worst[0], (long long)d->worst[1], (long long)d->worst[2],
            (long long)d->worst[3], d->worst_cpu, d->worst_gpu, (long long)d->mismatched_special);
    return 1;
}

/* S_dmask: magnitudes within one ulp at 1 of the CPU's; the sign (the
 * dropout mask) equal to the CPU's and to the reference Philox wherever
 * the value is non-zero (the CPU leaves a zero unsigned); everything
 * outside the visible region equal (zero). */
static int compare_sdmask(const test_case *tc, const flashc_tensor *cpu, const flashc_tensor *gpu,
                          tcuda_mask_stats *stats) {
    const flashc_attention_options *o = &tc->fwd.options;
    double allowed = ldexp(1.0, -mantissa_bits(tc->cfg.dtype));
    int64_t B = flashc_ref_batch_count(&tc->q, &tc->fwd.varlen);
    int64_t bad_value = 0, bad_sign = 0, bad_ref = 0, bad_hidden = 0;
    double worst = 0.0;
    char first[256] = "";
    for (int64_t b = 0; b < B; ++b) {
        flashc_ref_seq seq = flashc_ref_sequence(&tc->q, &tc->k, &tc->fwd.varlen, b);
        for (int64_t h = 0; h < tc->cfg.nheads; ++h)
            for (int64_t i = 0; i < cpu->shape[2]; ++i)
                for (int64_t j = 0; j < cpu->shape[3]; ++j) {
                    int64_t index[4] = {b, h, i, j};
                    double a = flashc_ref_load(cpu, index), g = flashc_ref_load(gpu, index);
                    int visible = i < seq.len_q && j < seq.len_k &&
                                  flashc_ref_visible(o, seq.len_q, seq.len_k, i, j);
                    if (!visible) {
                        if (!(a == 0.0 && g == 0.0) && bad_hidden++ == 0 && !first[0])
                            snprintf(first, sizeof first, "hidden (%lld,%lld,%lld,%lld): cpu %g gpu %g",
                                     (long long)b, (long long)h, (long long)i, (long long)j, a, g);
                        continue;
                    }
                    ++stats->visible;
                    double e = fabs(fabs(a) - fabs(g));
                    if (!(e <= allowed)) {
                        if (bad_value++ == 0 && !first[0])
                            snprintf(first, sizeof first, "value (%lld,%lld,%lld,%lld): cpu %.9g gpu %.9g",
                                     (long long)b, (long long)h, (long long)i, (long long)j, a, g);
                    }
                    if (e > worst) worst = e;
                    if (g == 0.0) continue;
                    if (o->dropout_p > 0.0) {
                        int keep = flashc_ref_dropout_keep(o->dropout_seed, o->dropout_offset,
                                                           o->dropout_p, b, h, tc->cfg.nheads, i, j);
                        if (keep == (signbit(g) != 0) && bad_ref++ == 0 && !first[0])
                            snprintf(first, sizeof first,
                                     "mask (%lld,%lld,%lld,%lld): gpu %g, reference Philox says %s",
                                     (long long)b, (long long)h, (long long)i, (long long)j, g,
                                     keep ? "kept" : "dropped");
                    } else if (signbit(g)) {
                        if (bad_ref++ == 0 && !first[0])
                            snprintf(first, sizeof first, "negative without dropout at (%lld,%lld,%lld,%lld): %g",
                                     (long long)b, (long long)h, (long long)i, (long long)j, g);
                    }
                    if (a == 0.0) continue;
                    ++stats->signed_both;
                    if (signbit(g)) ++stats->dropped;
                    if ((signbit(a) != 0) != (signbit(g) != 0) && bad_sign++ == 0 && !first[0])
                        snprintf(first, sizeof first, "sign (%lld,%lld,%lld,%lld): cpu %g gpu %g",
                                 (long long)b, (long long)h, (long long)i, (long long)j, a, g);
                }
    }
    if (!bad_value && !bad_sign && !bad_ref && !bad_hidden) return 0;
    char desc[768];
    test_config_describe(&tc->cfg, desc, sizeof desc);
    fprintf(stderr,
            "FAIL CUDA vs CPU s_dmask [%s] input seed %llu: %lld values off by more than %.3g "
            "(worst %.3g), %lld signs differ from the CPU, %lld from the reference mask, %lld "
            "hidden entries not 0; first: %s\n",
            desc, (unsigned long long)tc->seed, (long long)bad_value, allowed, worst,
            (long long)bad_sign, (long long)bad_ref, (long long)bad_hidden, first);
    return 1;
}

int tcuda_check_against_cpu(tcuda_case *c, tcuda_mask_stats *stats) {
    test_case *tc = &c->tc;
    const test_config *cfg = &tc->cfg;
    tcuda_mask_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    unsigned char *g_out = malloc(tc->a_out.size), *g_lse = malloc(tc->a_lse.size);
    unsigned char *g_sd = malloc(tc->a_sdmask.size);
    int fails = 0;
    if (!g_out || !g_lse || !g_sd) {
        fprintf(stderr, "FAIL out of host memory\n");
        fails = 1;
        goto done;
    }
    memcpy(g_out, tc->a_out.bytes, tc->a_out.size);
    memcpy(g_lse, tc->a_lse.bytes, tc->a_lse.size);
    memcpy(g_sd, tc->a_sdmask.bytes, tc->a_sdmask.size);
    flashc_status st = test_case_forward(tc); /* the CPU backend, host tensors */
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL CPU forward on the CUDA case's inputs returned %s (%s)\n",
                flashc_status_string(st), flashc_last_error_message());
        fails = 1;
        goto done;
    }
    flashc_tensor gpu_out = over_copy(&tc->out, &tc->a_out, g_out);
    diff_ctx d;
    memset(&d, 0, sizeof d);
    d.cpu = &tc->out;
    d.gpu = &gpu_out;
    test_for_each(&tc->out, diff_one, &d);
    int m = mantissa_bits(cfg->dtype);
    double keep_scale = 1.0 / (1.0 - tc->fwd.options.dropout_p);
    double allowed = 2.0 * ldexp(d.max_cpu, -m) + ldexp(max_abs(&tc->v) * keep_scale, -(m + 1));
    fails += report_diff(tc, "out", &d, allowed);
    if (cfg->with_lse) {
        flashc_tensor gpu_lse = over_copy(&tc->lse, &tc->a_lse, g_lse);
        memset(&d, 0, sizeof d);
        d.cpu = &tc->lse;
        d.gpu = &gpu_lse;
        test_for_each(&tc->lse, diff_one, &d);
        fails += report_diff(tc, "lse", &d, ldexp(d.max_cpu > 1.0 ? d.max_cpu : 1.0, -14));
    }
    if (cfg->with_sdmask) {
        flashc_tensor gpu_sd = over_copy(&tc->s_dmask, &tc->a_sdmask, g_sd);
        fails += compare_sdmask(tc, &tc->s_dmask, &gpu_sd, stats);
    }
done:
    free(g_out);
    free(g_lse);
    free(g_sd);
    return fails;
}

/* dq, dk, dv from the GPU (in c->tc) against the CPU backend's backward on
 * the same inputs and the same out / lse (the GPU forward's, in c->tc).
 * The GPU rounds P and dS to the input dtype before its tensor-core
 * products where the CPU keeps float32, so the two differ by a few ulp of
 * the dtype; a tensor whose values cancel to near zero (one visible key:
 * dP - D ~ 0) carries rounding noise of the size of the other gradients,
 * hence the floor at a sixteenth of the case's largest gradient. */
int tcuda_check_backward_against_cpu(tcuda_case *c) {
    test_case *tc = &c->tc;
    test_alloc *allocs[3] = {&tc->a_dq, &tc->a_dk, &tc->a_dv};
    flashc_tensor *views[3] = {&tc->dq, &tc->dk, &tc->dv};
    const char *names[3] = {"dq", "dk", "dv"};
    unsigned char *gpu[3] = {NULL, NULL, NULL};
    int fails = 0;
    for (int i = 0; i < 3; ++i) {
        gpu[i] = malloc(allocs[i]->size ? allocs[i]->size : 1);
        if (!gpu[i]) {
            fprintf(stderr, "FAIL out of host memory\n");
            fails = 1;
            goto done;
        }
        memcpy(gpu[i], allocs[i]->bytes, allocs[i]->size);
    }
    flashc_status st = test_case_backward(tc); /* the CPU backend, host tensors */
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL CPU backward on the CUDA case's inputs returned %s (%s)\n",
                flashc_status_string(st), flashc_last_error_message());
        fails = 1;
        goto done;
    }
    double largest = 0.0, max_t[3];
    for (int i = 0; i < 3; ++i) {
        max_t[i] = max_abs(views[i]);
        if (max_t[i] > largest) largest = max_t[i];
    }
    int m = mantissa_bits(tc->cfg.dtype);
    for (int i = 0; i < 3; ++i) {
        /* packed dq/dk/dv are views of one allocation: find the one holding this view */
        int a = i;
        for (int j = 0; j < 3; ++j) {
            const unsigned char *at = views[i]->data;
            if (allocs[j]->bytes && at >= allocs[j]->bytes && at < allocs[j]->bytes + allocs[j]->size) a = j;
        }
        flashc_tensor g = over_copy(views[i], allocs[a], gpu[a]);
        diff_ctx d;
        memset(&d, 0, sizeof d);
        d.cpu = views[i];
        d.gpu = &g;
        test_for_each(views[i], diff_one, &d);
        double magnitude = max_t[i] > largest / 16 ? max_t[i] : largest / 16;
        fails += report_diff(tc, names[i], &d, 4.0 * ldexp(magnitude, -m));
    }
done:
    for (int i = 0; i < 3; ++i) free(gpu[i]);
    return fails;
}

/* ---- Environment ---------------------------------------------------------- */

char *tcuda_env_set(const char *name, const char *value) {
    const char *given = getenv(name);
    char *saved = given ? strdup(given) : NULL;
    setenv(name, value, 1);
    return saved;
}

void tcuda_env_restore(const char *name, char *saved) {
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

/* ---- Running cases -------------------------------------------------------- */

int tcuda_run_case(const test_config *cfg, uint64_t seed, void *stream, int backward) {
    tcuda_case c;
    test_config cc = *cfg;
    if (backward) cc.with_lse = 1;
    char desc[768];
    test_config_describe(&cc, desc, sizeof desc);
    if (tcuda_case_init(&c, &cc, seed, stream) != 0) {
        fprintf(stderr, "FAIL could not build the case on the GPU [%s]\n", desc);
        tcuda_case_free(&c);
        return 1;
    }
    int fails = 0;
    flashc_status st = tcuda_forward(&c);
    if (st != FLASHC_SUCCESS) {
        fprintf(stderr, "FAIL CUDA forward returned %s (%s) [%s] input seed %llu\n",
                flashc_status_string(st), flashc_last_error_message(), desc,
                (unsigned long long)seed);
        tcuda_case_free(&c);
        return 1;
    }
    fails += test_check_forward(&c.tc);
    if (backward) {
        /* before the CPU run below replaces out and lse on the host: the
         * backward reads the GPU forward's, already on the device */
        st = tcuda_backward(&c);
        if (st != FLASHC_SUCCESS) {
            fprintf(stderr, "FAIL CUDA backward returned %s (%s) [%s] input seed %llu\n",
                    flashc_status_string(st), flashc_last_error_message(), desc,
                    (unsigned long long)seed);
            ++fails;
        } else {
            fails += test_check_backward(&c.tc);
            fails += tcuda_check_backward_against_cpu(&c);
        }
    }
    fails += tcuda_check_repeatable(&c, stream ? NULL : tcuda_side_stream());
    fails += tcuda_check_against_cpu(&c, NULL);
    tcuda_case_free(&c);
    return fails;
}

/* The cases of one tcuda_run_cases call; case r is cfgs[r * stride]. */
typedef struct case_list {
    const char *name;
    const test_config *cfgs;
    int stride, backward;
    int *failed; /* per case */
} case_list;

static void run_listed_case(int64_t r, void *ctx) {
    const case_list *list = ctx;
    int i = (int)r * list->stride;
    uint64_t seed = test_seed(list->name, (uint64_t)i);
    void *stream = r & 1 ? tcuda_side_stream() : NULL;
    struct timespec c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &c0);
    if (tcuda_run_case(&list->cfgs[i], seed, stream, list->backward) != 0) {
        fprintf(stderr, "  -> %s case %d failed (input seed %llu, %s stream)\n", list->name, i,
                (unsigned long long)seed, stream ? "side" : "default");
        list->failed[r] = 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &c1);
    if (test_verbose()) {
        char desc[768];
        test_config_describe(&list->cfgs[i], desc, sizeof desc);
        fprintf(stderr, "  %s case %d: %.1f s [%s]\n", list->name, i,
                (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec), desc);
    }
}

void tcuda_run_cases(const char *name, const test_config *cfgs, int count, int backward) {
    int stride = test_quick() ? 3 : 1, runs = (count + stride - 1) / stride, failed = 0;
    case_list list = {name, cfgs, stride, backward,
                      calloc((size_t)(runs > 0 ? runs : 1), sizeof(int))};
    if (!list.failed) fail_msg("%s: out of host memory", name);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* the cases run as tasks; the checks inside them spread their heads
     * over the same threads (test_parallel_for) */
    test_parallel_for(runs, run_listed_case, &list);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    for (int r = 0; r < runs; ++r) failed += list.failed[r];
    free(list.failed);
    printf("%s: %d/%d cases passed (%.1f s)\n", name, runs - failed, runs,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    fflush(stdout);
    if (failed) fail_msg("%s: %d of %d cases failed (details above)", name, failed, runs);
}
