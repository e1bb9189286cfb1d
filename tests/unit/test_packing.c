/* Packed documents (--reset-position-ids, --reset-attention-mask): a packed sequence's per-token
 * losses and parameter gradients equal those of its documents run one at a time (each a
 * sequence of its own: no document arrays at all, the code without packing), for causal GPT
 * with learned positions and for bidirectional masked diffusion with RoPE; documents of lengths
 * that cross the kernels' 64-row blocks (37, 90, 1, 72). Selective recomputation with packing
 * gives the gradients of the kept probabilities bit for bit. And the arrays of
 * core/datasets/packing.h on small cases computed by hand from Megatron's
 * get_ltor_masks_and_position_ids and MegaDLMs' shift by one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/datasets/packing.h"
#include "core/models/gpt_model.h"
#include "fixture.h"
#include "test_util.h"

enum { T = 200, NDOC = 4, EOD = 60 };
static const int LEN[NDOC] = {37, 90, 1, 72};

static int32_t tok[T], lab[T], pos[T], ds[T], de[T];
static float ones[T];

/* Megatron's arrays on "a b EOD c EOD EOD d": documents [0,3) [3,5) [5,6) [6,7). */
static void check_ltor_by_hand(void) {
    const int32_t t[7] = {1, 2, EOD, 3, EOD, EOD, 4};
    int32_t p[7], s[7], e[7];
    packing_ltor(t, 7, EOD, 1, 0, p, s, e);
    const int32_t P[7] = {0, 1, 2, 0, 1, 0, 0}, S[7] = {0, 0, 0, 3, 3, 5, 6},
                  E[7] = {3, 3, 3, 5, 5, 6, 7};
    for (int i = 0; i < 7; i++) CHECK(p[i] == P[i] && s[i] == S[i] && e[i] == E[i]);
    packing_ltor(t, 7, EOD, 0, 1, p, NULL, NULL); /* no reset: t + offset */
    for (int i = 0; i < 7; i++) CHECK(p[i] == i + 1);
}

/* MegaDLMs on sample "a EOD b c EOD d e f" cut at R = 7 tokens (L = 6, padded to 8): tokens
 * documents [0,2) [2,5) [5,7); their cu_seqlens after the shrink (cu < 7, then 7) {0,2,5,7},
 * after the shift by one {0,1,4,6}: the model's x = sample[1..6] in documents [0,1) [1,4) [4,6),
 * the padding 6, 7 joining the last; position ids of sample[1..6]: 1 0 1 2 0 1. */
static void check_difflm_by_hand(void) {
    const int32_t smp[8] = {1, EOD, 2, 3, EOD, 5, 6, 7};
    int32_t p[8], s[8], e[8];
    packing_difflm(smp, 6, 8, EOD, 1, p, s, e);
    const int32_t P[6] = {1, 0, 1, 2, 0, 1}, S[8] = {0, 1, 1, 1, 4, 4, 4, 4},
                  E[8] = {1, 4, 4, 4, 8, 8, 8, 8};
    for (int i = 0; i < 6; i++) CHECK(p[i] == P[i]);
    for (int i = 0; i < 8; i++) CHECK(s[i] == S[i] && e[i] == E[i]);
}

/* Loss, per-token losses and gradients of the packed sequence (docs != 0) or of its documents
 * one at a time (the same loss: the token-average over T, each document's backward weighted by
 * its share). */
static void run(gpt_model *m, activation_store *st, int docs, int use_ids, float *losses,
                float *grad) {
    gpt_step step = {.seed = 7, .training = 1};
    memset(m->params.grad, 0, m->params.numel * sizeof(float));
    if (docs) {
        gpt_batch b = {.tokens = tok, .labels = lab, .loss_mask = ones, .B = 1, .T = T,
                       .position_ids = use_ids ? pos : NULL, .doc_start = ds, .doc_end = de};
        gpt_model_forward(m, st, &b, step);
        memcpy(losses, st->losses, T * sizeof(float));
        gpt_model_backward(m, st, 1.0f);
    } else {
        for (int d = 0, at = 0; d < NDOC; at += LEN[d++]) {
            gpt_batch b = {.tokens = tok + at, .labels = lab + at, .loss_mask = ones, .B = 1,
                           .T = LEN[d]};
            gpt_model_forward(m, st, &b, step);
            memcpy(losses + at, st->losses, LEN[d] * sizeof(float));
            gpt_model_backward(m, st, (float)LEN[d] / T);
        }
    }
    memcpy(grad, m->params.grad, m->params.numel * sizeof(float));
}

