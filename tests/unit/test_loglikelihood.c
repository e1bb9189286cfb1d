/* The log-likelihood evaluator (training/loglikelihood.h, training/eval_tasks.h):
 *   - autoregressive: ll_score's log-likelihood (its own log-softmax of the logits, in double)
 *     equals minus the sum of the training loss terms on the same tokens (gpt_model_forward
 *     with labels and a loss mask on the continuation: loss x count), for the GPT-2-like and
 *     the Llama-like model, and with a context longer than the model (cut from the left: the
 *     loss of the last seq_length + 1 tokens); is_greedy against the logits' argmax;
 *   - masked diffusion: the draws' masks (l in 1..L, l positions, the same for the same
 *     counters, covering every l), and the estimate on a training model whose head runs in
 *     chunks (draws with more masked rows than its logits hold go through the labelled
 *     forward) equals the one of a forward-only model (every draw through the logits);
 *   - acc / acc_norm and their standard errors from hand-written log-likelihoods (lm-eval's
 *     definitions worked by hand below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/models/gpt_model.h"
#include "fixture.h"
#include "test_util.h"
#include "training/eval_tasks.h"
#include "training/loglikelihood.h"

static uint32_t lcg(uint32_t *x) { return *x = *x * 1664525u + 1013904223u; }

/* minus the training loss summed over the continuation: one labelled forward of seq[n] (the
 * last T + 1 tokens when longer) with the loss mask on the last ncont labels */
static double training_loss_sum(gpt_model *m, activation_store *st, const int32_t *seq, int n,
                                 int ncont) {
    int T = m->cfg.seq_length;
    if (n > T + 1) seq += n - (T + 1), n = T + 1;
    int32_t tok[64], lab[64];
    float w[64];
    for (int i = 0; i < n - 1; i++) {
        tok[i] = seq[i];
        lab[i] = seq[i + 1];
        w[i] = i >= n - 1 - ncont ? 1.0f : 0.0f;
    }
    gpt_batch b = {.tokens = tok, .labels = lab, .loss_mask = w, .B = 1, .T = n - 1};
    gpt_step gs = {.seed = 1, .training = 0};
    float loss = gpt_model_forward(m, st, &b, gs); /* sum(w x ce) / sum(w) */
    return -(double)loss * ncont;
}

static void check_autoregressive(const char *flags) {
    transformer_config c = fixture_config(flags);
    gpt_model *m = gpt_model_create(&c, 1, GPT_MODEL_FORWARD_ONLY);
    activation_store *st = activation_store_create(m, 1);
    gpt_model_init_params(m, 11);
    ll_scorer s;
    char err[256];
    CHECK(ll_scorer_init(&s, m, st, 0, 0, 1, 1, err, sizeof err) == 0);
    uint32_t x = 7;
    int32_t seq[40];
    for (int i = 0; i < 40; i++) seq[i] = (int32_t)(lcg(&x) >> 8) % 100;
    /* (context, continuation) lengths: short, filling the model, and a context cut */
    const int cases[][2] = {{1, 1}, {5, 6}, {4, 13}, {30, 5}, {2, 16}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int nctx = cases[k][0], ncont = cases[k][1];
        ll_result r;
        CHECK(ll_score(&s, seq, nctx, seq + nctx, ncont, 0, &r, err, sizeof err) == 0);
        double want = training_loss_sum(m, st, seq, nctx + ncont, ncont);
        CHECK_CLOSE(r.loglik, want, 1e-6, 1e-5);
        CHECK(r.cut == (nctx + ncont > c.seq_length + 1 ? nctx + ncont - c.seq_length - 1 : 0));
        CHECK(r.tokens == ncont);
    }
    /* is_greedy: a continuation of the argmax tokens is greedy, one other token is not */
    int32_t g[8] = {seq[0]};
    for (int i = 1; i < 8; i++) {
        gpt_batch b = {.tokens = g, .B = 1, .T = i};
        gpt_model_forward(m, st, &b, (gpt_step){.seed = 1});
        const float *row = st->logits + (size_t)(i - 1) * c.padded_vocab_size;
        int best = 0;
        for (int v = 1; v < c.padded_vocab_size; v++)
            if (row[v] > row[best]) best = v;
        g[i] = best;
    }
    ll_result r;
    CHECK(ll_score(&s, g, 1, g + 1, 7, 0, &r, err, sizeof err) == 0 && r.is_greedy == 1);
    g[5] = (g[5] + 1) % 100;
    CHECK(ll_score(&s, g, 1, g + 1, 7, 0, &r, err, sizeof err) == 0 && r.is_greedy == 0);
    /* a continuation longer than the model: refused */
    CHECK(ll_score(&s, seq, 1, seq + 1, c.seq_length + 1, 0, &r, err, sizeof err) == -1);
    ll_scorer_free(&s);
    activation_store_free(st);
    gpt_model_free(m);
}

