#include "core/transformer/transformer_block.h"

#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
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

void block_activations_alloc(block_activations *a, const transformer_config *cfg, int B, int T,
                             const transformer_block *blk) {
    int L = blk->num_layers;
    size_t NC = blk->hidden_floats;
    int distribute = cfg->distribute_saved_activations && cfg->recompute_granularity == RECOMPUTE_FULL;
    memset(a, 0, sizeof(*a));
    a->cfg = cfg;
    a->num_layers = L;
    a->saved = xcalloc(L, sizeof(layer_saved), "saved activations table");
    a->hidden = xcalloc((size_t)L + 1, sizeof(float *), "layer inputs table");
    a->hidden16 = xcalloc(L, sizeof(uint16_t *), "bf16 layer inputs table");
    a->layer_saved_bytes = xcalloc(L, sizeof(size_t), "saved bytes table");
    a->kept_shard = xcalloc(L, sizeof(float *), "kept shards table");
    for (int l = 0; l < L; l++) {
        size_t before = mem_current(MEM_ACTIVATIONS);
        int b = transformer_block_chunk_begin(cfg, l);
        if (l == b && distribute && transformer_block_checkpointed(cfg, l)) {
            a->kept_shard[l] = mem_alloc_floats(MEM_ACTIVATIONS, NC / tc_tp(cfg),
                                                "chunk input shard (distributed)");
            a->hidden[l] = blk->chunk_input[chunk_parity(cfg, l)];
        } else if (l == b && tc_half(cfg)) {
            a->hidden16[l] = mem_alloc(MEM_ACTIVATIONS, NC * sizeof(uint16_t),
                                       "layer input (residual stream, 16-bit)");
            a->hidden[l] = blk->views[l % 2];
        } else if (l == b)
            a->hidden[l] = mem_alloc_floats(MEM_ACTIVATIONS, NC, "layer input (residual stream)");
        else
            a->hidden[l] = blk->hidden_slots[l - b - 1];
        if (transformer_block_checkpointed(cfg, l))
            a->saved[l] = blk->slots[l - b];
        else
            /* (interleaved: a store runs any chunk, whose layer l may be dense or MoE) */
            layer_saved_alloc(&a->saved[l], cfg, B, T, MEM_ACTIVATIONS, &blk->ws,
                              tc_vp(cfg) > 1 ? -1 : tc_layer_offset(cfg) + l);
        a->layer_saved_bytes[l] = mem_current(MEM_ACTIVATIONS) - before;
    }
    /* The block's output is the final norm's input: the model head's, not a layer's. */
    a->hidden[L] = mem_alloc_floats(MEM_ACTIVATIONS, NC, "block output (residual stream)");
}

void block_activations_free(block_activations *a) {
    const transformer_config *cfg = a->cfg;
    if (!a->saved) return;
    for (int l = 0; l < a->num_layers; l++) {
        if (!transformer_block_checkpointed(cfg, l)) layer_saved_free(&a->saved[l]);
        if (a->kept_shard[l])
            mem_free(a->kept_shard[l]);
        else if (a->hidden16[l])
            mem_free(a->hidden16[l]);
        else if (transformer_block_chunk_begin(cfg, l) == l)
            mem_free(a->hidden[l]);
    }
    mem_free(a->hidden[a->num_layers]);
    free_all(a->kept_shard, a->saved, a->hidden, a->hidden16, a->layer_saved_bytes);
    memset(a, 0, sizeof(*a));
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
    int distribute = cfg->distribute_saved_activations && cfg->recompute_granularity == RECOMPUTE_FULL;
    if (distribute)
        for (int k = 0; k < 2; k++)
            blk->chunk_input[k] = mem_alloc_floats(MEM_WORKSPACE, NC, "gathered chunk input");
    if (tc_half(cfg))
        for (int k = 0; k < 2; k++)
            blk->views[k] = mem_alloc_floats(MEM_WORKSPACE, NC, "layer input (fp32 view)");

    layer_workspace_alloc(&blk->ws, cfg, B, T, with_backward, threads); /* views first */
    /* Recompute slots: a uniform chunk needs one per layer of the chunk, block one. */
    if (cfg->recompute_granularity == RECOMPUTE_FULL) {
        blk->num_slots = cfg->recompute_method == RECOMPUTE_UNIFORM ? cfg->recompute_num_layers : 1;
        blk->slots = xcalloc(blk->num_slots, sizeof(layer_saved), "recompute slots");
        blk->hidden_slots = xcalloc(blk->num_slots, sizeof(float *), "recompute inputs");
        for (int k = 0; k < blk->num_slots; k++) {
            layer_saved_alloc(&blk->slots[k], cfg, B, T, MEM_WORKSPACE, &blk->ws, -1);
            if (k > 0)
                blk->hidden_slots[k - 1] =
                    mem_alloc_floats(MEM_WORKSPACE, NC, "recomputed layer input");
        }
    }
}

