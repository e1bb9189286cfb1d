#include "training/theoretical_memory.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/models/gpt_model.h"
#include "core/models/gpt_param_table.h"
#include "core/models/head_saved.h"
#include "core/pipeline_parallel/schedules.h"
#include "core/transformer/activation_memory.h"
#include "core/transformer/moe/moe_layer.h"
#include "core/parallel_state.h"
#include "core/util/alloc.h"
#include "core/transformer/transformer_block.h"
#include "training/difflm.h"
#include "training/model_provider.h"

const char *const TM_ROW_KEYS[TM_NUM_ROWS] = {
    "no_parallelism",            "tensor_parallel",
    "tensor_sequence_parallel",  "tensor_parallel_selective",
    "tensor_sequence_parallel_selective", "full_recompute"};
const char *const TM_ROW_NAMES[TM_NUM_ROWS] = {
    "no parallelism",
    "tensor parallel",
    "tensor + sequence parallel",
    "tensor parallel + selective recompute",
    "tensor + sequence parallel + selective recompute",
    "full recompute"};
const char *const TM_ROW_FORMULAS[TM_NUM_ROWS] = {
    "sbh(34 + 5as/h)", "sbh(10 + 24/t + 5as/(ht))", "(sbh/t)(34 + 5as/h)",
    "sbh(10 + 24/t)",  "34sbh/t",                   "2sbh"};

/* ---- Megatron's parameter formula (compute_weight_and_optimizer_memory) ---- */

/* Megatron's layer count, generalised to MoE layers (--moe-layer-freq): the router E h, the
 * routed experts' MLPs E x 2h f_e (x 3/2 with SwiGLU; a rank's share under expert
 * parallelism: experts_share), the shared expert's 2h f_s. */
static double megatron_layer(const megadlm_args *a, const transformer_config *c, int l,
                             double experts_share) {
    double h = a->hidden_size, heads = a->num_attention_heads, groups = a->num_query_groups;
    double q_ratio = (double)a->kv_channels * heads / h; /* query projection / hidden size */
    double gated = a->swiglu ? 1.5 : 1.0;
    /* RMSNorm: no bias */
    double norm = ARGS_CHOICE(a, normalization) == ARGS_NORM_RMSNORM ? 1.0 : 2.0;
    double attention = 2.0 * h * h * ((1.0 + groups / heads) * q_ratio);
    if (!tc_moe_layer(c, l)) return 2.0 * h * (a->ffn_hidden_size * gated + norm) + attention;
    double E = a->num_experts;
    return attention + 2.0 * h * norm + E * h +
           E * experts_share * 2.0 * h * a->moe_ffn_hidden_size * gated +
           2.0 * h * a->moe_shared_expert_intermediate_size * gated;
}

static void megatron_parameters(const megadlm_args *a, double *total, double *shard) {
    double h = a->hidden_size, V = a->padded_vocab_size;
    double norm = ARGS_CHOICE(a, normalization) == ARGS_NORM_RMSNORM ? 1.0 : 2.0;
    double embedding = h * V;
    double t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    double ep = a->num_experts > 0 ? a->expert_model_parallel_size : 1;
    double block = norm * h, first = 0.0; /* the final norm; the first stage's layers */
    int stage = a->num_layers / (int)p;
    const transformer_config c = model_config_from_args(a);
    for (int l = 0; l < a->num_layers; l++) {
        block += megatron_layer(a, &c, l, 1.0);
        if (l < stage) first += megatron_layer(a, &c, l, 1.0 / ep);
    }
    int untied = a->untie_embeddings_and_output_weights;
    *total = block + (untied ? 2.0 : 1.0) * embedding;
    /* most loaded shard: the first stage's layers (its share of the experts under expert
     * parallelism) and the embedding, split by t; the output layer too when untied and p = 1
     * (without MoE: Megatron's 1/p of the block) */
    *shard = ((a->num_experts > 0 ? first : block / p) + embedding) / t;
    if (untied && p == 1) *shard += embedding / t;
}

/* ---- per layer ---- */

