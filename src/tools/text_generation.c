#include "tools/text_generation.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/random/philox.h"
#include "core/util/alloc.h"
#include "core/util/error.h"
#include "training/checkpoint_files.h"

static int cmp_desc(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* Draws a token from logits[V] (only ids < vocab are eligible). probs and sorted are scratch
 * [V]; u in [0, 1). */
static int sample_token(const float *logits, int V, const ar_sampling *s, float *probs,
                        float *sorted, float u) {
    const int vocab = s->vocab;
    float maxl = -FLT_MAX;
    for (int i = 0; i < vocab; i++) maxl = fmaxf(maxl, logits[i] / s->temperature);
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = i < vocab ? expf(logits[i] / s->temperature - maxl) : 0.0f;
        sum += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    float threshold = 0.0f; /* keep tokens with prob >= threshold */
    if (s->top_k > 0 || s->top_p > 0.0f) {
        memcpy(sorted, probs, V * sizeof(float));
        qsort(sorted, V, sizeof(float), cmp_desc);
        if (s->top_k > 0) {
            threshold = sorted[(s->top_k < vocab ? s->top_k : vocab) - 1];
        } else {
            /* smallest set whose mass reaches top_p (the token crossing it is kept) */
            double mass = 0.0;
            for (int i = 0; i < V; i++) {
                mass += sorted[i];
                threshold = sorted[i];
                if (mass >= s->top_p) break;
            }
        }
    }
    double kept = 0.0;
    for (int i = 0; i < V; i++)
        if (probs[i] >= threshold) kept += probs[i];
    double target = u * kept, acc = 0.0;
    int last = 0;
    for (int i = 0; i < vocab; i++) {
        if (probs[i] < threshold || probs[i] == 0.0f) continue;
        acc += probs[i];
        last = i;
        if (acc > target) return i;
    }
    return last;
}

/* The state of one batch's generation. */
typedef struct {
    const inference_engine *e;
    ar_batch *bt;
    const ar_sampling *s;
    int V, T;       /* padded vocabulary, the model's seq_length */
    int P;          /* the longest prompt: every sequence's row P + step - 1 is its last */
    int *pad;       /* [B] left padding to P */
    int *done;      /* [B] ended (end of document, or a non-finite logit) */
    int32_t *grid;  /* [B, P + max_new_tokens] the left-padded sequences */
    int32_t *docs;  /* [3, B, width] the padding's layout for full forwards (B > 1) */
    uint8_t *marks; /* [B, width] rows that get logits */
    float *probs, *sorted;
} ar_run;

static int width_of(const ar_run *r) { return r->P + r->s->max_new_tokens; }

/* Logits of every sequence's last row, [B, V], for the sequences of length t (grid columns
 * [0, t)) by a full forward (first_cached: also filling the cache) or, on the cache, the row
 * t - 1 alone. */
static const float *last_logits(ar_run *r, int t, int full, int fill_cache) {
    const inference_engine *e = r->e;
    const int B = r->bt->B, W = width_of(r);
    if (!full) {
        int32_t tok[B];
        for (int b = 0; b < B; b++) tok[b] = r->grid[(size_t)b * W + t - 1];
        inference_rows ir = {.tokens = tok, .B = B, .t0 = t - 1, .n = 1, .T = t,
                             .pad = B > 1 ? r->pad : NULL};
        const float *logits;
        gpt_inference_forward(e->gi, e->ic, &ir, &logits);
        return logits;
    }
    /* the full forward reads [B, t] contiguous: the grid's columns [0, t) packed */
    int32_t *tokens = (int32_t *)r->docs + 3 * (size_t)B * W; /* scratch after the layout */
    for (int b = 0; b < B; b++)
        memcpy(tokens + (size_t)b * t, r->grid + (size_t)b * W, (size_t)t * sizeof(int32_t));
    memset(r->marks, 0, (size_t)B * t);
    for (int b = 0; b < B; b++) r->marks[(size_t)b * t + t - 1] = 1;
    gpt_batch batch = {.tokens = tokens, .B = B, .T = t, .logit_rows = r->marks,
                       .inference = fill_cache ? e->ic : NULL};
    if (B > 1) {
        int32_t *d = r->docs;
        inference_padding(&e->m->cfg, r->pad, B, t, d, d + (size_t)B * t, d + 2 * (size_t)B * t);
        batch.doc_start = d, batch.doc_end = d + (size_t)B * t;
        batch.position_ids = d + 2 * (size_t)B * t;
    }
    gpt_model_forward(e->m, e->st, &batch, (gpt_step){.seed = r->s->seed, .training = 0});
    return inference_engine_logits(e, B);
}

/* One prompt, no cache: the single-prompt sampler (the window slides past seq_length); its
 * draws numbered from step0 (the tokens the cache made before it). */
static int generate_one(ar_run *r, int step0, char *err, size_t errlen) {
    const ar_sampling *s = r->s;
    int32_t *seq = r->bt->seq[0];
    size_t *len = &r->bt->len[0];
    uint32_t id = r->bt->seq_id ? (uint32_t)r->bt->seq_id[0] : 0;
    for (int step = step0; step < s->max_new_tokens; step++) {
        size_t start = *len > (size_t)r->T ? *len - r->T : 0; /* the last seq_length tokens */
        int t = (int)(*len - start);
        gpt_batch b = {.tokens = seq + start, .B = 1, .T = t};
        gpt_model_forward(r->e->m, r->e->st, &b, (gpt_step){.seed = s->seed, .training = 0});
        const float *row = inference_engine_logits(r->e, t) + (size_t)(t - 1) * r->V;
        uint32_t ctr[4] = {(uint32_t)step, id, 0, 0}, key[2] = {(uint32_t)s->seed, 0x67656e21u},
                 rnd[4];
        philox4x32_10(ctr, key, rnd);
        if (ckpt_first_nonfinite(row, (size_t)s->vocab) < (size_t)s->vocab) {
            err_set(err, errlen, "the logits of new token %d are not finite (the model's "
                                 "activations overflow)", step + 1);
            return 1;
        }
        int next = sample_token(row, r->V, s, r->probs, r->sorted, philox_to_uniform(rnd[0]));
        if (next == s->eod) break;
        seq[(*len)++] = next;
    }
    return 0;
}

/* Draws every unfinished sequence's next token from logits [B, V] and appends it. */
static int draw_all(ar_run *r, const float *logits, int step, int t, char *err, size_t errlen) {
    const int W = width_of(r);
    for (int b = 0; b < r->bt->B; b++) {
        if (r->done[b]) continue;
        const float *row = logits + (size_t)b * r->V;
        if (ckpt_first_nonfinite(row, (size_t)r->s->vocab) < (size_t)r->s->vocab) {
            err_set(err, errlen, "prompt %d: the logits of new token %d are not finite (the "
                                 "model's activations overflow)",
                    r->bt->seq_id ? r->bt->seq_id[b] : b, step + 1);
            return 1;
        }
        uint32_t id = r->bt->seq_id ? (uint32_t)r->bt->seq_id[b] : (uint32_t)b;
        uint32_t ctr[4] = {(uint32_t)step, id, 0, 0}, key[2] = {(uint32_t)r->s->seed, 0x67656e21u},
                 rnd[4];
        philox4x32_10(ctr, key, rnd);
        int next = sample_token(row, r->V, r->s, r->probs, r->sorted, philox_to_uniform(rnd[0]));
        /* the grid's column t is written either way (a finished sequence's tokens are read by
         * no one: their keys serve only themselves) */
        r->grid[(size_t)b * W + t] = next;
        if (next == r->s->eod) {
            r->done[b] = 1;
            continue;
        }
        r->bt->seq[b][r->bt->len[b]++] = next;
    }
    return 0;
}

/* The batch (or one prompt with the cache) in one grid of P + max_new_tokens <= seq_length
 * columns, or one prompt whose window slides after the cache's last column. */
static int generate_grid(ar_run *r, char *err, size_t errlen) {
    const int B = r->bt->B, W = width_of(r);
    for (int b = 0; b < B; b++) {
        size_t n = r->bt->len[b];
        r->pad[b] = r->P - (int)n;
        for (int t = 0; t < r->pad[b]; t++) r->grid[(size_t)b * W + t] = r->s->eod;
        memcpy(r->grid + (size_t)b * W + r->pad[b], r->bt->seq[b], n * sizeof(int32_t));
    }
    int all_done = 0;
    for (int step = 0; step < r->s->max_new_tokens && !all_done; step++) {
        int t = r->P + step; /* the sequences' length before this token */
        if (t > r->T) break; /* only one prompt gets here: it slides on without the cache */
        int full = !r->s->use_cache || step == 0;
        const float *logits = last_logits(r, t, full, r->s->use_cache);
        if (draw_all(r, logits, step, t, err, errlen) != 0) return 1;
        all_done = 1;
        for (int b = 0; b < B; b++) all_done &= r->done[b];
    }
    return 0;
}

int ar_generate(const inference_engine *e, ar_batch *bt, const ar_sampling *s, char *err,
                size_t errlen) {
    ar_run r = {.e = e, .bt = bt, .s = s, .V = e->m->cfg.padded_vocab_size,
                .T = e->m->cfg.seq_length};
    for (int b = 0; b < bt->B; b++)
        if ((int)bt->len[b] > r.P) r.P = (int)bt->len[b];
    r.probs = xmalloc((size_t)r.V * sizeof(float), "sampling probabilities");
    r.sorted = xmalloc((size_t)r.V * sizeof(float), "sampling probabilities");
    int rc;
    if (bt->B == 1 && (!s->use_cache || r.P >= r.T)) {
        rc = generate_one(&r, 0, err, errlen);
    } else {
        const int W = width_of(&r);
        r.pad = xcalloc((size_t)bt->B, sizeof(int), "the padding");
        r.done = xcalloc((size_t)bt->B, sizeof(int), "the finished sequences");
        r.grid = xcalloc((size_t)bt->B * W, sizeof(int32_t), "the generated tokens");
        r.docs = xcalloc(4 * (size_t)bt->B * W, sizeof(int32_t), "the padding's layout");
        r.marks = xcalloc((size_t)bt->B * W, 1, "the logit rows");
        rc = generate_grid(&r, err, errlen);
        /* one prompt past the model's length: the rest without the cache, sliding */
        int made = (int)bt->len[0] - r.P;
        if (rc == 0 && bt->B == 1 && !r.done[0] && made < s->max_new_tokens &&
            (int)bt->len[0] > r.T)
            rc = generate_one(&r, made, err, errlen);
        free(r.pad);
        free(r.done);
        free(r.grid);
        free(r.docs);
        free(r.marks);
    }
    free(r.probs);
    free(r.sorted);
    return rc;
}
