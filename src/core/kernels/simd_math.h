/* Private to the kernels: branch-free float math that the compiler vectorizes (glibc's expf
 * and tanhf are scalar calls unless -ffast-math). */
#ifndef MEGADLM_CORE_KERNELS_SIMD_MATH_H
#define MEGADLM_CORE_KERNELS_SIMD_MATH_H

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

#endif
