/* Rotary position embedding as Megatron-core applies it (non-interleaved, "rotate_half"):
 * rot_dim = kv_channels * rotary_percent (even); inv_freq[i] = base^(-2i / rot_dim),
 * i < rot_dim/2; angle(pos, i) = pos * inv_freq[i]. For the first rot_dim channels x of a
 * head, with halves x1 = x[:rot_dim/2], x2 = x[rot_dim/2:]:
 *   x1' = x1 cos - x2 sin,   x2' = x2 cos + x1 sin
 * channels past rot_dim pass unchanged. Applied to query and key heads of the packed QKV
 * buffer (layout in qkv_layout.h), in place; value heads are untouched. */
#ifndef MEGADLM_CORE_KERNELS_ROPE_H
#define MEGADLM_CORE_KERNELS_ROPE_H

#include "core/kernels/qkv_layout.h"

/* cos_t, sin_t [T, rot_dim/2] for positions pos_offset .. pos_offset + T - 1. */
void rope_tables(float *cos_t, float *sin_t, int T, int rot_dim, float base, int pos_offset);

/* The tables of rope_tables and the rotated width they were made for. */
typedef struct {
    const float *cos, *sin; /* [T, rot_dim/2], row t for the sequence's position t */
    int rot_dim;
} rope_table;

/* qkv[B, T, QKV_C] (shapes in x) rotated in place. */
void rope_forward(float *qkv, qkv_batch x, rope_table r);
/* In place: dqkv := R^T dqkv on query and key heads (the transpose rotation). */
void rope_backward(float *dqkv, qkv_batch x, rope_table r);

#endif
