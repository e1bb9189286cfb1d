/* Self-attention (Megatron-core's SelfAttention) on this rank's share of the heads: the
 * column-parallel fused linear_qkv (this rank's query groups), optional q/k norm, RoPE, core
 * attention over the local heads, and the row-parallel linear_proj without its bias. The input
 * is the whole [N, C] norm output (gathered by the layer under sequence parallelism); the output
 * is this rank's partial sum of linear_proj, which the layer reduces across tensor-parallel ranks
 * and then adds the bias to. */
#ifndef MEGADLM_CORE_TRANSFORMER_ATTENTION_H
#define MEGADLM_CORE_TRANSFORMER_ATTENTION_H

#include "core/transformer/transformer_layer.h"

/* out[N, C] = ctx_local @ linear_proj_local^T. Uses s->qkv_raw/qk stats/qkv/probs/ctx. */
void self_attention_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                            layer_saved *s, layer_workspace *ws, const float *in, float *out);
/* din[N, C] += this rank's part of the gradient w.r.t. in, given dout[N, C] (the gradient
 * w.r.t. the reduced output). Weight gradients accumulate into g (linear_proj's bias excepted). */
void self_attention_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                             const layer_weights *g, const layer_saved *s, layer_workspace *ws,
                             const float *in, const float *dout, float *din);

#endif
