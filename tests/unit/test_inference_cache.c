/* The key/value cache of generation (core/inference/): the row forward of
 * gpt_inference_wrapper.h, given the cache a full forward leaves, gives the full forward's
 * logits on its rows (to rounding: fewer GEMM rows), for every model family a user can train:
 * GPT (learned positions, LayerNorm, GELU), a masked-diffusion model (bidirectional), Llama-style
 * (RoPE, RMSNorm, SwiGLU, grouped queries, q/k norms) and that under --bf16. A causal model
 * filled one position at a time after a prefill (autoregressive decoding's KV cache) gives the
 * full forward's logits at every position. Left padding (batched prompts) changes nothing of a
 * sequence's logits: a padded batch gives the logits of each sequence run alone, unpadded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/inference/gpt_inference_wrapper.h"
#include "core/models/gpt_model.h"
#include "fixture.h"
#include "test_util.h"

enum { B = 2, T = 70 };

typedef struct {
    gpt_model *m;
    activation_store *s;
    inference_context *ic;
    gpt_inference *gi;
    int V;
} rig;

static rig rig_make(const char *flags, int packed) {
    transformer_config c = fixture_config(flags);
    c.packed_docs = packed;
    rig r;
    r.m = gpt_model_create(&c, B, GPT_MODEL_FORWARD_ONLY);
    gpt_model_init_params(r.m, 11);
    gpt_model_params_to_bf16(r.m);
    r.s = activation_store_create(r.m, 1);
    r.ic = inference_context_create(&r.m->cfg, B, T);
    r.gi = gpt_inference_create(r.m, B, T);
    r.V = c.padded_vocab_size;
    return r;
}

static void rig_free(rig *r) {
    gpt_inference_free(r->gi);
    inference_context_free(r->ic);
    activation_store_free(r->s);
    gpt_model_free(r->m);
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* Full forward of tokens [nb, t] (optionally with the padding layout), filling the cache;
 * logits of every row copied into out [nb * t, V]. */
static void full_forward(rig *r, const int32_t *tokens, int nb, int t, const int *pad,
                         float *out) {
    static int32_t ds[B * T], de[B * T], pos[B * T];
    gpt_batch b = {.tokens = tokens, .B = nb, .T = t, .inference = r->ic};
    if (pad) {
        inference_padding(&r->m->cfg, pad, nb, t, ds, de, pos);
        b.doc_start = ds, b.doc_end = de, b.position_ids = pos;
    }
    gpt_model_forward(r->m, r->s, &b, (gpt_step){.seed = 1});
    memcpy(out, r->s->logits, (size_t)nb * t * r->V * sizeof(float));
}

/* Rows [t0, t0 + n) of both sequences from the cache a full forward left: its logits. */
static void check_rows_from_full(const char *flags) {
    rig r = rig_make(flags, 0);
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7919 + 13) % 90;
    float *full = malloc((size_t)B * T * r.V * sizeof(float));
    full_forward(&r, tok, B, T, NULL, full);
    double scale = max_abs(full, (size_t)B * T * r.V);
    const int t0 = 33, n = 9;
    int32_t rows[B * n];
    for (int b = 0; b < B; b++) memcpy(rows + b * n, tok + b * T + t0, n * sizeof(int32_t));
    inference_rows ir = {.tokens = rows, .B = B, .t0 = t0, .n = n, .T = T};
    const float *lg;
    CHECK(gpt_inference_forward(r.gi, r.ic, &ir, &lg) == B * n);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++)
            for (int v = 0; v < r.V; v += 7)
                CHECK_CLOSE(lg[((size_t)b * n + i) * r.V + v],
                            full[((size_t)b * T + t0 + i) * r.V + v], 0, 2e-5 * scale);
    /* marked rows only, in order */
    uint8_t mark[B * 9];
    memset(mark, 0, sizeof mark);
    mark[2] = mark[n + 5] = 1;
    ir.logit_rows = mark;
    CHECK(gpt_inference_forward(r.gi, r.ic, &ir, &lg) == 2);
    CHECK_CLOSE(lg[7], full[((size_t)t0 + 2) * r.V + 7], 0, 2e-5 * scale);
    CHECK_CLOSE(lg[r.V + 7], full[((size_t)T + t0 + 5) * r.V + 7], 0, 2e-5 * scale);
    free(full);
    rig_free(&r);
}

/* A causal model decoded one position at a time after a prefill of 20: every position's
 * logits are the full forward's. */
