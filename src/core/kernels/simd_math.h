/* Private to the kernels: branch-free float math that the compiler vectorizes (glibc's expf
 * and tanhf are scalar calls unless -ffast-math). */
#ifndef MEGADLM_CORE_KERNELS_SIMD_MATH_H
#define MEGADLM_CORE_KERNELS_SIMD_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* expf: range reduction x = n ln2 + r, |r| <= ln2/2 (ln2 split in two for accuracy),
 * degree-6 polynomial (Cephes expf coefficients), times 2^n built in the exponent bits.
 * Max relative error ~1e-7 (about 1.5 ulp) over [-87, 88]; arguments below about -87.7
 * return 0 (flush to zero, no denormals), above 88 saturate at e^88; NaN propagates. */
static inline float simd_expf(float x) {
    x = x < -88.0f ? -88.0f : (x > 88.0f ? 88.0f : x);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* round(x/ln2) */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187045e-06f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    /* 2^n in the exponent bits; n is in [-127, 127] for every x but NaN, whose n is NaN and
     * may not be converted to an integer (undefined): any exponent then, as p is NaN already */
    const float n_int = n == n ? n : 0.0f;
    const uint32_t bits = (uint32_t)((int32_t)n_int + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

/* 1 / (1 + e^-x) */
static inline float simd_sigmoidf(float x) { return 1.0f / (1.0f + simd_expf(-x)); }

/* Sums in an order fixed by the source, whatever vector width the compiler picks (8 lanes with
 * AVX2, 16 with AVX-512, or none): element i goes to partial sum i % SIMD_LANES, and the
 * partial sums are added in a fixed tree. `#pragma omp simd reduction(+)` would let the
 * compiler choose the lanes, so x86-64-v3 and AVX-512 builds would differ in the last bits. */
#define SIMD_LANES 16

static inline float simd_lanes_total(float acc[SIMD_LANES]) {
    for (int w = SIMD_LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++)
            acc[j] += acc[j + w];
    return acc[0];
}

/* sum of x[0..n) */
static inline float simd_sum(const float *x, int n) {
    float acc[SIMD_LANES] = {0};
    int i = 0;
    for (; i + SIMD_LANES <= n; i += SIMD_LANES)
        for (int j = 0; j < SIMD_LANES; j++)
            acc[j] += x[i + j];
    for (int j = 0; i + j < n; j++)
        acc[j] += x[i + j];
    return simd_lanes_total(acc);
}

/* sum of (x[i] - m)^2 (m = 0: the sum of squares) */
static inline float simd_sum_sq(const float *x, int n, float m) {
    float acc[SIMD_LANES] = {0};
    int i = 0;
    for (; i + SIMD_LANES <= n; i += SIMD_LANES)
        for (int j = 0; j < SIMD_LANES; j++) {
            const float d = x[i + j] - m;
            acc[j] += d * d;
        }
    for (int j = 0; i + j < n; j++) {
        const float d = x[i + j] - m;
        acc[j] += d * d;
    }
    return simd_lanes_total(acc);
}

/* sum of e^(x[i] - m) */
static inline float simd_sum_exp(const float *x, int n, float m) {
    float acc[SIMD_LANES] = {0};
    int i = 0;
    for (; i + SIMD_LANES <= n; i += SIMD_LANES)
        for (int j = 0; j < SIMD_LANES; j++)
            acc[j] += simd_expf(x[i + j] - m);
    for (int j = 0; i + j < n; j++)
        acc[j] += simd_expf(x[i + j] - m);
    return simd_lanes_total(acc);
}

/* max of x[0..n) (-inf for n = 0); exact in any order */
static inline float simd_max(const float *x, int n) {
    float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
    for (int i = 0; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    return mx;
}

#endif
