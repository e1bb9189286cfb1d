/* `megadlm memory <train's model, batch, parallelism and recompute flags> [--world-size N]
 * [--json]`: what a configuration costs before it runs (training/theoretical_memory.c), with no
 * MPI ranks and no model memory. The flags go through the same args_parse and args_validate as
 * `megadlm train`, so a layout train would refuse is refused here with the same words; the
 * flags only train needs (--train-iters, --lr, the data source) may be left out. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/models/gpt_model.h"
#include "tools/json_fields.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/difflm.h"
#include "training/megatron_memory.h"
#include "training/theoretical_memory.h"

static double mb(double bytes) { return bytes / TM_BYTES_PER_MB; }

static const char *recompute_name(const megadlm_args *a) {
    args_choice g = ARGS_CHOICE(a, recompute_granularity);
    if (g == ARGS_RECOMPUTE_SELECTIVE) return "selective recompute";
    if (g == ARGS_RECOMPUTE_FULL)
        return ARGS_CHOICE(a, recompute_method) == ARGS_RECOMPUTE_BLOCK ? "full recompute (block)"
                                                     : "full recompute (uniform)";
    return "no recompute";
}

/* The GPT-3-like shapes Table 2's formulas are written for. */
static int gpt3_like(const megadlm_args *a) {
    return a->ffn_hidden_size == 4 * a->hidden_size &&
           a->num_query_groups == a->num_attention_heads &&
           (long long)a->kv_channels * a->num_attention_heads == a->hidden_size && !a->swiglu;
}

/* The totals `megadlm plan` counts: Megatron's report with the MoE layers' state (MoE
 * models), and megadlm's most loaded stage with every store its schedule holds. */
static void print_totals(const megadlm_args *a, const theoretical_memory *m) {
    if (a->num_experts > 0)
        /* Megatron's report above counts no MoE state: in its convention each micro-batch in
         * flight keeps that of the layers it keeps whole, and a recomputation holds its own */
        printf("  Megatron's account above with the MoE layers' state (first stage: %g "
               "micro-batch%s in flight x %g MoE layers kept + %d held by a recomputation): "
               "total %.2f MB at the bound, %.2f MB balanced (what `megadlm plan` counts)\n",
               m->in_flight_microbatches, m->in_flight_microbatches == 1.0 ? "" : "es",
               m->moe_layers_kept_per_microbatch, m->moe_recompute_states,
               mb(m->total_bytes + m->moe_expert_optimizer_bytes + m->moe_bytes_bound),
               mb(m->total_bytes + m->moe_expert_optimizer_bytes + m->moe_bytes_balanced));
    if (m->moe_expert_optimizer_bytes > 0.0)
        printf("  (with %.2f MB more optimizer state than the report's 12/DP: the distributed "
               "optimizer shards the experts' over DP / EP ranks)\n",
               mb(m->moe_expert_optimizer_bytes));
    theoretical_megadlm_peak pk = theoretical_megadlm_most_loaded(a);
    printf("  most loaded pipeline stage with the schedule's activation stores (stage %d; what "
           "`megadlm plan` counts in megadlm's account): %.2f MB",
           pk.pp_rank, mb(pk.bound));
    if (a->num_experts > 0)
        printf(" with the MoE layers' state at the bound (%.2f MB of it), %.2f MB balanced",
               mb((double)pk.bytes.moe_bound), mb(pk.balanced));
    printf("\n");
}