/* One layer's saved bytes split as the parallel layouts split them:
 *   R  kept whole by every tensor-parallel rank (split along the sequence with SP),
 *   S  split across tensor-parallel ranks (heads, query groups, ffn columns),
 *   A  the core attention's s x s tensors (split by heads; gone with selective recompute),
 *   in the layer's input (what full recompute keeps). */
typedef struct {
    double R, S, A, in;
    double in_shards; /* a chunk input split across TP ranks (--distribute-saved-activations)
                         in all: megadlm keeps its shards in fp32 */
} layer_parts;

/* The paper's count (16-bit values, 1-byte dropout masks), at this model's widths. For f = 4h,
 * one query group per head, d = h/a and GeLU, R + S + A = sbh(34 + 5as/h):
 *   R = 10sbh: inputs of norm 1 (2), linear_qkv (2), norm 2 (2), linear_fc1 (2), and the two
 *       dropout masks (1 + 1);
 *   S = 24sbh: Q (2sb·ad), K (2sb·gd), V (2sb·gd), linear_proj input (2sb·ad), activation
 *       input (2sb·f, 2·2sb·f with SwiGLU's gate), linear_fc2 input (2sb·f);
 *   A = 5as²b: softmax output (2), its dropout mask (1), dropout output (2). */
static layer_parts paper_parts(const megadlm_args *a) {
    double s = a->seq_length, b = a->micro_batch_size, h = a->hidden_size;
    double heads = a->num_attention_heads, g = a->num_query_groups, d = a->kv_channels;
    double f = a->ffn_hidden_size;
    layer_parts x;
    x.R = 10.0 * s * b * h;
    x.S = 2.0 * s * b * (2.0 * heads * d + 2.0 * g * d + f * (a->swiglu ? 3.0 : 2.0));
    x.A = 5.0 * heads * s * s * b;
    x.in = 2.0 * s * b * h;
    x.in_shards = x.in;
    /* context parallelism: a rank holds s/CP positions of everything, and its queries' rows
     * (s/CP of them) of the s x s attention matrices */
    double cp = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    x.R /= cp;
    x.S /= cp;
    x.A /= cp;
    x.in /= cp;
    x.in_shards /= cp;
    return x;
}

/* The config of the whole model (no tensor-parallel split), for activation_memory.c. */
static transformer_config whole_model_config(const megadlm_args *a) {
    megadlm_args one = *a;
    one.tensor_model_parallel_size = 1;
    one.sequence_parallel = 0;
    one.distribute_saved_activations = 0;
    transformer_config c = model_config_from_args(&one);
    c.seq_length = difflm_model_length(a); /* the layout's (a padding may split over SP) */
    return c;
}

/* megadlm's tensors (fp32; under --bf16 / --fp16 all but the norms' statistics in 16 bits:
 * layer_saved.h, transformer_block.h; docs/MEMORY.md): R = the layer input, norm outputs and
 * statistics, the residual after attention; A = the attention probabilities; S = everything
 * else. */
static layer_parts megadlm_parts(const megadlm_args *a) {
    transformer_config c = whole_model_config(a);
    int B = a->micro_batch_size, T = tc_seq_local(&c); /* a rank's positions (CP) */
    double N = (double)B * T, h = a->hidden_size;
    double stats = c.normalization == NORM_LAYERNORM ? 2.0 * N : N; /* mean (LayerNorm), rstd */
    double bytes = tc_half(&c) ? 2.0 : 4.0;
    double input = bytes * N * h;
    double all = input + (double)activation_memory_layer_state_bytes(&c, B, T);
    layer_parts x;
    /* input, ln1, res1, ln2; both norms' statistics (fp32) */
    x.R = input + bytes * 3.0 * N * h + 4.0 * 2.0 * stats;
    x.A = (double)activation_memory_probs_bytes(&c, B, T);
    x.S = all - x.R - x.A;
    x.in = input;
    x.in_shards = 4.0 * N * h;
    return x;
}

