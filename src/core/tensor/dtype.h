/* 16-bit floating-point storage: bfloat16 and IEEE 754 binary16 (fp16, "half").
 *
 * Both are stored as uint16_t bit patterns (little-endian in files, like every other tensor):
 *   bf16: 1 sign, 8 exponent, 7 mantissa bits, the top half of an fp32 (same range as fp32)
 *   fp16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; max 65504, subnormals down to 2^-24
 * Arithmetic is never done on them: values are widened to fp32, computed, and rounded back.
 *
 * Conversions (the bits are the same on every CPU and with every -march: integer code only,
 * plus for fp16 subnormals one float multiply whose result is exact and normal):
 *   widening (bf16 -> fp32, fp16 -> fp32) is exact for every bit pattern: every value, the
 *   sign of zero, infinities, and NaNs with their payload bits (a signaling NaN stays one);
 *   narrowing (fp32 -> bf16, fp32 -> fp16) rounds to nearest, ties to even, as PyTorch's
 *   .to(torch.bfloat16) / .to(torch.float16) do: values past the largest finite one (by half
 *   an ulp or more) become infinities, fp32 values in fp16's subnormal range become fp16
 *   subnormals (rounded the same way), and fp32 subnormals are rounded like any other value (no
 *   flush to zero). A NaN stays a NaN of the same sign, made quiet, with the top bits of its
 *   payload: bf16 = (fp32 bits >> 16) | 0x0040, fp16 = sign | 0x7e00 | (payload >> 13), which
 *   is what the CPUs' conversion instructions (VCVTNEPS2BF16, VCVTPS2PH) give. (PyTorch
 *   returns one canonical NaN instead: 0x7fc0 or 0xffff for bf16, 0x7e00 for fp16, depending on
 *   its code path.)
 *
 * The array functions convert n elements, dst and src not overlapping; loops the compiler
 * vectorizes, split over the OpenMP team when n is large (and not already inside a parallel
 * region).
 *
 * They live on the tensor floor because both the files (safetensors.c reads and writes F16 and
 * BF16) and the kernels (kernels/bf16.h: rounding in place, the run's 16-bit format) convert. */
#ifndef MEGADLM_CORE_TENSOR_DTYPE_H
#define MEGADLM_CORE_TENSOR_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t bf16; /* bfloat16 bit pattern */
typedef uint16_t fp16; /* IEEE binary16 bit pattern */

static inline uint32_t bf16_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float bf16_bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ---------------- one value ---------------- */

static inline float bf16_to_float(bf16 h) { return bf16_bits_f32((uint32_t)h << 16); }

static inline bf16 bf16_from_float(float x) {
    const uint32_t u = bf16_f32_bits(x);
    /* round to nearest even on the 16 bits dropped; a carry runs into the exponent (up to
     * infinity), which is the correct rounding there too */
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x0040u;
    return (bf16)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

static inline float fp16_to_float(fp16 h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    const uint32_t normal = ((e + 112u) << 23) | (m << 13);    /* rebias 15 -> 127 */
    const uint32_t inf_nan = 0x7f800000u | (m << 13);          /* payload kept */
    /* subnormal (and zero): m * 2^-24, exact, and a normal fp32 (or 0) */
    const uint32_t sub = bf16_f32_bits((float)m * 0x1p-24f);
    const uint32_t mag = e == 0 ? sub : (e == 31 ? inf_nan : normal);
    return bf16_bits_f32(sign | mag);
}

static inline fp16 fp16_from_float(float x) {
    const uint32_t u = bf16_f32_bits(x);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    /* |x| >= 2^-14 (fp16 normal): round the 13 dropped mantissa bits to nearest even, carry
     * into the exponent, rebias 127 -> 15 */
    const uint32_t normal = ((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10);
    /* |x| < 2^-14: the result counts units of 2^-24. |x| = m * 2^(e - 150) with m the 24-bit
     * significand, so the count is m >> (126 - e), rounded to nearest even on the bits shifted
     * out. Shifts past 24 give 0 (|x| < 2^-25, or 2^-25 exactly: a tie, to even 0); the shift
     * is clamped so that every lane's is defined (only lanes with a < 2^-14 are used). */
    const int32_t e = (int32_t)(a >> 23);
    int32_t sh = 126 - e;
    sh = sh < 14 ? 14 : (sh > 31 ? 31 : sh);
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
    const uint32_t sub = q + (rem > half ? 1u : (rem == half ? (q & 1u) : 0u));
    uint32_t mag = a < 0x38800000u ? sub : normal;
    /* from 65520 (= 65504 + half an ulp, a tie that goes to the even 65536) up: infinity */
    mag = a >= 0x477ff000u ? 0x7c00u : mag;
    mag = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : mag; /* NaN: quiet, payload top */
    return (fp16)(sign | mag);
}

/* ---------------- arrays ---------------- */

void bf16_from_f32(bf16 *dst, const float *src, size_t n);
void bf16_to_f32(float *dst, const bf16 *src, size_t n);
void fp16_from_f32(fp16 *dst, const float *src, size_t n);
void fp16_to_f32(float *dst, const fp16 *src, size_t n);

/* Whether a loop over n elements splits over the OpenMP team (large, and not already inside a
 * parallel region), in chunks of DTYPE_CHUNK elements: the arrays above, and kernels/bf16.c's
 * loops, which split the same way. */
int dtype_use_team(size_t n);
#define DTYPE_CHUNK ((size_t)1 << 14)

#endif