static void print_report(const megadlm_args *a, const theoretical_memory *m) {
    /* Megatron's line (report_theoretical_memory) with megadlm's numbers, and Megatron's own
     * numbers beside it when they differ */
    megatron_memory_print_footprints(stdout, a, m);
    printf("\n");

    int t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    printf("layout: tensor parallel %d x ", t);
    if (a->context_parallel_size > 1)
        printf("context parallel %d (%s) x ", a->context_parallel_size, a->cp_comm_type);
    printf("pipeline parallel %d x data parallel %d = %d ranks", p, a->data_parallel_size,
           a->world_size);
    if (a->virtual_pipeline_model_parallel_size > 0)
        printf(", interleaved (%d model chunks per rank)", a->virtual_pipeline_model_parallel_size);
    printf("%s%s", a->sequence_parallel ? ", sequence parallel" : "",
           a->use_distributed_optimizer ? ", distributed optimizer" : "");
    if (a->use_custom_fsdp || a->use_torch_fsdp2)
        printf(", FSDP %s", a->data_parallel_sharding_strategy);
    printf("; %s\n", recompute_name(a));
    printf("batch: micro-batch %d, global batch %d (%d micro-batches per iteration), sequence "
           "%d\n",
           a->micro_batch_size, a->global_batch_size, m->num_microbatches, a->seq_length);
    printf("most loaded rank: the first pipeline stage, %d of %d layers, %g micro-batch%s of "
           "activations in flight\n",
           m->stage_layers, a->num_layers, m->in_flight_microbatches,
           m->in_flight_microbatches == 1.0 ? "" : "es");
    printf("parameters (Megatron's formula%s): %.3f B in the model, %.4f B on this rank, x %g "
           "bytes = %.2f MB\n",
           ARGS_CHOICE(a, normalization) != ARGS_NORM_RMSNORM ? "" : ", RMSNorm without a bias",
           m->parameters / 1e9, m->parameters_most_loaded_shard / 1e9, m->bytes_per_parameter,
           mb(m->weight_and_optimizer_bytes));
    if (p == 1)
        printf("activations: (%.2f MB of layers + %.2f MB of embedding) x %g in flight + %.2f MB "
               "of output layer = %.2f MB\n\n",
               mb(m->stage_layer_bytes), mb(m->embedding_bytes), m->in_flight_microbatches,
               mb(m->output_layer_bytes), mb(m->activation_bytes));
    else
        printf("activations: (%.2f MB of layers + %.2f MB of embedding) x %g in flight = %.2f MB "
               "(the output layer is on the last stage)\n\n",
               mb(m->stage_layer_bytes), mb(m->embedding_bytes), m->in_flight_microbatches,
               mb(m->activation_bytes));

    printf("Activation memory per layer (Korthikanti et al. 2022, Table 2; s=%d, b=%d, h=%d, "
           "a=%d, t=%d)%s:\n",
           a->seq_length, a->micro_batch_size, a->hidden_size, a->num_attention_heads, t,
           gpt3_like(a) ? "" : ", at this model's widths (Q, K, V, ffn, SwiGLU gate)");
    if (a->context_parallel_size > 1)
        printf("  per rank with context parallelism %d: every row / %d (s/%d positions, their "
               "queries' rows of the s x s attention matrices)\n",
               a->context_parallel_size, a->context_parallel_size, a->context_parallel_size);
    printf("  %-50s %-27s %16s %16s\n", "configuration", "formula", "paper (16-bit)",
           a->bf16 ? "megadlm (bf16)" : "megadlm (fp32)");
    for (int r = 0; r < TM_NUM_ROWS; r++)
        printf("  %-50s %-27s %13.2f MB %13.2f MB\n", TM_ROW_NAMES[r], TM_ROW_FORMULAS[r],
               mb(m->per_layer[r]), mb(m->per_layer_megadlm[r]));
    printf("  %-50s %-27s %13.2f MB %13.2f MB\n", "this configuration (mean over the stage)", "",
           mb(m->per_layer_activation_bytes), mb(m->per_layer_saved_bytes_megadlm));
    printf("\n");

    int sel = ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_SELECTIVE;
    int full = ARGS_CHOICE(a, recompute_granularity) == ARGS_RECOMPUTE_FULL;
    printf("FLOPs per iteration (global batch %d; Korthikanti et al. 2022, appendix A):\n",
           a->global_batch_size);
    printf("  model     %.4e  72BLsh^2(1 + s/(6h) + V/(12hL))%s\n", m->model_flops_per_iteration,
           gpt3_like(a) ? "" : " at this model's shapes (Megatron's formula)");
    printf("  hardware  %.4e  %s\n", m->hardware_flops_per_iteration,
           sel    ? "selective recompute: 72BLsh^2(1 + s/(3h) + V/(12hL))"
           : full ? "full recompute: 96BLsh^2(1 + s/(6h) + V/(16hL)) when every layer is "
                    "checkpointed"
                  : "no recompute: = model");

    theoretical_megadlm_bytes g = theoretical_megadlm(a);
    printf("\nmegadlm train on this layout (%s, what --log-memory measures): parameters "
           "%.2f MB, gradients %.2f MB, optimizer state %.2f MB, saved activations %.2f MB "
           "(one micro-batch)\n",
           a->bf16 ? "--bf16: bf16 parameters, fp32 main parameters in the optimizer state, fp32 "
                     "gradients; saved activations in bf16 but the norms' statistics"
           : a->fp16 ? "--fp16: fp16 parameters, fp32 main parameters in the optimizer state, "
                       "fp32 gradients; saved activations in fp16 but the norms' statistics"
                     : "fp32",
           mb((double)g.parameters), mb((double)g.gradients), mb((double)g.optimizer),
           mb((double)g.saved_activations));
    if (a->num_experts > 0)
        printf("  mixture of experts (%d experts, top %d, expert parallel %d, %s): each of the "
               "first stage's %d MoE layers keeps per micro-batch, beside the above, %.2f MB "
               "with a balanced routing, at most %.2f MB (%s; docs/MOE.md, \"Memory\")\n",
               a->num_experts, a->moe_router_topk, a->expert_model_parallel_size,
               a->moe_token_dispatcher_type, m->moe_layers_first_stage,
               mb(m->moe_layer_kept_balanced), mb(m->moe_layer_kept_bound),
               a->moe_expert_capacity_factor >= 0.0f ? "every expert at its capacity"
                                                     : "every token of every expert-parallel "
                                                       "rank routed to one rank's experts");
    size_t rows = theoretical_megadlm_logits_rows(a);
    /* the rows a rank holds: b x s / CP, s the model's positions (a masked-diffusion
     * sequence's padded length where that is longer) */
    int cp = a->context_parallel_size > 1 ? a->context_parallel_size : 1;
    size_t N = (size_t)a->micro_batch_size * (size_t)(difflm_model_length(a) / cp);
    printf("  of which logits %.2f MB per micro-batch on the last stage: %zu of the %zu rows x "
           "%d vocabulary columns (",
           mb((double)theoretical_megadlm_logits_bytes(a)), rows, N,
           a->padded_vocab_size / a->tensor_model_parallel_size);
    if (difflm_logits_in_chunks(a))
        printf("masked diffusion: the loss-weighted rows in chunks of at most %d, their "
               "backward fused into forward)\n", GPT_HEAD_CHUNK_ROWS);
    else
        printf("every row, kept from forward to backward)\n");
    print_totals(a, m);
}