static void compare(const char *what, const float *a, const float *b, size_t n, double tol) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    printf("%s: max |diff| %.3g (max |value| %.3g)\n", what, worst, scale);
    CHECK(worst <= tol * fmax(scale, 1.0));
}

/* One family: the packed sequence against its documents; with selective recomputation the
 * same gradients bit for bit. */
static void check_family(const char *name, const char *flags, int use_ids) {
    transformer_config c = fixture_config(flags);
    gpt_model *m = gpt_model_create(&c, 1, GPT_MODEL_TRAINING);
    activation_store *st = activation_store_create(m, 1);
    gpt_model_init_params(m, 11);
    size_t P = m->params.numel;
    float *g_packed = malloc(P * sizeof(float)), *g_docs = malloc(P * sizeof(float));
    float l_packed[T], l_docs[T];
    run(m, st, 1, use_ids, l_packed, g_packed);
    run(m, st, 0, use_ids, l_docs, g_docs);
    printf("%s\n", name);
    compare("  per-token losses", l_packed, l_docs, T, 1e-5);
    compare("  gradients", g_packed, g_docs, P, 1e-4);
    /* the kernel must not have attended across documents: the packed run without the bounds
     * differs (the check above can fail) */
    float l_whole[T];
    gpt_batch b = {.tokens = tok, .labels = lab, .loss_mask = ones, .B = 1, .T = T,
                   .position_ids = use_ids ? pos : NULL};
    gpt_model_forward(m, st, &b, (gpt_step){.seed = 7, .training = 1});
    memcpy(l_whole, st->losses, sizeof l_whole);
    double dmax = 0.0;
    for (int i = LEN[0]; i < T; i++) dmax = fmax(dmax, fabs(l_whole[i] - l_docs[i]));
    CHECK(dmax > 1e-3);
    activation_store_free(st);
    gpt_model_free(m);

    /* selective recompute: bitwise the gradients of the kept probabilities */
    char rflags[1024];
    snprintf(rflags, sizeof rflags, "%s --recompute-granularity selective", flags);
    transformer_config rc = fixture_config(rflags);
    gpt_model *mr = gpt_model_create(&rc, 1, GPT_MODEL_TRAINING);
    activation_store *sr = activation_store_create(mr, 1);
    gpt_model_init_params(mr, 11);
    float *g_rec = malloc(P * sizeof(float)), l_rec[T];
    run(mr, sr, 1, use_ids, l_rec, g_rec);
    CHECK(memcmp(l_rec, l_packed, sizeof l_rec) == 0);
    CHECK(memcmp(g_rec, g_packed, P * sizeof(float)) == 0);
    activation_store_free(sr);
    gpt_model_free(mr);
    free(g_packed);
    free(g_docs);
    free(g_rec);
}

#define MODEL                                                                                   \
    "--num-layers 2 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 "             \
    "--seq-length 200 --max-position-embeddings 256 --vocab-size 63 "                           \
    "--make-vocab-size-divisible-by 64 --init-method-std 0.2 --hidden-dropout 0 "               \
    "--attention-dropout 0 --reset-position-ids --reset-attention-mask "

int main(void) {
    check_ltor_by_hand();
    check_difflm_by_hand();
    srand(3);
    for (int d = 0, at = 0; d < NDOC; at += LEN[d++])
        for (int i = 0; i < LEN[d]; i++) {
            tok[at + i] = i == LEN[d] - 1 && d < NDOC - 1 ? EOD : rand() % 60;
            lab[at + i] = rand() % 60;
        }
    for (int i = 0; i < T; i++) ones[i] = 1.0f;
    /* causal GPT, learned positions: Megatron's arrays */
    packing_ltor(tok, T, EOD, 1, 0, pos, ds, de);
    check_family("GPT (causal, learned positions)", MODEL, 1);
    /* masked diffusion, bidirectional, RoPE: the documents as the kernels see them (RoPE reads
     * no position ids: relative within a document) */
    check_family("difflm-noshift (bidirectional, RoPE)",
                 MODEL "--model-running-mode difflm-noshift --mask-token 62 "
                       "--attention-mask-type no_mask --cut-off-varlen-to-seqlen "
                       "--position-embedding-type rope --normalization RMSNorm",
                 0);
    TEST_DONE();
}
