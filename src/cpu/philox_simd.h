/* Philox4x32-10 on SIMD lanes: VL independent instances side by side, the
 * same rounds and constants as core/philox.h (which stays the reference:
 * the CPU tests compare the two). Needs vec.h. */
#ifndef FLASHC_CPU_PHILOX_SIMD_H
#define FLASHC_CPU_PHILOX_SIMD_H

#include <stdint.h>

#include "core/philox.h"

typedef uint32_t vu32 __attribute__((vector_size(VL * 4)));
typedef uint64_t vu64 __attribute__((vector_size(VL * 8)));
typedef int32_t vi32 __attribute__((vector_size(VL * 4)));

typedef struct fc_philox_lanes {
    vu32 x, y, z, w;
} fc_philox_lanes;

/* Full 64-bit products of 32-bit lanes by a constant: low and high words. */
static inline void fc_mulhilo(vu32 a, uint32_t m, vu32 *lo, vu32 *hi) {
    vu64 prod = __builtin_convertvector(a, vu64) * (uint64_t)m;
    *lo = __builtin_convertvector(prod, vu32);
    *hi = __builtin_convertvector(prod >> 32, vu32);
}

static inline fc_philox_lanes fc_philox_lanes_10(fc_philox_lanes c, uint32_t key0, uint32_t key1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key0 += FLASHC_PHILOX_W0;
            key1 += FLASHC_PHILOX_W1;
        }
        vu32 lo0, hi0, lo1, hi1;
        fc_mulhilo(c.x, FLASHC_PHILOX_M0, &lo0, &hi0);
        fc_mulhilo(c.z, FLASHC_PHILOX_M1, &lo1, &hi1);
        fc_philox_lanes r;
        r.x = hi1 ^ c.y ^ key0;
        r.y = lo1;
        r.z = hi0 ^ c.w ^ key1;
        r.w = lo0;
        c = r;
    }
    return c;
}

#endif
