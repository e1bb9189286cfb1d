/* MLP (Megatron-core's MLP): linear_fc1 -> GELU or SwiGLU -> linear_fc2. Output is linear_fc2's
 * output before dropout and the residual add. */
#ifndef MEGADLM_CORE_TRANSFORMER_MLP_H
#define MEGADLM_CORE_TRANSFORMER_MLP_H

#include "core/transformer/transformer_layer.h"

/* out[N, C] = fc2(act(fc1(ln2))). Uses s->fc1, s->act. */
void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s, const float *ln2,
                 float *out);
/* dln2[N, C] += grad w.r.t. ln2, given dout[N, C]. */
void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *ln2, const float *dout,
                  float *dln2);

#endif
