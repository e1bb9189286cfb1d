/* GPT dataset indices (Megatron's GPTDataset / BlendedDataset semantics): samples are
 * seq_length + 1 consecutive tokens of the documents concatenated in document-index order,
 * consecutive samples share one token, epochs / separate final epoch / shuffle are
 * permutations, split bookends round as Python, blending follows the weights, mock data is
 * deterministic and learnable, errors name the flag. NumPy equality itself is checked by
 * tests/scripts/test_megatron_format.sh. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/datasets/gpt_data.h"
#include "core/datasets/gpt_data_debug.h"
#include "core/datasets/gpt_dataset.h"
#include "core/datasets/indexed_dataset.h"
#include "core/random/mt19937.h"
#include "test_util.h"

static char g_dir[256];
static uint64_t rng_state = 42;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

/* A dataset of ndocs documents of random lengths in [minlen, maxlen]; token t of document d
 * is (d * 1000 + t) so every token identifies its place (ids fit int32). */
static void make_dataset(const char *prefix, int ndocs, int minlen, int maxlen) {
    char err[512];
    idx_builder *b = idx_builder_create(prefix, IDX_DTYPE_INT32, err, sizeof err);
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(maxlen + 1));
    for (int d = 0; d < ndocs; d++) {
        int len = minlen + (int)(rnd() % (uint32_t)(maxlen - minlen + 1));
        for (int i = 0; i < len; i++) t[i] = d * 1000 + i;
        if (idx_builder_add_document(b, t, (size_t)len, err, sizeof err) != 0) abort();
    }
    free(t);
    if (idx_builder_finalize(b, err, sizeof err) != 0) abort();
}

static void test_mt19937(void) {
    mt19937_state st;
    mt19937_seed(&st, 5489);
    CHECK(mt19937_next32(&st) == 3499211612U); /* the MT19937 reference first output */
    /* numpy.random.RandomState(1234).shuffle(numpy.arange(20)) */
    int32_t a[20], expect[20] = {3, 13, 2, 16, 14, 5, 4, 0, 8, 18, 17, 11, 10, 9, 7, 1, 19, 12, 6, 15};
    for (int i = 0; i < 20; i++) a[i] = i;
    mt19937_seed(&st, 1234);
    mt19937_shuffle_i32(&st, a, 20);
    CHECK(memcmp(a, expect, sizeof a) == 0);
    /* continuing: RandomState(1234) after that shuffle, randint(0, 2**33 + 6) x 2 (64-bit path) */
    CHECK(mt19937_interval(&st, (1ULL << 33) + 5) == 1901221627ULL);
    CHECK(mt19937_interval(&st, (1ULL << 33) + 5) == 95107365ULL);
}

static void test_split_parse(void) {
    double w[3];
    char err[256];
    CHECK(gpt_split_parse("969,30,1", w, err, sizeof err) == 0);
    CHECK_CLOSE(w[0], 0.969, 0, 1e-15);
    CHECK_CLOSE(w[1], 0.030, 0, 1e-15);
    CHECK(gpt_split_parse("99/1", w, err, sizeof err) == 0);
    CHECK(w[2] == 0.0);
    const char *bad[] = {"abc", "1,2,3,4", "-1,2", "", "1,,2", "0,0,0", "1;2"};
    for (int i = 0; i < 7; i++) {
        err[0] = 0;
        CHECK(gpt_split_parse(bad[i], w, err, sizeof err) != 0);
        CHECK(strncmp(err, "expected", 8) == 0);
    }
    gpt_split_parse("abc", w, err, sizeof err);
    CHECK(strcmp(err, "expected up to 3 comma-separated non-negative weights, found 'abc'") == 0);

    int present[3];
    int64_t beg[3], end[3];
    gpt_split_parse("969,30,1", w, err, sizeof err);
    gpt_split_ranges(w, 1000, present, beg, end);
    CHECK(present[0] && present[1] && present[2]);
    CHECK(beg[0] == 0 && end[0] == 969 && beg[1] == 969 && end[1] == 999 && beg[2] == 999 && end[2] == 1000);
    gpt_split_parse("1,1,1", w, err, sizeof err);
    gpt_split_ranges(w, 10, present, beg, end);
    CHECK(end[0] == 3 && beg[1] == 3 && end[1] == 7 && beg[2] == 7 && end[2] == 10);
    /* Python's round is half-to-even: 2.5 -> 2, 3.5 -> 4 */
    gpt_split_parse("1,1", w, err, sizeof err);
    gpt_split_ranges(w, 5, present, beg, end);
    CHECK(end[0] == 2 && beg[1] == 2 && end[1] == 5 && !present[2]);
    gpt_split_ranges(w, 7, present, beg, end);
    CHECK(end[0] == 4);
    gpt_split_parse("1,0,1", w, err, sizeof err);
    gpt_split_ranges(w, 10, present, beg, end);
    CHECK(present[0] && !present[1] && present[2] && end[0] == 5 && beg[2] == 5);
}

