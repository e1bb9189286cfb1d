/* Supervised fine-tuning: the loss masks travel with Megatron's samples (packed samples that
 * span documents, and padded one-pair samples), the mask file is checked against its tokens,
 * the autoregressive label mask, and LLaDA's diffusion SFT noising (the prompt never masked
 * over many draws; masks and weights 1 / (p A) recomputed here from the documented draws). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/datasets/gpt_data.h"
#include "core/datasets/indexed_dataset.h"
#include "core/datasets/sft_dataset.h"
#include "test_util.h"
#include "training/sft.h"

enum { PROMPT_LO = 1, RESPONSE_LO = 50, EOD = 100, VOCAB = 101, DOCS = 40 };
static char g_dir[256];

/* DOCS documents: a prompt of ids below RESPONSE_LO, a response of ids from RESPONSE_LO, then
 * the end of document (a response token): a token's id says whether it is in the response. */
static void write_sft_data(const char *prefix, int corrupt) {
    char err[512], mprefix[300];
    snprintf(mprefix, sizeof mprefix, "%s%s", prefix, SFT_MASK_SUFFIX);
    idx_builder *b = idx_builder_create(prefix, IDX_DTYPE_UINT16, err, sizeof err);
    idx_builder *m = idx_builder_create(mprefix, IDX_DTYPE_UINT8, err, sizeof err);
    CHECK(b && m);
    for (int d = 0; d < DOCS; d++) {
        int np = 1 + (d * 7) % 5, nr = 1 + (d * 3) % 6, n = np + nr + 1;
        int32_t ids[16], mask[16];
        for (int i = 0; i < n; i++) {
            ids[i] = i < np ? PROMPT_LO + (d + i) % 40 : i < n - 1 ? RESPONSE_LO + (d + i) % 40
                                                                   : EOD;
            mask[i] = i >= np;
        }
        idx_builder_add_document(b, ids, (size_t)n, err, sizeof err);
        /* corrupt: the mask of document 3 one value short */
        idx_builder_add_document(m, mask, (size_t)(corrupt && d == 3 ? n - 1 : n), err,
                                 sizeof err);
    }
    CHECK(idx_builder_finalize(b, err, sizeof err) == 0);
    CHECK(idx_builder_finalize(m, err, sizeof err) == 0);
}

static gpt_data_config sft_config(const char **paths, int padded, int pad_mask) {
    gpt_data_config c = {.num_paths = 1, .data_paths = paths, .split = "1,0,0",
                         .seq_length = 9, .seed = 1234, .vocab_size = VOCAB, .eod = EOD,
                         .num_samples = {120, 0, 0}, .sft = 1, .sft_padded = padded,
                         .sft_pad_mask = pad_mask};
    return c;
}

/* Packed: every sample's mask says exactly which of its tokens are response tokens, across
 * document boundaries. */
static void check_packed(const char *prefix) {
    const char *paths[1] = {prefix};
    gpt_data_config c = sft_config(paths, 0, 0);
    char err[1024];
    gpt_data *d = gpt_data_build(&c, NULL, err, sizeof err);
    CHECK(d != NULL);
    if (!d) return;
    int32_t tok[10], mask[10];
    int spanning = 0;
    for (uint64_t i = 0; i < gpt_data_num_samples(d, SPLIT_TRAIN); i++) {
        CHECK(gpt_data_get_sft(d, SPLIT_TRAIN, i, tok, mask, err, sizeof err) == 0);
        int eods = 0;
        for (int t = 0; t < 10; t++) {
            CHECK(mask[t] == (tok[t] >= RESPONSE_LO));
            eods += tok[t] == EOD && t < 9;
        }
        spanning += eods > 0;
    }
    CHECK(spanning > 50); /* most samples cross a document boundary */
    /* the plain reader gives the same tokens */
    int32_t tok2[10];
    CHECK(gpt_data_get(d, SPLIT_TRAIN, 5, tok2, err, sizeof err) == 0);
    gpt_data_get_sft(d, SPLIT_TRAIN, 5, tok, mask, err, sizeof err);
    CHECK(memcmp(tok, tok2, sizeof tok) == 0);
    gpt_data_free(d);
}

/* Padded: a sample is one document from its start, then end-of-document padding whose mask is
 * the given value; one epoch holds every document once. */
