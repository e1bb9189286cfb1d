#include "training/loglikelihood.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/random/philox.h"
#include "core/util/alloc.h"
#include "core/util/error.h"

enum { STREAM_COUNT = 1, STREAM_POSITION = 2 };

static void draw_bits(uint64_t seed, uint32_t request, uint32_t draw, uint32_t j, uint32_t stream,
                      uint32_t out[4]) {
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ 0x6c6c6b21u}; /* "llk!" */
    const uint32_t ctr[4] = {j, draw, request, stream};
    philox4x32_10(ctr, key, out);
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

int ll_draw_mask(uint64_t seed, uint32_t request, uint32_t draw, int L, uint8_t *mask,
                 uint64_t *keys) {
    uint32_t r[4];
    draw_bits(seed, request, draw, 0, STREAM_COUNT, r);
    int l = 1 + (int)(((uint64_t)(r[0] >> 8) * (uint64_t)L) >> 24); /* uniform in 1..L */
    for (int j = 0; j < L; j++) {
        draw_bits(seed, request, draw, (uint32_t)j, STREAM_POSITION, r);
        keys[j] = (uint64_t)r[0] << 32 | (uint32_t)j; /* ties (equal words) by position */
    }
    qsort(keys, (size_t)L, sizeof(uint64_t), cmp_u64);
    memset(mask, 0, (size_t)L);
    for (int k = 0; k < l; k++) mask[(uint32_t)keys[k]] = 1;
    return l;
}

int ll_scorer_init(ll_scorer *s, gpt_model *m, activation_store *st, int diffusion,
                   int mask_token, int mc_num, uint64_t seed, char *err, size_t errlen) {
    if (diffusion && mc_num < 1) {
        err_set(err, errlen, "the Monte Carlo estimate needs at least one draw (mc-num %d)",
                mc_num);
        return -1;
    }
    int T = m->cfg.seq_length;
    *s = (ll_scorer){.model = m, .store = st, .diffusion = diffusion, .mask_token = mask_token,
                     .mc_num = mc_num, .seed = seed,
                     .max_tokens = diffusion ? T - 1 : T + 1};
    size_t N = (size_t)m->max_batch * T;
    s->tokens = xcalloc(N, sizeof(int32_t), "the scored tokens");
    s->labels = xcalloc(N, sizeof(int32_t), "the scored labels");
    s->weights = xcalloc(N, sizeof(float), "the scored positions");
    s->marks = xcalloc(N, 1, "the rows that get logits");
    s->row_ll = xcalloc(N, sizeof(double), "the rows' log-likelihoods");
    s->row_argmax = xcalloc(N, sizeof(int), "the rows' argmax");
    s->keys = xcalloc((size_t)T, sizeof(uint64_t), "the mask draw's keys");
    s->mask = xcalloc((size_t)T, 1, "the mask draw");
    s->draws = xcalloc(mc_num > 0 ? (size_t)mc_num : 1, sizeof(double), "the draws' values");
    return 0;
}

void ll_scorer_free(ll_scorer *s) {
    free(s->tokens);
    free(s->labels);
    free(s->weights);
    free(s->marks);
    free(s->row_ll);
    free(s->row_argmax);
    free(s->keys);
    free(s->mask);
    free(s->draws);
    memset(s, 0, sizeof *s);
}

/* log-softmax of token y in row[V], in double; *argmax: the row's first largest logit. */
static double log_softmax_at(const float *row, int V, int y, int *argmax) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    double mx = row[best], sum = 0.0;
    for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
    *argmax = best;
    return (double)row[y] - mx - log(sum);
}

/* row_ll[k] = log-softmax of token labels[k] in logits row k, row_argmax[k] the row's argmax,
 * for k < M: the rows are independent, so threads share them and the sums that follow (in row
 * order) do not depend on the thread count. */
static void rows_log_softmax(ll_scorer *s, int M, int V) {
    const float *logits = s->store->logits;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < M; k++)
        s->row_ll[k] = log_softmax_at(logits + (size_t)k * V, V, s->labels[k], &s->row_argmax[k]);
}

/* Exact: one forward of the input (all tokens but the last), logits for the last ncont rows
 * alone (they predict the continuation's tokens). */
static void score_autoregressive(ll_scorer *s, const int32_t *seq, int n, int ncont,
                                 ll_result *out) {
    gpt_model *m = s->model;
    int T = n - 1, V = m->cfg.padded_vocab_size;
    for (int i = 0; i < T; i++) s->mask[i] = i >= T - ncont;
    gpt_batch b = {.tokens = seq, .B = 1, .T = T, .logit_rows = s->mask};
    gpt_step gs = {.seed = s->seed, .training = 0};
    gpt_model_forward(m, s->store, &b, gs);
    for (int k = 0; k < ncont; k++) s->labels[k] = seq[T - ncont + k + 1];
    rows_log_softmax(s, ncont, V);
    double ll = 0.0;
    int greedy = 1;
    for (int k = 0; k < ncont; k++) {
        ll += s->row_ll[k];
        greedy &= s->row_argmax[k] == s->labels[k];
    }
    out->loglik = ll;
    out->is_greedy = greedy;
}

/* Row b of the batch: draw d's noisy sequence, its labels and masked positions (weights 1);
 * returns the draw's mask count. */
