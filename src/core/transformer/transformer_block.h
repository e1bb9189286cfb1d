/* The stack of transformer layers (Megatron-core's TransformerBlock). The block owns what all
 * micro-batches share: the layers' parameter slots, the recompute slots and the workspace; what
 * one micro-batch in flight keeps (the residual stream buffers hidden[0..L], hidden[l] being
 * layer l's input, and the per-layer saved activations) is a block_activations, one per
 * activation store. The recompute policy is the block's. With the interleaved pipeline schedule
 * a block_activations holds one model chunk's layers and runs whichever chunk its config names
 * (vp_rank); the parameter slots hold all the rank's chunks (recompute plans count a chunk's
 * layers, as Megatron's per-chunk TransformerBlock does):
 *
 *   none       every layer keeps its layer_saved buffers and its input.
 *   selective  as none, but no layer keeps its attention probabilities: the core attention is
 *              recomputed in backward from the kept Q, K, V (core/kernels/attention.c).
 *   full       layers are grouped in checkpointed chunks (Megatron's _checkpointed_forward):
 *              uniform: chunks of N consecutive layers; block: each of the first N layers is
 *              a chunk of one and the remaining layers keep everything. A chunk keeps only its
 *              input; its layers run forward into shared recompute slots (workspace), and
 *              backward re-runs the chunk's forward into those slots before its backward.
 *
 * Recomputation runs the same kernels on the same inputs with the same dropout keys, so losses
 * and gradients are bitwise identical to no recomputation (tests/unit/test_recompute.c). */
#ifndef MEGADLM_CORE_TRANSFORMER_BLOCK_H
#define MEGADLM_CORE_TRANSFORMER_BLOCK_H

#include <stdint.h>

#include "core/transformer/transformer_layer.h"

typedef struct {
    const transformer_config *cfg;
    int num_layers;       /* the layers of one model chunk (the pipeline stage's without
                           * interleaving) */
    layer_weights *w_all; /* [chunks x num_layers] every chunk's parameters (set by the model) */
    layer_weights *g_all; /* their gradients (NULL without backward) */
    layer_saved *slots;   /* [num_slots] recompute slots (full recompute), MEM_WORKSPACE */
    int num_slots;
    float **hidden_slots; /* [num_slots - 1] inputs of the non-first layers of a chunk */
    /* --distribute-saved-activations: a chunk keeps 1/t of its input (kept_shard[l]); its
     * whole input lives in one of two workspace buffers (chunks alternate) and is all-gathered
     * back before the chunk is recomputed. */
    float *chunk_input[2];
    /* --bf16 / --fp16: the layer inputs are kept in 16 bits (block_activations.hidden16); hidden[l] is then
     * one of these two fp32 views (layer l's input in view l % 2, its output in the other),
     * written by the previous layer (or the embedding, or the pipeline's receive), packed before
     * layer l runs and widened again before its backward. Exact: the residual stream holds bf16
     * values (transformer_layer.c rounds it) in the run's format. */
    float *views[2];
    size_t hidden_floats; /* floats of one hidden[l]: [Ns, C] */
    layer_workspace ws;
    /* Called after layer l's backward has added its gradients (a data-parallel reducer can
     * start on them), with l counted among the rank's layers (chunk x num_layers + index in
     * the chunk); NULL = none. */
    void (*layer_grads_done)(void *user, int l);
    void *layer_grads_done_user;
    /* Called before layer l's forward, recomputed forward and backward read its parameters,
     * l as above; NULL = none. */
    void (*layer_params_needed)(void *user, int l);
    void *layer_params_needed_user;
    /* Called after each of those (FSDP frees the layer's gathered parameters); NULL = none. */
    void (*layer_params_done)(void *user, int l);
    void *layer_params_done_user;
} transformer_block;

/* What one micro-batch in flight keeps in the block (part of an activation store). */
typedef struct {
    const transformer_config *cfg; /* the store's: its model chunk (vp_rank) and recompute plan
                                    * (recompute_store_unchecked) */
    int num_layers;       /* the block's */
    layer_saved *saved;   /* [num_layers] a layer's own buffers, or a copy of its recompute slot */
    float **hidden;       /* [num_layers + 1] of [Ns, C]; hidden[0] = block input */
    uint16_t **hidden16;  /* [num_layers] --bf16 / --fp16: the kept layer inputs in 16 bits (NULL where a
                           * layer keeps no input of its own: inside a checkpointed chunk, or a
                           * distributed chunk start, whose shard stays fp32) */
    float **kept_shard;   /* [num_layers] (NULL where not a distributed chunk start) */
    size_t *layer_saved_bytes; /* [num_layers] saved-activation bytes each layer allocated, as
                                  measured by the tracked allocator */
} block_activations;

/* 1 if layer l is inside a checkpointed chunk (full recompute). */
int transformer_block_checkpointed(const transformer_config *cfg, int l);
/* First layer of the chunk holding layer l (l itself when not checkpointed). */
int transformer_block_chunk_begin(const transformer_config *cfg, int l);

/* Builds the parameter slots of all the rank's chunks (tc_vp(cfg) of them), the recompute slots
 * and the workspace of one model chunk (tc_chunk_layers(cfg) layers) for B x T tokens.
 * threads: the most threads the layers' kernels run with (workspaces are sized for it). */
void transformer_block_init(transformer_block *blk, const transformer_config *cfg, int B, int T,
                            int with_backward, int threads);
void transformer_block_free(transformer_block *blk);

/* One micro-batch's layer inputs and saved buffers for B x T tokens under cfg's recompute plan;
 * checkpointed layers point into blk's recompute slots. */
void block_activations_alloc(block_activations *a, const transformer_config *cfg, int B, int T,
                             const transformer_block *blk);
void block_activations_free(block_activations *a);

/* a->hidden[0] -> a->hidden[num_layers], with the parameters of a's model chunk. */
void transformer_block_forward(transformer_block *blk, block_activations *a,
                               const layer_ctx *ctx);
/* dres[Ns, C]: gradient w.r.t. a->hidden[num_layers] on entry, w.r.t. a->hidden[0] on return. */
void transformer_block_backward(transformer_block *blk, block_activations *a,
                                const layer_ctx *ctx, float *dres);

/* Saved-activation bytes of layer l (its kept input plus its own saved buffers), measured by
 * the tracked allocator when a was allocated. */
size_t block_activations_layer_saved_bytes(const block_activations *a, int l);

#endif
