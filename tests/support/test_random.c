/* Seeds and random numbers of the tests (splitmix64: tiny, good enough for
 * test data, identical on every platform). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

int test_quick(void) {
    const char *env = getenv("FLASHC_TEST_QUICK");
    return env && env[0] && env[0] != '0';
}

int test_verbose(void) {
    const char *env = getenv("FLASHC_TEST_VERBOSE");
    return env && env[0] && strcmp(env, "0") != 0;
}

uint64_t test_base_seed(void) {
    const char *env = getenv("FLASHC_TEST_SEED");
    if (env && env[0]) return strtoull(env, NULL, 0);
    return 0x5eed2026ull;
}

uint64_t test_seed(const char *test_name, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the name */
    for (const char *c = test_name; *c; ++c) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    test_rng rng;
    test_rng_init(&rng, test_base_seed() ^ h ^ (n * 0x9E3779B97F4A7C15ull));
    return test_rng_u64(&rng);
}

void test_rng_init(test_rng *rng, uint64_t seed) { rng->state = seed; }

uint64_t test_rng_u64(test_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double test_rng_uniform(test_rng *rng, double lo, double hi) {
    double u = (double)(test_rng_u64(rng) >> 11) * 0x1.0p-53;
    return lo + (hi - lo) * u;
}

double test_rng_normal(test_rng *rng) {
    double u1 = test_rng_uniform(rng, 0.0, 1.0);
    double u2 = test_rng_uniform(rng, 0.0, 1.0);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int64_t test_rng_int(test_rng *rng, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(test_rng_u64(rng) % span);
}