static void check_padded(const char *prefix, int pad_mask) {
    const char *paths[1] = {prefix};
    gpt_data_config c = sft_config(paths, 1, pad_mask);
    c.num_samples[0] = DOCS;
    char err[1024];
    gpt_data *d = gpt_data_build(&c, NULL, err, sizeof err);
    CHECK(d != NULL);
    if (!d) return;
    CHECK(gpt_data_num_samples(d, SPLIT_TRAIN) == DOCS);
    int32_t tok[10], mask[10];
    int firsts[DOCS] = {0}, distinct = 0;
    for (uint64_t i = 0; i < DOCS; i++) {
        CHECK(gpt_data_get_sft(d, SPLIT_TRAIN, i, tok, mask, err, sizeof err) == 0);
        CHECK(tok[0] < RESPONSE_LO); /* starts with its prompt */
        int end = 0;
        while (end < 10 && tok[end] != EOD) end++;
        CHECK(end < 10);
        for (int t = 0; t <= end; t++) CHECK(mask[t] == (tok[t] >= RESPONSE_LO));
        for (int t = end + 1; t < 10; t++) CHECK(tok[t] == EOD && mask[t] == pad_mask);
        /* which document: its prompt's first id and length identify it here */
        for (int k = 0; k < DOCS; k++) {
            int np = 1 + (k * 7) % 5, nr = 1 + (k * 3) % 6;
            int np_seen = 0;
            while (tok[np_seen] < RESPONSE_LO) np_seen++;
            if (tok[0] == PROMPT_LO + k % 40 && np == np_seen && end == np + nr && !firsts[k]) {
                firsts[k] = 1;
                distinct++;
                break;
            }
        }
    }
    CHECK(distinct == DOCS);
    gpt_data_free(d);
}

static void check_refusals(const char *bad_prefix) {
    const char *paths[1] = {bad_prefix};
    gpt_data_config c = sft_config(paths, 0, 0);
    char err[1024];
    gpt_data *d = gpt_data_build(&c, NULL, err, sizeof err);
    CHECK(d == NULL);
    printf("refused: %s\n", err);
    CHECK(strstr(err, "_loss_mask.idx: not the loss mask of") != NULL);
    CHECK(strstr(err, "sequence 3 holds") != NULL);
    c.mock = 1;
    gpt_data_fault fault = GPT_DATA_OK;
    d = gpt_data_build(&c, &fault, err, sizeof err);
    CHECK(d == NULL && fault == GPT_DATA_FAULT_MOCK && strstr(err, "mock data") != NULL);
}

static void check_ar_mask(void) {
    int32_t mask[5] = {0, 0, 1, 1, 1};
    float lm[4];
    CHECK(sft_ar_loss_mask(mask, 4, lm) == 3.0);
    CHECK(lm[0] == 0.0f && lm[1] == 1.0f && lm[2] == 1.0f && lm[3] == 1.0f);
}

/* LLaDA's SFT forward process, recomputed from its definition (sft.h). */
static void check_difflm(void) {
    enum { L = 24, S = 4000 };
    int32_t sample[L + 1], mask[L + 1], noisy[L], labels[L];
    float w[L];
    for (int j = 0; j <= L; j++) {
        sample[j] = 3 + j;
        mask[j] = j >= 10; /* x_j = sample[j + 1]: positions 0..8 prompt, 9..23 response */
    }
    const int A = L - 9;
    double fraction = 0.0;
    int prompt_masked = 0;
    for (uint64_t idx = 0; idx < S; idx++) {
        int masked = sft_difflm_mask_sequence(sample, mask, L, 999, 5, idx, noisy, labels, w);
        float p = (1.0f - 1e-3f) * sft_difflm_t(5, idx) + 1e-3f;
        int count = 0;
        for (int j = 0; j < L; j++) {
            int resp = j >= 9;
            int m = resp && sft_difflm_u(5, idx, j) < p;
            CHECK(labels[j] == sample[j + 1]);
            CHECK(noisy[j] == (m ? 999 : sample[j + 1]));
            CHECK(w[j] == (m ? 1.0f / (p * (float)A) : 0.0f));
            prompt_masked += !resp && noisy[j] == 999;
            count += m;
        }
        CHECK(count == masked);
        fraction += (double)masked / A;
    }
    fraction /= S;
    printf("prompt positions masked in %d draws: %d; response masked fraction %.3f\n", S,
           prompt_masked, fraction);
    CHECK(prompt_masked == 0);
    CHECK(fraction > 0.45 && fraction < 0.55); /* E[p] = 1/2 */
    /* a hand case: t of sample 0 under seed 5, weights 1 / (p * 15) on its masked positions;
     * the expected loss of per-token losses CE_j = j is sum_masked j / (p * 15) */
    sft_difflm_mask_sequence(sample, mask, L, 999, 5, 0, noisy, labels, w);
    float p = (1.0f - 1e-3f) * sft_difflm_t(5, 0) + 1e-3f;
    double loss = 0.0, want = 0.0;
    for (int j = 0; j < L; j++) {
        loss += w[j] * (double)j;
        if (noisy[j] == 999) want += (double)j / ((double)p * 15.0);
    }
    CHECK_CLOSE(loss, want, 1e-6, 0.0);
    /* a sequence of prompt tokens only: nothing masked, no weight */
    for (int j = 0; j <= L; j++) mask[j] = 0;
    CHECK(sft_difflm_mask_sequence(sample, mask, L, 999, 5, 1, noisy, labels, w) == 0);
    for (int j = 0; j < L; j++) CHECK(w[j] == 0.0f && noisy[j] == sample[j + 1]);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/test_sft.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good", g_dir);
    snprintf(bad, sizeof bad, "%s/bad", g_dir);
    write_sft_data(good, 0);
    write_sft_data(bad, 1);
    check_packed(good);
    check_padded(good, 0);
    check_padded(good, 1);
    check_refusals(bad);
    check_ar_mask();
    check_difflm();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_DONE();
}
