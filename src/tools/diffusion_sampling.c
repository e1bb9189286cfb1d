#include "tools/diffusion_sampling.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/random/philox.h"
#include "core/util/alloc.h"
#include "core/util/error.h"

/* A draw in (0, 1) (never 0, so -log u is finite) for sequence seq: kind 1 the Gumbel noise
 * of token v at a position (pos * 65536 + v), kind 2 random remasking's confidence. Sequence 0's
 * key is the one a single prompt always had. */
static double uniform01(uint64_t seed, uint32_t seq, uint32_t kind, uint32_t step, uint32_t pos) {
    const uint32_t key[2] = {(uint32_t)seed, 0x6c6c6164u ^ (seq * 0x9e3779b9u)}; /* "llad" */
    const uint32_t ctr[4] = {pos, step, kind, 0};
    uint32_t r[4];
    philox4x32_10(ctr, key, r);
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

/* Where a position's draws come from: its sequence, the round, its place after the first real
 * token. */
typedef struct {
    uint32_t seq, step, pos;
} draw_key;

/* The confidence remasking ranks the position by, from its softmax probs[vocab] and the
 * predicted token. */
static double confidence(const diffusion_sampling *ds, const double *probs, int best, draw_key k) {
    switch (ds->remasking) {
    case DLM_REMASK_RANDOM: return uniform01(ds->seed, k.seq, 2, k.step, k.pos);
    case DLM_REMASK_TOPK_MARGIN: {
        double p1 = 0.0, p2 = 0.0; /* the two largest probabilities of predictable tokens */
        for (int v = 0; v < ds->vocab; v++) {
            if (v == ds->mask_token) continue;
            if (probs[v] > p1) p2 = p1, p1 = probs[v];
            else if (probs[v] > p2) p2 = probs[v];
        }
        return p1 - p2;
    }
    case DLM_REMASK_ENTROPY: {
        double s = 0.0; /* minus the entropy: sum p log p */
        for (int v = 0; v < ds->vocab; v++)
            if (probs[v] > 0.0) s += probs[v] * log(probs[v]);
        return s;
    }
    default: return probs[best];
    }
}

/* Best token at one position and its confidence. probs and scratch are [vocab] work space. */
static int predict(const float *logits, const diffusion_sampling *ds, draw_key k, double *probs,
                   double *scratch, double *conf) {
    const int vocab = ds->vocab;
    float mx = -INFINITY;
    /* a comparison, not fmaxf: the same maximum of finite logits, and it vectorizes */
    for (int v = 0; v < vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < vocab; v++) sum += probs[v] = exp((double)logits[v] - mx);
    /* top-p filters only a draw (MegaDLMs applies it when temperature > 0) */
    const int filter = ds->temperature > 0.0f && ds->top_p > 0.0f && ds->top_p < 1.0f;
    /* the whole distribution only where it is read (the filter, Dream's confidences); LLaDA's
     * confidence reads the chosen token's probability alone: the same quotient, taken once */
    const int whole = filter || ds->remasking == DLM_REMASK_TOPK_MARGIN ||
                      ds->remasking == DLM_REMASK_ENTROPY;
    if (whole)
        for (int v = 0; v < vocab; v++) probs[v] /= sum;
    double keep = filter ? top_p_threshold(probs, vocab, ds->mask_token, ds->top_p, scratch) : 0.0;
    double best_score = -INFINITY;
    int best = -1;
    for (int v = 0; v < vocab; v++) {
        if (v == ds->mask_token || (filter && probs[v] < keep)) continue; /* never the mask */
        /* LLaDA's add_gumbel_noise: exp(logits) / (-log u)^temperature, argmax */
        double score =
            ds->temperature > 0.0f
                ? (double)logits[v] - mx -
                      ds->temperature *
                          log(-log(uniform01(ds->seed, k.seq, 1, k.step, k.pos * 65536u + v)))
                : (double)logits[v];
        if (best < 0 || score > best_score) best_score = score, best = v;
    }
    if (!whole) probs[best] /= sum;
    /* the confidences are compared in float, as the uncached sampler always did */
    *conf = (float)confidence(ds, probs, best, k);
    return best;
}

int dlm_unmask_count(const float *sorted, int n, float threshold, float factor) {
    int k = n ? 1 : 0; /* the most confident always */
    if (threshold > 0.0f)
        while (k < n && sorted[k] >= threshold) k++;
    else
        /* the (k+1)-th most confident, k from 0: c >= 1 - factor / (k + 2) */
        while (k < n && sorted[k] >= 1.0f - factor / (float)(k + 2)) k++;
    return k;
}

/* One sampling run's state. */
typedef struct {
    const inference_engine *e;
    const dlm_batch *bt;
    const diffusion_sampling *ds;
    diffusion_stats *stats;
    int total, V;
    int *pred;        /* [B, total] predicted tokens */
    float *conf;      /* [B, total] their confidences; -inf: not a candidate */
    int *cand;        /* [B x block] the round's candidates (b * total + i), in logits order */
    int candidates;
    uint8_t *marks;   /* [B, total] the rows that get logits */
    int32_t *docs;    /* [3, B, total] the padding's document layout (gpt_batch), or NULL */
    double *work;     /* predict's work space, [2 x vocab] per thread */
} run;

static int seq_of(const run *r, int b) { return r->bt->seq_id ? r->bt->seq_id[b] : b; }
static int pad_of(const run *r, int b) { return r->bt->pad ? r->bt->pad[b] : 0; }

/* The round's candidates: the still-masked positions of [lo, hi) of every sequence, in the
 * order their logits come (sequence, then position). */
static void find_candidates(run *r, int lo, int hi) {
    const int32_t *x = r->bt->x;
    r->candidates = 0;
    for (int b = 0; b < r->bt->B; b++)
        for (int i = lo; i < hi; i++) {
            size_t at = (size_t)b * r->total + i;
            r->conf[at] = -INFINITY;
            if (x[at] == r->ds->mask_token) r->cand[r->candidates++] = (int)at;
        }
}

/* A full forward of every sequence (and, with a cache, its rows into the cache): the logits of
 * the candidates, or of every position with full_logits (*by_position then 1). */
static const float *full_round(run *r, int fill_cache, int *by_position) {
    const inference_engine *e = r->e;
    const int B = r->bt->B, N = B * r->total;
    *by_position = r->ds->full_logits;
    memset(r->marks, 0, (size_t)N);
    for (int c = 0; c < r->candidates; c++) r->marks[r->cand[c]] = 1;
    gpt_batch batch = {.tokens = r->bt->x, .B = B, .T = r->total,
                       .logit_rows = r->ds->full_logits ? NULL : r->marks,
                       .inference = fill_cache ? e->ic : NULL};
    if (r->docs) {
        batch.doc_start = r->docs;
        batch.doc_end = r->docs + N;
        batch.position_ids = r->docs + 2 * (size_t)N;
    }
    gpt_model_forward(e->m, e->st, &batch, (gpt_step){.seed = r->ds->seed, .training = 0});
    r->stats->full_forwards++;
    r->stats->rows += N;
    int M = r->ds->full_logits ? N : r->candidates;
    return inference_engine_logits(e, M);
}

/* A round on the cache: rows [lo, total) (prefix) or [lo, hi) (dual) of every sequence; the
 * candidates' logits. */
static const float *cached_round(run *r, int lo, int hi) {
    const int B = r->bt->B, n = (r->ds->cache == DLM_CACHE_PREFIX ? r->total : hi) - lo;
    int32_t *tokens = (int32_t *)r->work; /* [B, n] ahead of predict's use of the work space */
    memset(r->marks, 0, (size_t)B * n);
    for (int b = 0; b < B; b++)
        memcpy(tokens + (size_t)b * n, r->bt->x + (size_t)b * r->total + lo,
               (size_t)n * sizeof(int32_t));
    for (int c = 0; c < r->candidates; c++) {
        int b = r->cand[c] / r->total, i = r->cand[c] % r->total;
        r->marks[(size_t)b * n + (i - lo)] = 1;
    }
    inference_rows ir = {.tokens = tokens, .B = B, .t0 = lo, .n = n, .T = r->total,
                         .pad = r->bt->pad, .logit_rows = r->marks};
    const float *logits;
    gpt_inference_forward(r->e->gi, r->e->ic, &ir, &logits);
    r->stats->row_forwards++;
    r->stats->rows += (long)B * n;
    return logits;
}

/* Predictions and confidences of the candidates from their logits. */
static void predict_candidates(run *r, const float *logits, int by_position, uint32_t step) {
    const diffusion_sampling *ds = r->ds;
    /* each position's prediction reads only its own logits row and draws: the rows are
     * independent, so threads share them out and the tokens do not depend on the thread count */
#pragma omp parallel for schedule(dynamic, 1)
    for (int c = 0; c < r->candidates; c++) {
        int at = r->cand[c], b = at / r->total, i = at % r->total;
        double *probs = r->work + (size_t)omp_get_thread_num() * 2 * (size_t)ds->vocab;
        size_t row = by_position ? (size_t)at : (size_t)c;
        draw_key k = {(uint32_t)seq_of(r, b), step, (uint32_t)(i - pad_of(r, b))};
        double cf;
        r->pred[at] = predict(logits + row * r->V, ds, k, probs, probs + ds->vocab, &cf);
        r->conf[at] = (float)cf;
    }
}

/* The most confident still-candidate position of sequence b in [lo, hi) (the first of equals),
 * or -1. */
static int most_confident(const run *r, int b, int lo, int hi) {
    int best = -1;
    for (int i = lo; i < hi; i++) {
        size_t at = (size_t)b * r->total + i;
        if (r->conf[at] > -INFINITY && (best < 0 || r->conf[at] > r->conf[best])) best = (int)at;
    }
    return best;
}

static int cmp_float_desc(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* How many of sequence b's candidates this round unmasks. */
static int unmask_count(const run *r, int b, int lo, int hi, int quota) {
    const diffusion_sampling *ds = r->ds;
    if (ds->threshold <= 0.0f && ds->factor <= 0.0f) return quota;
    float sorted[hi - lo];
    int n = 0;
    for (int i = lo; i < hi; i++)
        if (r->conf[(size_t)b * r->total + i] > -INFINITY)
            sorted[n++] = r->conf[(size_t)b * r->total + i];
    qsort(sorted, (size_t)n, sizeof(float), cmp_float_desc);
    return dlm_unmask_count(sorted, n, ds->threshold, ds->factor);
}

/* Unmasks, in each sequence, its count of most confident candidates of [lo, hi). */
static void unmask(run *r, int lo, int hi, int quota) {
    for (int b = 0; b < r->bt->B; b++) {
        int count = unmask_count(r, b, lo, hi, quota);
        for (int k = 0; k < count; k++) {
            int at = most_confident(r, b, lo, hi);
            if (at < 0) break;
            r->bt->x[at] = r->pred[at];
            r->conf[at] = -INFINITY;
        }
    }
}

/* Block [lo, hi): its rounds until the schedule (or, with a threshold or factor, the block)
 * is done. */
static void sample_block(run *r, int blk, int lo, int hi, int steps_per_block) {
    const diffusion_sampling *ds = r->ds;
    const int adaptive = ds->threshold > 0.0f || ds->factor > 0.0f;
    /* LLaDA's quotas give each of the first block_length rounds of a block one token or more
     * and every later round none: those rounds change nothing and are not run (a round's
     * draws are numbered by its step, so the tokens are those of running them all) */
    int rounds = adaptive ? ds->block_length
                 : steps_per_block < ds->block_length ? steps_per_block : ds->block_length;
    int masked = ds->block_length; /* the block starts fully masked */
    for (int s = 0; s < rounds; s++) {
        find_candidates(r, lo, hi);
        if (r->candidates == 0) break; /* adaptive: every sequence's block is done */
        uint32_t step = (uint32_t)(adaptive ? blk * ds->block_length + s
                                            : blk * steps_per_block + s);
        int by_position = 0;
        const float *logits = s == 0 || ds->cache == DLM_CACHE_NONE
                                  ? full_round(r, ds->cache != DLM_CACHE_NONE, &by_position)
                                  : cached_round(r, lo, hi);
        predict_candidates(r, logits, by_position, step);
        /* LLaDA's get_num_transfer_tokens: even split, remainder to the first steps */
        int quota = masked / steps_per_block + (s < masked % steps_per_block ? 1 : 0);
        unmask(r, lo, hi, quota);
    }
}

static int check_schedule(const diffusion_sampling *ds, char *err, size_t errlen) {
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
    return 0;
}

int diffusion_generate(const inference_engine *e, const dlm_batch *bt, const diffusion_sampling *ds,
                       diffusion_stats *stats, char *err, size_t errlen) {
    if (check_schedule(ds, err, errlen) != 0) return -1;
    diffusion_stats unused = {0};
    run r = {.e = e, .bt = bt, .ds = ds, .stats = stats ? stats : &unused,
             .total = bt->prompt_len + ds->gen_length, .V = e->m->cfg.padded_vocab_size};
    const size_t N = (size_t)bt->B * r.total;
    for (int b = 0; b < bt->B; b++)
        for (int i = bt->prompt_len; i < r.total; i++) bt->x[(size_t)b * r.total + i] = ds->mask_token;
    r.pred = xcalloc(N, sizeof(int), "the predicted tokens");
    r.conf = xcalloc(N, sizeof(float), "the prediction confidences");
    r.cand = xcalloc(N, sizeof(int), "the masked positions");
    r.marks = xcalloc(N, 1, "the logit rows");
    const size_t threads = (size_t)omp_get_max_threads();
    size_t work = threads * 2 * (size_t)ds->vocab;
    if (work < N) work = N; /* also the cached rounds' tokens */
    r.work = xcalloc(work, sizeof(double), "the sampling work space (2 x vocabulary per thread)");
    if (bt->pad) {
        r.docs = xcalloc(3 * N, sizeof(int32_t), "the padding's layout");
        inference_padding(&e->m->cfg, bt->pad, bt->B, r.total, r.docs, r.docs + N,
                          r.docs + 2 * N);
    }
    int blocks = ds->gen_length / ds->block_length;
    for (int blk = 0; blk < blocks; blk++) {
        int lo = bt->prompt_len + blk * ds->block_length;
        sample_block(&r, blk, lo, lo + ds->block_length, ds->steps / blocks);
    }
    free(r.pred);
    free(r.conf);
    free(r.cand);
    free(r.marks);
    free(r.work);
    free(r.docs);
    return 0;
}
