/* Counter-based dropout (see dropout.h for the exact key/counter packing). One Philox call
 * yields the decisions of 4 consecutive global indices (lane = index % 4), so the loops below
 * walk the buffer in aligned groups of 4 global indices; a buffer may start and end anywhere
 * inside a group (offset % 4 != 0), which is what makes shards draw the whole tensor's mask.
 * Called inside an OpenMP parallel region (attention), the loops run serially in the caller's
 * thread; otherwise large buffers are split across threads by groups. */
#include "core/kernels/dropout.h"

#include <omp.h>
#include <string.h>

#include "core/random/philox.h"

static inline void dropout_bits(dropout_key key, uint64_t g, uint32_t r[4]) {
    const uint32_t k[2] = {(uint32_t)key.seed, key.iteration};
    const uint32_t c[4] = {(uint32_t)g, (uint32_t)(g >> 32), (key.layer << 8) | key.site,
                           key.microbatch};
    philox4x32_10_inline(c, k, r);
}

int dropout_keep(dropout_key key, uint64_t global_index, float p) {
    uint32_t r[4];
    dropout_bits(key, global_index / 4, r);
    return philox_to_uniform(r[global_index % 4]) >= p;
}

/* Below this many elements a call stays single-threaded. */
#define DROPOUT_PARALLEL_MIN 32768

/* The shared loop: for every element i in [0, n) with global index offset + i, calls
 * BODY(i, keep) where keep is 0/1. Groups g in [g_begin, g_end) are split across threads. */
#define DROPOUT_LOOP(BODY)                                                                   \
    do {                                                                                     \
        const uint64_t first = offset, last = offset + n; /* [first, last) */                \
        const int64_t g_begin = (int64_t)(first / 4), g_end = (int64_t)((last + 3) / 4);     \
        const int par = n >= DROPOUT_PARALLEL_MIN && !omp_in_parallel();                     \
        _Pragma("omp parallel for schedule(static) if (par)")                                \
        for (int64_t g = g_begin; g < g_end; g++) {                                          \
            uint32_t r[4];                                                                   \
            dropout_bits(key, (uint64_t)g, r);                                               \
            for (int lane = 0; lane < 4; lane++) {                                           \
                const uint64_t idx = (uint64_t)g * 4 + (uint64_t)lane;                       \
                if (idx < first || idx >= last) continue;                                    \
                const size_t i = (size_t)(idx - first);                                      \
                const int keep = philox_to_uniform(r[lane]) >= p;                            \
                BODY;                                                                        \
            }                                                                                \
        }                                                                                    \
    } while (0)

/* out[i] = keep(offset+i) ? inp[i] * (1/(1-p)) : 0.  p <= 0 copies (exactly); p >= 1 zeros.
 * out may alias inp. */
void dropout_forward(float *out, const float *inp, size_t n, float p, dropout_key key,
                     uint64_t offset) {
    if (p <= 0.0f) {
        if (out != inp) memmove(out, inp, n * sizeof(float));
        return;
    }
    if (p >= 1.0f) {
        memset(out, 0, n * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    DROPOUT_LOOP(out[i] = keep ? inp[i] * scale : 0.0f);
}

/* dinp[i] += keep(offset+i) ? dout[i] * (1/(1-p)) : 0 */
void dropout_backward(float *dinp, const float *dout, size_t n, float p, dropout_key key,
                      uint64_t offset) {
    if (p <= 0.0f) {
        const int64_t nn = (int64_t)n;
#pragma omp parallel for schedule(static) if (nn >= DROPOUT_PARALLEL_MIN && !omp_in_parallel())
        for (int64_t i = 0; i < nn; i++) dinp[i] += dout[i];
        return;
    }
    if (p >= 1.0f) return;
    const float scale = 1.0f / (1.0f - p);
    DROPOUT_LOOP(if (keep) dinp[i] += dout[i] * scale);
}

/* out[i] = residual[i] + dropout(x)[i]. out may alias residual (or x). */
void residual_dropout_forward(float *out, const float *residual, const float *x, size_t n,
                              float p, dropout_key key, uint64_t offset) {
    if (p <= 0.0f) {
        const int64_t nn = (int64_t)n;
#pragma omp parallel for schedule(static) if (nn >= DROPOUT_PARALLEL_MIN && !omp_in_parallel())
        for (int64_t i = 0; i < nn; i++) out[i] = residual[i] + x[i];
        return;
    }
    if (p >= 1.0f) {
        if (out != residual) memmove(out, residual, n * sizeof(float));
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    DROPOUT_LOOP(out[i] = residual[i] + (keep ? x[i] * scale : 0.0f));
}

/* dresidual[i] += dout[i];  dx[i] += keep ? dout[i] / (1-p) : 0.  Either may be NULL. */
void residual_dropout_backward(float *dresidual, float *dx, const float *dout, size_t n, float p,
                               dropout_key key, uint64_t offset) {
    if (dresidual) {
        const int64_t nn = (int64_t)n;
#pragma omp parallel for schedule(static) if (nn >= DROPOUT_PARALLEL_MIN && !omp_in_parallel())
        for (int64_t i = 0; i < nn; i++) dresidual[i] += dout[i];
    }
    if (dx) dropout_backward(dx, dout, n, p, key, offset);
}