static void read_ds(void *ctx, uint64_t seq, uint64_t offset, uint64_t count, int32_t *out) {
    indexed_dataset_read((const indexed_dataset *)ctx, seq, offset, count, out);
}

/* Checks one single-prefix split against a direct concatenation of its document index. */
static void check_split_structure(const gpt_data *d, const indexed_dataset *ds, int split,
                                  int seq, uint64_t requested) {
    CHECK(gpt_data_split_kind(d, split) == GPT_SPLIT_SINGLE);
    const gpt_indices *ix = gpt_data_component(d, split, 0);
    int64_t beg, end;
    gpt_data_component_range(d, split, 0, &beg, &end);
    uint64_t ndocs = (uint64_t)(end - beg);
    CHECK(ix->num_samples == gpt_data_num_samples(d, split));
    CHECK(ix->num_samples >= requested);
    /* epochs: the fewest whose tokens cover requested * seq + 1 */
    uint64_t T = 0;
    for (int64_t s = beg; s < end; s++) T += (uint64_t)ds->sequence_lengths[s];
    CHECK(ix->num_tokens_per_epoch == T);
    CHECK((uint64_t)ix->num_epochs * T >= requested * (uint64_t)seq + 1);
    CHECK((uint64_t)(ix->num_epochs - 1) * T < requested * (uint64_t)seq + 1);
    CHECK(ix->num_samples == ((uint64_t)ix->num_epochs * T - 1) / (uint64_t)seq);
    /* document index: every document of the range once per epoch */
    CHECK(ix->document_index_len == ndocs * (uint64_t)ix->num_epochs);
    int *count = calloc(ndocs, sizeof(int));
    int in_range = 1;
    for (uint64_t i = 0; i < ix->document_index_len; i++) {
        int32_t doc = ix->document_index[i];
        if (doc < beg || doc >= end) in_range = 0;
        else count[doc - beg]++;
    }
    CHECK(in_range);
    int all = 1;
    for (uint64_t i = 0; i < ndocs; i++) all &= count[i] == ix->num_epochs;
    CHECK(all);
    if (ix->separate_final_epoch) { /* the final epoch alone is a permutation of the range */
        memset(count, 0, ndocs * sizeof(int));
        for (uint64_t i = ndocs * (uint64_t)(ix->num_epochs - 1); i < ix->document_index_len; i++)
            count[ix->document_index[i] - beg]++;
        all = 1;
        for (uint64_t i = 0; i < ndocs; i++) all &= count[i] == 1;
        CHECK(all);
    }
    free(count);
    /* the flat token stream in document-index order */
    uint64_t total = (uint64_t)ix->num_epochs * T;
    int32_t *stream = malloc(total * sizeof(int32_t));
    uint64_t o = 0;
    for (uint64_t i = 0; i < ix->document_index_len; i++) {
        int32_t doc = ix->document_index[i];
        indexed_dataset_read(ds, (uint64_t)doc, 0, (uint64_t)ds->sequence_lengths[doc], stream + o);
        o += (uint64_t)ds->sequence_lengths[doc];
    }
    CHECK(o == total);
    /* shuffle index: a permutation (two blocks when the final epoch is separate) */
    uint64_t n = ix->num_samples;
    char *seen = calloc(n, 1);
    int perm = 1;
    uint64_t sans = ix->separate_final_epoch
                        ? ((uint64_t)(ix->num_epochs - 1) * T - 1) / (uint64_t)seq : n;
    for (uint64_t i = 0; i < n; i++) {
        int64_t s = ix->shuffle_index[i];
        if (s < 0 || (uint64_t)s >= n || seen[s]) perm = 0;
        else seen[s] = 1;
        if ((i < sans) != ((uint64_t)s < sans)) perm = 0;
    }
    CHECK(perm);
    free(seen);
    /* every sample: seq + 1 tokens of the stream at sample_start = s * seq */
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(seq + 1));
    int32_t *prev = malloc(sizeof(int32_t) * (size_t)(seq + 1));
    int match = 1, overlap = 1;
    for (uint64_t i = 0; i < n; i++) {
        gpt_data_get(d, split, i, tok, NULL, 0);
        uint64_t s = (uint64_t)ix->shuffle_index[i];
        if (memcmp(tok, stream + s * (uint64_t)seq, sizeof(int32_t) * (size_t)(seq + 1)) != 0) match = 0;
    }
    CHECK(match);
    /* consecutive samples (unshuffled, read through the sample index) overlap by exactly
     * the one extra token */
    for (uint64_t s = 0; s + 1 < n; s++) {
        gpt_indices_sample(ix, ds->sequence_lengths, seq, s, read_ds, (void *)ds, prev);
        uint64_t got = gpt_indices_sample(ix, ds->sequence_lengths, seq, s + 1, read_ds, (void *)ds, tok);
        if (got != (uint64_t)seq + 1 || prev[seq] != tok[0] ||
            memcmp(prev + 1, stream + s * (uint64_t)seq + 1, sizeof(int32_t) * (size_t)seq) != 0)
            overlap = 0;
    }
    CHECK(overlap);
    /* and the wrap: index n is sample 0 */
    gpt_data_get(d, split, n, tok, NULL, 0);
    gpt_data_get(d, split, 0, prev, NULL, 0);
    CHECK(memcmp(tok, prev, sizeof(int32_t) * (size_t)(seq + 1)) == 0);
    free(tok);
    free(prev);
    free(stream);
}

