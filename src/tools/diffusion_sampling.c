#include "core/util/alloc.h"
#include "tools/diffusion_sampling.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "core/random/philox.h"
#include "core/util/error.h"

static double uniform01(uint64_t seed, uint32_t kind, uint32_t step, uint32_t pos) {
    const uint32_t key[2] = {(uint32_t)seed, 0x6c6c6164u}; /* "llad" */
    const uint32_t ctr[4] = {pos, step, kind, 0};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
    /* in (0, 1): never 0, so -log u is finite */
    return ((double)(r[0] >> 8) + 0.5) / 16777216.0;
}

static int cmp_desc(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a < b) - (a > b);
}

/* MegaDLMs' TopPLogitsWarper (before the temperature): the smallest probability kept, so that
 * the tokens at or above it hold at least top_p of the mass (the token crossing it is kept).
 * probs[vocab] are the softmax probabilities; scratch[vocab]. The mask token, which is never
 * predicted here, is left out, so at least one other token is always kept. */
static double top_p_threshold(const double *probs, int vocab, int mask_token, float top_p,
                              double *scratch) {
    int n = 0;
    for (int v = 0; v < vocab; v++)
        if (v != mask_token) scratch[n++] = probs[v];
    qsort(scratch, (size_t)n, sizeof(double), cmp_desc);
    double mass = 0.0, threshold = scratch[0];
    for (int v = 0; v < n; v++) {
        mass += scratch[v];
        threshold = scratch[v];
        if (mass >= top_p) break;
    }
    return threshold;
}

/* Best token at one position and its softmax probability (over ids < vocab). probs and
 * scratch are [vocab] work space. */
static int predict(const float *logits, const diffusion_sampling *ds, int step, int pos,
                   double *probs, double *scratch, float *prob) {
    const int vocab = ds->vocab;
    float mx = -INFINITY;
    for (int v = 0; v < vocab; v++) mx = fmaxf(mx, logits[v]);
    double sum = 0.0;
    for (int v = 0; v < vocab; v++) sum += probs[v] = exp((double)logits[v] - mx);
    for (int v = 0; v < vocab; v++) probs[v] /= sum;
    /* top-p filters only a draw (MegaDLMs applies it when temperature > 0) */
    double keep = ds->temperature > 0.0f && ds->top_p > 0.0f && ds->top_p < 1.0f
                      ? top_p_threshold(probs, vocab, ds->mask_token, ds->top_p, scratch)
                      : 0.0;
    double best_score = -INFINITY;
    int best = -1;
    for (int v = 0; v < vocab; v++) {
        if (v == ds->mask_token || probs[v] < keep) continue; /* never predict the mask */
        /* LLaDA's add_gumbel_noise: exp(logits) / (-log u)^temperature, argmax */
        double score = ds->temperature > 0.0f
                           ? (double)logits[v] - mx -
                                 ds->temperature *
                                     log(-log(uniform01(ds->seed, 1, step, pos * 65536u + v)))
                           : (double)logits[v];
        if (best < 0 || score > best_score) best_score = score, best = v;
    }
    *prob = (float)probs[best];
    return best;
}

int diffusion_generate(gpt_model *m, activation_store *st, int32_t *x, int prompt_len,
                       const diffusion_sampling *ds, char *err, size_t errlen) {
    int total = prompt_len + ds->gen_length, V = m->cfg.padded_vocab_size;
    if (ds->gen_length % ds->block_length != 0) {
        err_set(err, errlen, "--gen-length %d is not a multiple of --block-length %d",
                ds->gen_length, ds->block_length);
        return -1;
    }
    int blocks = ds->gen_length / ds->block_length;
    if (ds->steps % blocks != 0) {
        err_set(err, errlen, "--steps %d is not a multiple of the %d blocks (--gen-length / "
                             "--block-length)", ds->steps, blocks);
        return -1;
    }
    int steps_per_block = ds->steps / blocks;
    for (int i = prompt_len; i < total; i++) x[i] = ds->mask_token;
    int *pred = xcalloc((size_t)total, sizeof(int), "the predicted tokens");
    float *conf = xcalloc((size_t)total, sizeof(float), "the prediction confidences");
    /* a round's masked positions of the block */
    int *cand = xcalloc((size_t)total, sizeof(int), "the masked positions");
    /* predict's work space, [vocab] probs and [vocab] scratch per thread */
    const int threads = omp_get_max_threads();
    double *work = xcalloc((size_t)threads * 2 * (size_t)ds->vocab, sizeof(double),
                           "the sampling work space (2 x vocabulary per thread)");
    uint8_t *rows = xcalloc((size_t)total, 1, "the logit rows"); /* the positions a round reads */
    gpt_step gs = {.seed = ds->seed, .training = 0};
    /* LLaDA's quotas give each of the first block_length rounds of a block one token or more
     * and every later round none: those rounds change nothing and are not run (a round's
     * draws are numbered by its step, so the tokens are those of running them all) */
    int rounds = steps_per_block < ds->block_length ? steps_per_block : ds->block_length;
    for (int b = 0; b < blocks; b++) {
        int lo = prompt_len + b * ds->block_length, hi = lo + ds->block_length;
        int masked = ds->block_length; /* the block starts fully masked */
        for (int s = 0; s < rounds; s++) {
            int step_id = b * steps_per_block + s;
            /* LLaDA's get_num_transfer_tokens: even split, remainder to the first steps */
            int quota = masked / steps_per_block + (s < masked % steps_per_block ? 1 : 0);
            for (int i = 0; i < total; i++)
                rows[i] = i >= lo && i < hi && x[i] == ds->mask_token;
            gpt_batch batch = {.tokens = x, .B = 1, .T = total,
                               .logit_rows = ds->full_logits ? NULL : rows};
            gpt_model_forward(m, st, &batch, gs);
            int candidates = 0;
            for (int i = lo; i < hi; i++) {
                conf[i] = -INFINITY;
                if (x[i] == ds->mask_token) cand[candidates++] = i;
            }
            /* each position's prediction reads only its own logits row and draws: the rows
             * are independent, so threads share them out and the tokens do not depend on the
             * thread count */
#pragma omp parallel for schedule(dynamic, 1)
            for (int c = 0; c < candidates; c++) {
                int i = cand[c];
                double *probs = work + (size_t)omp_get_thread_num() * 2 * (size_t)ds->vocab;
                float p;
                size_t row = ds->full_logits ? (size_t)i : (size_t)c;
                pred[i] = predict(st->logits + row * V, ds, step_id, i, probs, probs + ds->vocab,
                                  &p);
                conf[i] = ds->low_confidence ? p
                                             : (float)uniform01(ds->seed, 2, step_id, (uint32_t)i);
            }
            /* unmask the `quota` most confident masked positions of the block */
            for (int k = 0; k < quota && k < candidates; k++) {
                int best = -1;
                for (int i = lo; i < hi; i++)
                    if (x[i] == ds->mask_token && conf[i] > -INFINITY &&
                        (best < 0 || conf[i] > conf[best]))
                        best = i;
                x[best] = pred[best];
                conf[best] = -INFINITY;
            }
        }
    }
    free(pred);
    free(conf);
    free(cand);
    free(work);
    free(rows);
    return 0;
}