static void check_incremental(const char *flags) {
    rig r = rig_make(flags, 0);
    int32_t tok[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 104729 + 5) % 90;
    float *full = malloc((size_t)B * T * r.V * sizeof(float));
    full_forward(&r, tok, B, T, NULL, full);
    double scale = max_abs(full, (size_t)B * T * r.V);
    inference_context_free(r.ic);
    r.ic = inference_context_create(&r.m->cfg, B, T); /* empty */
    int32_t rows[B * T];
    const float *lg;
    const int pre = 20;
    for (int t0 = 0, n = pre; t0 < T; t0 += n, n = 1) {
        for (int b = 0; b < B; b++) memcpy(rows + b * n, tok + b * T + t0, n * sizeof(int32_t));
        /* keys up to the last row computed: the cache past it is not filled yet */
        inference_rows ir = {.tokens = rows, .B = B, .t0 = t0, .n = n, .T = t0 + n};
        CHECK(gpt_inference_forward(r.gi, r.ic, &ir, &lg) == B * n);
        for (int b = 0; b < B; b++)
            for (int i = 0; i < n; i++)
                for (int v = 0; v < r.V; v += 5)
                    CHECK_CLOSE(lg[((size_t)b * n + i) * r.V + v],
                                full[((size_t)b * T + t0 + i) * r.V + v], 0, 2e-5 * scale);
    }
    free(full);
    rig_free(&r);
}

/* Sequence 0 left-padded by 6 in a batch with an unpadded sequence 1: each sequence's logits
 * are those of it alone, in a full forward and in the row forward. */
static void check_padding(const char *flags) {
    rig r = rig_make(flags, 1);
    enum { P = 6 };
    int32_t tok[B * T], alone[T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 31 + 3) % 90;
    for (int t = 0; t < P; t++) tok[t] = 89; /* the padding: any token */
    float *batch = malloc((size_t)B * T * r.V * sizeof(float));
    float *one = malloc((size_t)T * r.V * sizeof(float));
    int pad[B] = {P, 0};
    full_forward(&r, tok, B, T, pad, batch);
    double scale = max_abs(batch, (size_t)B * T * r.V);
    /* the rows computed again from the padded batch's cache */
    const int t0 = 40, n = T - 40;
    int32_t rows[B * (T - 40)];
    for (int b = 0; b < B; b++) memcpy(rows + b * n, tok + b * T + t0, n * sizeof(int32_t));
    inference_rows ir = {.tokens = rows, .B = B, .t0 = t0, .n = n, .T = T, .pad = pad};
    const float *lg;
    CHECK(gpt_inference_forward(r.gi, r.ic, &ir, &lg) == B * n);
    float *cached = malloc((size_t)B * n * r.V * sizeof(float));
    memcpy(cached, lg, (size_t)B * n * r.V * sizeof(float));
    for (int b = 0; b < B; b++) {
        int p = pad[b];
        memcpy(alone, tok + b * T + p, (T - p) * sizeof(int32_t));
        full_forward(&r, alone, 1, T - p, NULL, one);
        for (int t = p; t < T; t++)
            for (int v = 0; v < r.V; v += 3) {
                float want = one[(size_t)(t - p) * r.V + v];
                CHECK_CLOSE(batch[((size_t)b * T + t) * r.V + v], want, 0, 5e-5 * scale);
                if (t >= t0)
                    CHECK_CLOSE(cached[((size_t)b * n + t - t0) * r.V + v], want, 0,
                                5e-5 * scale);
            }
    }
    free(batch);
    free(one);
    free(cached);
    rig_free(&r);
}

#define SIZES "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 72 " \
              "--max-position-embeddings 80 --vocab-size 90 --make-vocab-size-divisible-by 8 "
#define GPT SIZES "--hidden-dropout 0 --attention-dropout 0"
#define DLM GPT " --model-running-mode difflm-noshift --mask-token 89"
#define LLAMA SIZES "--hidden-dropout 0 --attention-dropout 0 --position-embedding-type rope " \
                    "--normalization RMSNorm --swiglu --group-query-attention --num-query-groups 2 " \
                    "--qk-layernorm --disable-bias-linear --untie-embeddings-and-output-weights"

int main(void) {
    check_rows_from_full(GPT);
    check_rows_from_full(DLM);
    check_rows_from_full(LLAMA);
    check_rows_from_full(LLAMA " --bf16");
    check_rows_from_full(DLM " --position-embedding-type rope --bf16");
    check_incremental(GPT);
    check_incremental(LLAMA);
    check_incremental(LLAMA " --bf16");
    check_padding(GPT);
    check_padding(DLM);
    check_padding(LLAMA);
    TEST_DONE();
}
