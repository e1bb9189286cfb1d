#include "core/transformer/activation_memory.h"

#include "core/transformer/transformer_block.h"

/* Row by row the table "Per layer (no recomputation)" of docs/MEMORY.md (floats). */
size_t activation_memory_layer_state_bytes(const transformer_config *c, int B, int T) {
    size_t N = (size_t)B * T, h = c->hidden_size, a = c->num_attention_heads;
    size_t g = c->num_query_groups, d = c->kv_channels, f = c->ffn_hidden_size;
    size_t Q = (size_t)tc_qkv_width(c);
    int ln = c->normalization == NORM_LAYERNORM;
    size_t floats = 0;
    floats += N * h;                          /* ln1 */
    floats += ln ? N : 0;                     /* ln1_mean */
    floats += N;                              /* ln1_rstd */
    if (c->qk_layernorm) {
        floats += N * Q;                      /* qkv_raw */
        floats += ln ? N * (a + g) : 0;       /* qk_mean */
        floats += N * (a + g);                /* qk_rstd */
    }
    floats += N * Q;                          /* qkv */
    floats += (size_t)B * a * T * T;          /* probs */
    floats += N * a * d;                      /* ctx */
    floats += N * h;                          /* res1 */
    floats += N * h;                          /* ln2 */
    floats += ln ? N : 0;                     /* ln2_mean */
    floats += N;                              /* ln2_rstd */
    floats += N * (c->swiglu ? 2 * f : f);    /* fc1 */
    floats += N * f;                          /* act */
    return 4 * floats;
}

size_t activation_memory_probs_bytes(const transformer_config *c, int B, int T) {
    return 4 * (size_t)B * c->num_attention_heads * T * T;
}

size_t activation_memory_layer_bytes(const transformer_config *c, int B, int T, int l) {
    size_t input = 4 * (size_t)B * T * c->hidden_size;
    size_t state = activation_memory_layer_state_bytes(c, B, T);
    switch (c->recompute_granularity) {
    case RECOMPUTE_NONE: return input + state;
    case RECOMPUTE_SELECTIVE: return input + state - activation_memory_probs_bytes(c, B, T);
    case RECOMPUTE_FULL:
        if (!transformer_block_checkpointed(c, l)) return input + state;
        return transformer_block_chunk_begin(c, l) == l ? input : 0; /* only a chunk's input */
    }
    return 0;
}

size_t activation_memory_recompute_workspace_bytes(const transformer_config *c, int B, int T) {
    if (c->recompute_granularity != RECOMPUTE_FULL) return 0;
    size_t slots = c->recompute_method == RECOMPUTE_UNIFORM ? c->recompute_num_layers : 1;
    size_t input = 4 * (size_t)B * T * c->hidden_size;
    return slots * activation_memory_layer_state_bytes(c, B, T) + (slots - 1) * input;
}
