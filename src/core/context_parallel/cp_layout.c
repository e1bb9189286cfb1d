#include "core/context_parallel/cp_layout.h"

#include <string.h>

/* fn on each run of rows of r that are consecutive global tokens: local row offset, global
 * element offset, element count. */
#define CP_FOR_RUNS(r, lo, go, n, BODY)                                                      \
    for (int64_t i_ = 0; i_ < (r).rows;) {                                                  \
        int64_t len_ = cp_run((r).cfg, (r).T_local, (r).first + i_);                        \
        if (len_ > (r).rows - i_) len_ = (r).rows - i_;                                     \
        const size_t lo = (size_t)i_ * (r).C;                                               \
        const uint64_t go = (uint64_t)cp_global_token((r).cfg, (r).T_local, (r).T_key, (r).first + i_) * \
                            (uint64_t)(r).C;                                                \
        const size_t n = (size_t)len_ * (r).C;                                              \
        BODY;                                                                               \
        i_ += len_;                                                                         \
    }

void cp_dropout_forward(cp_rows r, float *out, const float *inp, float p, dropout_key key) {
    CP_FOR_RUNS(r, lo, go, n, dropout_forward(out + lo, inp + lo, n, p, key, go))
}

void cp_dropout_backward(cp_rows r, float *dinp, const float *dout, float p, dropout_key key) {
    CP_FOR_RUNS(r, lo, go, n, dropout_backward(dinp + lo, dout + lo, n, p, key, go))
}

void cp_residual_dropout_forward(cp_rows r, float *out, const float *residual, const float *x,
                                 float p, dropout_key key) {
    CP_FOR_RUNS(r, lo, go, n,
                residual_dropout_forward(out + lo, residual + lo, x + lo, n, p, key, go))
}

void cp_residual_dropout_backward(cp_rows r, float *dresidual, float *dx, const float *dout,
                                  float p, dropout_key key) {
    CP_FOR_RUNS(r, lo, go, n,
                residual_dropout_backward(dresidual ? dresidual + lo : NULL, dx ? dx + lo : NULL,
                                          dout + lo, n, p, key, go))
}

/* dst[b, k L .. (k+1) L) = src[b, chunk(k) L ..) for the rank's two chunks k, of size bytes
 * per element. */
static void select_rows(const transformer_config *c, int B, int T, void *dst, const void *src,
                        size_t size) {
    const int Tl = T / tc_cp(c), L = Tl / 2;
    for (int b = 0; b < B; b++)
        for (int k = 0; k < 2; k++)
            memcpy((char *)dst + ((size_t)b * Tl + (size_t)k * L) * size,
                   (const char *)src + ((size_t)b * T + (size_t)cp_chunk(c, k) * L) * size,
                   (size_t)L * size);
}

void cp_select_rows(const transformer_config *c, int B, int T, int32_t *tokens_local,
                    const int32_t *tokens, int32_t *labels_local, const int32_t *labels,
                    float *mask_local, const float *mask) {
    if (tokens) select_rows(c, B, T, tokens_local, tokens, sizeof(int32_t));
    if (labels) select_rows(c, B, T, labels_local, labels, sizeof(int32_t));
    if (mask) select_rows(c, B, T, mask_local, mask, sizeof(float));
}

/* Each sequence's two chunks separately: one sequence of L rows at its global position. */
static void rope_chunks(const transformer_config *c, float *qkv, qkv_batch x, rope_table r,
                        int backward) {
    if (tc_cp(c) == 1) {
        if (backward)
            rope_backward(qkv, x, r);
        else
            rope_forward(qkv, x, r);
        return;
    }
    const int L = x.T / 2, half = r.rot_dim / 2;
    const size_t W = qkv_row_width(x.layout);
    for (int b = 0; b < x.B; b++)
        for (int k = 0; k < 2; k++) {
            const size_t p0 = (size_t)cp_chunk(c, k) * L * half;
            rope_table rk = {r.cos + p0, r.sin + p0, r.rot_dim};
            float *q = qkv + ((size_t)b * x.T + (size_t)k * L) * W;
            qkv_batch xk = {1, L, x.layout};
            if (backward)
                rope_backward(q, xk, rk);
            else
                rope_forward(q, xk, rk);
        }
}

void cp_rope_forward(const transformer_config *c, float *qkv, qkv_batch x, rope_table r) {
    rope_chunks(c, qkv, x, r, 0);
}

void cp_rope_backward(const transformer_config *c, float *dqkv, qkv_batch x, rope_table r) {
    rope_chunks(c, dqkv, x, r, 1);
}