static int fill_draw(ll_scorer *s, const int32_t *seq, int n, int ncont, uint32_t request, int d,
                     int b) {
    int start = n - ncont;
    int32_t *x = s->tokens + (size_t)b * n, *y = s->labels + (size_t)b * n;
    float *w = s->weights + (size_t)b * n;
    int l = ll_draw_mask(s->seed, request, (uint32_t)d, ncont, s->mask, s->keys);
    for (int i = 0; i < n; i++) {
        int masked = i >= start && s->mask[i - start];
        x[i] = masked ? s->mask_token : seq[i];
        y[i] = seq[i]; /* no shift: each position predicts its own token */
        w[i] = masked ? 1.0f : 0.0f;
    }
    return l;
}

/* Draws [d0, d0 + B) as one forward of B rows, each draw's value into s->draws: logits for the
 * masked rows alone, their cross-entropy in double. A draw with more masked rows than the
 * store's logits hold (a masked-diffusion training model's head runs in chunks) goes alone
 * through the labelled forward, whose head takes the masked rows in chunks (B = 1). */
static void run_draws(ll_scorer *s, const int32_t *seq, int n, int ncont, int d0, int B,
                      const int *count, int labelled) {
    int V = s->model->cfg.padded_vocab_size;
    gpt_batch batch = {.tokens = s->tokens, .B = B, .T = n};
    uint8_t *marks = s->marks;
    for (int i = 0; i < B * n; i++) marks[i] = s->weights[i] != 0.0f;
    if (labelled) {
        batch.labels = s->labels;
        batch.loss_mask = s->weights;
        batch.loss_rows_only = 1;
    } else {
        batch.logit_rows = marks;
    }
    gpt_step gs = {.seed = s->seed, .training = 0};
    gpt_model_forward(s->model, s->store, &batch, gs);
    const activation_store *st = s->store;
    if (!labelled) { /* the marked rows' labels, compacted as their logits are */
        int M = 0;
        for (int i = 0; i < B * n; i++)
            if (marks[i]) s->labels[M++] = s->labels[i];
        rows_log_softmax(s, M, V);
    }
    for (int b = 0, k = 0; b < B; b++) {
        double ce = 0.0;
        for (int i = 0; i < n; i++) {
            int at = b * n + i;
            if (!marks[at]) continue;
            if (labelled)
                ce += st->head_rows >= 0 ? st->losses[k] : st->losses[at];
            else
                ce -= s->row_ll[k];
            k++;
        }
        s->draws[d0 + b] = ce * (double)ncont / (double)count[b];
    }
}

/* The draws of one request, as many per forward as the model's batch and the store's logits
 * rows allow. */
static void score_draws(ll_scorer *s, const int32_t *seq, int n, int ncont, uint32_t request) {
    int per = s->model->max_batch, cap = s->store->logits_rows;
    int count[per];
    for (int d = 0; d < s->mc_num;) {
        int B = 0, rows = 0;
        while (B < per && d + B < s->mc_num) {
            int l = fill_draw(s, seq, n, ncont, request, d + B, B);
            if (B > 0 && rows + l > cap) break; /* (row B is filled again next time) */
            count[B] = l;
            rows += l;
            B++;
            if (rows > cap) break; /* one draw alone, too many rows for the logits */
        }
        run_draws(s, seq, n, ncont, d, B, count, rows > cap);
        d += B;
    }
}

static void score_diffusion(ll_scorer *s, const int32_t *seq, int n, int ncont, uint32_t request,
                            ll_result *out) {
    score_draws(s, seq, n, ncont, request);
    double mean = 0.0, ss = 0.0;
    for (int d = 0; d < s->mc_num; d++) mean += s->draws[d];
    mean /= s->mc_num;
    for (int d = 0; d < s->mc_num; d++) ss += (s->draws[d] - mean) * (s->draws[d] - mean);
    out->loglik = -mean;
    out->sem = s->mc_num > 1 ? sqrt(ss / (s->mc_num - 1) / s->mc_num) : 0.0;
    out->is_greedy = 0;
}

int ll_score(ll_scorer *s, const int32_t *ctx, int nctx, const int32_t *cont, int ncont,
             uint32_t request, ll_result *out, char *err, size_t errlen) {
    *out = (ll_result){.tokens = ncont};
    if (ncont < 1 || nctx < 0) {
        err_set(err, errlen, "%s", ncont < 1 ? "an empty continuation (nothing to score)"
                                               : "a context of a negative length");
        return -1;
    }
    if (!s->diffusion && nctx < 1) {
        err_set(err, errlen, "an autoregressive model needs a context token before the "
                             "continuation (the end-of-document token for an empty context)");
        return -1;
    }
    int room = s->max_tokens - (s->diffusion ? 0 : 1); /* AR: one context token at least */
    if (ncont > room) {
        err_set(err, errlen, "a continuation of %d tokens: the model holds %d (%s)", ncont, room,
                s->diffusion ? "--seq-length - 1 for masked diffusion"
                             : "--seq-length, after one context token");
        return -1;
    }
    int keep = nctx + ncont > s->max_tokens ? s->max_tokens - ncont : nctx;
    out->cut = nctx - keep;
    int n = keep + ncont;
    int32_t *seq = xmalloc((size_t)n * sizeof(int32_t), "the scored sequence");
    memcpy(seq, ctx + out->cut, (size_t)keep * sizeof(int32_t));
    memcpy(seq + keep, cont, (size_t)ncont * sizeof(int32_t));
    if (s->diffusion)
        score_diffusion(s, seq, n, ncont, request, out);
    else
        score_autoregressive(s, seq, n, ncont, out);
    free(seq);
    return 0;
}
