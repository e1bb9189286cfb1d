/* The key/value cache of inference (Megatron-core's StaticInferenceContext,
 * inference/contexts/static_context.py): for every layer, the packed QKV rows
 * (core/kernels/qkv_layout.h) of B sequences of up to max_T positions, as the layer's attention
 * read them (after the q/k norms and RoPE; 16-bit-rounded values under --bf16). A query row
 * computed later attends to the cached keys and values of the other positions
 * (core/inference/gpt_inference_wrapper.h).
 *
 * Whole QKV rows rather than keys and values alone: the cache is then laid out as the
 * training forward's buffer, so one memcpy fills it from a full forward and the attention
 * kernel's row variant (attention_forward_rows) reads it unchanged; the query slots cost
 * NH / (NH + 2 NG) of the bytes more.
 *
 * Filled two ways: by a full forward of the model (gpt_batch.inference: each layer's attention
 * stores all T rows of every sequence), and by the wrapper's row forward (the rows it computes). */
#ifndef MEGADLM_CORE_INFERENCE_STATIC_CONTEXT_H
#define MEGADLM_CORE_INFERENCE_STATIC_CONTEXT_H

#include <stddef.h>

#include "core/transformer/transformer_config.h"

typedef struct inference_context {
    int B, max_T, layers;
    size_t row;  /* floats of a packed QKV row of this rank (tc_qkv_width_local) */
    float **qkv; /* [layers] -> [B, max_T, row] */
    size_t bytes; /* what the cache holds, for the log */
} inference_context;

/* A cache for the layers of c's model (one pipeline stage), B sequences of max_T positions. */
inference_context *inference_context_create(const transformer_config *c, int B, int max_T);
void inference_context_free(inference_context *ic);

/* Row t of sequence b of layer l. */
static inline float *inference_context_row(const inference_context *ic, int l, int b, int t) {
    return ic->qkv[l] + ((size_t)b * ic->max_T + (size_t)t) * ic->row;
}

/* Stores rows [t0, t0 + n) of each of the B sequences of layer l from src [B, n, row]. */
void inference_context_store(inference_context *ic, int layer, const float *src, int B, int t0,
                             int n);

#endif