static void table_rows(const layer_parts *x, double t, double out[TM_NUM_ROWS]) {
    out[TM_NO_PARALLELISM] = x->R + x->S + x->A;
    out[TM_TENSOR_PARALLEL] = x->R + (x->S + x->A) / t;
    out[TM_TENSOR_SEQUENCE] = (x->R + x->S + x->A) / t;
    out[TM_TENSOR_SELECTIVE] = x->R + x->S / t;
    out[TM_TENSOR_SEQUENCE_SELECTIVE] = (x->R + x->S) / t;
    out[TM_FULL_RECOMPUTE] = x->in;
}

/* Layer l of a model chunk under the chosen layout and recompute mode. */
static double layer_bytes(const megadlm_args *a, const transformer_config *c,
                          const layer_parts *x, const double rows[TM_NUM_ROWS], int l) {
    int sp = a->sequence_parallel;
    double t = a->tensor_model_parallel_size;
    double keep_all = rows[sp ? TM_TENSOR_SEQUENCE : TM_TENSOR_PARALLEL];
    switch (c->recompute_granularity) {
    case RECOMPUTE_NONE: return keep_all;
    case RECOMPUTE_SELECTIVE: return rows[sp ? TM_TENSOR_SEQUENCE_SELECTIVE : TM_TENSOR_SELECTIVE];
    case RECOMPUTE_FULL:
        if (!transformer_block_checkpointed(c, l)) return keep_all;
        if (transformer_block_chunk_begin(c, l) != l) return 0.0;
        /* a chunk keeps its input: split along the sequence with SP, or across the
         * tensor-parallel ranks with --distribute-saved-activations */
        if (!sp && a->distribute_saved_activations) return x->in_shards / t;
        return x->in / (sp ? t : 1.0);
    }
    return 0.0;
}

/* ---- FLOPs ---- */

/* One layer's forward FLOPs for the global batch (Megatron's num_floating_point_operations
 * divided by 3 passes and L layers, the logits left out). */
static double layer_forward_flops(const megadlm_args *a) {
    double B = a->global_batch_size, s = a->seq_length, h = a->hidden_size;
    double heads = a->num_attention_heads, g = a->num_query_groups;
    double q_ratio = (double)a->kv_channels * heads / h;
    double gated = a->swiglu ? 1.5 : 1.0;
    return 4.0 * B * s * h * h *
           ((1.0 + g / heads + s / h) * q_ratio + ((double)a->ffn_hidden_size / h) * gated);
}

/* ---- mixture of experts: the layer states held at once ---- */

/* What one MoE layer's forward keeps for a micro-batch (moe_layer_saved_bytes), at the bound's
 * rows and at a balanced routing's: every MoE layer of a model has the same shapes. extra (if
 * not NULL): what a forward holds beside it for a moment (moe_layer_forward_extra_bytes). */
static void moe_layer_kept(const megadlm_args *a, size_t *bound, size_t *balanced,
                           size_t extra[2]) {
    *bound = *balanced = 0;
    if (extra) extra[0] = extra[1] = 0;
    if (a->num_experts <= 0) return;
    transformer_config c = model_config_from_args(a);
    const int B = a->micro_batch_size, T = tc_seq_local(&c);
    const moe_rows hi = moe_rows_bound(&c, B, T), even = moe_rows_balanced(&c, B, T);
    *bound = moe_layer_saved_bytes(&c, B, T, hi);
    *balanced = moe_layer_saved_bytes(&c, B, T, even);
    if (extra) {
        extra[0] = moe_layer_forward_extra_bytes(&c, hi);
        extra[1] = moe_layer_forward_extra_bytes(&c, even);
    }
}

/* The MoE layer states (moe_saved) a pipeline stage can hold together, from the recompute plan
 * the block runs (transformer_block.c): a layer kept whole keeps its state in its store until
 * its backward; a checkpointed layer's lands in the recompute slot of its place in the chunk,
 * shared by every store and model chunk of the rank, and stays there until that layer's
 * backward or the slot's next MoE forward; --moe-layer-recompute keeps none (each forward
 * releases it, each backward re-runs the layer: one at a time). */