static void test_single(void) {
    char prefix[512], err[1024];
    snprintf(prefix, sizeof prefix, "%s/single", g_dir);
    make_dataset(prefix, 200, 0, 60); /* includes empty documents */
    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    CHECK(ds != NULL);
    const char *paths[1] = {prefix};
    gpt_data_config cfg = {0};
    cfg.num_paths = 1;
    cfg.data_paths = paths;
    cfg.split = "8,1,1";
    cfg.seq_length = 16;
    cfg.seed = 1234;
    cfg.vocab_size = 1 << 20;
    cfg.eod = 0;
    cfg.num_samples[0] = 1500; /* several epochs of the ~160 training documents */
    cfg.num_samples[1] = 20;
    cfg.num_samples[2] = 0; /* not built */
    gpt_data *d = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d != NULL);
    if (!d) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    int64_t beg, end;
    gpt_data_component_range(d, SPLIT_TRAIN, 0, &beg, &end);
    CHECK(beg == 0 && end == 160);
    gpt_data_component_range(d, SPLIT_VALID, 0, &beg, &end);
    CHECK(beg == 160 && end == 180);
    CHECK(gpt_data_num_samples(d, SPLIT_TEST) == 0);
    CHECK(gpt_data_component(d, SPLIT_TRAIN, 0)->num_epochs > 1);
    check_split_structure(d, ds, SPLIT_TRAIN, 16, 1500);
    check_split_structure(d, ds, SPLIT_VALID, 16, 20);
    gpt_data_free(d);

    /* a request just past an epoch boundary separates the final epoch (threshold 0.80) */
    uint64_t T = 0;
    for (int s = 0; s < 160; s++) T += (uint64_t)ds->sequence_lengths[s];
    uint64_t per_epoch = (T - 1) / 16;
    cfg.num_samples[0] = per_epoch + 3;
    cfg.num_samples[1] = 0;
    d = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d && gpt_data_component(d, SPLIT_TRAIN, 0)->separate_final_epoch == 1);
    CHECK(d && gpt_data_component(d, SPLIT_TRAIN, 0)->num_epochs == 2);
    if (d) check_split_structure(d, ds, SPLIT_TRAIN, 16, per_epoch + 3);
    gpt_data_free(d);
    cfg.num_samples[0] = per_epoch * 2 - 1; /* most of the final epoch: not separated */
    d = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d && gpt_data_component(d, SPLIT_TRAIN, 0)->separate_final_epoch == 0);
    if (d) check_split_structure(d, ds, SPLIT_TRAIN, 16, per_epoch * 2 - 1);
    gpt_data_free(d);

    /* same seed -> same samples; another seed -> another order */
    cfg.num_samples[0] = 100;
    gpt_data *d1 = gpt_data_build(&cfg, NULL, err, sizeof err);
    gpt_data *d2 = gpt_data_build(&cfg, NULL, err, sizeof err);
    cfg.seed = 99;
    gpt_data *d3 = gpt_data_build(&cfg, NULL, err, sizeof err);
    int32_t a[17], b[17], c[17];
    int same = 1, differ = 0;
    for (uint64_t i = 0; i < 100; i++) {
        gpt_data_get(d1, 0, i, a, NULL, 0);
        gpt_data_get(d2, 0, i, b, NULL, 0);
        gpt_data_get(d3, 0, i, c, NULL, 0);
        same &= memcmp(a, b, sizeof a) == 0;
        differ |= memcmp(a, c, sizeof a) != 0;
    }
    CHECK(same);
    CHECK(differ);
    gpt_data_free(d1);
    gpt_data_free(d2);
    gpt_data_free(d3);
    indexed_dataset_close(ds);
}

