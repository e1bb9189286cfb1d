/* gpt_batch.loss_rows_only (the masked-diffusion head on the loss-weighted rows only, in chunks
 * of GPT_HEAD_CHUNK_ROWS with their backward fused into forward): the same loss, per-row losses
 * and gradients as the full computation (every row through the output layer, the existing
 * path), and the gradient against central finite differences of the loss (an independent check
 * of the row gather, the chunks and the scatter of the gradient). The weighted rows M cross the
 * chunk boundaries: M > 256 and not a multiple of it, M = 2 x 256, M < 256, M = 0; the rows
 * path runs on a store whose logits hold one chunk (logits_in_chunks). An evaluation forward
 * (not training) gives the same loss and leaves the gradients alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/models/gpt_model.h"
#include "fixture.h"
#include "test_util.h"

enum { B = 2, T = 300, N = B * T };

/* difflm-noshift, bidirectional, over T tokens (--seq-length T + 1); padded vocabulary 64 (63
 * tokens and the mock data's EOD) */
static transformer_config tiny(void) {
    char flags[512];
    snprintf(flags, sizeof flags,
             "--num-layers 2 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 "
             "--seq-length %d --max-position-embeddings %d --vocab-size 63 "
             "--make-vocab-size-divisible-by 64 --init-method-std 0.2 --hidden-dropout 0 "
             "--attention-dropout 0 --model-running-mode difflm-noshift --mask-token 62 "
             "--attention-mask-type no_mask",
             T + 1, T + 2);
    return fixture_config(flags);
}

static int32_t tok[N], lab[N];
static float w[N];

static gpt_batch batch(int rows_only) {
    return (gpt_batch){.tokens = tok, .labels = lab, .loss_mask = w, .denominator = 13.0f,
                       .B = B, .T = T, .loss_rows_only = rows_only, .grad_seed = 0.5f};
}

/* The weights of pattern k (their nonzero count M against the chunk of 256 rows). */
static int set_weights(int k) {
    int M = 0;
    for (int i = 0; i < N; i++) {
        if (k == 0) /* M = 280: a chunk and 24 rows */
            w[i] = (i % 3 == 0) ? 2.5f : (i % 5 == 1) ? 0.75f : 0.0f;
        else if (k == 1) /* M = 86: less than a chunk */
            w[i] = (i % 7 == 0) ? 1.5f : 0.0f;
        else /* M = 512: two chunks exactly */
            w[i] = i < 512 ? 0.5f + 0.5f * (float)(i % 3) : 0.0f;
        M += w[i] != 0.0f;
    }
    return M;
}

/* The loss and (grad != NULL) its gradient, all parameters, for one micro-batch, with
 * d(objective)/d(loss) = 0.5 (gradients of the rows path accumulate from its forward on). */
static float loss_and_grad(gpt_model *m, activation_store *s, int rows_only, float *grad) {
    gpt_step step = {.seed = 1, .training = 1};
    gpt_batch b = batch(rows_only);
    memset(m->params.grad, 0, m->params.numel * sizeof(float));
    float loss = gpt_model_forward(m, s, &b, step);
    if (!grad) return loss;
    gpt_model_backward(m, s, 0.5f);
    memcpy(grad, m->params.grad, m->params.numel * sizeof(float));
    return loss;
}

static double max_abs(const float *x, size_t n) {
    double mx = 0.0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(x[i]));
    return mx;
}

/* sf: a store for every row; s: the chunked one. */
static void check_against_full(gpt_model *m, activation_store *sf, activation_store *s,
                               int expect_M) {
    size_t P = m->params.numel;
    float *g_full = malloc(P * sizeof(float)), *g_rows = malloc(P * sizeof(float));
    static float full_losses[N];
    float l_full = loss_and_grad(m, sf, 0, g_full);
    memcpy(full_losses, sf->losses, sizeof full_losses);
    CHECK(sf->head_rows == -1);
    float l_rows = loss_and_grad(m, s, 1, g_rows);
    int M = 0;
    for (int i = 0; i < N; i++)
        if (w[i] != 0.0f) {
            CHECK(s->labels[M] == lab[i]); /* compacted in order */
            CHECK_CLOSE(s->losses[M], full_losses[i], 1e-6, 1e-6);
            M++;
        }
    CHECK(M == expect_M && s->head_rows == M); /* fewer rows went through the output layer */
    CHECK_CLOSE(l_rows, l_full, 1e-6, 0);
    double scale = max_abs(g_full, P), worst = 0.0;
    for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs(g_rows[i] - g_full[i]));
    CHECK(scale > 0.0 && worst <= 1e-5 * scale);
    /* evaluation: the loss only, the gradients untouched */
    memset(m->params.grad, 0, P * sizeof(float));
    gpt_batch b = batch(1);
    float l_eval = gpt_model_forward(m, s, &b, (gpt_step){.seed = 1, .training = 0});
    CHECK_CLOSE(l_eval, l_full, 1e-6, 0);
    CHECK(s->head_rows == M && !s->head_dln && max_abs(m->params.grad, P) == 0.0);
    free(g_full);
    free(g_rows);
}

/* d loss / d theta_i by central differences, against the rows path's gradient, on a few
 * elements of every kind of tensor the head's gradient reaches. */
static void check_finite_differences(gpt_model *m, activation_store *s) {
    size_t P = m->params.numel;
    float *g = malloc(P * sizeof(float));
    loss_and_grad(m, s, 1, g);
    const float h = 1e-2f;
    double gscale = max_abs(g, P);
    for (size_t i = 0; i < P; i += P / 23 + 1) {
        float keep = m->params.data[i];
        m->params.data[i] = keep + h;
        double up = loss_and_grad(m, s, 1, NULL);
        m->params.data[i] = keep - h;
        double down = loss_and_grad(m, s, 1, NULL);
        m->params.data[i] = keep;
        CHECK_CLOSE(g[i], 0.5 * (up - down) / (2.0 * h), 2e-2, 2e-3 * gscale); /* the seed */
    }
    free(g);
}

/* No weighted row at all: loss 0 and no gradient, without touching the logits. */
static void check_no_rows(gpt_model *m, activation_store *s) {
    size_t P = m->params.numel;
    float *g = malloc(P * sizeof(float));
    float keep[N];
    memcpy(keep, w, sizeof keep);
    memset(w, 0, sizeof w);
    CHECK(loss_and_grad(m, s, 1, g) == 0.0f && s->head_rows == 0);
    CHECK(max_abs(g, P) == 0.0);
    memcpy(w, keep, sizeof keep);
    free(g);
}

int main(void) {
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 7) % 50;
        lab[i] = (i * 3 + 1) % 50;
    }
    transformer_config c = tiny();
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *sf = activation_store_create(m, 1);
    m->logits_in_chunks = 1;
    activation_store *s = activation_store_create(m, 1);
    CHECK(sf->logits_rows == B * (T + 1) && s->logits_rows == GPT_HEAD_CHUNK_ROWS);
    gpt_model_init_params(m, 5);
    const int expect[] = {280, 86, 512};
    for (int k = 2; k >= 0; k--) {
        CHECK(set_weights(k) == expect[k]);
        check_against_full(m, sf, s, expect[k]);
    }
    check_finite_differences(m, s); /* pattern 0: a chunk and 24 rows */
    check_no_rows(m, s);
    activation_store_free(s);
    activation_store_free(sf);
    gpt_model_free(m);
    TEST_DONE();
}