typedef struct {
    int store_checked;   /* most MoE layers a store keeps (a store runs one model chunk; with
                            interleaving any of the rank's, so the largest) */
    int store_unchecked; /* ... a store that keeps everything (partial recompute) */
    int stage_checked;   /* the same summed over the stage's chunks: what a micro-batch keeps
                            in Megatron's account, whose stage counts every chunk */
    int stage_unchecked;
    int slots;           /* recompute slots that can hold an MoE layer's state (1 with
                            --moe-layer-recompute) */
} moe_states;

static moe_states moe_live_states(const megadlm_args *a, int pp_rank) {
    moe_states st = {0};
    if (a->num_experts <= 0) return st;
    transformer_config c = model_config_from_args(a);
    c.pp_size = a->pipeline_model_parallel_size;
    c.pp_rank = pp_rank;
    if (c.pp_size <= 1) c.vp_size = 0;
    c.recompute_store_unchecked = 0;
    const int chunk = tc_chunk_layers(&c);
    uint8_t *slot = xcalloc((size_t)chunk, 1, "recompute slots' MoE flags");
    int any = 0;
    for (int j = 0; j < tc_vp(&c); j++) {
        int kept = 0, all = 0;
        for (int l = 0; l < chunk; l++) {
            if (!tc_moe_layer(&c, tc_chunk_layer_offset(&c, j) + l)) continue;
            all++;
            if (transformer_block_checkpointed(&c, l))
                slot[l - transformer_block_chunk_begin(&c, l)] = 1;
            else
                kept++;
        }
        any |= all > 0;
        if (kept > st.store_checked) st.store_checked = kept;
        if (all > st.store_unchecked) st.store_unchecked = all;
        st.stage_checked += kept;
        st.stage_unchecked += all;
    }
    for (int l = 0; l < chunk; l++) st.slots += slot[l];
    free(slot);
    if (a->moe_layer_recompute) {
        moe_states one = {.slots = any};
        return one;
    }
    return st;
}

/* The MoE layers' kept bytes (moe_layer_saved_bytes) on the first stage, and what they add to
 * this account: each micro-batch in flight keeps the state of the layers it keeps whole, and a
 * recomputation holds its slots' (moe_live_states) */
static void moe_memory(const megadlm_args *a, theoretical_memory *out) {
    out->moe_layers_first_stage = 0;
    out->moe_layer_kept_balanced = out->moe_layer_kept_bound = 0.0;
    out->moe_layers_kept_per_microbatch = out->moe_bytes_bound = out->moe_bytes_balanced = 0.0;
    out->moe_recompute_states = 0;
    out->moe_expert_optimizer_bytes = 0.0;
    if (a->num_experts <= 0) return;
    transformer_config c = model_config_from_args(a);
    c.pp_size = a->pipeline_model_parallel_size;
    c.pp_rank = 0;
    if (c.pp_size <= 1) c.vp_size = 0;
    for (int j = 0; j < tc_vp(&c); j++)
        for (int l = 0; l < tc_chunk_layers(&c); l++)
            out->moe_layers_first_stage += tc_moe_layer(&c, tc_chunk_layer_offset(&c, j) + l);
    size_t bound, balanced;
    moe_layer_kept(a, &bound, &balanced, NULL);
    out->moe_layer_kept_bound = (double)bound;
    out->moe_layer_kept_balanced = (double)balanced;
    moe_states st = moe_live_states(a, 0);
    out->moe_layers_kept_per_microbatch = st.stage_checked;
    out->moe_recompute_states = st.slots;
    double states = out->in_flight_microbatches * st.stage_checked + st.slots;
    out->moe_bytes_bound = states * out->moe_layer_kept_bound;
    out->moe_bytes_balanced = states * out->moe_layer_kept_balanced;
    /* the first stage's experts on this rank (Megatron's E/EP x 2 h f_e x 3/2 with SwiGLU, / t)
     * hold 12 bytes over DP / EP ranks, not DP */
    double ep = a->expert_model_parallel_size, dp = a->data_parallel_size;
    if (a->use_distributed_optimizer && ep > 1.0) {
        double experts = out->moe_layers_first_stage * (a->num_experts / ep) * 2.0 *
                         a->hidden_size * a->moe_ffn_hidden_size * (a->swiglu ? 1.5 : 1.0) /
                         a->tensor_model_parallel_size;
        out->moe_expert_optimizer_bytes = experts * 12.0 * (ep / dp - 1.0 / dp);
    }
}

