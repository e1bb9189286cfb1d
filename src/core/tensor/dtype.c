/* bf16 / fp16 array conversions: see dtype.h for the rounding rules. Each element is converted
 * on its own, so the split over threads does not change any bit. */
#include "core/tensor/dtype.h"

#include <omp.h>

/* Below this many elements one thread converts (a parallel region costs microseconds; a
 * thread converts a few elements per nanosecond). */
#define BF16_PARALLEL_MIN ((size_t)1 << 17)
#define BF16_CHUNK DTYPE_CHUNK

int dtype_use_team(size_t n) { return n >= BF16_PARALLEL_MIN && !omp_in_parallel(); }

/* The loop of one conversion over [0, n), as a function of the element conversion. */
#define BF16_CONVERT(NAME, DST_T, SRC_T, ONE)                                                     \
    static void NAME##_serial(DST_T *restrict dst, const SRC_T *restrict src, size_t n) {         \
        _Pragma("omp simd") for (size_t i = 0; i < n; i++) dst[i] = ONE(src[i]);                \
    }                                                                                           \
    void NAME(DST_T *dst, const SRC_T *src, size_t n) {                                         \
        if (!dtype_use_team(n)) {                                                               \
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