void transformer_block_free(transformer_block *blk) {
    for (int k = 0; k < blk->num_slots; k++) {
        layer_saved_free(&blk->slots[k]);
        if (k > 0) mem_free(blk->hidden_slots[k - 1]);
    }
    mem_free(blk->chunk_input[0]);
    mem_free(blk->chunk_input[1]);
    mem_free(blk->views[0]);
    mem_free(blk->views[1]);
    layer_workspace_free(&blk->ws);
    free(blk->w_all);
    free(blk->g_all);
    free(blk->slots);
    free(blk->hidden_slots);
    memset(blk, 0, sizeof(*blk));
}

/* ---- forward / backward ---- */

/* The model chunk a micro-batch's activations run (their config's vp_rank): its parameters and
 * where its layers are among the global and the rank's layers. */
typedef struct {
    const layer_weights *w, *g;
    int layer_offset;    /* global index of its first layer (dropout keys) */
    int rank_layer_base; /* index of its first layer among the rank's (the callbacks') */
} chunk_view;

static chunk_view chunk_of(const transformer_block *blk, const block_activations *a) {
    int chunk = tc_vp_rank(a->cfg);
    chunk_view v = {.rank_layer_base = chunk * blk->num_layers,
                    .layer_offset = tc_chunk_layer_offset(a->cfg, chunk)};
    v.w = blk->w_all + v.rank_layer_base;
    v.g = blk->g_all ? blk->g_all + v.rank_layer_base : NULL;
    return v;
}

static void params_needed(transformer_block *blk, const chunk_view *v, int l) {
    if (blk->layer_params_needed)
        blk->layer_params_needed(blk->layer_params_needed_user, v->rank_layer_base + l);
}
static void params_done(transformer_block *blk, const chunk_view *v, int l) {
    if (blk->layer_params_done)
        blk->layer_params_done(blk->layer_params_done_user, v->rank_layer_base + l);
}

static void layer_forward(transformer_block *blk, block_activations *a, const chunk_view *v,
                          const layer_ctx *ctx, int l) {
    params_needed(blk, v, l);
    transformer_layer_forward(ctx, v->layer_offset + l, &v->w[l], &a->saved[l], &blk->ws,
                              a->hidden[l], a->hidden[l + 1]);
    params_done(blk, v, l);
}

/* The 1/t slice of a whole chunk input that this tensor-parallel rank keeps. */
static size_t shard_floats(const transformer_block *blk) {
    return blk->hidden_floats / tc_tp(blk->cfg);
}

void transformer_block_forward(transformer_block *blk, block_activations *a,
                               const layer_ctx *ctx) {
    /* Checkpointed layers run the same forward; their saved tensors land in the recompute
     * slots and are overwritten by the next chunk. */
    chunk_view v = chunk_of(blk, a);
    size_t n = shard_floats(blk);
    for (int l = 0; l < blk->num_layers; l++) {
        if (a->kept_shard[l])
            memcpy(a->kept_shard[l], a->hidden[l] + a->cfg->tp_rank * n, n * sizeof(float));
        if (a->hidden16[l])
            half_from_f32(tc_half(a->cfg), a->hidden16[l], a->hidden[l], blk->hidden_floats);
        layer_forward(blk, a, &v, ctx, l);
    }
}

/* --bf16 / --fp16: layer l's kept 16-bit input into its fp32 view (nothing otherwise). */
static void widen_input(const transformer_block *blk, block_activations *a, int l) {
    if (a->hidden16[l])
        half_to_f32(tc_half(a->cfg), a->hidden[l], a->hidden16[l], blk->hidden_floats);
}

void transformer_block_backward(transformer_block *blk, block_activations *a,
                                const layer_ctx *ctx, float *dres) {
    const transformer_config *cfg = a->cfg;
    chunk_view v = chunk_of(blk, a);
    int l = blk->num_layers - 1;
    while (l >= 0) {
        int b = transformer_block_chunk_begin(cfg, l);
        if (transformer_block_checkpointed(cfg, l)) {
            /* Re-run the chunk's forward from its kept input: this refills the slots (and
             * rewrites the chunk's output with the same bits). */
            if (a->kept_shard[b]) tp_all_gather(a->hidden[b], a->kept_shard[b], shard_floats(blk));
            widen_input(blk, a, b);
            layer_ctx again = *ctx;
            again.moe_tracker = NULL; /* the routers' losses were recorded once, in forward */
            for (int j = b; j <= l; j++) layer_forward(blk, a, &v, &again, j);
        }
        for (int j = l; j >= b; j--) {
            /* (a chunk's input again: a chunk of an even number of layers recomputes its output
             * into its input's view) */
            widen_input(blk, a, j);
            params_needed(blk, &v, j);
            transformer_layer_backward(ctx, v.layer_offset + j, &v.w[j], &v.g[j], &a->saved[j],
                                       &blk->ws, a->hidden[j], dres);
            params_done(blk, &v, j);
            if (blk->layer_grads_done)
                blk->layer_grads_done(blk->layer_grads_done_user, v.rank_layer_base + j);
        }
        l = b - 1;
    }
}

size_t block_activations_layer_saved_bytes(const block_activations *a, int l) {
    return a->layer_saved_bytes[l];
}
