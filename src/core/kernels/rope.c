/* Rotary position embedding (Megatron-core, non-interleaved "rotate_half"), in place on the
 * query and key heads of the packed QKV buffer [B, T, QKV_C] (layout in qkv_layout.h). */
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
static void rope_rotate(float *qkv, qkv_batch xb, rope_table r, float sign) {
    const qkv_layout l = xb.layout;
    const int Q = qkv_heads_per_group(l), T = xb.T;
    const size_t QKV_C = qkv_row_width(l);
    const int half = r.rot_dim / 2;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < xb.B * T; bt++) {
        const int t = bt % T;
        const float *c = r.cos + (size_t)t * half, *s = r.sin + (size_t)t * half;
        float *row = qkv + (size_t)bt * QKV_C;
        for (int g = 0; g < l.NG; g++) {
            for (int k = 0; k <= Q; k++) { /* Q query heads, then the key head */
                float *x = row + qkv_slot_offset(l, g, k);
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
void rope_forward(float *qkv, qkv_batch x, rope_table r) { rope_rotate(qkv, x, r, 1.0f); }

/* dqkv := R^T dqkv in place (the rotation by -angle); value heads and channels past rot_dim
 * pass through unchanged. */
void rope_backward(float *dqkv, qkv_batch x, rope_table r) { rope_rotate(dqkv, x, r, -1.0f); }
