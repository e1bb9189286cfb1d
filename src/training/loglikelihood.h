/* The log-likelihood of a continuation given a context (lm-evaluation-harness's
 * `loglikelihood` request), for both model families, on a model that holds its parameters whole
 * (no tensor, pipeline or context parallelism):
 *
 *   - autoregressive models: exact. One forward of (context + continuation)[-(T+1):][:-1]
 *     (T = the model's sequence length; a longer context is cut from the left as lm-eval
 *     cuts it); log p = the sum over the continuation's tokens of the log-softmax of their
 *     logits row (over the padded vocabulary, in double), and is_greedy = every continuation
 *     token is its row's argmax (lm-eval's is_greedy).
 *   - masked-diffusion models (difflm-noshift): LLaDA's Monte Carlo estimate (its
 *     get_log_likelihood.py). The sequence is context + continuation (at most seq_length - 1
 *     tokens, the most the model saw in training; the context cut from the left). For each of
 *     mc_num draws d: a mask count l uniform in 1..L over the continuation's L tokens, l of
 *     its positions chosen uniformly (never the context's) take the mask token, and the draw's
 *     value is (L / l) x the sum of the masked tokens' cross-entropies. The estimate of
 *     log p is minus the mean over the draws (in expectation the ELBO, a lower bound of log p),
 *     its standard error sd(draws) / sqrt(mc_num) (sample standard deviation). What differs
 *     from LLaDA: each draw's l is drawn on its own (LLaDA spreads the l of its batch of 16
 *     draws evenly from one random start, a stratification that lowers the variance; the
 *     expectation is the same, and independent draws make the standard error the textbook
 *     one); classifier-free guidance is not implemented (LLaDA's cfg_scale = 0, its default).
 *     Draw d of request r takes its randomness from Philox4x32-10 keyed by the seed, at the
 *     counters (0, d, r, 1) for l (l = 1 + (u24 x L >> 24), u24 the top 24 bits of the first
 *     word) and (j, d, r, 2) for continuation position j's sort key (its first word): the l
 *     positions of smallest (key, j) are masked, a uniform l-subset (LLaDA's randperm). So a
 *     request's estimate depends on (seed, r, mc_num) alone, not on the rank that scores it
 *     or on how its draws are batched.
 */
#ifndef MEGADLM_TRAINING_LOGLIKELIHOOD_H
#define MEGADLM_TRAINING_LOGLIKELIHOOD_H

#include <stddef.h>
#include <stdint.h>

#include "core/models/gpt_model.h"

typedef struct {
    gpt_model *model;       /* built for at least one sequence of its seq_length */
    activation_store *store;
    int diffusion;          /* masked diffusion: the Monte Carlo estimate */
    int mask_token;
    int max_tokens;         /* the longest context + continuation one forward holds */
    int mc_num;             /* draws per request (diffusion) */
    uint64_t seed;
    /* work space, sized at init */
    int32_t *tokens, *labels;
    float *weights;
    uint8_t *marks;
    double *row_ll;
    int *row_argmax;
    uint64_t *keys;
    uint8_t *mask;
    double *draws;
} ll_scorer;

typedef struct {
    double loglik;  /* log p(continuation | context), or the estimate of its lower bound */
    double sem;     /* diffusion: the estimate's standard error; 0 for exact values */
    int is_greedy;  /* autoregressive: every continuation token is its row's argmax; diffusion 0 */
    int tokens;     /* continuation tokens */
    int cut;        /* context tokens dropped on the left to fit the model */
} ll_result;

/* A scorer on model m and store st (m's seq_length, its max_batch rows per forward: diffusion
 * batches a request's draws that many at a time). max_tokens: seq_length + 1 tokens for an
 * autoregressive model (the input is one shorter), seq_length - 1 for masked diffusion.
 * Returns 0, or -1 with a message (mc_num < 1 with diffusion). */
int ll_scorer_init(ll_scorer *s, gpt_model *m, activation_store *st, int diffusion,
                   int mask_token, int mc_num, uint64_t seed, char *err, size_t errlen);
void ll_scorer_free(ll_scorer *s);

/* Scores cont[ncont] after ctx[nctx] as request `request` (the diffusion draws' counter).
 * Autoregressive models need nctx >= 1 (lm-eval puts the end-of-document token before an
 * empty context; the caller does). 0, or -1 with a message (an empty continuation, one longer
 * than the model holds). */
int ll_score(ll_scorer *s, const int32_t *ctx, int nctx, const int32_t *cont, int ncont,
             uint32_t request, ll_result *out, char *err, size_t errlen);

/* The diffusion draw's masked positions: mask[j] = 1 for the continuation positions j (of L)
 * that draw d of request r masks under seed; returns their count l. keys[L] is work space. */
int ll_draw_mask(uint64_t seed, uint32_t request, uint32_t draw, int L, uint8_t *mask,
                 uint64_t *keys);

#endif
