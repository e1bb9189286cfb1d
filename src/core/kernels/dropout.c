/* Counter-based dropout (see dropout.h for the exact key/counter packing). One Philox call
 * yields the decisions of 4 consecutive global indices (lane = index % 4); the loops below
 * walk the buffer in aligned blocks of 64 global indices, and a buffer may start and end
 * anywhere inside a block, which is what makes shards draw the whole tensor's mask.
 * Called inside an OpenMP parallel region (attention), the loops run serially in the caller's
 * thread; otherwise large buffers are split across threads by blocks. */
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

/* Masks are generated in blocks of DROP_BLOCK = 64 consecutive global indices (16 Philox
 * counters), block b covering indices [64 b, 64 b + 64): the ten rounds run over the 16
 * counters side by side so the compiler vectorizes them (32x32->64-bit multiplies). The
 * result is bit-identical to dropout_keep(): u[e] is lane e % 4 of counter 16 b + e / 4. */
#define DROP_GROUPS 16
#define DROP_BLOCK (4 * DROP_GROUPS)

/* Ten Philox4x32 rounds on DROP_GROUPS counters held as four word arrays (structure of
 * arrays, restrict: the j loop vectorizes). */
static void philox_rounds_soa(uint32_t *restrict c0, uint32_t *restrict c1, uint32_t *restrict c2,
                              uint32_t *restrict c3, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        for (int j = 0; j < DROP_GROUPS; j++) {
            const uint64_t p0 = (uint64_t)c0[j] * 0xD2511F53u;
            const uint64_t p1 = (uint64_t)c2[j] * 0xCD9E8D57u;
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0;
            const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
            c1[j] = (uint32_t)p1;
            c3[j] = (uint32_t)p0;
            c0[j] = n0;
            c2[j] = n2;
        }
        k0 += 0x9E3779B9u; /* Weyl key schedule, as philox4x32_10_inline */
        k1 += 0xBB67AE85u;
    }
}

static inline void dropout_block_uniforms(dropout_key key, uint64_t block, float u[DROP_BLOCK]) {
    uint32_t c0[DROP_GROUPS], c1[DROP_GROUPS], c2[DROP_GROUPS], c3[DROP_GROUPS];
    const uint32_t word2 = (key.layer << 8) | key.site;
    for (int j = 0; j < DROP_GROUPS; j++) {
        const uint64_t g = block * DROP_GROUPS + (uint64_t)j;
        c0[j] = (uint32_t)g;
        c1[j] = (uint32_t)(g >> 32);
        c2[j] = word2;
        c3[j] = key.microbatch;
    }
    philox_rounds_soa(c0, c1, c2, c3, (uint32_t)key.seed, key.iteration);
    for (int j = 0; j < DROP_GROUPS; j++) {
        u[4 * j + 0] = philox_to_uniform(c0[j]);
        u[4 * j + 1] = philox_to_uniform(c1[j]);
        u[4 * j + 2] = philox_to_uniform(c2[j]);
        u[4 * j + 3] = philox_to_uniform(c3[j]);
    }
}

/* The shared loop: for every element i in [0, n) (global index offset + i), evaluates BODY
 * with keep = 0/1. Blocks are split across threads when the buffer is large and we are not
 * already inside a parallel region (attention calls this per row from its own threads). */
#define DROPOUT_BLOCK_BODY(BODY)                                                                   \
    do {                                                                                           \
        float u[DROP_BLOCK];                                                                       \
        dropout_block_uniforms(key, (uint64_t)blk, u);                                             \
        const uint64_t b0 = (uint64_t)blk * DROP_BLOCK;                                            \
        const uint64_t lo = first > b0 ? first : b0;                                               \
        const uint64_t hi = last < b0 + DROP_BLOCK ? last : b0 + DROP_BLOCK;                       \
        float *const ub = u + (lo - b0);                                                           \
        const size_t i0 = (size_t)(lo - first), cnt = (size_t)(hi - lo);                           \
        for (size_t e = 0; e < cnt; e++) {                                                         \
            const size_t i = i0 + e;                                                               \
            const int keep = ub[e] >= p;                                                           \
            BODY;                                                                                  \
        }                                                                                          \
    } while (0)

/* clang-format off */
#define DROPOUT_LOOP(BODY)                                                                         \
    do {                                                                                           \
        const uint64_t first = offset, last = offset + n; /* [first, last) */                      \
        const int64_t blk_begin = (int64_t)(first / DROP_BLOCK);                                   \
        const int64_t blk_end = (int64_t)((last + DROP_BLOCK - 1) / DROP_BLOCK);                   \
        if (n >= DROPOUT_PARALLEL_MIN && !omp_in_parallel()) {                                     \
            _Pragma("omp parallel for schedule(static)")                                           \
            for (int64_t blk = blk_begin; blk < blk_end; blk++) DROPOUT_BLOCK_BODY(BODY);          \
        } else {                                                                                   \
            for (int64_t blk = blk_begin; blk < blk_end; blk++) DROPOUT_BLOCK_BODY(BODY);          \
        }                                                                                          \
    } while (0)
/* clang-format on */

/* out[i] = keep(offset+i) ? inp[i] * (1/(1-p)) : 0.  p <= 0 copies (exactly); p >= 1 zeros.
 * out may alias inp. */
void dropout_forward(float *out, const float *inp, size_t n, float p, dropout_key key,
                     uint64_t offset) {
    if (p <= 0.0f) {
        if (out != inp)
            memmove(out, inp, n * sizeof(float));
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
        for (int64_t i = 0; i < nn; i++)
            dinp[i] += dout[i];
        return;
    }
    if (p >= 1.0f)
        return;
    const float scale = 1.0f / (1.0f - p);
    DROPOUT_LOOP(if (keep) dinp[i] += dout[i] * scale);
}

/* out[i] = residual[i] + dropout(x)[i]. out may alias residual (or x). */
void residual_dropout_forward(float *out, const float *residual, const float *x, size_t n, float p,
                              dropout_key key, uint64_t offset) {
    if (p <= 0.0f) {
        const int64_t nn = (int64_t)n;
#pragma omp parallel for schedule(static) if (nn >= DROPOUT_PARALLEL_MIN && !omp_in_parallel())
        for (int64_t i = 0; i < nn; i++)
            out[i] = residual[i] + x[i];
        return;
    }
    if (p >= 1.0f) {
        if (out != residual)
            memmove(out, residual, n * sizeof(float));
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
        for (int64_t i = 0; i < nn; i++)
            dresidual[i] += dout[i];
    }
    if (dx)
        dropout_backward(dx, dout, n, p, key, offset);
}
