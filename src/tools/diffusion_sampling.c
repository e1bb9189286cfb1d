#include "tools/diffusion_sampling.h"

#include <math.h>
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

/* Best token at one position and its softmax probability (over ids < vocab). */
static int predict(const float *logits, int vocab, int mask_token, float temperature,
                   uint64_t seed, int step, int pos, float *prob) {
    float mx = -INFINITY;
    for (int v = 0; v < vocab; v++) mx = fmaxf(mx, logits[v]);
    double sum = 0.0, best_score = -INFINITY;
    int best = 0;
    for (int v = 0; v < vocab; v++) {
        double e = exp((double)logits[v] - mx);
        sum += e;
        if (v == mask_token) continue; /* never predict the mask itself */
        /* LLaDA's add_gumbel_noise: exp(logits) / (-log u)^temperature, argmax */
        double score = temperature > 0.0f
                           ? log(e) - temperature * log(-log(uniform01(seed, 1, step, pos * 65536u + v)))
                           : (double)logits[v];
        if (score > best_score) best_score = score, best = v;
    }
    *prob = (float)(exp((double)logits[best] - mx) / sum);
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
    int *pred = malloc(total * sizeof(int));
    float *conf = malloc(total * sizeof(float));
    uint8_t *rows = malloc(total); /* the positions whose logits a round reads */
    gpt_step gs = {.seed = ds->seed, .training = 0};
    int step_id = 0;
    for (int b = 0; b < blocks; b++) {
        int lo = prompt_len + b * ds->block_length, hi = lo + ds->block_length;
        int masked = ds->block_length; /* the block starts fully masked */
        for (int s = 0; s < steps_per_block; s++, step_id++) {
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
                if (x[i] != ds->mask_token) continue;
                float p;
                size_t row = ds->full_logits ? (size_t)i : (size_t)candidates;
                pred[i] = predict(st->logits + row * V, ds->vocab, ds->mask_token,
                                  ds->temperature, ds->seed, step_id, i, &p);
                conf[i] = ds->low_confidence ? p
                                             : (float)uniform01(ds->seed, 2, step_id, (uint32_t)i);
                candidates++;
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
    free(rows);
    return 0;
}
