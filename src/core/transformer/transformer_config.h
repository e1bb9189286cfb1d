/* The one model configuration, validated once (training/arguments.c) and handed down; modules
 * never read the command line (Megatron-core's TransformerConfig). */
#ifndef MEGADLM_CORE_TRANSFORMER_CONFIG_H
#define MEGADLM_CORE_TRANSFORMER_CONFIG_H

#include <stdint.h>

#include "core/kernels/activation.h"
#include "core/kernels/bf16.h"
#include "core/kernels/norm.h"
#include "core/kernels/qkv_layout.h"

/* Activation recomputation (Megatron-core's recompute_granularity / recompute_method). */
typedef enum { RECOMPUTE_NONE = 0, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL } recompute_granularity;
typedef enum { RECOMPUTE_UNIFORM = 0, RECOMPUTE_BLOCK } recompute_method;

/* Mixture of experts (Megatron-core's num_moe_experts and moe_* fields; docs/MOE.md). */
typedef enum { MOE_LB_AUX_LOSS = 0, MOE_LB_SEQ_AUX_LOSS, MOE_LB_SINKHORN, MOE_LB_NONE } moe_load_balancing;
typedef enum { MOE_DISPATCHER_ALLGATHER = 0, MOE_DISPATCHER_ALLTOALL } moe_dispatcher;
typedef enum { MOE_DROP_PROBS = 0, MOE_DROP_POSITION } moe_drop_policy;
#define MOE_MAX_PATTERN_LAYERS 1024

typedef struct {
    int num_experts;          /* E routed experts; 0: a dense model (every other field unused) */
    int ffn_hidden_size;      /* each routed expert's F (--moe-ffn-hidden-size) */
    int shared_expert_size;   /* --moe-shared-expert-intermediate-size; 0: no shared expert */
    int topk;                 /* --moe-router-topk */
    int pre_softmax;          /* softmax over all experts, then top-k (else top-k of the logits,
                                 softmax over those k) */
    float topk_scaling_factor; /* > 0: the gates times this; else none (Megatron's None) */
    int topk_limited_devices; /* > 0: each token's experts from this many EP ranks; 0: none */
    moe_load_balancing load_balancing;
    float aux_loss_coeff;     /* --moe-aux-loss-coeff */
    float z_loss_coeff;       /* >= 0: the router's z-loss with this coefficient; < 0: none */
    float input_jitter_eps;   /* > 0: the router's input times U(1 - eps, 1 + eps) */
    moe_dispatcher dispatcher;
    float capacity_factor;    /* >= 0: each expert takes at most ceil(tokens x k / E x this)
                                 tokens of a rank; < 0: none (dropless) */
    int pad_to_capacity;      /* with a capacity: every expert computes exactly its capacity */
    moe_drop_policy drop_policy;
    int grouped_gemm;         /* --moe-grouped-gemm: each weight of the local experts in one
                                 packed call (experts.c) */
    int shared_expert_overlap;
    int layer_recompute;      /* --moe-layer-recompute */
    int layer_freq;           /* > 0: layer i (from 0) is an MoE layer when i % layer_freq == 0;
                                 0: `pattern` says it */
    uint8_t pattern[MOE_MAX_PATTERN_LAYERS]; /* layer_freq 0: 1 for an MoE layer */
    int ep_size, ep_rank;     /* expert parallelism: this rank holds experts
                                 [ep_rank E/ep_size, (ep_rank + 1) E/ep_size) */
} moe_config;

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
    int add_qkv_bias;           /* linear_qkv has a bias even without add_bias_linear */
    int rope;                   /* position_embedding_type == rope (else learned_absolute) */
    float rotary_base;
    int rot_dim;                /* kv_channels * rotary_percent */
    int untie_embeddings_and_output_weights;
    float init_method_std;
    float hidden_dropout;
    float attention_dropout;
    int causal;                 /* causal self-attention (else bidirectional: no_mask) */
    int bf16;                   /* --bf16: the linears' GEMMs take bf16 weights (the model's bf16
                                   parameter copy) and bf16-rounded inputs, fp32 sums */
    int fp16;                   /* --fp16: the same in IEEE fp16 (tc_half: the run's format) */
    int position_offset;        /* first learned position (1 for difflm-noshift, as MegaDLMs) */
    int packed_docs;            /* micro-batches may carry position ids and document bounds
                                   (gpt_batch): the stores hold a copy for backward */
    recompute_granularity recompute_granularity;
    recompute_method recompute_method; /* with RECOMPUTE_FULL */
    int recompute_num_layers;          /* with RECOMPUTE_FULL: chunk size (uniform) or number of
                                          checkpointed layers (block) */
    int recompute_store_unchecked;     /* with RECOMPUTE_FULL: this activation store (a
                                          micro-batch in flight) keeps everything
                                          (--num-microbatches-with-partial-activation-checkpoints) */
    /* tensor parallelism: this rank's share of heads, query groups, ffn and vocabulary */
    int tp_size;                       /* 0 or 1: no tensor parallelism */
    int tp_rank;
    int sequence_parallel;             /* norms, dropouts, residuals on N/t token shards */
    int distribute_saved_activations;  /* full recompute: keep 1/t of each chunk input */
    /* TP communication overlap (Megatron's ModelParallelConfig tp_comm_*; needs sequence
     * parallelism): which all-gathers and reduce-scatters run under GEMMs (tensor_parallel/
     * layers.h says where each one is) */
    int tp_comm_overlap;
    int tp_comm_overlap_ag, tp_comm_overlap_rs, tp_comm_overlap_rs_dgrad;
    int tp_comm_bulk_dgrad, tp_comm_bulk_wgrad;
    int tp_comm_overlap_disable_qkv, tp_comm_overlap_disable_fc1;
    int tp_comm_overlap_num_splits;    /* pieces per shard of the SP row plan (0: whole GEMMs) */
    /* pipeline parallelism: this rank's stage holds layers [pp_rank * L/pp, (pp_rank+1) * L/pp)
     * of the num_layers; the first stage also the embedding, the last the head and loss. With
     * the interleaved schedule (vp_size v > 1) a rank holds v model chunks of L/(pp v) layers:
     * chunk j of rank r is layers (j pp + r) L/(pp v) ..; the embedding is on chunk 0 of rank
     * 0, the head on chunk v - 1 of rank pp - 1 (Megatron's virtual pipeline stages). */
    /* context parallelism: each sequence in 2 cp_size chunks, this rank holding chunks
     * cp_rank and 2 cp_size - 1 - cp_rank (core/context_parallel/cp_layout.h) */
    int cp_size;                       /* 0 or 1: no context parallelism */
    int cp_rank;
    int cp_ring;                       /* --cp-comm-type p2p: the ring (cp_ring.h) */
    int cp_a2a;                        /* --cp-comm-type a2a: all-to-all (cp_a2a.h); neither:
                                          the all-gather (cp_attention.h) */
    int pp_size;                       /* 0 or 1: one stage */
    int pp_rank;
    int vp_size;                       /* model chunks per rank; 0 or 1: no interleaving */
    int vp_rank;                       /* the model chunk this config describes (0 .. v - 1) */
    moe_config moe;                    /* mixture of experts (num_experts 0: dense) */
} transformer_config;