static cJSON *report_json(const megadlm_args *a, const theoretical_memory *m) {
    cJSON *o = cJSON_CreateObject();
    JSON_ADD(o, JNUM("weights_and_optimizer_bytes", m->weight_and_optimizer_bytes),
             JNUM("activation_bytes", m->activation_bytes), JNUM("total_bytes", m->total_bytes),
             JNUM("parameters", m->parameters),
             JNUM("parameters_most_loaded_rank", m->parameters_most_loaded_shard),
             JNUM("bytes_per_parameter", m->bytes_per_parameter));
    cJSON *rows = cJSON_AddObjectToObject(o, "per_layer_activation_bytes");
    cJSON *mrows = cJSON_CreateObject();
    for (int r = 0; r < TM_NUM_ROWS; r++) {
        cJSON_AddNumberToObject(rows, TM_ROW_KEYS[r], m->per_layer[r]);
        cJSON_AddNumberToObject(mrows, TM_ROW_KEYS[r], m->per_layer_megadlm[r]);
    }
    JSON_ADD(o, JNUM("per_layer_activation_bytes_this_configuration", m->per_layer_activation_bytes),
             JNUM("per_layer_saved_bytes_megadlm", m->per_layer_saved_bytes_megadlm));
    cJSON_AddItemToObject(o, "per_layer_saved_bytes_megadlm_by_configuration", mrows);
    JSON_ADD(o, JNUM("model_flops_per_iteration", m->model_flops_per_iteration),
             JNUM("hardware_flops_per_iteration", m->hardware_flops_per_iteration),
             JNUM("first_stage_layers", m->stage_layers),
             JNUM("moe_layers_first_stage", m->moe_layers_first_stage),
             JNUM("moe_layer_kept_bytes_balanced", m->moe_layer_kept_balanced),
             JNUM("moe_layer_kept_bytes_bound", m->moe_layer_kept_bound),
             JNUM("moe_layers_kept_per_microbatch", m->moe_layers_kept_per_microbatch),
             JNUM("moe_recompute_states", m->moe_recompute_states),
             JNUM("moe_bytes_bound", m->moe_bytes_bound),
             JNUM("moe_bytes_balanced", m->moe_bytes_balanced),
             JNUM("moe_expert_optimizer_bytes", m->moe_expert_optimizer_bytes),
             JNUM("total_bytes_moe_bound",
                  m->total_bytes + m->moe_expert_optimizer_bytes + m->moe_bytes_bound),
             JNUM("total_bytes_moe_balanced",
                  m->total_bytes + m->moe_expert_optimizer_bytes + m->moe_bytes_balanced),
             JNUM("num_microbatches", m->num_microbatches),
             JNUM("in_flight_microbatches", m->in_flight_microbatches),
             JNUM("tensor_model_parallel_size", a->tensor_model_parallel_size),
             JNUM("pipeline_model_parallel_size", a->pipeline_model_parallel_size),
             JNUM("context_parallel_size", a->context_parallel_size),
             JNUM("data_parallel_size", a->data_parallel_size), JNUM("world_size", a->world_size));
    /* Megatron's own formula, always (null activation where Megatron computes none) */
    megatron_memory_report r;
    megatron_memory_compute(a, &r);
    char why[512];
    megatron_memory_why(a, &r, why, sizeof why);
    cJSON *mg = cJSON_AddObjectToObject(o, "megatron_formula");
    JSON_ADD(mg, JNUM("weights_and_optimizer_bytes", r.weight_and_optimizer_bytes),
             JNUM("parameters", r.parameters),
             JNUM("parameters_most_loaded_rank", r.parameters_most_loaded_shard),
             JNUM("bytes_per_parameter", r.bytes_per_parameter));
    if (r.has_activation) {
        JSON_ADD(mg, JNUM("activation_bytes", r.activation_bytes),
                 JNUM("total_bytes", r.total_bytes));
    } else {
        cJSON_AddNullToObject(mg, "activation_bytes");
        cJSON_AddNullToObject(mg, "total_bytes");
    }
    cJSON_AddBoolToObject(mg, "differs", megatron_memory_differs(m, &r));
    cJSON_AddStringToObject(mg, "why", why);
    theoretical_megadlm_bytes g = theoretical_megadlm(a);
    cJSON *t = cJSON_AddObjectToObject(o, "megadlm_train_bytes");
    JSON_ADD(t, JNUM("parameters", g.parameters), JNUM("gradients", g.gradients),
             JNUM("optimizer", g.optimizer), JNUM("saved_activations", g.saved_activations),
             JNUM("logits", theoretical_megadlm_logits_bytes(a)),
             JNUM("logits_rows", theoretical_megadlm_logits_rows(a)),
             JNUM("moe_bound", g.moe_bound), JNUM("moe_balanced", g.moe_balanced));
    /* the most loaded stage with the schedule's stores: `megadlm plan`'s megadlm account */
    theoretical_megadlm_peak pk = theoretical_megadlm_most_loaded(a);
    cJSON *most = cJSON_AddObjectToObject(t, "most_loaded_stage");
    JSON_ADD(most, JNUM("pipeline_rank", pk.pp_rank), JNUM("total_bytes_bound", pk.bound),
             JNUM("total_bytes_balanced", pk.balanced), JNUM("moe_bound", pk.bytes.moe_bound),
             JNUM("saved_activations", pk.bytes.saved_activations));
    return o;
}

