/* Rotary position embedding as Megatron-core applies it (non-interleaved, "rotate_half"):
 * rot_dim = kv_channels * rotary_percent (even); inv_freq[i] = base^(-2i / rot_dim),
 * i < rot_dim/2; angle(pos, i) = pos * inv_freq[i]. For the first rot_dim channels x of a
 * head, with halves x1 = x[:rot_dim/2], x2 = x[rot_dim/2:]:
 *   x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin
 * channels past rot_dim pass unchanged. Applied to query and key heads of the packed QKV
 * buffer (layout in attention.h), in place; value heads are untouched. */
#ifndef MEGADLM_CORE_KERNELS_ROPE_H
#define MEGADLM_CORE_KERNELS_ROPE_H

/* cos_t, sin_t [T, rot_dim/2] for positions pos_offset .. pos_offset + T - 1. */
void rope_tables(float *cos_t, float *sin_t, int T, int rot_dim, float base, int pos_offset);

void rope_forward(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                  int NG, int HS, int rot_dim);
/* In place: dqkv := R^T dqkv on query and key heads (the transpose rotation). */
void rope_backward(float *dqkv, const float *cos_t, const float *sin_t, int B, int T, int NH,
                   int NG, int HS, int rot_dim);

#endif
