/* Evaluation tasks scored by log-likelihood (training/loglikelihood.h), with
 * lm-evaluation-harness's definitions of their requests and metrics, for `megadlm eval` and for
 * training's --use-on-the-fly-eval:
 *
 *   multiple_choice  JSONL, one example a line (HellaSwag's layout in lm-eval and llm.c):
 *                    "ctx" (or "context"): string; "endings": a non-empty array of non-empty
 *                    strings; "label": the true ending's index, an integer (or a string of
 *                    digits, as the HellaSwag dataset stores it). Each ending is a request
 *                    (context, " " + ending): lm-eval's target delimiter. acc: the ending of
 *                    highest log-likelihood is the label; acc_norm: the highest log-likelihood
 *                    / the ending's length in characters (lm-eval's completion_len =
 *                    len(choice), the delimiter not counted; characters are UTF-8 code points,
 *                    bytes for ASCII); ties go to the first. Each with lm-eval's standard error
 *                    of a mean, sqrt(sample variance / n).
 *   loglikelihood    JSONL: "context" (or "ctx"): string, "continuation": non-empty string.
 *                    Prints the summed log-likelihood, per continuation token, lm-eval's
 *                    perplexity exp(-mean over examples) and acc (is_greedy; autoregressive).
 *   perplexity       a text: a .jsonl file holds one document per line ("text"), any other
 *                    file is one document. lm-eval's loglikelihood_rolling: disjoint windows
 *                    of the tokens, each predicted once (autoregressive: the first window
 *                    after the end-of-document token, each later one after the tokens before
 *                    it, up to the model's sequence length: lm-eval's rolling windows with
 *                    context_len 1; masked diffusion: windows of seq_length - 1 tokens, the last
 *                    one conditioned on the tokens before it up to that length). word_perplexity
 *                    = exp(-ll / words), byte_perplexity = exp(-ll / UTF-8 bytes),
 *                    bits_per_byte = -ll / bytes / ln 2 (words: the pieces of a split on runs of
 *                    ASCII whitespace, Python's re.split(r"\s+") count). For a masked-diffusion
 *                    model ll is the Monte Carlo ELBO: every number is a bound.
 *
 * A task is tokenized as lm-eval's _encode_pair does: trailing whitespace of the context moves
 * to the continuation, the continuation's tokens are those of encode(context + continuation)
 * after the first len(encode(context)). An autoregressive model scores an empty context after
 * the end-of-document token. The requests are numbered in file order; under several ranks
 * request i is scored on rank i % ranks and the per-request results are summed across the
 * ranks (each slot written by one rank, the others adding 0) before any metric is computed, in
 * request order: the same numbers as one process. */
#ifndef MEGADLM_TRAINING_EVAL_TASKS_H
#define MEGADLM_TRAINING_EVAL_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/parallel_state.h"
#include "training/loglikelihood.h"
#include "training/tokenizer/tokenizer.h"

typedef enum {
    EVAL_TASK_INFER, /* from the file: .jsonl by its first record's keys, else perplexity */
    EVAL_TASK_MULTIPLE_CHOICE,
    EVAL_TASK_LOGLIKELIHOOD,
    EVAL_TASK_PERPLEXITY
} eval_task_type;

typedef struct {
    int32_t *ctx, *cont;
    int nctx, ncont;
    int example, choice;
} eval_request;

typedef struct {
    eval_task_type type;
    int num_examples;
    eval_request *req;
    int num_requests;
    int *label;          /* multiple_choice: [num_examples] */
    double *choice_chars; /* multiple_choice: [num_requests] the ending's characters */
    double words, bytes; /* perplexity: of all documents */
} eval_task;

typedef struct {
    eval_task_type type;
    int diffusion;
    int examples, requests;
    long tokens;             /* continuation tokens scored */
    double acc, acc_se, acc_norm, acc_norm_se; /* multiple_choice; loglikelihood: acc */
    double loglik, loglik_se;  /* summed; diffusion: the standard error of the sum */
    double loglik_per_token, perplexity;
    double word_perplexity, byte_perplexity, bits_per_byte, words, bytes;
    int cut;                 /* requests whose context was cut on the left */
} eval_scores;

const char *eval_task_type_name(eval_task_type t);

/* Reads task file `path` of type `type` (EVAL_TASK_INFER: from the file), its first `limit`
 * examples (documents for perplexity; 0: all), tokenized by tok into requests that fit a model
 * scoring max_tokens tokens (ll_scorer.max_tokens; diffusion: no end-of-document before an
 * empty context, windows of max_tokens). 0, or -1 with a message naming the file, line and
 * field. */
int eval_task_load(eval_task *t, const char *path, eval_task_type type, int limit,
                   const tokenizer *tok, int diffusion, int max_tokens, char *err, size_t errlen);
void eval_task_free(eval_task *t);

/* Scores the task's requests on this rank's share of `group` (request i on rank i % size; a
 * world of one without MPI), sums the results across the group and computes the metrics (every
 * rank gets them). eod: the token before an empty context (autoregressive). per_request: NULL,
 * or [t->num_requests] for every request's result. 0, or -1 with a message. */
int eval_task_run(const eval_task *t, ll_scorer *s, int eod, parallel_group group,
                  eval_scores *out, ll_result *per_request, char *err, size_t errlen);

/* The metrics of per-request results res[t->num_requests] (what eval_task_run computes after
 * the gather; a pure function of the numbers, for the tests). */
void eval_task_aggregate(const eval_task *t, const ll_result *res, int diffusion,
                         eval_scores *out);

#endif
