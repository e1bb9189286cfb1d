/* Self-attention (Megatron-core's SelfAttention) on this rank's share of the heads: the
 * column-parallel fused linear_qkv (this rank's query groups), optional q/k norm, RoPE, core
 * attention over the local heads, and the row-parallel linear_proj. Input: this rank's [Ns, C]
 * rows of the norm output (all of them without sequence parallelism); output: linear_proj's
 * [Ns, C] rows, summed across tensor-parallel ranks, bias added. The communication happens in
 * the parallel linears (tensor_parallel/parallel_linear.h). */
#ifndef MEGADLM_CORE_TRANSFORMER_ATTENTION_H
#define MEGADLM_CORE_TRANSFORMER_ATTENTION_H

#include "core/transformer/layer_types.h"

/* out_local = reduce(ctx_local @ linear_proj_local^T) + b. Uses s->qkv_raw/qk stats/qkv/probs/ctx. */
void self_attention_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                            layer_saved *s, layer_workspace *ws, const float *in_local,
                            float *out_local);
/* din_local[Ns, C] = the gradient w.r.t. in_local (overwritten), given dout_local[Ns, C], the
 * gradient w.r.t. out_local. Weight gradients accumulate into g. */
void self_attention_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                             const layer_weights *g, const layer_saved *s, layer_workspace *ws,
                             const float *in_local, const float *dout_local, float *din_local);

#endif
