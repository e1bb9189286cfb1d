#include "core/transformer/transformer_block.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"

void transformer_block_init(transformer_block *blk, const transformer_config *cfg, int B, int T,
                            int with_backward) {
    memset(blk, 0, sizeof(*blk));
    blk->cfg = cfg;
    blk->num_layers = cfg->num_layers;
    int L = cfg->num_layers;
    size_t NC = (size_t)B * T * cfg->hidden_size;
    blk->w = calloc(L, sizeof(layer_weights));
    blk->g = with_backward ? calloc(L, sizeof(layer_weights)) : NULL;
    blk->saved = calloc(L, sizeof(layer_saved));
    blk->hidden = calloc(L + 1, sizeof(float *));
    blk->hidden_bytes = NC * sizeof(float);
    for (int l = 0; l <= L; l++)
        blk->hidden[l] = mem_alloc_floats(MEM_ACTIVATIONS, NC, "layer input (residual stream)");
    for (int l = 0; l < L; l++) layer_saved_alloc(&blk->saved[l], cfg, B, T);
    layer_workspace_alloc(&blk->ws, cfg, B, T, with_backward);
}

void transformer_block_free(transformer_block *blk) {
    for (int l = 0; l < blk->num_layers; l++) layer_saved_free(&blk->saved[l]);
    for (int l = 0; l <= blk->num_layers; l++) mem_free(blk->hidden[l]);
    layer_workspace_free(&blk->ws);
    free(blk->w);
    free(blk->g);
    free(blk->saved);
    free(blk->hidden);
    memset(blk, 0, sizeof(*blk));
}

void transformer_block_forward(transformer_block *blk, const layer_ctx *ctx) {
    for (int l = 0; l < blk->num_layers; l++)
        transformer_layer_forward(ctx, l, &blk->w[l], &blk->saved[l], &blk->ws, blk->hidden[l],
                                  blk->hidden[l + 1]);
}

void transformer_block_backward(transformer_block *blk, const layer_ctx *ctx, float *dres) {
    for (int l = blk->num_layers - 1; l >= 0; l--)
        transformer_layer_backward(ctx, l, &blk->w[l], &blk->g[l], &blk->saved[l], &blk->ws,
                                   blk->hidden[l], dres);
}

size_t transformer_block_layer_saved_bytes(const transformer_block *blk, int l) {
    return blk->saved[l].bytes + blk->hidden_bytes;
}
