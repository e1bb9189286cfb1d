/* The analytic count of what megadlm keeps for backward, per layer and per recompute mode, as
 * docs/MEMORY.md tables it. Pure arithmetic on the config: no allocation, so `megadlm memory`
 * can evaluate any model size. The tracked allocator's measurement of a built model must equal
 * it exactly (tests/unit/test_recompute.c). */
#ifndef MEGADLM_CORE_TRANSFORMER_ACTIVATION_MEMORY_H
#define MEGADLM_CORE_TRANSFORMER_ACTIVATION_MEMORY_H

#include <stddef.h>

#include "core/transformer/transformer_config.h"

/* Bytes of one layer's state without recomputation, its input excluded: norm outputs and
 * statistics, Q/K/V, attention probabilities, context, residual, MLP activations. */
size_t activation_memory_layer_state_bytes(const transformer_config *c, int B, int T);
/* Bytes of the attention probabilities of one layer: 4 * B * NH * T * T (T the positions a
 * rank holds; under context parallelism T x (T x CP): its queries against every key). */
size_t activation_memory_probs_bytes(const transformer_config *c, int B, int T);
/* Saved-activation bytes layer l keeps under c's recompute mode (its input included when it
 * keeps it). */
size_t activation_memory_layer_bytes(const transformer_config *c, int B, int T, int l);
/* Workspace bytes full recompute adds for its recompute slots. */
size_t activation_memory_recompute_workspace_bytes(const transformer_config *c, int B, int T);

#endif
