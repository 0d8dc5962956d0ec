/* The CUDA portable kernels' shared last wave (src/cuda/tail_split.h,
 * plain C on the host), by brute force: the tail CTAs' ranges laid over the tail
 * tiles' iterations must cover each iteration exactly once, each CTA's
 * segments must be its range cut at tile boundaries (one or two), the CTAs
 * the kernel adds in a tile's sum must be exactly those that ran a
 * segment of it, and no two segments may share a slot. A gap or an overlap
 * would drop or double a query block's terms of dK / dV (the backward) or
 * a key block's of O (the forward); a wrong CTA list
 * would read a slot nobody wrote. Also the plan's choice on the shapes it
 * was made for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/cuda/tail_split.h"
#include "test_support.h"

/* Checks every property of plan t by brute force; returns failures
 * (printed). */
static int check_tail(const flashc_tail *t, long long tiles, long long iters, int slots) {
    int fails = 0;
    const long long r = tiles % slots;
    if (t->ctas == 0) {
        if (t->first != tiles) {
            fprintf(stderr, "FAIL no tail but first %lld != tiles %lld\n", t->first, tiles);
            ++fails;
        }
        return fails;
    }
    /* the last partial wave, on at most one CTA per SM, each sharing */
    if (t->tiles != r || t->first != tiles - r || t->iters != iters || t->ctas > slots || t->ctas <= r) {
        fprintf(stderr, "FAIL tail (%lld, %d, %d, %d) of %lld tiles x %lld on %d slots\n", t->first, t->tiles,
                t->iters, t->ctas, tiles, iters, slots);
        return fails + 1;
    }
    const long long total = r * iters;
    int *owner = malloc((size_t)total * sizeof *owner);
    int *covered = calloc((size_t)total, sizeof *covered);
    int *slot_used = calloc((size_t)(t->ctas + t->tiles), sizeof *slot_used);
    int *tile_first = malloc((size_t)r * sizeof *tile_first), *tile_last = malloc((size_t)r * sizeof *tile_last);
    assert_non_null(owner);
    assert_non_null(covered);
    assert_non_null(slot_used);
    assert_non_null(tile_first);
    assert_non_null(tile_last);
    for (long long i = 0; i < r; ++i) tile_first[i] = -1, tile_last[i] = -1;
    /* the ranges: [q L / S, (q + 1) L / S) (so from 0 to L), none empty,
     * none longer than a tile */
    for (int q = 0; q < t->ctas; ++q) {
        const long long lo = (long long)q * total / t->ctas, hi = (long long)(q + 1) * total / t->ctas;
        if (lo >= hi || hi - lo > iters || flashc_tail_start(*t, q) != lo || flashc_tail_start(*t, q + 1) != hi) {
            fprintf(stderr, "FAIL CTA %d: range [%lld, %lld), start %lld .. %lld\n", q, lo, hi,
                    flashc_tail_start(*t, q), flashc_tail_start(*t, q + 1));
            ++fails;
            break;
        }
        for (long long x = lo; x < hi; ++x) owner[x] = q;
    }
    for (long long x = 0; x < total && !fails; ++x) {
        if (flashc_tail_cta_at(*t, x) != owner[x]) {
            fprintf(stderr, "FAIL iteration %lld: cta_at %d, owner %d\n", x, flashc_tail_cta_at(*t, x), owner[x]);
            ++fails;
        }
        const int tile = (int)(x / iters);
        if (tile_first[tile] < 0) tile_first[tile] = owner[x];
        tile_last[tile] = owner[x];
    }
    /* the segments: the range cut at tile boundaries, in order */
    for (int q = 0; q < t->ctas && !fails; ++q) {
        const int n = flashc_tail_segments(*t, q);
        if (n < 1 || n > 2) {
            fprintf(stderr, "FAIL CTA %d: %d segments\n", q, n);
            ++fails;
            break;
        }
        long long at = flashc_tail_start(*t, q);
        for (int w = 0; w < n; ++w) {
            const flashc_tail_segment s = flashc_tail_segment_of(*t, q, w);
            const long long begin = (long long)s.tile * iters;
            if (s.tile < 0 || s.tile >= r || s.lo < 0 || s.lo >= s.hi || s.hi > iters || begin + s.lo != at) {
                fprintf(stderr, "FAIL CTA %d segment %d: tile %d [%d, %d) at %lld\n", q, w, s.tile, s.lo, s.hi, at);
                ++fails;
                break;
            }
            for (long long x = begin + s.lo; x < begin + s.hi; ++x) ++covered[x];
            at = begin + s.hi;
            const int slot = flashc_tail_slot(q, s.tile);
            if (slot < 0 || slot >= t->ctas + t->tiles || slot_used[slot]++) {
                fprintf(stderr, "FAIL CTA %d segment %d: slot %d taken or out of range\n", q, w, slot);
                ++fails;
            }
        }
        if (at != flashc_tail_start(*t, q + 1)) {
            fprintf(stderr, "FAIL CTA %d: segments end at %lld, not at the range's end\n", q, at);
            ++fails;
        }
    }
    for (long long x = 0; x < total && !fails; ++x)
        if (covered[x] != 1) {
            fprintf(stderr, "FAIL iteration %lld covered %d times\n", x, covered[x]);
            ++fails;
        }
    /* the CTAs of each tile's sum */
    for (int tile = 0; tile < r && !fails; ++tile) {
        const flashc_tail_ctas c = flashc_tail_ctas_of(*t, tile);
        if (c.first != tile_first[tile] || c.last != tile_last[tile]) {
            fprintf(stderr, "FAIL tile %d: CTAs %d..%d, ran on %d..%d\n", tile, c.first, c.last, tile_first[tile],
                    tile_last[tile]);
            ++fails;
        }
    }
    free(owner);
    free(covered);
    free(slot_used);
    free(tile_first);
    free(tile_last);
    return fails;
}