static void check_masks(void) {
    enum { L = 5 };
    uint8_t mask[L], again[L];
    uint64_t keys[L];
    int seen[L + 1] = {0};
    for (uint32_t d = 0; d < 400; d++) {
        int l = ll_draw_mask(9, 3, d, L, mask, keys);
        int count = 0;
        for (int j = 0; j < L; j++) count += mask[j];
        CHECK(l >= 1 && l <= L && count == l);
        seen[l]++;
        CHECK(ll_draw_mask(9, 3, d, L, again, keys) == l && !memcmp(mask, again, L));
    }
    for (int l = 1; l <= L; l++) CHECK(seen[l] > 40); /* about 80 each */
    /* another request or seed: other masks */
    int differ = 0;
    for (uint32_t d = 0; d < 20; d++) {
        ll_draw_mask(9, 3, d, L, mask, keys);
        ll_draw_mask(9, 4, d, L, again, keys);
        differ += memcmp(mask, again, L) != 0;
    }
    CHECK(differ > 10);
}

/* The estimate on a chunked training model (draws of more than 256 masked rows through the
 * labelled forward) equals a forward-only model's. */
static void check_diffusion_paths(void) {
    enum { T = 300 };
    char flags[512];
    snprintf(flags, sizeof flags,
             "--num-layers 1 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 "
             "--seq-length %d --max-position-embeddings %d --vocab-size 63 "
             "--make-vocab-size-divisible-by 64 --init-method-std 0.2 --hidden-dropout 0 "
             "--attention-dropout 0 --model-running-mode difflm-noshift --mask-token 62 "
             "--attention-mask-type no_mask", T + 1, T + 2);
    transformer_config c = fixture_config(flags);
    gpt_model *mf = gpt_model_create(&c, 2, GPT_MODEL_FORWARD_ONLY);
    activation_store *sf = activation_store_create(mf, 1);
    gpt_model *mt = gpt_model_create(&c, 2, GPT_MODEL_TRAINING);
    mt->logits_in_chunks = 1;
    activation_store *stt = activation_store_create(mt, 1);
    CHECK(stt->logits_rows == GPT_HEAD_CHUNK_ROWS);
    gpt_model_init_params(mf, 4);
    gpt_model_init_params(mt, 4);
    int32_t seq[T];
    uint32_t x = 3;
    for (int i = 0; i < T; i++) seq[i] = (int32_t)(lcg(&x) >> 8) % 62;
    ll_scorer a, b;
    char err[256];
    CHECK(ll_scorer_init(&a, mf, sf, 1, 62, 12, 5, err, sizeof err) == 0);
    CHECK(ll_scorer_init(&b, mt, stt, 1, 62, 12, 5, err, sizeof err) == 0);
    CHECK(a.max_tokens == T);
    ll_result ra, rb;
    CHECK(ll_score(&a, seq, 10, seq + 10, T - 10, 7, &ra, err, sizeof err) == 0);
    CHECK(ll_score(&b, seq, 10, seq + 10, T - 10, 7, &rb, err, sizeof err) == 0);
    CHECK_CLOSE(rb.loglik, ra.loglik, 1e-5, 0);
    CHECK_CLOSE(rb.sem, ra.sem, 1e-4, 0);
    CHECK(ra.sem > 0);
    int big = 0; /* some draws did take the labelled path */
    uint8_t mask[T];
    uint64_t keys[T];
    for (uint32_t d = 0; d < 12; d++) big += ll_draw_mask(5, 7, d, T - 10, mask, keys) > 256;
    CHECK(big > 0 && big < 12);
    ll_scorer_free(&a);
    ll_scorer_free(&b);
    activation_store_free(sf);
    activation_store_free(stt);
    gpt_model_free(mf);
    gpt_model_free(mt);
}

