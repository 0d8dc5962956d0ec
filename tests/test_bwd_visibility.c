/* The CUDA backward's visibility arithmetic (src/cuda/bwd_visibility.h,
 * plain C on the host), against the reference's rule of DESIGN.md by
 * brute force: row i of a sequence (sq queries, sk keys, shift = sk - sq)
 * sees key j iff 0 <= j < sk and, for each bound given (-1: unbounded),
 * i + shift - left <= j <= i + shift + right. flashc_bwd_rows_seeing
 * must give exactly the rows that see a key of a block: the backward's
 * key blocks walk those rows' blocks (a row missing loses its gradient
 * terms, an extra one costs an iteration), and the plan's cost model
 * counts them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "../src/cuda/bwd_visibility.h"
#include "test_support.h"

typedef struct shape {
    int64_t sq, sk, left, right;
    int block_n;
} shape;

/* The reference's rule (reference/flashc_reference.c), not the library's. */
static int sees(const shape *s, int64_t i, int64_t j) {
    flashc_attention_options o = flashc_attention_options_default();
    o.window_left = s->left;
    o.window_right = s->right;
    return flashc_ref_visible(&o, s->sq, s->sk, i, j);
}

/* The rows [*lo, *hi] that see a key of [n0, n1); *lo = -1 when none. */
static void rows_seeing_keys(const shape *s, int64_t n0, int64_t n1, int64_t *lo, int64_t *hi) {
    *lo = -1, *hi = -2;
    for (int64_t i = 0; i < s->sq; ++i)
        for (int64_t j = n0; j < n1; ++j)
            if (sees(s, i, j)) {
                if (*lo < 0) *lo = i;
                *hi = i;
                break;
            }
}

/* Short sequences (every alignment of rows, keys and key blocks), with
 * bounds of all kinds: none, causal (0 on the right), and windows smaller
 * and larger than the sequences. */
static shape random_shape(test_rng *rng) {
    static const int blocks[] = {16, 32, 64, 128};
    shape s;
    s.sq = test_rng_int(rng, 1, 300);
    s.sk = test_rng_int(rng, 0, 300);
    /* 0 none, 1 causal, 2 causal with a left window, 3 a window on both
     * sides, 4 a right window only */
    const int kind = (int)test_rng_int(rng, 0, 4);
    s.left = kind == 2 || kind == 3 ? test_rng_int(rng, 0, 320) : -1;
    s.right = kind == 0 ? -1 : kind == 1 || kind == 2 ? 0 : test_rng_int(rng, 0, 320);
    s.block_n = blocks[test_rng_int(rng, 0, 3)];
    return s;
}

static void rows_seeing_is_exact(void **state) {
    (void)state;
    test_rng rng;
    test_rng_init(&rng, test_seed("rows_seeing_is_exact", 0));
    const int shapes = test_quick() ? 300 : 2000;
    for (int t = 0; t < shapes; ++t) {
        const shape s = random_shape(&rng);
        for (int64_t n0 = 0; n0 < s.sk; n0 += s.block_n) {
            const int64_t n1 = n0 + s.block_n < s.sk ? n0 + s.block_n : s.sk;
            int64_t lo, hi;
            rows_seeing_keys(&s, n0, n1, &lo, &hi);
            int first, last;
            flashc_bwd_rows_seeing(n0, n1, s.sq, s.sk, s.left, s.right, &first, &last);
            if (lo < 0) {
                if (first <= last)
                    fail_msg("sq %lld sk %lld window (%lld, %lld) keys [%lld, %lld): no row sees them, got [%d, %d]",
                             (long long)s.sq, (long long)s.sk, (long long)s.left, (long long)s.right, (long long)n0,
                             (long long)n1, first, last);
            } else if (first != lo || last != hi) {
                fail_msg("sq %lld sk %lld window (%lld, %lld) keys [%lld, %lld): rows [%lld, %lld], got [%d, %d]",
                         (long long)s.sq, (long long)s.sk, (long long)s.left, (long long)s.right, (long long)n0,
                         (long long)n1, (long long)lo, (long long)hi, first, last);
            }
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_seeing_is_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