void theoretical_memory_compute(const megadlm_args *a, theoretical_memory *out) {
    memset(out, 0, sizeof(*out));
    double t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    double s = a->seq_length, b = a->micro_batch_size, h = a->hidden_size;
    double V = a->padded_vocab_size;
    int sp = a->sequence_parallel;
    int v = a->virtual_pipeline_model_parallel_size > 1 ? a->virtual_pipeline_model_parallel_size : 1;

    /* weight and optimizer */
    megatron_parameters(a, &out->parameters, &out->parameters_most_loaded_shard);
    /* Megatron's 18 bytes: 2 (bf16 parameters) + 4 (fp32 gradients) + 12 (fp32 main
     * parameters and moments); the distributed optimizer divides the 12 by DP, FSDP's
     * optim_grads the gradients' 4 too, optim_grads_params all 18 */
    double dp = a->data_parallel_size;
    int fsdp = a->use_custom_fsdp || a->use_torch_fsdp2
                   ? (int)ARGS_CHOICE(a, data_parallel_sharding_strategy) : -1;
    out->bytes_per_parameter = fsdp == ARGS_SHARDING_OPTIM_GRADS_PARAMS ? 18.0 / dp
                               : fsdp == ARGS_SHARDING_OPTIM_GRADS      ? 2.0 + 16.0 / dp
                               : a->use_distributed_optimizer           ? 6.0 + 12.0 / dp
                                                                        : 18.0;
    out->weight_and_optimizer_bytes = out->parameters_most_loaded_shard * out->bytes_per_parameter;

    /* per layer: Table 2 at the paper's convention, and megadlm's fp32 tensors */
    layer_parts pp = paper_parts(a), mp = megadlm_parts(a);
    table_rows(&pp, t, out->per_layer);
    table_rows(&mp, t, out->per_layer_megadlm);

    /* the first stage: v model chunks of L/(pv) layers each; recompute chunks restart in each */
    transformer_config c = whole_model_config(a);
    int chunk_layers = a->num_layers / (a->pipeline_model_parallel_size * v);
    out->stage_layers = chunk_layers * v;
    double paper_sum = 0.0, megadlm_sum = 0.0;
    for (int l = 0; l < chunk_layers; l++) {
        paper_sum += layer_bytes(a, &c, &pp, out->per_layer, l);
        megadlm_sum += layer_bytes(a, &c, &mp, out->per_layer_megadlm, l);
    }
    out->stage_layer_bytes = v * paper_sum;
    out->per_layer_activation_bytes = out->stage_layer_bytes / out->stage_layers;
    out->per_layer_saved_bytes_megadlm = v * megadlm_sum / out->stage_layers;

    /* the rest per rank: s/CP positions each under context parallelism */
    const double s_rank = s / (a->context_parallel_size > 1 ? a->context_parallel_size : 1);
    /* Megatron: token ids (8 bytes each) and the embedding dropout mask, per micro-batch */
    out->embedding_bytes = (8.0 * s_rank * b + s_rank * b * h) / (sp ? t : 1.0);
    out->num_microbatches = args_num_microbatches(a);
    if (a->pipeline_model_parallel_size == 1)
        out->in_flight_microbatches = 1.0;
    else if (v > 1) /* interleaved 1F1B: p micro-batches times Megatron's penalty */
        out->in_flight_microbatches = p * (1.0 + (p - 1.0) / (p * v));
    else /* 1F1B: the first stage holds p micro-batches, fewer when there are fewer */
        out->in_flight_microbatches = fmin((double)out->num_microbatches, p);
    /* p = 1: final norm and output-layer inputs (2 x 2sbh) and the fp32 logits (4sbV) */
    if (a->pipeline_model_parallel_size == 1)
        out->output_layer_bytes = sp ? (4.0 * s_rank * b * h + 4.0 * s_rank * b * V) / t
                                     : 4.0 * s_rank * b * h + 4.0 * s_rank * b * V / t;
    out->activation_bytes =
        (out->stage_layer_bytes + out->embedding_bytes) * out->in_flight_microbatches +
        out->output_layer_bytes;
    out->total_bytes = out->weight_and_optimizer_bytes + out->activation_bytes;

    /* FLOPs: model = Megatron's formula (= 72BLsh^2(1 + s/6h + V/12hL) for GPT-3 shapes);
     * hardware adds what recomputation re-runs */
    out->model_flops_per_iteration = model_flops_per_iteration(a, a->global_batch_size);
    double hw = out->model_flops_per_iteration;
    if (c.recompute_granularity == RECOMPUTE_SELECTIVE) {
        /* the paper: s/(3h) in place of s/(6h), i.e. the attention-score term again */
        double B = a->global_batch_size, L = a->num_layers;
        hw += 12.0 * B * L * s * s * a->num_attention_heads * a->kv_channels;
    } else if (c.recompute_granularity == RECOMPUTE_FULL) {
        /* one more forward of every checkpointed layer (the paper: 96BLsh^2(1 + s/6h +
         * V/16hL) when all are) */
        double recomputed = c.recompute_method == RECOMPUTE_UNIFORM
                                ? a->num_layers
                                : fmin(a->recompute_num_layers, chunk_layers) * v * p;
        hw += recomputed * layer_forward_flops(a);
    }
    out->hardware_flops_per_iteration = hw;
    moe_memory(a, out);
}

