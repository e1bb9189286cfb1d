/* Philox4x32-10 and the normal sampler used for parameter initialization. */
#include "core/random/philox.h"

#include <math.h>

void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    philox4x32_10_inline(ctr, key, out);
}

/* Box-Muller on two 32-bit draws, in double precision:
 *   u1 = (a + 1) / 2^32  in (0, 1]   (never 0, so log is finite; |z| <= sqrt(2 ln 2^32) ~ 6.66)
 *   u2 =  b      / 2^32  in [0, 1)
 *   r = sqrt(-2 ln u1);  z0 = r cos(2 pi u2),  z1 = r sin(2 pi u2). */
void philox_normal2(uint32_t a, uint32_t b, float *z0, float *z1) {
    const double u1 = ((double)a + 1.0) * (1.0 / 4294967296.0);
    const double u2 = (double)b * (1.0 / 4294967296.0);
    const double r = sqrt(-2.0 * log(u1));
    const double theta = 6.283185307179586476925 * u2;
    *z0 = (float)(r * cos(theta));
    *z1 = (float)(r * sin(theta));
}

/* Pair k (elements 2k and 2k+1) comes from one Philox call:
 *   counter = {(uint32) k, (uint32) (k >> 32), (uint32) stream, (uint32) (stream >> 32)}
 *   key     = {(uint32) seed, (uint32) (seed >> 32)}
 * out[2k], out[2k+1] = std * philox_normal2(lane 0, lane 1); lanes 2 and 3 are unused.
 * So element i depends only on (seed, stream, i), whatever the thread count or n. */
void philox_fill_normal(float *out, uint64_t n, float std, uint64_t seed, uint64_t stream) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const int64_t npairs = (int64_t)((n + 1) / 2);
#pragma omp parallel for schedule(static) if (npairs > 4096)
    for (int64_t k = 0; k < npairs; k++) {
        const uint32_t ctr[4] = {(uint32_t)k, (uint32_t)((uint64_t)k >> 32), (uint32_t)stream,
                                 (uint32_t)(stream >> 32)};
        uint32_t r[4];
        philox4x32_10_inline(ctr, key, r);
        float z0, z1;
        philox_normal2(r[0], r[1], &z0, &z1);
        const uint64_t i = 2 * (uint64_t)k;
        out[i] = std * z0;
        if (i + 1 < n)
            out[i + 1] = std * z1;
    }
}

void philox_fill_normal_range(float *out, uint64_t begin, uint64_t n, float std, uint64_t seed,
                              uint64_t stream) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const int64_t k0 = (int64_t)(begin / 2), k1 = (int64_t)((begin + n + 1) / 2);
#pragma omp parallel for schedule(static) if (k1 - k0 > 4096)
    for (int64_t k = k0; k < k1; k++) {
        const uint32_t ctr[4] = {(uint32_t)k, (uint32_t)((uint64_t)k >> 32), (uint32_t)stream,
                                 (uint32_t)(stream >> 32)};
        uint32_t r[4];
        philox4x32_10_inline(ctr, key, r);
        float z[2];
        philox_normal2(r[0], r[1], &z[0], &z[1]);
        for (int lane = 0; lane < 2; lane++) {
            const uint64_t i = 2 * (uint64_t)k + lane; /* index in the whole tensor */
            if (i >= begin && i < begin + n) out[i - begin] = std * z[lane];
        }
    }
}