/* Three examples (4, 2 and 3 endings), log-likelihoods and ending lengths chosen so that acc and
 * acc_norm differ:
 *   example 0, label 2: ll -4 -3 -5 -6, chars 2 4 10 3 -> argmax 1 (wrong); per char -2 -0.75
 *              -0.5 -2 -> 2 (right)
 *   example 1, label 0: ll -1 -1, chars 5 5 -> tie: the first, 0 (right); per char: 0 (right)
 *   example 2, label 1: ll -2 -8 -9, chars 1 20 30 -> 0 (wrong); per char -2 -0.4 -0.3 -> 2
 *              (wrong)
 * acc = 1/3, acc_norm = 2/3; lm-eval's stderr sqrt(sample variance / n): for a mean p of 3
 * zeros and ones, sqrt(p (1 - p) x 3/2 / 3) = sqrt(2/9 / 2) = 1/3 for both. */
static void check_aggregation(void) {
    const double ll[] = {-4, -3, -5, -6, -1, -1, -2, -8, -9};
    const double chars[] = {2, 4, 10, 3, 5, 5, 1, 20, 30};
    const int example[] = {0, 0, 0, 0, 1, 1, 2, 2, 2}, choice[] = {0, 1, 2, 3, 0, 1, 0, 1, 2};
    int label[] = {2, 0, 1};
    eval_request req[9];
    ll_result res[9];
    double cc[9];
    for (int i = 0; i < 9; i++) {
        req[i] = (eval_request){.example = example[i], .choice = choice[i]};
        res[i] = (ll_result){.loglik = ll[i], .tokens = 2};
        cc[i] = chars[i];
    }
    eval_task t = {.type = EVAL_TASK_MULTIPLE_CHOICE, .num_examples = 3, .req = req,
                   .num_requests = 9, .label = label, .choice_chars = cc};
    eval_scores s;
    eval_task_aggregate(&t, res, 0, &s);
    CHECK_CLOSE(s.acc, 1.0 / 3.0, 1e-12, 0);
    CHECK_CLOSE(s.acc_norm, 2.0 / 3.0, 1e-12, 0);
    CHECK_CLOSE(s.acc_se, 1.0 / 3.0, 1e-12, 0);
    CHECK_CLOSE(s.acc_norm_se, 1.0 / 3.0, 1e-12, 0);
    CHECK_CLOSE(s.loglik, -39.0, 1e-12, 0);
    CHECK(s.tokens == 18);
    /* perplexity: -ll / bytes / ln 2 bits per byte, exp(-ll / words) */
    eval_task p = {.type = EVAL_TASK_PERPLEXITY, .num_examples = 1, .req = req,
                   .num_requests = 2, .words = 3, .bytes = 12};
    eval_task_aggregate(&p, res, 0, &s);
    CHECK_CLOSE(s.bits_per_byte, 7.0 / 12.0 / log(2.0), 1e-12, 0);
    CHECK_CLOSE(s.word_perplexity, exp(7.0 / 3.0), 1e-12, 0);
    CHECK_CLOSE(s.byte_perplexity, exp(7.0 / 12.0), 1e-12, 0);
    CHECK_CLOSE(s.perplexity, exp(7.0 / 4.0), 1e-12, 0);
}

int main(void) {
    check_autoregressive("--num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                         "--seq-length 16 --max-position-embeddings 16 --vocab-size 100 "
                         "--hidden-dropout 0 --attention-dropout 0 --init-method-std 0.2");
    check_autoregressive("--num-layers 2 --hidden-size 32 --num-attention-heads 4 "
                         "--seq-length 16 --max-position-embeddings 16 --vocab-size 100 "
                         "--normalization RMSNorm --position-embedding-type rope --swiglu "
                         "--disable-bias-linear --untie-embeddings-and-output-weights "
                         "--hidden-dropout 0 --attention-dropout 0 --init-method-std 0.2");
    check_masks();
    check_diffusion_paths();
    check_aggregation();
    TEST_DONE();
}
