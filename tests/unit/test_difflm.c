/* The masked-diffusion objective: the forward process (masking, p_b, weights), its determinism
 * by sample index, the weighted loss sum(m/p * CE * lm) / sum(lm) against per-token losses
 * summed here, and bidirectional attention (an early position sees a later token). */
#include <string.h>

#include "core/models/gpt_model.h"
#include "core/random/philox.h"
#include "fixture.h"
#include "test_util.h"
#include "training/difflm.h"

static void check_forward_process(void) {
    enum { L = 40, S = 200 };
    int32_t sample[L + 1], noisy[L], labels[L], noisy2[L], labels2[L];
    float lm[L], w[L], w2[L];
    for (int j = 0; j <= L; j++) sample[j] = 3 + j % 17;
    for (int j = 0; j < L; j++) lm[j] = (j % 7 == 3) ? 0.0f : 1.0f;
    double mean_fraction = 0.0;
    int ones = 0;
    for (uint64_t idx = 0; idx < S; idx++) {
        int masked = difflm_mask_sequence(sample, lm, L, 999, 42, idx, noisy, labels, w);
        int count = 0;
        for (int j = 0; j < L; j++) {
            int m = noisy[j] == 999;
            count += m;
            CHECK(labels[j] == sample[j + 1]);                  /* unshifted, in place */
            CHECK(m || noisy[j] == sample[j + 1]);
            float want = m ? (float)L / (float)masked * lm[j] : 0.0f; /* m / p * lm */
            CHECK(w[j] == want);
        }
        CHECK(masked >= 1 && count == masked);
        ones += masked == 1;
        mean_fraction += (double)masked / L;
        /* a pure function of (seed, sample index) */
        difflm_mask_sequence(sample, lm, L, 999, 42, idx, noisy2, labels2, w2);
        CHECK(memcmp(noisy, noisy2, sizeof(noisy)) == 0 && memcmp(w, w2, sizeof(w)) == 0);
    }
    /* t ~ U(0,1) per sequence: the masked fraction averages about 1/2 */
    mean_fraction /= S;
    printf("masked fraction over %d sequences: %.3f, sequences with one mask: %d\n", S,
           mean_fraction, ones);
    CHECK(mean_fraction > 0.4 && mean_fraction < 0.6);
    /* another seed gives other masks */
    difflm_mask_sequence(sample, lm, L, 999, 43, 0, noisy2, labels2, w2);
    difflm_mask_sequence(sample, lm, L, 999, 42, 0, noisy, labels, w);
    CHECK(memcmp(noisy, noisy2, sizeof(noisy)) != 0);
    /* varilen: lengths in [2, s], about P of them cut */
    int cut = 0;
    for (uint32_t k = 0; k < 2000; k++) {
        int R = difflm_length(7, k / 8, k % 8, 64, 0.25f);
        CHECK(R >= 2 && R <= 64);
        cut += R < 64;
    }
    CHECK(cut > 400 && cut < 600);
    CHECK(difflm_length(7, 1, 1, 64, 0.0f) == 64);
}

#define DIFFLM_TINY_FLAGS                                                                  \
    "--num-layers 2 --hidden-size 32 --ffn-hidden-size 64 --num-attention-heads 4 "        \
    "--seq-length 12 --max-position-embeddings 13 --vocab-size 63 "                        \
    "--make-vocab-size-divisible-by 64 --init-method-std 0.2 --hidden-dropout 0 "         \
    "--attention-dropout 0 --model-running-mode difflm-noshift --mask-token 62"
/* difflm-noshift (learned positions from 1) over 11 tokens, bidirectional or causal; padded
 * vocabulary 64 (63 tokens and the mock data's EOD) */
static transformer_config tiny(int causal) {
    return fixture_config(causal ? DIFFLM_TINY_FLAGS " --attention-mask-type causal"
                                 : DIFFLM_TINY_FLAGS " --attention-mask-type no_mask");
}

