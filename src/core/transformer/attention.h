/* Self-attention (Megatron-core's SelfAttention): fused linear_qkv, optional q/k norm, RoPE,
 * core attention, linear_proj. Input is the norm1 output; output is linear_proj's output
 * before dropout and the residual add (those belong to the layer). */
#ifndef MEGADLM_CORE_TRANSFORMER_ATTENTION_H
#define MEGADLM_CORE_TRANSFORMER_ATTENTION_H

#include "core/transformer/transformer_layer.h"

/* out[N, C] = linear_proj(core_attention(qkv(ln1))). Uses s->qkv_raw/qk stats/qkv/probs/ctx. */
void self_attention_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                            layer_saved *s, layer_workspace *ws, const float *ln1, float *out);
/* dln1[N, C] += grad w.r.t. ln1, given dout[N, C] (grad w.r.t. out). */
void self_attention_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                             const layer_weights *g, const layer_saved *s, layer_workspace *ws,
                             const float *ln1, const float *dout, float *dln1);

#endif
