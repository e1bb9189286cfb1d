/* One pre-norm transformer layer (Megatron-core's TransformerLayer with the local spec):
 *   res1 = inp  + dropout(linear_proj(attention(qkv(norm1(inp)))))
 *   out  = res1 + dropout(linear_fc2(act(linear_fc1(norm2(res1)))))
 * Forward records what backward needs in layer_saved (every buffer from the tracked allocator
 * as saved activations); backward consumes it. The layer does not own its input: the block's
 * per-micro-batch activations (block_activations) keep each layer's input (the previous layer's
 * output), and the block passes it to both passes. */
#ifndef MEGADLM_CORE_TRANSFORMER_LAYER_H
#define MEGADLM_CORE_TRANSFORMER_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor/memory.h"
#include "core/transformer/layer_types.h"

/* Allocates a layer's saved buffers for up to B x T tokens in category cat (MEM_ACTIVATIONS for
 * a layer that keeps its state, MEM_WORKSPACE for the slots full recompute reuses); layer: the
 * global layer they are for (an MoE layer keeps no dense MLP tensors), -1 for any layer. */
void layer_saved_alloc(layer_saved *s, const transformer_config *cfg, int B, int T,
                       mem_category cat, const layer_workspace *ws, int layer);
/* --bf16: rounds the b16 tensors' fp32 views into their bf16 storage (after the layer's
 * forward), or widens them back into the views (before its backward); B x T this call's.
 * No-op without --bf16. */
void layer_saved_pack(const layer_saved *s, const transformer_config *cfg, int B, int T);
void layer_saved_unpack(const layer_saved *s, const transformer_config *cfg, int B, int T);
void layer_saved_free(layer_saved *s);
/* threads: the most OpenMP threads a kernel may run with (the attention workspace has a slice
 * per thread). Allocate it before the layer_saved that use its views. */
void layer_workspace_alloc(layer_workspace *ws, const transformer_config *cfg, int B, int T,
                           int with_backward, int threads);
void layer_workspace_free(layer_workspace *ws);

/* out[Ns, C] from inp[Ns, C]; layer_index keys dropout. out must not alias inp. */
void transformer_layer_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                               layer_saved *s, layer_workspace *ws, const float *inp,
                               float *out);
/* dres[Ns, C]: on entry the gradient w.r.t. the layer's output, on return w.r.t. its input
 * (updated in place). Weight gradients accumulate into g. */
void transformer_layer_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                                const layer_weights *g, const layer_saved *s,
                                layer_workspace *ws, const float *inp, float *dres);

/* The norm the config names (--normalization) over N rows of hidden_size: LayerNorm with mean,
 * rstd and bias b, or RMSNorm (mean, b and db unused). One dispatch for the layers' two norms
 * and the model's final norm. Backward accumulates into dinp, dw and db. */
void norm_forward(const transformer_config *c, float *out, float *mean, float *rstd,
                  const float *inp, const float *w, const float *b, int N);
void norm_backward(const transformer_config *c, float *dinp, float *dw, float *db,
                   const float *dout, const float *inp, const float *w, const float *mean,
                   const float *rstd, int N);

#endif