static void test_blend(void) {
    char p1[512], p2[512], err[1024];
    snprintf(p1, sizeof p1, "%s/blend_a", g_dir);
    snprintf(p2, sizeof p2, "%s/blend_b", g_dir);
    make_dataset(p1, 100, 5, 50);
    make_dataset(p2, 150, 1, 30);
    const char *paths[2] = {p1, p2};
    double weights[2] = {3, 7};
    gpt_data_config cfg = {0};
    cfg.num_paths = 2;
    cfg.data_paths = paths;
    cfg.weights = weights;
    cfg.split = "969,30,1";
    cfg.seq_length = 8;
    cfg.seed = 7;
    cfg.vocab_size = 1 << 20;
    cfg.num_samples[0] = 1000;
    cfg.num_samples[1] = 40;
    gpt_data *d = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d != NULL);
    if (!d) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(gpt_data_split_kind(d, 0) == GPT_SPLIT_BLENDED);
    /* ceil(1000 * 0.3 * 1.005) + ceil(1000 * 0.7 * 1.005) = 302 + 704 */
    CHECK(gpt_blend_dataset_size(1000, 0.3) == 302);
    CHECK(gpt_blend_dataset_size(1000, 0.7) == 704);
    CHECK(gpt_data_num_samples(d, 0) == 1006);
    CHECK(gpt_data_component(d, 0, 0)->num_samples >= 302);
    CHECK(gpt_data_component(d, 0, 1)->num_samples >= 704);
    const int16_t *di = gpt_data_blend_dataset_index(d, 0);
    const int64_t *si = gpt_data_blend_sample_index(d, 0);
    uint64_t n = gpt_data_num_samples(d, 0), taken[2] = {0, 0};
    int consecutive = 1, prefix_ok = 1, samples_ok = 1;
    int32_t tok[9], ref[9];
    for (uint64_t i = 0; i < n; i++) {
        int k = di[i];
        if (si[i] != (int64_t)taken[k]) consecutive = 0;
        taken[k]++;
        /* the greedy keeps every prefix within about one sample of its share */
        if (fabs((double)taken[0] - 0.3 * (double)(i + 1)) > 1.5) prefix_ok = 0;
        /* sample i of the blend is sample si[i] of dataset k */
        gpt_data_get(d, 0, i, tok, NULL, 0);
        const gpt_indices *ix = gpt_data_component(d, 0, k);
        uint64_t s = (uint64_t)ix->shuffle_index[si[i]];
        int32_t doc = ix->document_index[ix->sample_index[2 * s]];
        int64_t off = ix->sample_index[2 * s + 1];
        /* first token identifies dataset k's document and offset: doc * 1000 + off */
        if (tok[0] != doc * 1000 + (int32_t)off) samples_ok = 0;
        (void)ref;
    }
    CHECK(consecutive);
    CHECK(prefix_ok);
    CHECK(samples_ok);
    CHECK_CLOSE((double)taken[0] / (double)n, 0.3, 0, 0.002);
    CHECK_CLOSE((double)taken[1] / (double)n, 0.7, 0, 0.002);
    CHECK(taken[0] <= gpt_data_component(d, 0, 0)->num_samples);
    CHECK(taken[1] <= gpt_data_component(d, 0, 1)->num_samples);
    CHECK(gpt_data_num_samples(d, 1) == (uint64_t)ceil(40 * 0.3 * 1.005) + (uint64_t)ceil(40 * 0.7 * 1.005));
    gpt_data_free(d);

    /* several prefixes without weights: one epoch each, size min(N, total), weights by length */
    cfg.weights = NULL;
    cfg.num_samples[0] = 50;
    cfg.num_samples[1] = 100000;
    d = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d != NULL);
    if (d) {
        CHECK(gpt_data_num_samples(d, 0) == 50);
        uint64_t l0 = gpt_data_component(d, 1, 0)->num_samples, l1 = gpt_data_component(d, 1, 1)->num_samples;
        CHECK(gpt_data_component(d, 1, 0)->num_epochs == 1);
        CHECK(gpt_data_num_samples(d, 1) == l0 + l1);
        const double *bw = gpt_data_blend_weights(d, 1);
        CHECK_CLOSE(bw[0], (double)l0 / (double)(l0 + l1), 1e-15, 0);
        gpt_data_free(d);
    }

    /* blending index alone: three weights, proportions within tolerance */
    double w3[3] = {0.5, 0.3, 0.2};
    int16_t *dsi = malloc(10000 * sizeof(int16_t));
    int64_t *dss = malloc(10000 * sizeof(int64_t));
    gpt_blending_indices(w3, 3, 10000, dsi, dss);
    int cnt[3] = {0, 0, 0};
    for (int i = 0; i < 10000; i++) cnt[dsi[i]]++;
    CHECK(abs(cnt[0] - 5000) <= 1 && abs(cnt[1] - 3000) <= 1 && abs(cnt[2] - 2000) <= 1);
    free(dsi);
    free(dss);
}

