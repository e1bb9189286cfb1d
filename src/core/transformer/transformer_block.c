#include "core/transformer/transformer_block.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/alloc.h"

/* ---- the recompute plan (a pure function of the config) ---- */

int transformer_block_checkpointed(const transformer_config *c, int l) {
    if (c->recompute_granularity != RECOMPUTE_FULL || c->recompute_store_unchecked) return 0;
    return c->recompute_method == RECOMPUTE_UNIFORM || l < c->recompute_num_layers;
}

int transformer_block_chunk_begin(const transformer_config *c, int l) {
    if (!transformer_block_checkpointed(c, l) || c->recompute_method == RECOMPUTE_BLOCK) return l;
    return l - l % c->recompute_num_layers;
}

/* Which of the two gathered-input buffers the chunk starting at layer b uses. */
static int chunk_parity(const transformer_config *c, int b) {
    int size = c->recompute_method == RECOMPUTE_UNIFORM ? c->recompute_num_layers : 1;
    return (b / size) % 2;
}

/* ---- allocation ---- */

/* What one micro-batch in flight keeps: the layer inputs and the layers' saved buffers. */
static void alloc_store(transformer_block *blk, const transformer_config *cfg, int B, int T) {
    int L = blk->num_layers;
    size_t NC = blk->hidden_floats;
    int distribute = cfg->distribute_saved_activations && cfg->recompute_granularity == RECOMPUTE_FULL;
    blk->saved = xcalloc(L, sizeof(layer_saved), "saved activations table");
    blk->hidden = xcalloc((size_t)L + 1, sizeof(float *), "layer inputs table");
    blk->layer_saved_bytes = xcalloc(L, sizeof(size_t), "saved bytes table");
    blk->kept_shard = xcalloc(L, sizeof(float *), "kept shards table");
    for (int l = 0; l < L; l++) {
        size_t before = mem_current(MEM_ACTIVATIONS);
        int b = transformer_block_chunk_begin(cfg, l);
        if (l == b && distribute && transformer_block_checkpointed(cfg, l)) {
            blk->kept_shard[l] = mem_alloc_floats(MEM_ACTIVATIONS, NC / tc_tp(cfg),
                                                  "chunk input shard (distributed)");
            blk->hidden[l] = blk->chunk_input[chunk_parity(cfg, l)];
        } else if (l == b)
            blk->hidden[l] = mem_alloc_floats(MEM_ACTIVATIONS, NC, "layer input (residual stream)");
        else
            blk->hidden[l] = blk->hidden_slots[l - b - 1];
        if (transformer_block_checkpointed(cfg, l))
            blk->saved[l] = blk->slots[l - b];
        else
            layer_saved_alloc(&blk->saved[l], cfg, B, T, MEM_ACTIVATIONS);
        blk->layer_saved_bytes[l] = mem_current(MEM_ACTIVATIONS) - before;
    }
    /* The block's output is the final norm's input: the model head's, not a layer's. */
    blk->hidden[L] = mem_alloc_floats(MEM_ACTIVATIONS, NC, "block output (residual stream)");
}

void transformer_block_init(transformer_block *blk, const transformer_config *cfg, int B, int T,
                            int with_backward, int threads) {
    memset(blk, 0, sizeof(*blk));
    blk->cfg = cfg;
    blk->num_layers = tc_chunk_layers(cfg);
    size_t NC = (size_t)tc_tokens_local(cfg, B * T) * cfg->hidden_size;
    blk->hidden_floats = NC;
    blk->w_all = xcalloc((size_t)tc_stage_layers(cfg), sizeof(layer_weights), "layer weights");
    blk->g_all =
        with_backward ? xcalloc((size_t)tc_stage_layers(cfg), sizeof(layer_weights), "layer gradients")
                      : NULL;
    transformer_block_bind(blk, tc_vp_rank(cfg));
    int distribute = cfg->distribute_saved_activations && cfg->recompute_granularity == RECOMPUTE_FULL;
    if (distribute)
        for (int k = 0; k < 2; k++)
            blk->chunk_input[k] = mem_alloc_floats(MEM_WORKSPACE, NC, "gathered chunk input");

    /* Recompute slots: a uniform chunk needs one per layer of the chunk, block one. */
    if (cfg->recompute_granularity == RECOMPUTE_FULL) {
        blk->num_slots = cfg->recompute_method == RECOMPUTE_UNIFORM ? cfg->recompute_num_layers : 1;
        blk->slots = xcalloc(blk->num_slots, sizeof(layer_saved), "recompute slots");
        blk->hidden_slots = xcalloc(blk->num_slots, sizeof(float *), "recompute inputs");
        for (int k = 0; k < blk->num_slots; k++) {
            layer_saved_alloc(&blk->slots[k], cfg, B, T, MEM_WORKSPACE);
            if (k > 0)
                blk->hidden_slots[k - 1] =
                    mem_alloc_floats(MEM_WORKSPACE, NC, "recomputed layer input");
        }
    }
    alloc_store(blk, cfg, B, T);
    layer_workspace_alloc(&blk->ws, cfg, B, T, with_backward, threads);
}

