/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
 * a counter-based generator. Output is a pure function of (counter, key), so any element's
 * random number can be produced without state — which is what lets recompute and every
 * parallel layout reproduce dropout masks exactly. */
#ifndef MEGADLM_CORE_RANDOM_PHILOX_H
#define MEGADLM_CORE_RANDOM_PHILOX_H

#include <stdint.h>

/* out = Philox4x32-10(ctr, key). Matches the Random123 reference (known-answer tested). */
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The same function, inlined for hot loops (dropout masks): ten rounds of
 *   (hi0, lo0) = M0 * c0,  (hi1, lo1) = M1 * c2,   c = {hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0}
 * with the Weyl key schedule k += {W0, W1} between rounds (Random123's philox4x32_R, R=10). */
static inline void philox4x32_10_inline(const uint32_t ctr[4], const uint32_t key[2],
                                        uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u; /* golden ratio */
            k1 += 0xBB67AE85u; /* sqrt(3) - 1 */
        }
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        const uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* Uniform float in [0, 1) from 24 high bits of a 32-bit draw. */
static inline float philox_to_uniform(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* Two standard normals from two uniforms-worth of bits (Box-Muller). */
void philox_normal2(uint32_t a, uint32_t b, float *z0, float *z1);

/* Fills out[0..n) with N(0, std^2) samples that depend only on (seed, stream, index):
 * element i is a pure function of (seed, stream, i). Used for parameter init. */
void philox_fill_normal(float *out, uint64_t n, float std, uint64_t seed, uint64_t stream);
/* out[j] = element (begin + j) of what philox_fill_normal would produce for a tensor of at least
 * begin + n elements: a shard of a tensor gets exactly the values the whole tensor would. */
void philox_fill_normal_range(float *out, uint64_t begin, uint64_t n, float std, uint64_t seed,
                              uint64_t stream);

#endif
