/* Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
 * a counter-based generator. Output is a pure function of (counter, key), so any element's
 * random number can be produced without state — which is what lets recompute and every
 * parallel layout reproduce dropout masks exactly. */
#ifndef MEGADLM_CORE_RANDOM_PHILOX_H
#define MEGADLM_CORE_RANDOM_PHILOX_H

#include <stdint.h>

/* out = Philox4x32-10(ctr, key). Matches the Random123 reference (known-answer tested). */
void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* Uniform float in [0, 1) from 24 high bits of a 32-bit draw. */
static inline float philox_to_uniform(uint32_t x) { return (float)(x >> 8) * (1.0f / 16777216.0f); }

/* Two standard normals from two uniforms-worth of bits (Box-Muller). */
void philox_normal2(uint32_t a, uint32_t b, float *z0, float *z1);

/* Fills out[0..n) with N(0, std^2) samples that depend only on (seed, stream, index):
 * element i is a pure function of (seed, stream, i). Used for parameter init. */
void philox_fill_normal(float *out, uint64_t n, float std, uint64_t seed, uint64_t stream);

#endif
