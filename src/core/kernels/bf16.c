/* Rounding in place, tiles, staged widening and the run's 16-bit format: see bf16.h; the
 * conversions and their rounding rules are core/tensor/dtype.h's. Each element is converted on
 * its own, so the split over threads does not change any bit. */
#include "core/kernels/bf16.h"

#include <omp.h>
#include <string.h>

#include "core/util/die.h"

/* Large loops split as dtype.c's conversions do. */
#define BF16_CHUNK DTYPE_CHUNK

static int use_team(size_t n) { return dtype_use_team(n); }

/* One thread's widening of a row (the tiles and the staged widening split by rows or not at
 * all); the element conversions are dtype.h's. */
#define WIDEN_SERIAL(NAME, SRC_T, ONE)                                                          \
    static void NAME(float *restrict dst, const SRC_T *restrict src, size_t n) {                \
        _Pragma("omp simd") for (size_t i = 0; i < n; i++) dst[i] = ONE(src[i]);                \
    }

WIDEN_SERIAL(bf16_to_f32_serial, bf16, bf16_to_float)
WIDEN_SERIAL(fp16_to_f32_serial, fp16, fp16_to_float)

/* x = widen(narrow(x)) over [0, n): the rounding of one format, split like a conversion */
#define HALF_ROUND(NAME, FROM, TO)                                                              \
    static void NAME##_serial(float *x, size_t n) {                                             \
        _Pragma("omp simd") for (size_t i = 0; i < n; i++) x[i] = TO(FROM(x[i]));               \
    }                                                                                           \
    void NAME(float *x, size_t n) {                                                             \
        if (!use_team(n)) {                                                                     \
            NAME##_serial(x, n);                                                                \
            return;                                                                             \
        }                                                                                       \
        const size_t chunks = (n + BF16_CHUNK - 1) / BF16_CHUNK;                                \
        _Pragma("omp parallel for schedule(static)") for (size_t c = 0; c < chunks; c++) {      \
            const size_t b = c * BF16_CHUNK, e = b + BF16_CHUNK < n ? b + BF16_CHUNK : n;       \
            NAME##_serial(x + b, e - b);                                                        \
        }                                                                                       \
    }

HALF_ROUND(bf16_round_f32, bf16_from_float, bf16_to_float)
HALF_ROUND(fp16_round_f32, fp16_from_float, fp16_to_float)

/* A block of rows, each row one serial conversion; rows split over the team when large. */
#define HALF_TO_F32_2D(NAME, SRC_T, ROW)                                                        \
    void NAME(float *dst, size_t ld_dst, const SRC_T *src, size_t ld_src, size_t rows,          \
              size_t cols) {                                                                    \
        if (!use_team(rows * cols) || rows < 2) {                                               \
            for (size_t r = 0; r < rows; r++) ROW(dst + r * ld_dst, src + r * ld_src, cols);    \
            return;                                                                             \
        }                                                                                       \
        _Pragma("omp parallel for schedule(static)") for (size_t r = 0; r < rows; r++)          \
            ROW(dst + r * ld_dst, src + r * ld_src, cols);                                      \
    }

HALF_TO_F32_2D(bf16_to_f32_2d, bf16, bf16_to_f32_serial)
HALF_TO_F32_2D(fp16_to_f32_2d, fp16, fp16_to_f32_serial)

/* ---- the run's format ---- */

const char *half_kind_name(half_kind kind) {
    return kind == HALF_BF16 ? "bf16" : kind == HALF_FP16 ? "fp16" : "fp32";
}

static void no_format(const char *what) {
    die(1, "internal error: %s without a 16-bit format", what);
}

void half_round_f32(half_kind kind, float *x, size_t n) {
    if (kind == HALF_BF16) bf16_round_f32(x, n);
    else if (kind == HALF_FP16) fp16_round_f32(x, n);
}

void half_from_f32(half_kind kind, uint16_t *dst, const float *src, size_t n) {
    if (kind == HALF_BF16) bf16_from_f32(dst, src, n);
    else if (kind == HALF_FP16) fp16_from_f32(dst, src, n);
    else no_format("half_from_f32");
}

void half_to_f32(half_kind kind, float *dst, const uint16_t *src, size_t n) {
    if (kind == HALF_BF16) bf16_to_f32(dst, src, n);
    else if (kind == HALF_FP16) fp16_to_f32(dst, src, n);
    else no_format("half_to_f32");
}

void half_to_f32_2d(half_kind kind, float *dst, size_t ld_dst, const uint16_t *src,
                    size_t ld_src, size_t rows, size_t cols) {
    if (kind == HALF_BF16) bf16_to_f32_2d(dst, ld_dst, src, ld_src, rows, cols);
    else if (kind == HALF_FP16) fp16_to_f32_2d(dst, ld_dst, src, ld_src, rows, cols);
    else no_format("half_to_f32_2d");
}

void half_from_f32_2d(half_kind kind, uint16_t *dst, size_t ld_dst, const float *src,
                      size_t ld_src, size_t rows, size_t cols) {
    if (kind != HALF_BF16 && kind != HALF_FP16) no_format("half_from_f32_2d");
    if (!use_team(rows * cols) || rows < 2) {
        for (size_t r = 0; r < rows; r++)
            half_from_f32(kind, dst + r * ld_dst, src + r * ld_src, cols);
        return;
    }
    /* inside the region each row's conversion runs on its thread (dtype_use_team says no) */
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) half_from_f32(kind, dst + r * ld_dst, src + r * ld_src, cols);
}

/* In blocks copied out first: the floats of a block end at byte 4 (i + B), where the next
 * block's bf16 values begin (byte 2n + 2 (i + B), not below it while i + B <= n), so nothing
 * is overwritten before it is read. */
#define WIDEN_BLOCK 1024
static void widen_staged(float *x, size_t n,
                         void (*widen)(float *restrict, const uint16_t *restrict, size_t)) {
    const unsigned char *stage = (const unsigned char *)x + n * sizeof(uint16_t);
    uint16_t block[WIDEN_BLOCK];
    for (size_t i = 0; i < n; i += WIDEN_BLOCK) {
        size_t k = n - i < WIDEN_BLOCK ? n - i : WIDEN_BLOCK;
        memcpy(block, stage + i * sizeof(uint16_t), k * sizeof(uint16_t));
        widen(x + i, block, k);
    }
}

void bf16_widen_staged(float *x, size_t n) { widen_staged(x, n, bf16_to_f32_serial); }

void half_widen_staged(half_kind kind, float *x, size_t n) {
    if (kind == HALF_BF16) widen_staged(x, n, bf16_to_f32_serial);
    else if (kind == HALF_FP16) widen_staged(x, n, fp16_to_f32_serial);
    else no_format("half_widen_staged");
}
