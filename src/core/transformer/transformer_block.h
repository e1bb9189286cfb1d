/* The stack of transformer layers (Megatron-core's TransformerBlock). It owns the residual
 * stream buffers hidden[0..L] (hidden[l] is layer l's input), the per-layer saved activations,
 * and the activation-recomputation policy. With the interleaved pipeline schedule it is one
 * model chunk's stack: its buffers fit one chunk, its parameter slots hold all the rank's
 * chunks, and transformer_block_bind picks the chunk it runs (recompute plans count a chunk's
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

#include "core/transformer/transformer_layer.h"

typedef struct {
    const transformer_config *cfg;
    int num_layers;       /* the layers of one model chunk (the pipeline stage's without
                           * interleaving) */
    int chunk;            /* the model chunk the block runs now (transformer_block_bind) */
    int layer_offset;     /* global index of its first layer (dropout keys, names) */
    int rank_layer_base;  /* index of its first layer among the rank's layers (chunk x
                           * num_layers): the callbacks' layer index is rank_layer_base + l */
    layer_weights *w;     /* [num_layers] parameters of the bound chunk (in w_all) */
    layer_weights *g;     /* [num_layers] gradients (in g_all; NULL without backward) */
    layer_weights *w_all; /* [chunks x num_layers] every chunk's parameters (set by the model) */
    layer_weights *g_all;
    layer_saved *saved;   /* [num_layers] a layer's own buffers, or a copy of its recompute slot */
    layer_saved *slots;   /* [num_slots] recompute slots (full recompute), MEM_WORKSPACE */
    int num_slots;
    float **hidden;       /* [num_layers + 1] of [Ns, C]; hidden[0] = block input */
    float **hidden_slots; /* [num_slots - 1] inputs of the non-first layers of a chunk */
    /* --distribute-saved-activations: a chunk keeps 1/t of its input (kept_shard[l]); its
     * whole input lives in one of two workspace buffers (chunks alternate) and is all-gathered
     * back before the chunk is recomputed. */
    float **kept_shard;   /* [num_layers] (NULL where not a distributed chunk start) */
    float *chunk_input[2];
    size_t hidden_floats; /* floats of one hidden[l] */
    size_t *layer_saved_bytes; /* [num_layers] saved-activation bytes each layer allocated, as
                                  measured by the tracked allocator */
    layer_workspace ws;
    /* Called after layer l's backward has added its gradients (a data-parallel reducer can
     * start on them), with l counted among the rank's layers (rank_layer_base + local index);
     * NULL = none. */
    void (*layer_grads_done)(void *user, int l);
    void *layer_grads_done_user;
    /* Called before layer l's forward reads its parameters (not on recomputation), l as
     * above; NULL = none. */
    void (*layer_params_needed)(void *user, int l);
    void *layer_params_needed_user;
    int replica;          /* shares parameters, workspace and slots with its owner */
} transformer_block;

/* 1 if layer l is inside a checkpointed chunk (full recompute). */
int transformer_block_checkpointed(const transformer_config *cfg, int l);
/* First layer of the chunk holding layer l (l itself when not checkpointed). */
int transformer_block_chunk_begin(const transformer_config *cfg, int l);

/* Builds the buffers of one model chunk (tc_chunk_layers(cfg) layers) and the parameter slots
 * of all the rank's chunks (tc_vp(cfg) of them); bound to chunk tc_vp_rank(cfg). threads: the
 * most threads the layers' kernels run with (workspaces are sized for it). */
void transformer_block_init(transformer_block *blk, const transformer_config *cfg, int B, int T,
                            int with_backward, int threads);
/* Points the block at model chunk `chunk`'s parameters and global layer indices (the
 * interleaved schedule runs any chunk's micro-batch on any activation store). */
void transformer_block_bind(transformer_block *blk, int chunk);
/* Another activation store for a micro-batch in flight (pipeline schedules): its own layer
 * inputs and saved buffers; parameters, workspace and recompute slots are the owner's. */
void transformer_block_init_replica(transformer_block *blk, const transformer_config *cfg, int B,
                                    int T, const transformer_block *owner);
void transformer_block_free(transformer_block *blk);

/* hidden[0] -> hidden[num_layers]. */
void transformer_block_forward(transformer_block *blk, const layer_ctx *ctx);
/* dres[Ns, C]: gradient w.r.t. hidden[num_layers] on entry, w.r.t. hidden[0] on return. */
void transformer_block_backward(transformer_block *blk, const layer_ctx *ctx, float *dres);

/* Saved-activation bytes of layer l (its kept input plus its own saved buffers), measured by
 * the tracked allocator when the block was built. */
size_t transformer_block_layer_saved_bytes(const transformer_block *blk, int l);

#endif
