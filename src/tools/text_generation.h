/* Sampling from an autoregressive model, Megatron's text-generation semantics (its
 * inference/text_generation/sampling.py): logits / temperature, then top-k or top-p (nucleus)
 * filtering (not both), then a draw from the softmax; generation of a sequence stops at its
 * end-of-document token or after max_new_tokens.
 *
 * Without a cache every new token runs the whole sequence (its last seq_length tokens: the
 * window slides past the model's length). With the key/value cache (core/inference/) the
 * prompt runs once (prefill) and every new token runs only its own position against the
 * cached keys and values of the ones before: the logits of the uncached forward to rounding
 * (tests/unit/test_inference_cache.c). A sequence that outgrows seq_length goes on without
 * the cache, its window sliding.
 *
 * Batches: B prompts, left-padded to the longest (core/inference/gpt_inference_wrapper.h);
 * each sequence's draws are keyed by its own number, so a prompt draws the same numbers alone
 * or in a batch. One prompt without a cache runs exactly the single-prompt sampler of before. */
#ifndef MEGADLM_TOOLS_TEXT_GENERATION_H
#define MEGADLM_TOOLS_TEXT_GENERATION_H

#include <stddef.h>
#include <stdint.h>

#include "core/inference/gpt_inference_wrapper.h"

typedef struct {
    int max_new_tokens;
    float temperature; /* > 0 */
    int top_k;         /* 0: off */
    float top_p;       /* 0: off */
    uint64_t seed;
    int vocab;         /* ids >= vocab (padding) are never drawn */
    int eod;           /* the end-of-document token: a sequence ends there (not kept) */
    int use_cache;     /* prefill once, then one position a token */
} ar_sampling;

/* B sequences: seq[b] holds the prompt (len[b] tokens, at least one) with room for
 * max_new_tokens more; generation appends to it and advances len[b]. seq_id[b] numbers the
 * sequence for its draws (NULL: b). */
typedef struct {
    int32_t **seq;
    size_t *len;
    int B;
    const int *seq_id;
} ar_batch;

/* 0, or 1 with the message in err when the logits stop being finite. */
int ar_generate(const inference_engine *e, ar_batch *batch, const ar_sampling *s, char *err,
                size_t errlen);

#endif