/* The run's 16-bit format: what the linears multiply in, the tensors forward rounds and the
 * saved tensors the layer stores in 2 bytes (HALF_NONE: fp32 training). */
static inline half_kind tc_half(const transformer_config *c) {
    return c->bf16 ? HALF_BF16 : c->fp16 ? HALF_FP16 : HALF_NONE;
}

static inline int tc_pp(const transformer_config *c) { return c->pp_size > 1 ? c->pp_size : 1; }
static inline int tc_vp(const transformer_config *c) {
    return tc_pp(c) > 1 && c->vp_size > 1 ? c->vp_size : 1;
}
static inline int tc_vp_rank(const transformer_config *c) { return tc_vp(c) > 1 ? c->vp_rank : 0; }
/* Layers of this pipeline rank (all its model chunks), and of one model chunk. */
static inline int tc_stage_layers(const transformer_config *c) { return c->num_layers / tc_pp(c); }
static inline int tc_chunk_layers(const transformer_config *c) {
    return c->num_layers / (tc_pp(c) * tc_vp(c));
}
/* Global index of the first layer of model chunk `chunk` of this rank. */
static inline int tc_chunk_layer_offset(const transformer_config *c, int chunk) {
    return tc_pp(c) > 1 ? (chunk * tc_pp(c) + c->pp_rank) * tc_chunk_layers(c) : 0;
}
/* ... of the chunk this config describes (the stage's first layer without interleaving). */
static inline int tc_layer_offset(const transformer_config *c) {
    return tc_chunk_layer_offset(c, tc_vp_rank(c));
}
/* This rank holds the embedding / the head (rank-level: some chunk of it). */
static inline int tc_first_rank(const transformer_config *c) {
    return tc_pp(c) == 1 || c->pp_rank == 0;
}
static inline int tc_last_rank(const transformer_config *c) {
    return tc_pp(c) == 1 || c->pp_rank == c->pp_size - 1;
}
/* The model chunk this config describes is the pipeline's first / last stage. */
static inline int tc_first_stage(const transformer_config *c) {
    return tc_first_rank(c) && tc_vp_rank(c) == 0;
}
static inline int tc_last_stage(const transformer_config *c) {
    return tc_last_rank(c) && tc_vp_rank(c) == tc_vp(c) - 1;
}

