/* bf16 / fp16 array conversions: see bf16.h for the rounding rules. Each element is converted
 * on its own, so the split over threads does not change any bit. */
#include "core/kernels/bf16.h"

#include <omp.h>
#include <string.h>

/* Below this many elements one thread converts (a parallel region costs microseconds; a
 * thread converts a few elements per nanosecond). */
#define BF16_PARALLEL_MIN ((size_t)1 << 17)
#define BF16_CHUNK ((size_t)1 << 14)

static int use_team(size_t n) { return n >= BF16_PARALLEL_MIN && !omp_in_parallel(); }

/* The loop of one conversion over [0, n), as a function of the element conversion. */
#define BF16_CONVERT(NAME, DST_T, SRC_T, ONE)                                                     \
    static void NAME##_serial(DST_T *restrict dst, const SRC_T *restrict src, size_t n) {         \
        _Pragma("omp simd") for (size_t i = 0; i < n; i++) dst[i] = ONE(src[i]);                \
    }                                                                                           \
    void NAME(DST_T *dst, const SRC_T *src, size_t n) {                                         \
        if (!use_team(n)) {                                                                     \
            NAME##_serial(dst, src, n);                                                         \
            return;                                                                             \
        }                                                                                       \
        const size_t chunks = (n + BF16_CHUNK - 1) / BF16_CHUNK;                                \
        _Pragma("omp parallel for schedule(static)") for (size_t c = 0; c < chunks; c++) {      \
            const size_t b = c * BF16_CHUNK, e = b + BF16_CHUNK < n ? b + BF16_CHUNK : n;       \
            NAME##_serial(dst + b, src + b, e - b);                                             \
        }                                                                                       \
    }

BF16_CONVERT(bf16_from_f32, bf16, float, bf16_from_float)
BF16_CONVERT(bf16_to_f32, float, bf16, bf16_to_float)
BF16_CONVERT(fp16_from_f32, fp16, float, fp16_from_float)
BF16_CONVERT(fp16_to_f32, float, fp16, fp16_to_float)

static void bf16_round_serial(float *x, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) x[i] = bf16_to_float(bf16_from_float(x[i]));
}

void bf16_round_f32(float *x, size_t n) {
    if (!use_team(n)) {
        bf16_round_serial(x, n);
        return;
    }
    const size_t chunks = (n + BF16_CHUNK - 1) / BF16_CHUNK;
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        const size_t b = c * BF16_CHUNK, e = b + BF16_CHUNK < n ? b + BF16_CHUNK : n;
        bf16_round_serial(x + b, e - b);
    }
}

void bf16_to_f32_2d(float *dst, size_t ld_dst, const bf16 *src, size_t ld_src, size_t rows,
                    size_t cols) {
    if (!use_team(rows * cols) || rows < 2) {
        for (size_t r = 0; r < rows; r++) bf16_to_f32_serial(dst + r * ld_dst, src + r * ld_src, cols);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) bf16_to_f32_serial(dst + r * ld_dst, src + r * ld_src, cols);
}

/* In blocks copied out first: the floats of a block end at byte 4 (i + B), where the next
 * block's bf16 values begin (byte 2n + 2 (i + B), not below it while i + B <= n), so nothing
 * is overwritten before it is read. */
#define WIDEN_BLOCK 1024
void bf16_widen_staged(float *x, size_t n) {
    const unsigned char *stage = (const unsigned char *)x + n * sizeof(bf16);
    bf16 block[WIDEN_BLOCK];
    for (size_t i = 0; i < n; i += WIDEN_BLOCK) {
        size_t k = n - i < WIDEN_BLOCK ? n - i : WIDEN_BLOCK;
        memcpy(block, stage + i * sizeof(bf16), k * sizeof(bf16));
        bf16_to_f32_serial(x + i, block, k);
    }
}
