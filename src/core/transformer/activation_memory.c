#include "core/transformer/activation_memory.h"

#include "core/transformer/transformer_block.h"

/* Row by row the table "Per layer (no recomputation)" of docs/MEMORY.md (floats). */
size_t activation_memory_layer_state_bytes(const transformer_config *c, int B, int T) {
    /* N tokens; Ns = N/t under sequence parallelism; a, g, f, Q: this rank's shares */
    size_t N = (size_t)B * T, Ns = tc_tokens_local(c, (int)N), h = c->hidden_size;
    size_t a = tc_heads_local(c), g = tc_groups_local(c), d = c->kv_channels;
    size_t f = tc_ffn_local(c), Q = (size_t)tc_qkv_width_local(c);
    int ln = c->normalization == NORM_LAYERNORM;
    size_t floats = 0;
    floats += Ns * h;                         /* ln1 */
    floats += ln ? Ns : 0;                    /* ln1_mean */
    floats += Ns;                             /* ln1_rstd */
    if (c->qk_layernorm) {
        floats += N * Q;                      /* qkv_raw */
        floats += ln ? N * (a + g) : 0;       /* qk_mean */
        floats += N * (a + g);                /* qk_rstd */
    }
    floats += N * Q;                          /* qkv */
    floats += (size_t)B * a * T * T;          /* probs */
    floats += N * a * d;                      /* ctx */
    floats += Ns * h;                         /* res1 */
    floats += Ns * h;                         /* ln2 */
    floats += ln ? Ns : 0;                    /* ln2_mean */
    floats += Ns;                             /* ln2_rstd */
    floats += N * (c->swiglu ? 2 * f : f);    /* fc1 */
    floats += N * f;                          /* act */
    return 4 * floats;
}

size_t activation_memory_probs_bytes(const transformer_config *c, int B, int T) {
    return 4 * (size_t)B * tc_heads_local(c) * T * T;
}

/* A layer's input: [Ns, C]. */
static size_t input_bytes(const transformer_config *c, int B, int T) {
    return 4 * (size_t)tc_tokens_local(c, B * T) * c->hidden_size;
}

size_t activation_memory_layer_bytes(const transformer_config *c, int B, int T, int l) {
    size_t input = input_bytes(c, B, T);
    size_t state = activation_memory_layer_state_bytes(c, B, T);
    switch (c->recompute_granularity) {
    case RECOMPUTE_NONE: return input + state;
    case RECOMPUTE_SELECTIVE: return input + state - activation_memory_probs_bytes(c, B, T);
    case RECOMPUTE_FULL:
        if (!transformer_block_checkpointed(c, l)) return input + state;
        if (transformer_block_chunk_begin(c, l) != l) return 0;
        /* only a chunk's input; 1/t of it with --distribute-saved-activations */
        return c->distribute_saved_activations ? input / tc_tp(c) : input;
    }
    return 0;
}

size_t activation_memory_recompute_workspace_bytes(const transformer_config *c, int B, int T) {
    if (c->recompute_granularity != RECOMPUTE_FULL) return 0;
    size_t slots = c->recompute_method == RECOMPUTE_UNIFORM ? c->recompute_num_layers : 1;
    size_t input = input_bytes(c, B, T);
    /* with distributed chunk inputs, two whole inputs to gather into (the chunk being run and
     * the one it writes) */
    size_t gathered = c->distribute_saved_activations ? 2 * input : 0;
    return slots * activation_memory_layer_state_bytes(c, B, T) + (slots - 1) * input + gathered;
}
