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
 * is 0) and are skipped: --steps beyond --gen-length costs nothing and changes no token. */
#ifndef MEGADLM_TOOLS_DIFFUSION_SAMPLING_H
#define MEGADLM_TOOLS_DIFFUSION_SAMPLING_H

#include <stdint.h>

#include "core/models/gpt_model.h"

typedef struct {
    int gen_length, steps, block_length;
    int low_confidence; /* 1: low_confidence remasking, 0: random */
    float temperature;
    float top_p;        /* 0 = off; used only when temperature > 0 */
    uint64_t seed;
    int mask_token;
    int vocab;          /* ids >= vocab (padding) and the mask token are never predicted */
    int full_logits;    /* 1: logits for every position each round (as LLaDA); 0: only for the
                           still-masked positions of the current block, the only ones read
                           (the same logits there, the same draws: the same tokens) */
} diffusion_sampling;

/* x[prompt_len + gen_length]: x[0 .. prompt_len) is the prompt; fills the rest, running the
 * model on the store st. The model must have been built for at least that many tokens.
 * Returns 0, or -1 with a message in err. */
int diffusion_generate(gpt_model *m, activation_store *st, int32_t *x, int prompt_len,
                       const diffusion_sampling *ds, char *err, size_t errlen);

#endif