static void test_mock(void) {
    char err[256];
    gpt_data_config cfg = {0};
    cfg.mock = 1;
    cfg.seq_length = 32;
    cfg.seed = 1234;
    cfg.vocab_size = 257;
    cfg.eod = 256;
    cfg.num_samples[0] = 64;
    cfg.num_samples[1] = 8;
    gpt_data *d = gpt_data_build(&cfg, NULL, err, sizeof err);
    gpt_data *d2 = gpt_data_build(&cfg, NULL, err, sizeof err);
    CHECK(d && d2);
    if (!d || !d2) return;
    CHECK(gpt_data_num_samples(d, 0) == 64 && gpt_data_num_samples(d, 1) == 8 &&
          gpt_data_num_samples(d, 2) == 0);
    int32_t a[33], b[33], v[33];
    int det = 1, learn = 1, range = 1, distinct = 0, split_differs = 0;
    int32_t first0 = -1;
    for (uint64_t i = 0; i < 64; i++) {
        gpt_data_get(d, 0, i, a, NULL, 0);
        gpt_data_get(d2, 0, i, b, NULL, 0);
        det &= memcmp(a, b, sizeof a) == 0;
        for (int j = 0; j < 33; j++) range &= a[j] >= 0 && a[j] < 256;
        for (int j = 0; j < 32; j++) learn &= a[j + 1] == (a[j] + 1) % 256;
        if (i == 0) first0 = a[0];
        else distinct |= a[0] != first0;
        if (i < 8) {
            gpt_data_get(d, 1, i, v, NULL, 0);
            split_differs |= memcmp(a, v, sizeof a) != 0;
        }
    }
    CHECK(det);
    CHECK(learn);
    CHECK(range);
    CHECK(distinct);
    CHECK(split_differs);
    gpt_data_get(d, 0, 64, a, NULL, 0); /* wraps */
    gpt_data_get(d, 0, 0, b, NULL, 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    gpt_data_free(d);
    gpt_data_free(d2);
}

static void test_errors(void) {
    char prefix[512], err[1024], want[700];
    snprintf(prefix, sizeof prefix, "%s/does_not_exist", g_dir);
    const char *paths[1] = {prefix};
    gpt_data_config cfg = {0};
    cfg.num_paths = 1;
    cfg.data_paths = paths;
    cfg.split = "969,30,1";
    cfg.seq_length = 8;
    cfg.seed = 1;
    cfg.num_samples[0] = 10;
    /* each failure says which input it is about (the caller names its flag) and describes
     * the problem without naming any flag */
    gpt_data_fault fault = GPT_DATA_OK;
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    snprintf(want, sizeof want, "%s.idx: cannot open: No such file or directory", prefix);
    CHECK(strcmp(err, want) == 0 && fault == GPT_DATA_FAULT_PATHS);
    cfg.split = "abc";
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    CHECK(strstr(err, "expected up to 3 comma-separated") == err && fault == GPT_DATA_FAULT_SPLIT);
    cfg.split = "969,30,1";
    cfg.seq_length = 1;
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    CHECK(strcmp(err, "expected at least 2, found 1") == 0 && fault == GPT_DATA_FAULT_SEQ_LENGTH);
    /* a split that gets no documents */
    snprintf(prefix, sizeof prefix, "%s/tiny", g_dir);
    make_dataset(prefix, 3, 5, 10);
    cfg.seq_length = 4;
    cfg.num_samples[1] = 5;
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    CHECK(strstr(err, "the valid split of") == err && fault == GPT_DATA_FAULT_SPLIT);
    CHECK(strstr(err, "with split weights 969,30,1)") != NULL && !strstr(err, "--"));
    cfg.seed = 1ULL << 32;
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    CHECK(strstr(err, "expected a value below 2^32") == err && fault == GPT_DATA_FAULT_SEED);
    /* mock data with a vocabulary of one id */
    cfg.seed = 1;
    cfg.mock = 1;
    cfg.vocab_size = 1;
    CHECK(gpt_data_build(&cfg, &fault, err, sizeof err) == NULL);
    CHECK(strcmp(err, "expected a vocabulary of at least 2 ids, found 1") == 0 &&
          fault == GPT_DATA_FAULT_MOCK);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/test_gpt_dataset.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_mt19937();
    test_split_parse();
    test_single();
    test_blend();
    test_mock();
    test_errors();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", g_dir);
    TEST_DONE();
}
