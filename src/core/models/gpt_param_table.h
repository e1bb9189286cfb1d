/* The GPT model's parameters as a description, without any buffer: every tensor's Megatron-core
 * name, whole and local shape, tensor-parallel partition, init (normal(std) or a constant) and
 * init stream, and where it belongs (embedding, layer l and which of its weights, final norm,
 * output layer). Whatever needs the parameters' shape reads it here: gpt_model_create lays its
 * flat buffers out from gpt_param_table_rank and points its weights through `place`; the checkpoint
 * layout (training/dist_checkpointing.c), the Hugging Face converter (tools/convert.c) and
 * megadlm's exact parameter count (training/theoretical_memory.c) use gpt_param_table_whole /
 * gpt_param_table_rank_numel.
 *
 * Init streams: the whole model's tensors, in its order (word and position embedding, layer
 * 0 .. L-1 each in layer_weights' order, final norm, untied output layer), have init_stream
 * 0, 1, 2, ...; a rank's table is a selection of those tensors with their streams (the last
 * pipeline stage's copy of a tied word embedding has the embedding's), so every layout starts
 * from the same weights and no tensor count is written anywhere by hand. */
#ifndef MEGADLM_CORE_MODELS_GPT_PARAM_TABLE_H
#define MEGADLM_CORE_MODELS_GPT_PARAM_TABLE_H

#include <stddef.h>

#include "core/tensor/tensor.h"
#include "core/transformer/transformer_config.h"

/* Which part of the model a tensor belongs to. */
typedef enum {
    GPT_PARAM_WORD_EMBEDDING,
    GPT_PARAM_POSITION_EMBEDDING,
    GPT_PARAM_LAYER,
    GPT_PARAM_FINAL_NORM_WEIGHT,
    GPT_PARAM_FINAL_NORM_BIAS,
    GPT_PARAM_OUTPUT_LAYER /* untied, or the last stage's copy of a tied word embedding */
} gpt_param_part;

/* How a tensor replicated across TP (TP_SPLIT_NONE) gets its gradient under TP. */
typedef enum {
    GPT_GRAD_WHOLE,           /* every rank computes all of it */
    GPT_GRAD_PARTIAL_WITH_SP, /* a part under sequence parallelism (norms, row-parallel biases,
                               * learned positions act on token shards) */
    GPT_GRAD_PARTIAL          /* always a part (q/k norms act on this rank's heads) */
} gpt_grad_kind;

typedef struct {
    gpt_param_part part;
    int layer;          /* GPT_PARAM_LAYER: global layer index; else -1 */
    size_t field;       /* GPT_PARAM_LAYER: offsetof(layer_weights, the tensor's pointer) */
    int split;          /* TP_SPLIT_*: the partition under TP, whatever this table's TP size */
    gpt_grad_kind grad; /* partial gradients (summed across TP after backward) */
    /* A GEMM weight (linear_qkv, linear_proj, linear_fc1, linear_fc2, the word embedding and the
     * output layer): under --bf16 / --fp16 the model reads it from the 16-bit copy (a layer's
     * through field16: offsetof(layer_weights, its *_w16 pointer)); every other tensor through
     * an fp32 buffer of widened 16-bit values (gpt_model.h) */
    int gemm;
    size_t field16;
    /* A routed expert's weight (mlp.experts.local_experts.<expert>.*): its global expert index,
     * -1 for every other tensor. A rank holds the experts of its expert-parallel rank; the
     * layer's pointer (field) is its first local expert's, the others follow it in the flat
     * buffer (moe/experts.h). */
    int expert;
} gpt_param_place;

typedef struct {
    /* the tensors (local shapes, offsets in one flat buffer of params.numel floats, TP and PP
     * flags); no buffers: data, grad, exp_avg, exp_avg_sq are NULL */
    param_set params;
    gpt_param_place *place; /* [params.count] */
    /* The layers this table holds (a rank: all its model chunks, chunk by chunk: local layer l
     * is layer l % Lc of chunk l / Lc, Lc = tc_chunk_layers): local layer l's tensors are
     * [layer_first[l], layer_first[l + 1]) and its parameters the floats
     * [layer_begin[l], layer_begin[l + 1]); before layer_first[0] the embedding, from
     * layer_first[num_layers] on the final norm and the output layer. */
    int num_layers;
    int *layer_first;   /* [num_layers + 1] */
    size_t *layer_begin; /* [num_layers + 1] */
    /* the word embedding (first stage) or its copy (last stage) that the first and last
     * pipeline stage both hold with tied embeddings (p > 1); -1 where none */
    int tied_embedding;
} gpt_param_table;

/* The whole model as one process holds it (cfg's TP, PP and interleaving ignored): whole
 * shapes, tensor i with init_stream i, offsets as in one flat buffer. The same on every rank of
 * any layout of cfg. */
void gpt_param_table_whole(const transformer_config *cfg, gpt_param_table *table);
/* This rank's share of cfg's layout: its pipeline stage's tensors (every model chunk), TP
 * slices of the partitioned ones. */
void gpt_param_table_rank(const transformer_config *cfg, gpt_param_table *table);
void gpt_param_table_free(gpt_param_table *table);

/* gpt_param_table_rank(cfg)'s params.numel, in constant memory whatever the number of layers
 * (one dense and one MoE layer described, times the stage's layers of each kind): a
 * configuration read from a file is checked against the tensor file before anything is built
 * for it. */
size_t gpt_param_table_rank_numel(const transformer_config *cfg);

#endif
