/* What a configuration costs before it runs (`megadlm memory`), and what `train --log-memory`
 * predicts beside the tracked allocator's measurement. Pure arithmetic on validated arguments:
 * no model memory is allocated, so any size (the paper's 1T model included) is instant.
 *
 * Three accounts, each from its source:
 *  - Megatron-LM's report_theoretical_memory (megatron/training/theoretical_memory_usage.py),
 *    generalised: weight and optimizer bytes of the most loaded rank from Megatron's parameter
 *    formula (GQA, SwiGLU, untied embeddings; RMSNorm without a bias), 18 bytes per parameter
 *    (6 + 12/DP with the distributed optimizer, less under FSDP's sharding strategies);
 *    activations of the first pipeline stage at the paper's convention for any layout, at
 *    the model's real widths and s/CP positions. Megatron's formula as its code evaluates it
 *    is training/megatron_memory.h, printed beside this one when they differ.
 *  - Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models":
 *    Table 2's six per-layer rows (16-bit values, 1-byte masks), the first stage's in-flight
 *    micro-batches (1F1B: p; interleaved: p(1 + (p-1)/(pv))), the output layer when p = 1, and
 *    appendix A's model and hardware FLOPs.
 *  - megadlm's own tensors (fp32, docs/MEMORY.md, core/transformer/activation_memory.c), per
 *    layer and, for a layout `train` can run, exactly what it allocates.
 * docs/MEMORY.md ("`megadlm memory`") writes every formula out. */
#ifndef MEGADLM_TRAINING_THEORETICAL_MEMORY_H
#define MEGADLM_TRAINING_THEORETICAL_MEMORY_H

#include <stddef.h>

#include "training/arguments.h"

#define TM_BYTES_PER_MB (1024.0 * 1024.0) /* Megatron's NUM_BYTES_IN_MEGABYTE */

/* The six rows of the paper's Table 2 (per layer). */
enum {
    TM_NO_PARALLELISM = 0,     /* sbh(34 + 5as/h) */
    TM_TENSOR_PARALLEL,        /* sbh(10 + 24/t + 5as/(ht)) */
    TM_TENSOR_SEQUENCE,        /* (sbh/t)(34 + 5as/h) */
    TM_TENSOR_SELECTIVE,       /* sbh(10 + 24/t) */
    TM_TENSOR_SEQUENCE_SELECTIVE, /* 34sbh/t */
    TM_FULL_RECOMPUTE,         /* 2sbh */
    TM_NUM_ROWS
};
extern const char *const TM_ROW_KEYS[TM_NUM_ROWS];     /* JSON keys: "no_parallelism", ... */
extern const char *const TM_ROW_NAMES[TM_NUM_ROWS];    /* "tensor parallel + selective", ... */
extern const char *const TM_ROW_FORMULAS[TM_NUM_ROWS]; /* "sbh(10 + 24/t)", ... */

typedef struct {
    /* ---- Megatron's report_theoretical_memory (bytes; the report prints MB = 2^20) ---- */
    double weight_and_optimizer_bytes;
    double activation_bytes;
    double total_bytes;
    double parameters;                   /* the whole model, Megatron's formula */
    double parameters_most_loaded_shard; /* first stage: (block/p + embedding [+ output]) / t */
    double bytes_per_parameter;          /* 18, or 6 + 12/DP with the distributed optimizer */

    /* ---- per layer ---- */
    double per_layer[TM_NUM_ROWS];         /* the paper's Table 2 at this model's shapes */
    double per_layer_megadlm[TM_NUM_ROWS]; /* megadlm's tensors (fp32, or 16-bit under --bf16 /
                                             --fp16), partitioned the same way */
    double per_layer_activation_bytes;     /* the chosen layout and recompute mode, paper's
                                            * convention: mean over the first stage's layers */
    double per_layer_saved_bytes_megadlm;  /* the same at megadlm's fp32 (activation_memory.c) */

    /* ---- the first pipeline stage ---- */
    int stage_layers;              /* layers of the first stage, all its model chunks */
    int num_microbatches;          /* per iteration: global / (micro x DP) */
    double in_flight_microbatches; /* micro-batches whose activations the first stage holds */
    double stage_layer_bytes;      /* one micro-batch through the stage's layers (paper) */
    double embedding_bytes;        /* one micro-batch: token ids and the embedding dropout mask */
    double output_layer_bytes;     /* p = 1: final norm and output-layer inputs, fp32 logits */

    /* ---- mixture of experts: what an MoE layer's forward keeps per micro-batch beside the
     * table (its rows depend on the routing: core/transformer/moe/moe_layer.h), balanced and
     * at its bound, and the first stage's MoE layers ---- */
    int moe_layers_first_stage;
    double moe_layer_kept_balanced, moe_layer_kept_bound;
    /* ... and in this account's convention (what each micro-batch in flight keeps, as Table 2's
     * rows): the first stage's MoE layers whose state a micro-batch keeps until its backward
     * (those not checkpointed; none with --moe-layer-recompute), the states a recomputation
     * holds at once (full recompute: one recompute chunk's MoE layers; --moe-layer-recompute:
     * the one layer its backward re-runs), and their bytes: (in flight x kept + recompute) x
     * the layer's bytes, at the bound and balanced. total_bytes (Megatron's report) does not
     * count them; total_bytes + moe_bytes_bound is what `megadlm plan` counts. */
    double moe_layers_kept_per_microbatch;
    int moe_recompute_states;
    double moe_bytes_bound, moe_bytes_balanced;
    /* Megatron's report divides every parameter's 12 optimizer bytes by DP under the distributed
     * optimizer, but the experts' are sharded over their expert-data-parallel group (DP / EP
     * ranks): the bytes that adds on this rank (0 without EP or the distributed optimizer).
     * With the state: total_bytes + moe_expert_optimizer_bytes + moe_bytes_bound. */
    double moe_expert_optimizer_bytes;

    /* ---- FLOPs per iteration (global batch), the paper's appendix A at the real shapes ---- */
    double model_flops_per_iteration;
    double hardware_flops_per_iteration;
} theoretical_memory;