/* Random tile counts, lengths, SM counts and costs: fewer tiles than SMs,
 * several waves, one iteration per tile to thousands. */
static void random_tails(void **state) {
    (void)state;
    test_rng rng;
    test_rng_init(&rng, test_seed("tail split", 0));
    const int count = test_quick() ? 2000 : 20000;
    int fails = 0, tails = 0;
    for (int i = 0; i < count && !fails; ++i) {
        const int slots = (int)test_rng_int(&rng, 1, 200);
        const long long tiles = test_rng_int(&rng, 1, 4 * slots + 3);
        const long long iters = test_rng_int(&rng, 1, i % 10 == 0 ? 3000 : 80);
        const int start = (int)test_rng_int(&rng, 0, 3), slot = (int)test_rng_int(&rng, 0, 3);
        const flashc_tail t = flashc_tail_plan(tiles, iters, slots, start, slot);
        tails += t.ctas > 0;
        if (check_tail(&t, tiles, iters, slots) != 0) {
            fprintf(stderr, "  -> %lld tiles x %lld iterations on %d slots\n", tiles, iters, slots);
            ++fails;
        }
    }
    printf("tail split: %d of %d random plans took a tail\n", tails, count);
    assert_int_equal(fails, 0);
    assert_true(tails > count / 10);
}

/* The plan on shapes of the H100 / H200 (132 SMs), with the backward's
 * costs (a start and a slot of 2 iterations each, bwd_workspace.h): the
 * standard grid's 2048 tiles of 32 iterations (d128 at 2048 rows) share
 * their last 68 tiles over every SM; 128 SMs divide them (no tail); a last
 * wave of 130 tiles is nearly full, and 64 tiles of 8 iterations too short
 * to share; 64 tiles of 32 iterations (fewer tiles than SMs) are. The
 * forward's (1 and 1, fwd_config.h) on its 264 CTA slots (two per SM):
 * the same 2048 tiles leave 200, shared by 264 CTAs. Also the empty and
 * degenerate inputs. */
static void plan_choices(void **state) {
    (void)state;
    flashc_tail t = flashc_tail_plan(2048, 32, 132, 2, 2);
    assert_int_equal(t.first, 1980);
    assert_int_equal(t.tiles, 68);
    assert_int_equal(t.ctas, 132);
    assert_int_equal(check_tail(&t, 2048, 32, 132), 0);
    assert_int_equal(flashc_tail_plan(2048, 32, 128, 2, 2).ctas, 0);
    assert_int_equal(flashc_tail_plan(15 * 132 + 130, 32, 132, 2, 2).ctas, 0);
    assert_int_equal(flashc_tail_plan(64, 8, 132, 2, 2).ctas, 0);
    t = flashc_tail_plan(64, 32, 132, 2, 2);
    assert_int_equal(t.first, 0);
    assert_int_equal(t.ctas, 132);
    assert_int_equal(check_tail(&t, 64, 32, 132), 0);
    t = flashc_tail_plan(2048, 32, 264, 1, 1);
    assert_int_equal(t.first, 1848);
    assert_int_equal(t.tiles, 200);
    assert_int_equal(t.ctas, 264);
    assert_int_equal(check_tail(&t, 2048, 32, 264), 0);
    const long long degenerate[][3] = {{0, 32, 132}, {100, 0, 132}, {100, 32, 0}, {-1, 5, 4}};
    for (size_t i = 0; i < sizeof degenerate / sizeof degenerate[0]; ++i) {
        t = flashc_tail_plan(degenerate[i][0], degenerate[i][1], (int)degenerate[i][2], 2, 2);
        assert_int_equal(t.ctas, 0);
        assert_int_equal(t.first, degenerate[i][0]);
    }
}

/* Plans too large to lay out (up to 2^31 - 1 iterations a tile, 4096
 * slots): the starts against q L / S in long double, rising from 0 to L,
 * no share longer than a tile, cta_at the inverse of start (its
 * (x + 1) S - 1 within 63 bits). */
static void large_plans(void **state) {
    (void)state;
    const long long cases[][3] = {
        /* tiles, iterations, slots */
        {2048 + 200, 0x7fffffffLL, 264}, {3 * 1056 + 1000, 0x7fffffffLL, 1056}, {100, 1000000, 132},
        {4096 + 4000, 0x7fffffffLL, 4096}, {2 * 4096 + 200, 0x7fffffffLL, 4096}, {5 * 528 + 17, 123457, 528}};
    int fails = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        const long long tiles = cases[i][0], iters = cases[i][1];
        const int slots = (int)cases[i][2];
        const flashc_tail t = flashc_tail_plan(tiles, iters, slots, 1, 1);
        assert_true(t.ctas > 0);
        const long long total = (long long)t.tiles * t.iters;
        long long prev = flashc_tail_start(t, 0);
        if (prev != 0) ++fails;
        for (int q = 1; q <= t.ctas && !fails; ++q) {
            const long long at = flashc_tail_start(t, q);
            const long double want = (long double)total * q / t.ctas;
            if (at <= prev || at - prev > iters || fabsl((long double)at - want) > 1.0L ||
                (q == t.ctas && at != total) || flashc_tail_cta_at(t, at - 1) != q - 1 ||
                (q < t.ctas && flashc_tail_cta_at(t, at) != q)) {
                fprintf(stderr, "FAIL %lld tiles x %lld on %d slots: CTA %d starts at %lld (want %.2Lf)\n", tiles,
                        iters, slots, q, at, want);
                ++fails;
            }
            prev = at;
        }
    }
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(random_tails),
        cmocka_unit_test(plan_choices),
        cmocka_unit_test(large_plans),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
