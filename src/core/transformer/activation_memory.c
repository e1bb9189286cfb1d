#include "core/transformer/activation_memory.h"

#include "core/transformer/layer_saved.h"
#include "core/transformer/transformer_block.h"

/* The table "Per layer (no recomputation)" of docs/MEMORY.md: the saved-tensor table that
 * also drives the allocation (layer_saved.h), with the probabilities kept. */
size_t activation_memory_layer_state_bytes(const transformer_config *c, int B, int T) {
    layer_dims d = layer_dims_of(c, B, T);
    d.probs = 1;
    return layer_saved_bytes(d);
}

size_t activation_memory_probs_bytes(const transformer_config *c, int B, int T) {
    if (tc_cp(c) > 1 && c->cp_ring) return 0; /* the ring keeps none */
    return (tc_half(c) ? 2 : 4) * (size_t)B * tc_heads_local(c) * T * ((size_t)T * tc_cp(c));
}

/* A layer's input: [Ns, C] floats (the block's fp32 buffers: a distributed chunk input). */
static size_t input_floats(const transformer_config *c, int B, int T) {
    return (size_t)tc_tokens_local(c, B * T) * c->hidden_size;
}
/* A kept layer input: in 16 bits under --bf16 / --fp16 (transformer_block.h). */
static size_t input_bytes(const transformer_config *c, int B, int T) {
    return (tc_half(c) ? 2 : 4) * input_floats(c, B, T);
}

/* Layer l's (of the config's model chunk) state: an MoE layer keeps no dense MLP tensors in
 * the table (moe/moe_layer.h allocates its own per forward); with interleaving every store's
 * layer keeps the dense ones (transformer_block.c). */
static size_t layer_state_bytes(const transformer_config *c, int B, int T, int l) {
    layer_dims d = layer_dims_of_layer(c, B, T, tc_vp(c) > 1 ? -1 : tc_layer_offset(c) + l);
    d.probs = 1;
    return layer_saved_bytes(d);
}

size_t activation_memory_layer_bytes(const transformer_config *c, int B, int T, int l) {
    size_t input = input_bytes(c, B, T);
    size_t state = layer_state_bytes(c, B, T, l);
    switch (c->recompute_granularity) {
    case RECOMPUTE_NONE: return input + state;
    case RECOMPUTE_SELECTIVE: return input + state - activation_memory_probs_bytes(c, B, T);
    case RECOMPUTE_FULL:
        if (!transformer_block_checkpointed(c, l)) return input + state;
        if (transformer_block_chunk_begin(c, l) != l) return 0;
        /* only a chunk's input; 1/t of it with --distribute-saved-activations (fp32) */
        return c->distribute_saved_activations ? 4 * input_floats(c, B, T) / tc_tp(c) : input;
    }
    return 0;
}

size_t activation_memory_recompute_workspace_bytes(const transformer_config *c, int B, int T) {
    if (c->recompute_granularity != RECOMPUTE_FULL) return 0;
    size_t slots = c->recompute_method == RECOMPUTE_UNIFORM ? c->recompute_num_layers : 1;
    size_t input = 4 * input_floats(c, B, T);
    /* with distributed chunk inputs, two whole inputs to gather into (the chunk being run and
     * the one it writes) */
    size_t gathered = c->distribute_saved_activations ? 2 * input : 0;
    return slots * activation_memory_layer_state_bytes(c, B, T) + (slots - 1) * input + gathered;
}
