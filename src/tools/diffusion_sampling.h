/* Sampling from a masked-diffusion model the way LLaDA samples (its generate.py): the prompt is
 * followed by gen_length mask tokens, generated block by block (block_length tokens each, left
 * to right); within a block, steps/num_blocks rounds each predict every masked position and
 * unmask a share of them (the block's masked count split evenly over the rounds, the remainder
 * to the first rounds): with low_confidence remasking the positions whose predicted token has
 * the highest probability, with random remasking random ones. Temperature 0 takes the argmax;
 * above 0 the prediction is the argmax of exp(logits) / (-log u)^temperature (Gumbel noise, u
 * from the counter-based RNG), among the tokens MegaDLMs' top-p filter keeps when top_p is in
 * (0, 1) (its modeling_dlm.py generate: TopPLogitsWarper on the logits, then the temperature).
 * The mask token is never predicted. The prompt is never changed. With more rounds per block
 * than the block has tokens, the rounds after the block_length-th unmask nothing (their share
 * is 0) and are skipped: --steps beyond --gen-length costs nothing and changes no token.
 *
 * Beyond LLaDA (Fast-dLLM, training-free; docs/GENERATION.md):
 *   cache     prefix: at each block's first round a full forward also fills the key/value
 *             cache (core/inference/static_context.h); the block's later rounds run only the
 *             block and the positions after it, attending to the cached keys and values of the
 *             prompt and the finished blocks. dual: those rounds run only the block, the
 *             positions after it read from the cache as well. The first round of every block
 *             is the uncached round itself: the same call, the same logits, bit for bit.
 *   threshold unmask every masked position of the block whose confidence is >= threshold, and
 *             always the most confident one, round after round until the block is done (the
 *             fixed count and --steps no longer apply).
 *   factor    Fast-dLLM's factor rule: with the block's masked confidences sorted c1 >= c2 >=
 *             ..., unmask the first n for the largest n with c_k >= 1 - factor / (k + 1) for
 *             every k <= n (at least one).
 *   remasking Dream's topk_margin (top-1 minus top-2 probability) and entropy (minus the
 *             entropy of the prediction) as confidences beside low_confidence and random.
 *
 * Batches: B sequences of one length, each prompt left-padded to the longest (its pad[b] first
 * positions hold no token, masked as keys: core/inference/gpt_inference_wrapper.h). A
 * sequence's draws are keyed by its own number and its positions counted from its first real
 * token, so a prompt draws the same noise alone or in any batch. */
#ifndef MEGADLM_TOOLS_DIFFUSION_SAMPLING_H
#define MEGADLM_TOOLS_DIFFUSION_SAMPLING_H

#include <stdint.h>

#include "core/inference/gpt_inference_wrapper.h"
#include "core/models/gpt_model.h"

typedef enum {
    DLM_REMASK_LOW_CONFIDENCE,
    DLM_REMASK_RANDOM,
    DLM_REMASK_TOPK_MARGIN,
    DLM_REMASK_ENTROPY
} dlm_remasking;

typedef enum { DLM_CACHE_NONE, DLM_CACHE_PREFIX, DLM_CACHE_DUAL } dlm_cache;

typedef struct {
    int gen_length, steps, block_length;
    dlm_remasking remasking;
    float temperature;
    float top_p;        /* 0 = off; used only when temperature > 0 */
    float threshold;    /* > 0: Fast-dLLM's confidence threshold; 0: the fixed count */
    float factor;       /* > 0: Fast-dLLM's factor rule; 0: off */
    dlm_cache cache;
    uint64_t seed;
    int mask_token;
    int vocab;          /* ids >= vocab (padding) and the mask token are never predicted */
    int full_logits;    /* 1: logits for every position each round (as LLaDA); 0: only for the
                           still-masked positions of the current block, the only ones read
                           (the same logits there, the same draws: the same tokens) */
} diffusion_sampling;

/* What ran: model forwards over whole sequences and over rows with the cache, and the rows
 * those computed (B x T per full forward). */
typedef struct {
    long full_forwards, row_forwards, rows;
} diffusion_stats;

/* The batch: x[B, prompt_len + gen_length], each row's first prompt_len positions its
 * left-padded prompt (pad[b] padding positions, or pad NULL: none); seq_id[b] numbers the
 * sequence for its draws (NULL: b). */
typedef struct {
    int32_t *x;
    int B, prompt_len;
    const int *pad;
    const int *seq_id;
} dlm_batch;

/* How many of a round's n candidates of one sequence a threshold (> 0) or a factor (> 0)
 * unmasks, their confidences sorted[n] in descending order: at least one (when n > 0). */
int dlm_unmask_count(const float *sorted, int n, float threshold, float factor);

/* Fills the generated positions of every sequence. The model must have been built for B
 * sequences of at least that many tokens (and with packed_docs when pad is given). Returns 0,
 * or -1 with a message in err. stats may be NULL. */
int diffusion_generate(const inference_engine *e, const dlm_batch *batch, const diffusion_sampling *ds,
                       diffusion_stats *stats, char *err, size_t errlen);

#endif
