#include "training/megatron_memory.h"

#include <string.h>

/* compute_weight_and_optimizer_memory: per layer 2h^2 x (attention (1 + g/a) x ad/h, MLP
 * f/h x 3/2 with SwiGLU, two norms of 2 parameters per hidden unit 2/h), the final norm
 * 2h, the embedding hV (twice when untied). */
static void weight_and_optimizer(const megadlm_args *a, megatron_memory_report *out) {
    double h = a->hidden_size, L = a->num_layers, V = a->padded_vocab_size;
    double f = a->ffn_hidden_size, heads = a->num_attention_heads;
    /* Megatron sets num_query_groups = heads without --group-query-attention; megadlm's
     * validated arguments hold the same */
    double groups = a->num_query_groups;
    double q_ratio = (double)a->kv_channels * heads / h;
    double gated = a->swiglu ? 1.5 : 1.0;
    /* MegaDLMs' MoE term: every layer's MLP x --num-experts at --ffn-hidden-size (its formula
     * knows neither --moe-layer-freq, --moe-ffn-hidden-size, the router, the shared expert nor
     * expert parallelism) */
    double experts = a->num_experts > 0 ? a->num_experts : 1.0;
    double layers = 2.0 * L * h * h *
                    ((1.0 + groups / heads) * q_ratio + (f / h) * experts * gated + 2.0 / h +
                     1.0 / (L * h));
    double embedding = h * V;
    double t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    int untied = a->untie_embeddings_and_output_weights;
    out->parameters = layers + (untied ? 2.0 : 1.0) * embedding;
    out->parameters_most_loaded_shard = (layers / p + embedding) / t;
    if (untied && p == 1) out->parameters_most_loaded_shard += embedding / t;
    out->bytes_per_parameter =
        a->use_distributed_optimizer ? 6.0 + 12.0 / a->data_parallel_size : 18.0;
    out->weight_and_optimizer_bytes = out->parameters_most_loaded_shard * out->bytes_per_parameter;
}

/* compute_activation_memory (Korthikanti et al. Table 2, SP + selective, first stage), with
 * training's num_microbatches (global / (micro x DP)). */
static double activation(const megadlm_args *a) {
    double s = a->seq_length, b = a->micro_batch_size, h = a->hidden_size;
    double f = a->ffn_hidden_size, V = a->padded_vocab_size, L = a->num_layers;
    double t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    double act = s * b * h * (18.0 + 4.0 * (f / h)) * L;
    act += 8.0 * s * b * p; /* input to the embedding, p micro-batches in flight */
    act += s * b * h * p;   /* the embedding's dropout */
    int v = a->virtual_pipeline_model_parallel_size; /* 0: Megatron's None */
    if (v > 0) {
        act *= 1.0 + (p - 1.0) / (p * v);
    } else if (p > 1) {
        double m = args_num_microbatches(a); /* validated: the division is exact */
        act *= m / p < 1.0 ? m / p : 1.0;
    }
    if (p == 1) act += s * b * h * 4.0 * (1.0 + V / h); /* output layer and CE loss */
    return act / t;
}

void megatron_memory_compute(const megadlm_args *a, megatron_memory_report *out) {
    memset(out, 0, sizeof(*out));
    weight_and_optimizer(a, out);
    /* report_theoretical_memory: "Formulae here assume sequence parallelism and selective
     * activation recomputation"; otherwise it prints the weight and optimizer alone */
    if (!a->sequence_parallel ||
        ARGS_CHOICE(a, recompute_granularity) != ARGS_RECOMPUTE_SELECTIVE)
        return;
    out->has_activation = 1;
    out->activation_bytes = activation(a);
    out->total_bytes = out->weight_and_optimizer_bytes + out->activation_bytes;
}

/* "X" as both lines print a byte count: MB to two decimals. */
static void mb2(double bytes, char *buf, size_t n) {
    snprintf(buf, n, "%.2f", bytes / TM_BYTES_PER_MB);
}

static int same_mb(double x, double y) {
    char bx[64], by[64];
    mb2(x, bx, sizeof bx);
    mb2(y, by, sizeof by);
    return strcmp(bx, by) == 0;
}

int megatron_memory_differs(const theoretical_memory *m, const megatron_memory_report *r) {
    if (!same_mb(m->weight_and_optimizer_bytes, r->weight_and_optimizer_bytes)) return 1;
    return r->has_activation && (!same_mb(m->activation_bytes, r->activation_bytes) ||
                                 !same_mb(m->total_bytes, r->total_bytes));
}

static void add_reason(char *buf, size_t n, const char *why) {
    size_t used = strlen(buf);
    if (used < n) snprintf(buf + used, n - used, "%s%s", used ? "; " : "", why);
}

void megatron_memory_why(const megadlm_args *a, const megatron_memory_report *r, char *buf,
                         size_t n) {
    buf[0] = 0;
    if (ARGS_CHOICE(a, normalization) == ARGS_NORM_RMSNORM)
        add_reason(buf, n, "it counts a bias in every RMSNorm");
    if ((a->use_custom_fsdp || a->use_torch_fsdp2) &&
        ARGS_CHOICE(a, data_parallel_sharding_strategy) != ARGS_SHARDING_OPTIM &&
        ARGS_CHOICE(a, data_parallel_sharding_strategy) != ARGS_SHARDING_NO_SHARD)
        add_reason(buf, n, "it has no FSDP sharding of gradients or parameters (6 + 12/DP bytes "
                           "per parameter)");
    if (!r->has_activation) return;
    if (a->num_query_groups != a->num_attention_heads)
        add_reason(buf, n, "its activations take K and V at the query width (no GQA)");
    if ((long long)a->kv_channels * a->num_attention_heads != a->hidden_size)
        add_reason(buf, n, "its activations take Q and the attention output at the hidden "
                           "width, not kv-channels x heads");
    if (a->swiglu) add_reason(buf, n, "its activations have no SwiGLU gate");
    if (a->context_parallel_size > 1)
        add_reason(buf, n, "its activations hold the whole sequence (no context parallelism)");
}

void megatron_memory_print_footprints(FILE *out, const megadlm_args *a,
                                      const theoretical_memory *m) {
    fprintf(out, "Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f "
                 "MB, total=%.2f MB\n",
            m->weight_and_optimizer_bytes / TM_BYTES_PER_MB, m->activation_bytes / TM_BYTES_PER_MB,
            m->total_bytes / TM_BYTES_PER_MB);
    megatron_memory_report r;
    megatron_memory_compute(a, &r);
    if (!megatron_memory_differs(m, &r)) return;
    char why[512];
    megatron_memory_why(a, &r, why, sizeof why);
    fprintf(out, "Megatron's own formula (theoretical_memory_usage.py) gives: weight and "
                 "optimizer=%.2f MB",
            r.weight_and_optimizer_bytes / TM_BYTES_PER_MB);
    if (r.has_activation)
        fprintf(out, ", activation=%.2f MB, total=%.2f MB", r.activation_bytes / TM_BYTES_PER_MB,
                r.total_bytes / TM_BYTES_PER_MB);
    fprintf(out, " (%s; megadlm's line above counts this model as it is)\n",
            why[0] ? why : "see docs/MEMORY.md");
}