/* ---- megadlm's exact bytes ---- */

/* Parameters on one tensor-parallel rank of pipeline stage pp_rank of a layout with pp
 * stages: what the model holds there, counted from its own description (core/models/gpt_param_table.h:
 * every tensor gpt_model registers: biases, norms, q/k norms, learned positions, untied output
 * layer or the last stage's copy of a tied embedding). The paper's formulas above are the
 * independent check. */
static size_t megadlm_stage_count(const megadlm_args *a, int pp, int pp_rank) {
    transformer_config c = model_config_from_args(a);
    c.tp_rank = 0; /* every TP rank holds as much */
    c.pp_size = pp;
    c.pp_rank = pp_rank;
    if (pp <= 1) c.vp_size = 0;
    return gpt_param_table_rank_numel(&c);
}

size_t theoretical_megadlm_parameter_count(const megadlm_args *a) {
    return megadlm_stage_count(a, 1, 0);
}

static size_t theoretical_megadlm_stage_count(const megadlm_args *a, int pp_rank) {
    return megadlm_stage_count(a, a->pipeline_model_parallel_size, pp_rank);
}

/* Tokens of a micro-batch one rank holds: b x s, b x s / CP under context parallelism (s: the
 * model's positions, a masked-diffusion sequence's padded length where that is longer). */
static size_t rank_tokens(const megadlm_args *a) {
    int cp = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    return (size_t)a->micro_batch_size * (size_t)(difflm_model_length(a) / cp);
}

size_t theoretical_megadlm_logits_rows(const megadlm_args *a) {
    return (size_t)gpt_head_logits_rows((int)rank_tokens(a),
                                        difflm_logits_in_chunks(a));
}

/* The sizes of head_saved.h's table for one micro-batch on one tensor-parallel rank. */
static head_dims head_dims_of_args(const megadlm_args *a) {
    transformer_config c = model_config_from_args(a);
    return head_dims_of(&c, rank_tokens(a), theoretical_megadlm_logits_rows(a));
}

size_t theoretical_megadlm_logits_bytes(const megadlm_args *a) {
    const head_dims d = head_dims_of_args(a);
    return sizeof(float) * d.logits_rows * d.V;
}

size_t theoretical_megadlm_head_saved_bytes(const megadlm_args *a) {
    const head_dims d = head_dims_of_args(a);
    /* the block output (the final norm's input: the block's, not a layer's), then the head's
     * table: final norm output and statistics (token shards with SP), this rank's vocabulary
     * columns of the logits (one chunk of rows in masked-diffusion training), per-token loss
     * and logsumexp */
    return sizeof(float) * d.Ns * d.C + head_saved_bytes(d);
}