void transformer_block_bind(transformer_block *blk, int chunk) {
    blk->chunk = chunk;
    blk->rank_layer_base = chunk * blk->num_layers;
    blk->layer_offset = tc_chunk_layer_offset(blk->cfg, chunk);
    blk->w = blk->w_all + blk->rank_layer_base;
    blk->g = blk->g_all ? blk->g_all + blk->rank_layer_base : NULL;
}

void transformer_block_init_replica(transformer_block *blk, const transformer_config *cfg, int B,
                                    int T, const transformer_block *owner) {
    *blk = *owner; /* parameters, workspace, recompute slots, callback: shared */
    blk->cfg = cfg;
    blk->replica = 1;
    alloc_store(blk, cfg, B, T);
}

static void free_store(transformer_block *blk) {
    const transformer_config *cfg = blk->cfg;
    for (int l = 0; l < blk->num_layers; l++) {
        if (!transformer_block_checkpointed(cfg, l)) layer_saved_free(&blk->saved[l]);
        if (blk->kept_shard[l])
            mem_free(blk->kept_shard[l]);
        else if (transformer_block_chunk_begin(cfg, l) == l)
            mem_free(blk->hidden[l]);
    }
    mem_free(blk->hidden[blk->num_layers]);
    free(blk->kept_shard);
    free(blk->saved);
    free(blk->hidden);
    free(blk->layer_saved_bytes);
}

void transformer_block_free(transformer_block *blk) {
    free_store(blk);
    if (blk->replica) {
        memset(blk, 0, sizeof(*blk));
        return;
    }
    for (int k = 0; k < blk->num_slots; k++) {
        layer_saved_free(&blk->slots[k]);
        if (k > 0) mem_free(blk->hidden_slots[k - 1]);
    }
    mem_free(blk->chunk_input[0]);
    mem_free(blk->chunk_input[1]);
    layer_workspace_free(&blk->ws);
    free(blk->w_all);
    free(blk->g_all);
    free(blk->slots);
    free(blk->hidden_slots);
    memset(blk, 0, sizeof(*blk));
}

/* ---- forward / backward ---- */

static void layer_forward(transformer_block *blk, const layer_ctx *ctx, int l) {
    transformer_layer_forward(ctx, blk->layer_offset + l, &blk->w[l], &blk->saved[l], &blk->ws,
                              blk->hidden[l], blk->hidden[l + 1]);
}

/* The 1/t slice of a whole chunk input that this tensor-parallel rank keeps. */
static size_t shard_floats(const transformer_block *blk) {
    return blk->hidden_floats / tc_tp(blk->cfg);
}

void transformer_block_forward(transformer_block *blk, const layer_ctx *ctx) {
    /* Checkpointed layers run the same forward; their saved tensors land in the recompute
     * slots and are overwritten by the next chunk. */
    size_t n = shard_floats(blk);
    for (int l = 0; l < blk->num_layers; l++) {
        if (blk->kept_shard[l])
            memcpy(blk->kept_shard[l], blk->hidden[l] + blk->cfg->tp_rank * n, n * sizeof(float));
        if (blk->layer_params_needed)
            blk->layer_params_needed(blk->layer_params_needed_user, blk->rank_layer_base + l);
        layer_forward(blk, ctx, l);
    }
}

void transformer_block_backward(transformer_block *blk, const layer_ctx *ctx, float *dres) {
    const transformer_config *cfg = blk->cfg;
    int l = blk->num_layers - 1;
    while (l >= 0) {
        int b = transformer_block_chunk_begin(cfg, l);
        if (transformer_block_checkpointed(cfg, l)) {
            /* Re-run the chunk's forward from its kept input: this refills the slots (and
             * rewrites the chunk's output with the same bits). */
            if (blk->kept_shard[b]) tp_all_gather(blk->hidden[b], blk->kept_shard[b], shard_floats(blk));
            for (int j = b; j <= l; j++) layer_forward(blk, ctx, j);
        }
        for (int j = l; j >= b; j--) {
            transformer_layer_backward(ctx, blk->layer_offset + j, &blk->w[j], &blk->g[j],
                                       &blk->saved[j], &blk->ws, blk->hidden[j], dres);
            if (blk->layer_grads_done)
                blk->layer_grads_done(blk->layer_grads_done_user, blk->rank_layer_base + j);
        }
        l = b - 1;
    }
}

size_t transformer_block_layer_saved_bytes(const transformer_block *blk, int l) {
    return blk->layer_saved_bytes[l];
}