static void check_loss_and_attention(void) {
    int B = 2, T = 11, N = B * T;
    transformer_config c = tiny(0);
    gpt_model *m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    activation_store *s = activation_store_create(m, 1);
    gpt_model_init_params(m, 5);
    int32_t tok[22], lab[22];
    float w[22];
    for (int i = 0; i < N; i++) {
        tok[i] = (i * 7) % 50;
        lab[i] = (i * 3 + 1) % 50;
        w[i] = (i % 3 == 0) ? 2.5f : 0.0f;
    }
    gpt_step step = {.seed = 1, .training = 0};
    float den = 17.0f;
    gpt_batch b = {.tokens = tok, .labels = lab, .loss_mask = w, .denominator = den, .B = B,
                   .T = T};
    float loss = gpt_model_forward(m, s, &b, step);
    double want = 0.0;
    for (int i = 0; i < N; i++) want += (double)w[i] * s->losses[i];
    CHECK_CLOSE(loss, want / den, 1e-6, 0);

    /* bidirectional: changing the last token changes the first position's logits */
    float first[64];
    memcpy(first, s->logits, sizeof(first));
    tok[T - 1] = (tok[T - 1] + 1) % 50;
    gpt_batch logits_only = {.tokens = tok, .B = B, .T = T};
    gpt_model_forward(m, s, &logits_only, step);
    CHECK(memcmp(first, s->logits, sizeof(first)) != 0);
    activation_store_free(s);
    gpt_model_free(m);

    /* causal: it does not */
    c = tiny(1);
    m = gpt_model_create(&c, B, GPT_MODEL_TRAINING);
    s = activation_store_create(m, 1);
    gpt_model_init_params(m, 5);
    gpt_model_forward(m, s, &logits_only, step);
    memcpy(first, s->logits, sizeof(first));
    tok[T - 1] = (tok[T - 1] + 1) % 50;
    gpt_model_forward(m, s, &logits_only, step);
    CHECK(memcmp(first, s->logits, sizeof(first)) == 0);
    activation_store_free(s);
    gpt_model_free(m);
}

/* Sequence parallelism with a variable length: B x Lp divisible by the ranks, Lp the smallest
 * such >= L (hand-computed). */
static void check_padded_length(void) {
    CHECK(difflm_padded_length(7, 3, 1) == 7);  /* no sequence parallelism */
    CHECK(difflm_padded_length(7, 3, 2) == 8);  /* 21 -> 24 tokens */
    CHECK(difflm_padded_length(8, 3, 2) == 8);
    CHECK(difflm_padded_length(7, 2, 2) == 7);  /* 14 splits already */
    CHECK(difflm_padded_length(5, 2, 4) == 6);  /* 10 -> 12 */
    CHECK(difflm_padded_length(1, 1, 4) == 4);
    CHECK(difflm_padded_length(9, 6, 4) == 10); /* 54 -> 60 */
    /* context parallelism: a multiple of 2 CP, and B x Lp / CP divisible by the SP ranks */
    CHECK(difflm_padded_length_cp(7, 3, 2, 1) == 8);   /* CP 1: the SP rule alone */
    CHECK(difflm_padded_length_cp(13, 2, 1, 2) == 16); /* 4 chunks */
    CHECK(difflm_padded_length_cp(16, 2, 1, 2) == 16);
    CHECK(difflm_padded_length_cp(13, 2, 1, 4) == 16); /* 8 chunks */
    CHECK(difflm_padded_length_cp(9, 1, 4, 2) == 16);  /* 12: 1 x 6 not a multiple of 4 */
    /* the model's positions: seq-length, or the padded seq-length - 1 where that is longer */
    megadlm_args a;
    memset(&a, 0, sizeof a);
    snprintf(a.model_running_mode, sizeof a.model_running_mode, "difflm-noshift");
    a.micro_batch_size = 1;
    a.tensor_model_parallel_size = 1;
    a.context_parallel_size = 2;
    a.seq_length = 64;
    CHECK(difflm_model_length(&a) == 64);   /* 63 -> 64 */
    a.seq_length = 2048;
    a.context_parallel_size = 4;
    CHECK(difflm_model_length(&a) == 2048); /* 2047 -> 2048 */
    a.seq_length = 50;
    CHECK(difflm_model_length(&a) == 56);   /* 49 -> 56 = 7 x 8 */
    a.seq_length = 17;
    CHECK(difflm_model_length(&a) == 17);   /* 16 splits already */
    a.context_parallel_size = 1;
    a.tensor_model_parallel_size = 4;
    a.sequence_parallel = 1;
    a.seq_length = 10;
    CHECK(difflm_model_length(&a) == 12);   /* 9 -> 12: SP 4 */
    a.sequence_parallel = 0;
    CHECK(difflm_model_length(&a) == 10);   /* no split: seq-length */
    snprintf(a.model_running_mode, sizeof a.model_running_mode, "vanilla");
    a.context_parallel_size = 4;
    a.seq_length = 50;
    CHECK(difflm_model_length(&a) == 50);   /* not masked diffusion */
}

int main(void) {
    check_padded_length();
    check_forward_process();
    check_loss_and_attention();
    TEST_DONE();
}