theoretical_megadlm_bytes theoretical_megadlm(const megadlm_args *a) {
    return theoretical_megadlm_rank(a, 0, 1,
                                    a->num_microbatches_with_partial_activation_checkpoints > 0);
}

/* The distributed optimizer's elements on this rank under expert parallelism: the experts'
 * buckets are sharded over the expert-data-parallel group, the others over DP (Megatron's
 * expert buffers), so the pieces of this rank's buckets (distrib_optimizer.c: at least
 * ceil(N / DP)), from the layout training builds (ddp_create_layout on this rank's table).
 * `megadlm memory` (no ranks) gives data-parallel rank 0's. */
static size_t expert_parallel_shard(const megadlm_args *a, int pp_rank) {
    const parallel_state *st = parallel_get();
    transformer_config c = model_config_from_args(a);
    c.pp_size = a->pipeline_model_parallel_size;
    c.pp_rank = pp_rank;
    if (c.pp_size <= 1) c.vp_size = 0;
    const int dp = args_grad_reduce_ranks(a), ep = a->expert_model_parallel_size;
    const int dp_rank = st->world_size > 1 ? st->dp_cp_rank : 0;
    gpt_param_table spec;
    gpt_param_table_rank(&c, &spec);
    ddp_config dc = {.overlap_grad_reduce = a->overlap_grad_reduce,
                     .use_distributed_optimizer = 1,
                     .bucket_size = a->ddp_bucket_size,
                     .edp_size = dp / ep,
                     .edp_rank = st->world_size > 1 ? st->edp_rank : 0};
    if (dc.overlap_grad_reduce && dc.bucket_size <= 0) /* Megatron's default, as ddp_create */
        dc.bucket_size = (int64_t)1000000 * dp > 40000000 ? (int64_t)1000000 * dp : 40000000;
    ddp *d = ddp_create_layout(&spec.params, &dc, dp, dp_rank, tc_pp(&c), pp_rank);
    size_t pieces = 0, n = spec.params.numel;
    for (int b = 0; b < d->num_buckets; b++) pieces += ddp_piece_numel(d, b);
    ddp_free(d);
    gpt_param_table_free(&spec);
    size_t ceil_dp = (n + (size_t)dp - 1) / (size_t)dp;
    return pieces > ceil_dp ? pieces : ceil_dp;
}

