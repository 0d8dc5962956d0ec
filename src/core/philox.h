/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11): a counter-based generator, so a random word is a pure function
 * of (counter, key). Compiles for host and device. */
#ifndef FLASHC_CORE_PHILOX_H
#define FLASHC_CORE_PHILOX_H

#include <stdint.h>

#include "host_device.h"

typedef struct flashc_philox_u32x4 {
    uint32_t x, y, z, w;
} flashc_philox_u32x4;

#define FLASHC_PHILOX_M0 0xD2511F53u
#define FLASHC_PHILOX_M1 0xCD9E8D57u
#define FLASHC_PHILOX_W0 0x9E3779B9u
#define FLASHC_PHILOX_W1 0xBB67AE85u

FLASHC_HD flashc_philox_u32x4 flashc_philox_round(flashc_philox_u32x4 c,
                                                  uint32_t k0, uint32_t k1) {
    uint64_t p0 = (uint64_t)FLASHC_PHILOX_M0 * c.x;
    uint64_t p1 = (uint64_t)FLASHC_PHILOX_M1 * c.z;
    flashc_philox_u32x4 r;
    r.x = (uint32_t)(p1 >> 32) ^ c.y ^ k0;
    r.y = (uint32_t)p1;
    r.z = (uint32_t)(p0 >> 32) ^ c.w ^ k1;
    r.w = (uint32_t)p0;
    return r;
}

FLASHC_HD flashc_philox_u32x4 flashc_philox4x32_10(flashc_philox_u32x4 counter,
                                                   uint32_t key0, uint32_t key1) {
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key0 += FLASHC_PHILOX_W0;
            key1 += FLASHC_PHILOX_W1;
        }
        counter = flashc_philox_round(counter, key0, key1);
    }
    return counter;
}

#endif
