/* The stack of transformer layers (Megatron-core's TransformerBlock). It owns the residual
 * stream buffers hidden[0..L] (hidden[l] is layer l's input and is kept for its backward) and
 * the per-layer saved activations; activation recomputation will live here. */
#ifndef MEGADLM_CORE_TRANSFORMER_BLOCK_H
#define MEGADLM_CORE_TRANSFORMER_BLOCK_H

#include "core/transformer/transformer_layer.h"

typedef struct {
    const transformer_config *cfg;
    int num_layers;
    layer_weights *w;     /* [num_layers] parameters (set by the model) */
    layer_weights *g;     /* [num_layers] gradients (NULL without backward) */
    layer_saved *saved;   /* [num_layers] */
    layer_workspace ws;
    float **hidden;       /* [num_layers + 1] of [N, C]; hidden[0] = block input */
    size_t hidden_bytes;  /* bytes of one hidden[l] */
} transformer_block;

void transformer_block_init(transformer_block *blk, const transformer_config *cfg, int B, int T,
                            int with_backward);
void transformer_block_free(transformer_block *blk);

/* hidden[0] -> hidden[num_layers]. */
void transformer_block_forward(transformer_block *blk, const layer_ctx *ctx);
/* dres[N, C]: gradient w.r.t. hidden[num_layers] on entry, w.r.t. hidden[0] on return. */
void transformer_block_backward(transformer_block *blk, const layer_ctx *ctx, float *dres);

/* Saved-activation bytes of layer l: its layer_saved buffers plus its input hidden[l]. */
size_t transformer_block_layer_saved_bytes(const transformer_block *blk, int l);

#endif
