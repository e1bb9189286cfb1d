/* The types a transformer layer's parts share: its weights (layer_weights), its transient
 * workspace (layer_workspace) and the per-call context (layer_ctx). The layer
 * (transformer_layer.h) and its two sublayers (attention.h, mlp.h) all take them; they live here,
 * below all three, so that the sublayers need not include the layer that calls them. */
#ifndef MEGADLM_CORE_TRANSFORMER_LAYER_TYPES_H
#define MEGADLM_CORE_TRANSFORMER_LAYER_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/attention.h"
#include "core/kernels/dropout.h"
#include "core/kernels/linear.h"
#include "core/transformer/layer_saved.h"
#include "core/transformer/transformer_config.h"

/* Pointers into a param_set's data (or grad) buffer; NULL where the config has no such tensor
 * (biases without --add-bias-linear, LayerNorm biases with RMSNorm, q/k norms without
 * --qk-layernorm). Under --bf16 / --fp16 a layer's weights are the model's 16-bit parameters:
 * the four GEMM weights by their *_w16 pointers into the 16-bit copy (their fp32 pointers are
 * NULL), the other tensors by fp32 pointers into the model's buffer of their widened values
 * (gpt_model.h); the *_w16 pointers of a gradient's layer_weights are NULL. */
typedef struct {
    float *ln1_w, *ln1_b;                   /* input_layernorm [C] */
    float *qkv_w, *qkv_b;                   /* self_attention.linear_qkv [QKV, C], [QKV] */
    float *q_ln_w, *q_ln_b, *k_ln_w, *k_ln_b; /* self_attention.{q,k}_layernorm [HS] */
    float *proj_w, *proj_b;                 /* self_attention.linear_proj [C, NH*HS], [C] */
    float *ln2_w, *ln2_b;                   /* pre_mlp_layernorm [C] */
    float *fc1_w, *fc1_b;                   /* mlp.linear_fc1 [FC1, C], [FC1] */
    float *fc2_w, *fc2_b;                   /* mlp.linear_fc2 [C, F], [C] */
    const uint16_t *qkv_w16, *proj_w16, *fc1_w16, *fc2_w16; /* --bf16 / --fp16 */
    /* an MoE layer's MLP (moe/moe_layer.h) instead of fc1/fc2: the router [E, C]; this rank's
     * routed experts' weights, expert after expert [E_local, FC1e, C] and [E_local, C, Fe]; the
     * shared expert's [FC1s, C] and [C, Fs] */
    float *router_w;
    float *experts_fc1_w, *experts_fc2_w, *shared_fc1_w, *shared_fc2_w;
    const uint16_t *experts_fc1_w16, *experts_fc2_w16, *shared_fc1_w16, *shared_fc2_w16;
} layer_weights;
/* A layer's GEMM weight as the linears take it, e.g. LAYER_LINEAR_W(w, qkv). */
#define LAYER_LINEAR_W(w, name) ((linear_weight){(w)->name##_w, (w)->name##_w16})

/* What one layer keeps for backward: layer_saved, generated from the table of saved tensors in
 * layer_saved.h (docs/MEMORY.md). */

/* Transient buffers shared by all layers (workspace, not saved). Under sequence parallelism
 * the [Ns, C] and [N, C] buffers are distinct; otherwise the *_full pointers alias them. */
typedef struct {
    float *branch;      /* [Ns, C]  reduced output of linear_proj / linear_fc2 (+ bias); its grad */
    float *branch_full; /* [N, C]   this rank's partial output before the reduction; its grad */
    float *dln;         /* [Ns, C]  grad w.r.t. a norm output */
    float *dln_full;    /* [N, C]   this rank's partial grad w.r.t. the gathered norm output */
    float *gathered;    /* [N, C]   all-gathered norm output (sequence parallelism) */
    float *dctx;     /* [N, NH*HS] */
    float *dqkv;     /* [N, QKV] */
    float *dqkv_raw; /* [N, QKV] (--qk-layernorm only) */
    float *dfc1;     /* [N, FC1] */
    float *dact;     /* [N, F] */
    attention_workspace attn; /* attention_workspace_floats(T, threads) */
    float *recv;     /* [(N - Ns), C] ring reduce-scatter receive buffers (--tp-comm-overlap) */
    layer_saved views; /* --bf16: the fp32 views of the table's b16 tensors (layer_saved.h),
                          shared by every layer's layer_saved; NULL fields otherwise */
} layer_workspace;

/* Per-call context: shapes of this micro-batch and the dropout key parts. */
typedef struct {
    const transformer_config *cfg;
    int B, T;               /* this micro-batch (<= the allocated maximum) */
    int T_valid;            /* keys at positions >= T_valid are padding, masked out for every
                               query (a variable-length micro-batch padded for sequence
                               parallelism); T when none */
    int training;           /* dropout on */
    dropout_key key;        /* seed, iteration, micro-batch; layer and site are set per use */
    const float *rope_cos;  /* [T, rot_dim/2] (rope only) */
    /* packed documents: [B, T x CP] bounds of each position's document (attention_docs), or
     * NULL; and the learned-position rows of the tokens, or NULL (sequence index) */
    const int32_t *doc_start, *doc_end, *position_ids;
    const float *rope_sin;
    /* inference: each layer's attention also stores its QKV rows (after RoPE) into this key/
     * value cache (core/inference/static_context.h); NULL in training */
    struct inference_context *inference;
    /* mixture of experts: where training forwards record the routers' losses (NULL: nowhere),
     * and the losses' d(objective)/d(loss) in backward (Megatron's MoEAuxLossAutoScaler scale:
     * the main loss's backward scale) */
    struct moe_tracker *moe_tracker;
    float moe_grad_scale;
} layer_ctx;

#endif
