/* The one model configuration, validated once (training/arguments.c) and handed down; modules
 * never read the command line (Megatron-core's TransformerConfig). */
#ifndef MEGADLM_CORE_TRANSFORMER_CONFIG_H
#define MEGADLM_CORE_TRANSFORMER_CONFIG_H

#include <stdint.h>

#include "core/kernels/activation.h"
#include "core/kernels/norm.h"

/* Activation recomputation (Megatron-core's recompute_granularity / recompute_method). */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } recompute_granularity;
typedef enum { RECOMPUTE_UNIFORM = 0, RECOMPUTE_BLOCK } recompute_method;

typedef struct {
    int num_layers;
    int hidden_size;            /* C */
    int ffn_hidden_size;        /* F */
    int num_attention_heads;    /* NH */
    int num_query_groups;       /* NG (= NH without GQA) */
    int kv_channels;            /* HS */
    int seq_length;             /* T (max) */
    int max_position_embeddings;
    int padded_vocab_size;      /* V (rows of the word embedding and the output layer) */
    norm_kind normalization;
    float norm_epsilon;
    int qk_layernorm;
    int swiglu;                 /* FC1 has 2F outputs: gate then up */
    gelu_kind gelu;             /* when !swiglu */
    int add_bias_linear;
    int rope;                   /* position_embedding_type == rope (else learned_absolute) */
    float rotary_base;
    int rot_dim;                /* kv_channels * rotary_percent */
    int untie_embeddings_and_output_weights;
    float init_method_std;
    float hidden_dropout;
    float attention_dropout;
    int causal;                 /* causal self-attention (the autoregressive objective) */
    recompute_granularity recompute_granularity;
    recompute_method recompute_method; /* with RECOMPUTE_FULL */
    int recompute_num_layers;          /* with RECOMPUTE_FULL: chunk size (uniform) or number of
                                          checkpointed layers (block) */
} transformer_config;

/* Width of the fused QKV projection: NG * (NH/NG + 2) * HS. */
static inline int tc_qkv_width(const transformer_config *c) {
    return c->num_query_groups * (c->num_attention_heads / c->num_query_groups + 2) *
           c->kv_channels;
}
/* Output width of FC1: 2F with SwiGLU, else F. */
static inline int tc_fc1_width(const transformer_config *c) {
    return c->swiglu ? 2 * c->ffn_hidden_size : c->ffn_hidden_size;
}

#endif