/* After args_parse printed the shared flag table for "memory". */
static void print_memory_help(void) {
    printf("\n`megadlm memory` takes train's flags (--train-iters, --lr and the data source may "
           "be left out)\nand prints the theoretical memory of the most loaded rank, Table 2 of "
           "Korthikanti et al. 2022\nand the FLOPs per iteration, without building the model "
           "(see docs/MEMORY.md).\n");
    printf("  %-44s %s\n", "--json", "Print one JSON object (bytes and FLOPs) instead.");
}

int memory_main(int argc, char **argv) {
    /* --json is memory's own flag: take it out before the shared parser */
    char **av = malloc(sizeof(char *) * (size_t)(argc + 1));
    if (!av) return 1;
    int ac = 0, json = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        av[ac++] = argv[i];
    }
    av[ac] = NULL;
    av[0] = "memory";

    megadlm_args a;
    args_defaults(&a);
    char err[1024];
    int rc = args_parse(&a, ac, av, err, sizeof(err));
    free(av);
    if (rc == 1) {
        print_memory_help();
        return 0;
    }
    if (rc == 0) {
        /* what only training needs: not used here */
        if (isnan(a.lr)) a.lr = a.min_lr;
        if (a.train_iters == 0 && a.train_samples == 0) a.train_iters = INT_MAX;
        if (!a.mock_data && a.num_data_paths == 0) a.mock_data = 1;
    }
    if (rc < 0 || args_validate(&a, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        args_free(&a);
        return 2;
    }
    theoretical_memory m;
    theoretical_memory_compute(&a, &m);
    if (json) {
        cJSON *o = report_json(&a, &m);
        char *s = cJSON_Print(o);
        printf("%s\n", s);
        free(s);
        cJSON_Delete(o);
    } else {
        print_report(&a, &m);
    }
    args_free(&a);
    return 0;
}
