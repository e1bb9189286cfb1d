/* The GPT model's forward over some positions of its sequences against a key/value cache
 * (Megatron-core's GPTInferenceWrapper with a static inference context,
 * inference/model_inference_wrappers/gpt/): rows t0 .. t0 + n - 1 of each of B sequences of
 * length T run through every layer; their queries attend to all T keys (or, causal, to the
 * keys at or before them), their own keys and values stored into the cache first, the others'
 * read from it (static_context.h). The layers' arithmetic is the training forward's on fewer
 * rows: the same kernels, the same 16-bit roundings under --bf16 (transformer_layer.c), no
 * dropout; only the order of some sums differs (fewer GEMM rows), so the logits equal a full
 * forward's to rounding when the cache holds what a full forward would put there.
 *
 * Left padding (batched prompts of different lengths): sequence b's first pad[b] positions
 * hold no token; no query sees them as keys, and the learned positions count from the first
 * real token (RoPE keeps the sequence index: attention scores depend only on the difference of
 * positions, so the shift changes nothing but rounding). inference_padding lays that out as
 * the packed-document arrays a full forward takes (gpt_batch.doc_start, doc_end,
 * position_ids), so both forwards mask the same keys. */
#ifndef MEGADLM_CORE_INFERENCE_GPT_INFERENCE_WRAPPER_H
#define MEGADLM_CORE_INFERENCE_GPT_INFERENCE_WRAPPER_H

#include <stdint.h>

#include "core/inference/static_context.h"
#include "core/models/gpt_model.h"

typedef struct {
    const int32_t *tokens;     /* [B, n]: the tokens at positions t0 .. t0 + n - 1 */
    int B, t0, n;
    int T;                     /* the sequences' length (keys 0 .. T - 1) */
    const int *pad;            /* [B] left padding, or NULL: none */
    const uint8_t *logit_rows; /* [B, n] the rows that get logits, or NULL: every row */
} inference_rows;

typedef struct gpt_inference gpt_inference;

/* Workspaces for forwards of up to B sequences of max_T positions of model m (built with
 * max_batch >= B and seq_length >= max_T, without sequence or context parallelism). */
gpt_inference *gpt_inference_create(gpt_model *m, int B, int max_T);
void gpt_inference_free(gpt_inference *gi);

/* The forward of r's rows, their cache rows updated. Returns the number M of rows that got
 * logits (in order: sequence, then position); *logits then points at [M, V] (the whole padded
 * vocabulary, gathered across tensor-parallel ranks), valid until the next call. */
int gpt_inference_forward(gpt_inference *gi, inference_context *ic, const inference_rows *r,
                          const float **logits);

/* The whole vocabulary's logits [M, V] from a full forward's store (s->logits, [M, V/t] per
 * tensor-parallel rank: gathered into gi's buffer; with one rank s->logits itself). */
const float *gpt_inference_full_logits(gpt_inference *gi, const activation_store *s, int M);

/* What a sampler runs: the model and its store (full forwards), and for a cache or tensor
 * parallelism the row forward's workspaces and the cache (NULL otherwise). Megatron-core's
 * inference engine holds the same. */
typedef struct {
    gpt_model *m;
    activation_store *st;
    gpt_inference *gi;
    inference_context *ic;
} inference_engine;

/* The whole vocabulary's logits of a full forward's M rows: the store's, or gathered across
 * tensor-parallel ranks by gi. */
static inline const float *inference_engine_logits(const inference_engine *e, int M) {
    return e->gi ? gpt_inference_full_logits(e->gi, e->st, M) : e->st->logits;
}

/* The packed-document layout of left padding for B sequences of T positions ([B, T] each):
 * the padding's keys are seen by no real position, the learned positions start at the first
 * real token (cfg's position_offset there). */
void inference_padding(const transformer_config *c, const int *pad, int B, int T,
                       int32_t *doc_start, int32_t *doc_end, int32_t *position_ids);

#endif
