/* MLP (Megatron-core's MLP) on this rank's share of the ffn: column-parallel linear_fc1 (with
 * SwiGLU, this rank's gate rows then its up rows), GELU or SwiGLU, row-parallel linear_fc2.
 * Input: this rank's [Ns, C] rows of the norm output; output: linear_fc2's [Ns, C] rows, summed
 * across tensor-parallel ranks, bias added (tensor_parallel/parallel_linear.h). */
#ifndef MEGADLM_CORE_TRANSFORMER_MLP_H
#define MEGADLM_CORE_TRANSFORMER_MLP_H

#include "core/transformer/layer_types.h"

/* out_local = reduce(act(gather(in_local) @ fc1_local^T + b) @ fc2_local^T) + b.
 * Uses s->fc1, s->act. */
void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s,
                 layer_workspace *ws, const float *in_local, float *out_local);
/* din_local[Ns, C] = the gradient w.r.t. in_local (overwritten), given dout_local[Ns, C]. */
void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *in_local,
                  const float *dout_local, float *din_local);

#endif