theoretical_megadlm_bytes theoretical_megadlm_rank(const megadlm_args *a, int pp_rank,
                                                   int num_stores, int num_unchecked) {
    theoretical_megadlm_bytes r;
    size_t n = theoretical_megadlm_stage_count(a, pp_rank);
    /* --bf16 / --fp16 (Megatron's Float16OptimizerWithFloat16Params): the model's parameters
     * in 16 bits, the fp32 main parameters in the optimizer state; gradients fp32 either way
     * (docs/MEMORY.md) */
    const int half = a->bf16 || a->fp16;
    r.parameters = half ? 2 * n : 4 * n;
    r.gradients = 4 * n;
    /* exp_avg, exp_avg_sq (and the fp32 main parameters in 16-bit runs); the distributed
     * optimizer holds ceil(n / DP) of each on every rank (its pieces of the buckets,
     * core/optimizer/distrib_optimizer.h): Megatron's 6 + 12/DP bytes per parameter */
    /* context parallelism: the optimizer shards over DP x CP (the gradients' group) */
    size_t dp = (size_t)args_grad_reduce_ranks(a);
    /* --num-distributed-optimizer-instances N: each instance of DP/N ranks holds it all
     * (Megatron's theoretical report above ignores instances: it keeps 6 + 12/DP) */
    if (a->num_distributed_optimizer_instances > 1)
        dp /= (size_t)a->num_distributed_optimizer_instances;
    size_t state = half ? 12 : 8;
    r.optimizer = a->use_distributed_optimizer ? state * ((n + dp - 1) / dp) : state * n;
    if (a->use_distributed_optimizer && a->num_experts > 0 && a->expert_model_parallel_size > 1)
        r.optimizer = state * expert_parallel_shard(a, pp_rank);
    /* FSDP optim_grads(_params): the gradient shard, as large as the optimizer's
     * (core/distributed/fsdp.h); the whole buffer lives only during a backward */
    if (args_fsdp_shards_grads(a)) r.gradients = 4 * ((n + dp - 1) / dp);
    /* optim_grads_params: the parameter shard (16-bit under --bf16, beside the optimizer's
     * fp32 main pieces); the units gathered during a step are freed by its end
     * (fsdp_params_drop) */
    if (args_fsdp_shards_grads(a) &&
        ARGS_CHOICE(a, data_parallel_sharding_strategy) == ARGS_SHARDING_OPTIM_GRADS_PARAMS)
        r.parameters = (half ? 2 : 4) * ((n + dp - 1) / dp);
    /* every micro-batch in flight has its own store (pipeline schedules): the stage's layers
     * (one model chunk's with interleaving), the block output, and on the last stage the head
     * (every store there: any may hold the last chunk); with per-micro-batch partial
     * recompute, stores below num_unchecked keep everything */
    transformer_config c = model_config_from_args(a);
    c.pp_size = a->pipeline_model_parallel_size;
    c.pp_rank = pp_rank;
    int p = c.pp_size > 1 ? c.pp_size : 1;
    size_t N = rank_tokens(a), t = a->tensor_model_parallel_size;
    size_t block_output = 4 * (a->sequence_parallel ? N / t : N) * a->hidden_size;
    size_t head = theoretical_megadlm_head_saved_bytes(a) - block_output;
    size_t saved = 0;
    for (int s = 0; s < num_stores; s++) {
        c.recompute_store_unchecked = s < num_unchecked;
        for (int l = 0; l < tc_chunk_layers(&c); l++)
            saved += activation_memory_layer_bytes(&c, a->micro_batch_size, tc_seq_local(&c), l);
        saved += block_output + (pp_rank == p - 1 ? head : 0);
    }
    r.saved_activations = saved;
    /* the MoE states its stores and recompute slots can hold together (moe_live_states);
     * the slots only when a store is checkpointed (or --moe-layer-recompute re-runs) */
    moe_states st = moe_live_states(a, pp_rank);
    size_t live = (size_t)num_unchecked * (size_t)st.store_unchecked +
                  (size_t)(num_stores - num_unchecked) * (size_t)st.store_checked;
    if (num_stores > num_unchecked || a->moe_layer_recompute) live += (size_t)st.slots;
    /* and, while one forward runs, what it holds beside its kept state (the allocator counts
     * both as activations: the peak has them together) */
    size_t bound, balanced, extra[2];
    moe_layer_kept(a, &bound, &balanced, extra);
    r.moe_bound = live * bound + (live ? extra[0] : 0);
    r.moe_balanced = live * balanced + (live ? extra[1] : 0);
    return r;
}

theoretical_megadlm_peak theoretical_megadlm_most_loaded(const megadlm_args *a) {
    transformer_config c = model_config_from_args(a);
    int p = a->pipeline_model_parallel_size;
    int M = args_num_microbatches(a);
    theoretical_megadlm_peak pk = {.bound = -1.0, .balanced = -1.0};
    for (int r = 0; r < p; r++) {
        int unchecked = 0;
        int stores = schedule_stores(p, r, c.vp_size, M,
                                     a->num_microbatches_with_partial_activation_checkpoints,
                                     &unchecked);
        theoretical_megadlm_bytes b = theoretical_megadlm_rank(a, r, stores, unchecked);
        double base = (double)b.parameters + (double)b.gradients + (double)b.optimizer +
                      (double)b.saved_activations;
        if (base + (double)b.moe_bound > pk.bound) {
            pk.bound = base + (double)b.moe_bound;
            pk.pp_rank = r;
            pk.bytes = b;
        }
        if (base + (double)b.moe_balanced > pk.balanced) pk.balanced = base + (double)b.moe_balanced;
    }
    return pk;
}
