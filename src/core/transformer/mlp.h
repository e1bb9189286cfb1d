/* MLP (Megatron-core's MLP) on this rank's share of the ffn: column-parallel linear_fc1 (with
 * SwiGLU, this rank's gate rows then its up rows), GELU or SwiGLU, row-parallel linear_fc2.
 * Input: this rank's [Ns, C] rows of the norm output; output: linear_fc2's [Ns, C] rows, summed
 * across tensor-parallel ranks, bias added (tensor_parallel/parallel_linear.h). */
#ifndef MEGADLM_CORE_TRANSFORMER_MLP_H
#define MEGADLM_CORE_TRANSFORMER_MLP_H

#include "core/transformer/layer_types.h"

/* The buffers of one MLP forward: fc1 [N, FC1/t] and act [N, F/t] (what training keeps for the
 * backward), and the tensor-parallel linears' workspaces (tp_linear_make's gathered, full and
 * recv; NULL where the layout needs none). */
typedef struct {
    float *fc1, *act;
    float *gathered, *branch_full, *recv;
} mlp_buffers;

/* out_local = reduce(act(gather(in_local) @ fc1_local^T + b) @ fc2_local^T) + b on N rows:
 * the one MLP forward of training (mlp_forward) and of inference's row forwards. */
void mlp_forward_rows(const transformer_config *c, const layer_weights *w, const mlp_buffers *b,
                      const float *in_local, float *out_local, int N);
/* mlp_forward_rows on the layer's B x T rows, into s->fc1 and s->act. */
void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s,
                 layer_workspace *ws, const float *in_local, float *out_local);
/* din_local[Ns, C] = the gradient w.r.t. in_local (overwritten), given dout_local[Ns, C]. */
void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *in_local,
                  const float *dout_local, float *din_local);

#endif