/* Fills *out from validated arguments (args_validate). */
void theoretical_memory_compute(const megadlm_args *a, theoretical_memory *out);

/* megadlm's own bytes on a rank `train` builds (fp32 parameters, gradients, two Adam moments;
 * the saved activations of one micro-batch: every layer's activation_memory_layer_bytes plus
 * the model head's). These equal what the tracked allocator measures; `train --log-memory`
 * prints both. */
typedef struct {
    size_t parameters;
    size_t gradients;
    size_t optimizer;
    size_t saved_activations;
    /* The MoE layers' routing-dependent state (moe_layer_saved_bytes: allocated by each
     * forward, freed by its backward, so not in saved_activations, which the allocator holds
     * between iterations) the rank holds at most at once: the MoE layer states its stores and
     * recompute slots can keep together, at the bound's rows and at a balanced routing's. */
    size_t moe_bound, moe_balanced;
} theoretical_megadlm_bytes;

/* Parameters megadlm's GPTModel holds on one tensor-parallel rank of the whole model (every
 * tensor of core/models/gpt_param_table.h: biases, norms, q/k norms, learned positions, untied output
 * layer; the whole model at TP 1). */
size_t theoretical_megadlm_parameter_count(const megadlm_args *a);
/* Rows of an activation store's logits buffer: N = b x s, or in masked-diffusion training on
 * the loss-weighted rows (difflm_logits_in_chunks) min(N, GPT_HEAD_CHUNK_ROWS), the rows the
 * head runs at a time; and its bytes on one tensor-parallel rank (this rank's vocabulary). */
size_t theoretical_megadlm_logits_rows(const megadlm_args *a);
size_t theoretical_megadlm_logits_bytes(const megadlm_args *a);
/* Saved-activation bytes outside the layers for one micro-batch of b x s tokens on one
 * tensor-parallel rank: the block's output, the final norm's output and statistics, the
 * logits (this rank's vocabulary; theoretical_megadlm_logits_bytes), per-token loss and
 * logsumexp. */
size_t theoretical_megadlm_head_saved_bytes(const megadlm_args *a);
theoretical_megadlm_bytes theoretical_megadlm(const megadlm_args *a);
/* The same for pipeline stage pp_rank holding num_stores micro-batches in flight (model
 * chunks with interleaving: a store holds one chunk's layers), num_unchecked of which keep
 * everything under per-micro-batch partial recompute (schedule_stores; what
 * `train --log-memory` compares with the allocator on each rank). */
theoretical_megadlm_bytes theoretical_megadlm_rank(const megadlm_args *a, int pp_rank,
                                                   int num_stores, int num_unchecked);

/* The most loaded pipeline stage of what `train` allocates, each stage with the stores its
 * schedule builds (schedule_stores, partial recompute included): parameters + gradients +
 * optimizer state + saved activations + the MoE state at its bound (`bound`, the largest over
 * the stages, on stage pp_rank: what `megadlm plan` counts in the megadlm account, so that a
 * layout it says fits cannot run out whatever the routing) and at a balanced routing
 * (`balanced`, the largest over the stages). Dense models: bound = balanced. */
typedef struct {
    double bound, balanced;
    int pp_rank;
    theoretical_megadlm_bytes bytes; /* stage pp_rank's */
} theoretical_megadlm_peak;
theoretical_megadlm_peak theoretical_megadlm_most_loaded(const megadlm_args *a);

#endif
