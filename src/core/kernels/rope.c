/* Rotary position embedding (Megatron-core, non-interleaved "rotate_half"), in place on the
 * query and key heads of the packed QKV buffer [B, T, QKV_C] (layout in attention.h). */
#include "core/kernels/rope.h"

#include <math.h>
#include <stddef.h>

/* cos_t, sin_t [T, rot_dim/2]: row t is position pos_offset + t. Computed in float as Megatron
 * does: inv_freq[i] = 1 / base^(2i / rot_dim), angle = (float) pos * inv_freq[i]. */
void rope_tables(float *cos_t, float *sin_t, int T, int rot_dim, float base, int pos_offset) {
    const int half = rot_dim / 2;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < half; i++) {
            const float inv_freq = 1.0f / powf(base, (float)(2 * i) / (float)rot_dim);
            const float angle = (float)(pos_offset + t) * inv_freq;
            cos_t[(size_t)t * half + i] = cosf(angle);
            sin_t[(size_t)t * half + i] = sinf(angle);
        }
    }
}

/* Applies the rotation (sign = +1) or its transpose (sign = -1) to every query and key head
 * of every token: with x1 = x[0:half], x2 = x[half:rot_dim],
 *   x1' = x1 cos - sign * x2 sin,   x2' = x2 cos + sign * x1 sin. */
static void rope_rotate(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                        int NG, int HS, int rot_dim, float sign) {
    const int Q = NH / NG;
    const size_t QKV_C = (size_t)NG * (Q + 2) * HS;
    const int half = rot_dim / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const int t = bt % T;
        const float *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
        float *row = qkv + (size_t)bt * QKV_C;
        for (int g = 0; g < NG; g++) {
            for (int k = 0; k <= Q; k++) { /* Q query heads, then the key head */
                float *x = row + ((size_t)g * (Q + 2) + k) * HS;
                for (int i = 0; i < half; i++) {
                    const float x1 = x[i], x2 = x[half + i];
                    const float ss = sign * s[i];
                    x[i] = x1 * c[i] - x2 * ss;
                    x[half + i] = x2 * c[i] + x1 * ss;
                }
            }
        }
    }
}

/* qkv[B,T,QKV_C] rotated in place (query and key heads, first rot_dim channels). */
void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH, int NG,
                  int HS, int rot_dim) {
    rope_rotate(qkv, cos_t, sin_t, B, T, NH, NG, HS, rot_dim, 1.0f);
}

/* dqkv := R^T dqkv in place (the rotation by -angle); value heads and channels past rot_dim
 * pass through unchanged. */
void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                   int NG, int HS, int rot_dim) {
    rope_rotate(dqkv, cos_t, sin_t, B, T, NH, NG, HS, rot_dim, -1.0f);
}
