/* Core attention: softmax(Q K^T * scale + mask) -> dropout -> @ V, per batch and head.
 *
 * QKV layout (Megatron's fused linear_qkv output): each token row holds NG query groups of
 * (NH/NG query heads, then 1 key head, then 1 value head), each head HS floats:
 *   row width QKV_C = NG * (NH/NG + 2) * HS
 *   query head h: group g = h / (NH/NG), offset (g * (NH/NG + 2) + h % (NH/NG)) * HS
 *   key of group g: offset (g * (NH/NG + 2) + NH/NG) * HS;  value: one head further.
 * out[B,T,NH*HS] puts head h at columns h*HS .. h*HS+HS-1 (the input of linear_proj).
 * probs[B,NH,T,T] is the softmax output before dropout, saved for backward (masked entries 0).
 * scale = 1/sqrt(HS). causal != 0 masks key positions j > query position i.
 * Attention dropout uses key.site = DROPOUT_SITE_ATTENTION_PROBS; the global element index of
 * probs[b,h,i,j] is (b * total_heads + head_offset + h) * T * T + i * T + j, so a tensor-parallel
 * rank holding heads head_offset .. head_offset + NH - 1 of total_heads draws the same masks as a
 * single process (which passes 0 and NH).
 * probs may be NULL in forward (nothing kept) and in backward, which then recomputes each
 * head's probabilities with the same code as forward (bitwise identical): selective
 * recomputation keeps only Q, K, V.
 * workspace: attention_workspace_floats(T) floats, shared by forward and backward. */
#ifndef MEGADLM_CORE_KERNELS_ATTENTION_H
#define MEGADLM_CORE_KERNELS_ATTENTION_H

#include <stddef.h>

#include "core/kernels/dropout.h"

size_t attention_workspace_floats(int T);

void attention_forward(float *out, float *probs, const float *qkv, int B, int T, int NH, int NG,
                       int HS, int causal, float dropout_p, dropout_key key, int head_offset,
                       int total_heads, float *workspace);
/* dqkv[B,T,QKV_C] += gradient w.r.t. qkv (query, key and value columns). */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *probs,
                        int B, int T, int NH, int NG, int HS, int causal, float dropout_p,
                        dropout_key key, int head_offset, int total_heads, float *workspace);

#endif