static inline int tc_tp(const transformer_config *c) { return c->tp_size > 1 ? c->tp_size : 1; }
static inline int tc_sp(const transformer_config *c) { return c->sequence_parallel && tc_tp(c) > 1; }
/* This rank's attention heads, query groups, ffn size, vocabulary rows. */
static inline int tc_heads_local(const transformer_config *c) {
    return c->num_attention_heads / tc_tp(c);
}
static inline int tc_groups_local(const transformer_config *c) {
    return c->num_query_groups / tc_tp(c);
}
static inline int tc_ffn_local(const transformer_config *c) { return c->ffn_hidden_size / tc_tp(c); }
static inline int tc_vocab_local(const transformer_config *c) {
    return c->padded_vocab_size / tc_tp(c);
}
static inline int tc_cp(const transformer_config *c) { return c->cp_size > 1 ? c->cp_size : 1; }
/* Positions of each sequence a rank holds: seq-length / CP under context parallelism (its two
 * chunks; a masked-diffusion micro-batch of seq-length - 1 tokens fits too). */
static inline int tc_seq_local(const transformer_config *c) { return c->seq_length / tc_cp(c); }
/* Token rows a rank holds outside the tensor-parallel regions: N/t with sequence parallelism. */
static inline int tc_tokens_local(const transformer_config *c, int N) {
    return tc_sp(c) ? N / tc_tp(c) : N;
}

/* The packed-QKV layout of linear_qkv's output (qkv_layout.h): the whole model's, and this
 * rank's share (its query groups, whole). */
static inline qkv_layout tc_qkv_layout(const transformer_config *c) {
    return (qkv_layout){c->num_attention_heads, c->num_query_groups, c->kv_channels};
}
static inline qkv_layout tc_qkv_layout_local(const transformer_config *c) {
    return (qkv_layout){tc_heads_local(c), tc_groups_local(c), c->kv_channels};
}
/* Width of the fused QKV projection (whole model), and this rank's share. */
static inline int tc_qkv_width(const transformer_config *c) {
    return (int)qkv_row_width(tc_qkv_layout(c));
}
static inline int tc_qkv_width_local(const transformer_config *c) { return tc_qkv_width(c) / tc_tp(c); }
/* Output width of FC1: 2F with SwiGLU, else F (whole model), and this rank's share. */
static inline int tc_fc1_width(const transformer_config *c) {
    return c->swiglu ? 2 * c->ffn_hidden_size : c->ffn_hidden_size;
}
static inline int tc_fc1_width_local(const transformer_config *c) { return tc_fc1_width(c) / tc_tp(c); }

/* ---- mixture of experts ---- */
static inline int tc_moe(const transformer_config *c) { return c->moe.num_experts > 0; }
/* Global layer l (from 0) is an MoE layer (Megatron's moe_layer_freq / moe_layer_pattern). */
static inline int tc_moe_layer(const transformer_config *c, int l) {
    if (!tc_moe(c)) return 0;
    if (c->moe.layer_freq > 0) return l % c->moe.layer_freq == 0;
    return l >= 0 && l < MOE_MAX_PATTERN_LAYERS && c->moe.pattern[l];
}
static inline int tc_ep(const transformer_config *c) { return c->moe.ep_size > 1 ? c->moe.ep_size : 1; }
static inline int tc_ep_rank(const transformer_config *c) { return tc_ep(c) > 1 ? c->moe.ep_rank : 0; }
/* Routed experts this rank holds, and the first one's global index. */
static inline int tc_experts_local(const transformer_config *c) { return c->moe.num_experts / tc_ep(c); }
static inline int tc_expert_first(const transformer_config *c) {
    return tc_ep_rank(c) * tc_experts_local(c);
}
/* A routed expert's F on this rank: its share under tensor parallelism (the expert
 * tensor-parallel size is the TP size), and its FC1 width; the shared expert's likewise. */
static inline int tc_expert_ffn_local(const transformer_config *c) {
    return c->moe.ffn_hidden_size / tc_tp(c);
}
static inline int tc_expert_fc1_width_local(const transformer_config *c) {
    return (c->swiglu ? 2 : 1) * tc_expert_ffn_local(c);
}
static inline int tc_shared_fc1_width_local(const transformer_config *c) {
    return (c->swiglu ? 2 : 1) * (c->moe.shared_expert_size / tc_tp(c));
}
/* FC1 width of a routed expert (2F with SwiGLU), and of the shared expert (whole). */
static inline int tc_expert_fc1_width(const transformer_config *c) {
    return c->swiglu ? 2 * c->moe.ffn_hidden_size : c->moe.ffn_hidden_size;
}
static inline int tc_shared_fc1_width(const transformer_config *c) {
    return c->swiglu ? 2 * c->moe.shared_expert_size : c->moe.shared_expert_size;
}

#endif
