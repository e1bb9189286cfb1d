/* MLP (Megatron-core's MLP) on this rank's share of the ffn: column-parallel linear_fc1 (with
 * SwiGLU, this rank's gate rows then its up rows), GELU or SwiGLU, row-parallel linear_fc2
 * without its bias. Input: the whole [N, C] norm output; output: this rank's partial sum, which
 * the layer reduces and adds the bias to. */
#ifndef MEGADLM_CORE_TRANSFORMER_MLP_H
#define MEGADLM_CORE_TRANSFORMER_MLP_H

#include "core/transformer/transformer_layer.h"

/* out[N, C] = act(in @ fc1_local^T + b) @ fc2_local^T. Uses s->fc1, s->act. */
void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s, const float *in,
                 float *out);
/* din[N, C] += this rank's part of the gradient w.r.t. in, given dout[N, C]. */
void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *in, const float *dout,
                  float *din);

#endif
