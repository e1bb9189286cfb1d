/* Token (+ learned absolute position) embedding. */
#include "core/kernels/embedding.h"

#include <stddef.h>

#include "core/kernels/bf16.h"

/* out[B,T,C] = wte[tokens[b,t], :] + (wpe ? wpe[pos_offset + t, :] : 0) */
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe, int B,
                       int T, int C, int pos_offset) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        float *o = out + (size_t)bt * C;
        const float *e = wte + (size_t)tokens[bt] * C;
        if (wpe) {
            const float *p = wpe + (size_t)(pos_offset + t) * C;
            for (int i = 0; i < C; i++)
                o[i] = e[i] + p[i];
        } else {
            for (int i = 0; i < C; i++)
                o[i] = e[i];
        }
    }
}

/* The same from a 16-bit table (--bf16 / --fp16: the model's word embedding is its 16-bit
 * parameter): each row widened to fp32, then the position row added as above. */
void embedding_forward_half(float *out, const int *tokens, half_kind kind, const uint16_t *wte16,
                            const float *wpe, int B, int T, int C, int pos_offset) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        float *o = out + (size_t)bt * C;
        half_to_f32(kind, o, wte16 + (size_t)tokens[bt] * C, (size_t)C);
        if (wpe) {
            const float *p = wpe + (size_t)(pos_offset + t) * C;
            for (int i = 0; i < C; i++)
                o[i] = o[i] + p[i];
        }
    }
}

#define EMB_BLOCK 64

/* dwte[tokens[b,t], :] += dout[b,t,:];  dwpe[pos_offset + t, :] += dout[b,t,:].
 * Repeated tokens hit the same dwte row, so threads split the C columns (blocks of EMB_BLOCK)
 * instead of the tokens: no races, and the summation order (b, t ascending) is fixed.
 * dwte or dwpe may be NULL. */
void embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens, int B,
                        int T, int C, int pos_offset) {
    const int nblocks = (C + EMB_BLOCK - 1) / EMB_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        const int c0 = blk * EMB_BLOCK;
        const int w = C - c0 < EMB_BLOCK ? C - c0 : EMB_BLOCK;
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C + c0;
            if (dwte) {
                float *e = dwte + (size_t)tokens[bt] * C + c0;
                for (int i = 0; i < w; i++)
                    e[i] += d[i];
            }
            if (dwpe) {
                float *p = dwpe + (size_t)(pos_offset + bt % T) * C + c0;
                for (int i = 0; i < w; i++)
                    p[i] += d[i];
            }
        }
    }
}
