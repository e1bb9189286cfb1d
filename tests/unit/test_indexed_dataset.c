/* Indexed dataset (Megatron MMIDIDX): builder -> reader round trips for every dtype, the
 * exact .idx byte layout, atomic finalize, and refusal of corrupt files with
 * "PATH: offset N: expected X, found Y". Also the tokenizers that feed the builder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/datasets/indexed_dataset.h"
#include "test_util.h"
#include "training/tokenizer/tokenizer.h"

static char g_dir[256];

static uint64_t rng_state = 0x1234567;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

static void id_range(int dtype, int32_t *lo, int32_t *hi) {
    switch (dtype) {
    case IDX_DTYPE_UINT8: *lo = 0, *hi = 255; break;
    case IDX_DTYPE_INT8: *lo = -128, *hi = 127; break;
    case IDX_DTYPE_INT16: *lo = -32768, *hi = 32767; break;
    case IDX_DTYPE_UINT16: *lo = 0, *hi = 65535; break;
    case IDX_DTYPE_FLOAT32: *lo = -16777216, *hi = 16777216; break;
    default: *lo = INT32_MIN, *hi = INT32_MAX; break;
    }
}

/* Round trip: random documents (some empty, some of several sequences). */
static void test_roundtrip(int dtype) {
    char prefix[512], err[1024];
    snprintf(prefix, sizeof prefix, "%s/rt_%s", g_dir, idx_dtype_name(dtype));
    idx_builder *b = idx_builder_create(prefix, dtype, err, sizeof err);
    CHECK(b != NULL);
    if (!b) return;
    int32_t lo, hi;
    id_range(dtype, &lo, &hi);
    enum { NDOC = 60, MAXLEN = 40 };
    /* reference: flat token list per sequence, doc -> sequence ranges */
    int32_t *seq_tok[NDOC * 3];
    int seq_len[NDOC * 3];
    int doc_first[NDOC + 1];
    int nseq = 0;
    for (int d = 0; d < NDOC; d++) {
        doc_first[d] = nseq;
        int kind = (int)(rnd() % 6);
        int parts = kind == 0 ? 0 : (kind == 1 ? 3 : 1); /* empty doc / 3 sequences / 1 */
        for (int p = 0; p < parts; p++) {
            int len = (d % 7 == 3) ? 0 : (int)(rnd() % MAXLEN);
            int32_t *t = malloc(sizeof(int32_t) * (len + 1));
            for (int i = 0; i < len; i++) {
                int64_t span = (int64_t)hi - lo + 1;
                t[i] = (int32_t)(lo + (int64_t)(((uint64_t)rnd() << 32 | rnd()) % (uint64_t)span));
            }
            if (len > 1) t[0] = lo, t[len - 1] = hi; /* extremes of the dtype */
            CHECK(idx_builder_add_item(b, t, (size_t)len, err, sizeof err) == 0);
            seq_tok[nseq] = t;
            seq_len[nseq] = len;
            nseq++;
        }
        CHECK(idx_builder_end_document(b, err, sizeof err) == 0);
    }
    doc_first[NDOC] = nseq;
    CHECK(idx_builder_num_documents(b) == NDOC);
    CHECK(idx_builder_num_sequences(b) == (uint64_t)nseq);
    char tmp_bin[600];
    snprintf(tmp_bin, sizeof tmp_bin, "%s.bin.tmp", prefix);
    CHECK(file_exists(tmp_bin));
    CHECK(idx_builder_finalize(b, err, sizeof err) == 0);
    CHECK(!file_exists(tmp_bin));

    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    CHECK(ds != NULL);
    if (!ds) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(ds->dtype == dtype);
    CHECK(ds->sequence_count == (uint64_t)nseq);
    CHECK(ds->document_count == NDOC + 1);
    CHECK(indexed_dataset_num_documents(ds) == NDOC);
    int64_t ptr = 0;
    int32_t buf[MAXLEN + 1];
    for (int s = 0; s < nseq; s++) {
        CHECK(ds->sequence_lengths[s] == seq_len[s]);
        CHECK(indexed_dataset_pointer(ds, (uint64_t)s) == ptr);
        ptr += (int64_t)seq_len[s] * (int64_t)idx_dtype_size(dtype);
        memset(buf, 0x55, sizeof buf);
        indexed_dataset_read(ds, (uint64_t)s, 0, (uint64_t)seq_len[s], buf);
        CHECK(memcmp(buf, seq_tok[s], sizeof(int32_t) * seq_len[s]) == 0);
        if (seq_len[s] > 3) { /* partial read with an offset (Megatron's get(idx, offset, length)) */
            indexed_dataset_read(ds, (uint64_t)s, 2, (uint64_t)seq_len[s] - 3, buf);
            CHECK(memcmp(buf, seq_tok[s] + 2, sizeof(int32_t) * (seq_len[s] - 3)) == 0);
        }
    }
    CHECK((size_t)ptr == ds->bin_size);
    for (int d = 0; d <= NDOC; d++) CHECK(indexed_dataset_document_index(ds, (uint64_t)d) == doc_first[d]);
    indexed_dataset_close(ds);
    for (int s = 0; s < nseq; s++) free(seq_tok[s]);
}

/* The .idx bytes exactly as Megatron's _IndexWriter writes them. */
static void test_layout(void) {
    char prefix[512], path[600], err[1024];
    snprintf(prefix, sizeof prefix, "%s/layout", g_dir);
    idx_builder *b = idx_builder_create(prefix, IDX_DTYPE_UINT16, err, sizeof err);
    int32_t a[3] = {1, 2, 300}, c[2] = {7, 65535};
    CHECK(idx_builder_add_document(b, a, 3, err, sizeof err) == 0);
    CHECK(idx_builder_end_document(b, err, sizeof err) == 0); /* empty document */
    CHECK(idx_builder_add_document(b, c, 2, err, sizeof err) == 0);
    int32_t bad = 65536;
    CHECK(idx_builder_add_item(b, &bad, 1, err, sizeof err) != 0); /* does not fit uint16 */
    CHECK(strstr(err, "does not fit dtype uint16") != NULL);
    CHECK(idx_builder_finalize(b, err, sizeof err) == 0);
    unsigned char expect[34 + 2 * 4 + 2 * 8 + 4 * 8];
    size_t o = 0;
    memcpy(expect, "MMIDIDX\0\0", 9), o = 9;
    uint64_t u64;
    int64_t i64;
    int32_t i32;
    u64 = 1, memcpy(expect + o, &u64, 8), o += 8;
    expect[o++] = 8; /* uint16 */
    u64 = 2, memcpy(expect + o, &u64, 8), o += 8; /* sequences */
    u64 = 4, memcpy(expect + o, &u64, 8), o += 8; /* document indices: 3 documents + 1 */
    i32 = 3, memcpy(expect + o, &i32, 4), o += 4;
    i32 = 2, memcpy(expect + o, &i32, 4), o += 4;
    i64 = 0, memcpy(expect + o, &i64, 8), o += 8;
    i64 = 6, memcpy(expect + o, &i64, 8), o += 8;
    int64_t di[4] = {0, 1, 1, 2};
    memcpy(expect + o, di, 32), o += 32;
    size_t n;
    snprintf(path, sizeof path, "%s.idx", prefix);
    unsigned char *got = slurp(path, &n);
    CHECK(n == o);
    CHECK(got && n == o && memcmp(got, expect, o) == 0);
    free(got);
    snprintf(path, sizeof path, "%s.bin", prefix);
    got = slurp(path, &n);
    uint16_t bin_expect[5] = {1, 2, 300, 7, 65535};
    CHECK(n == 10 && memcmp(got, bin_expect, 10) == 0);
    free(got);
    CHECK(idx_dtype_optimal(257) == IDX_DTYPE_UINT16);
    CHECK(idx_dtype_optimal(65499) == IDX_DTYPE_UINT16);
    CHECK(idx_dtype_optimal(65500) == IDX_DTYPE_INT32);

    /* abort leaves nothing behind */
    char p2[512];
    snprintf(p2, sizeof p2, "%s/aborted", g_dir);
    b = idx_builder_create(p2, IDX_DTYPE_INT32, err, sizeof err);
    CHECK(idx_builder_add_document(b, a, 3, err, sizeof err) == 0);
    idx_builder_abort(b);
    snprintf(path, sizeof path, "%s.bin.tmp", p2);
    CHECK(!file_exists(path));
    snprintf(path, sizeof path, "%s.bin", p2);
    CHECK(!file_exists(path));
}

/* Opens prefix and expects failure with a message starting with `start` and containing
 * `contains` (if non-NULL). */
static void expect_refused(const char *prefix, const char *start, const char *contains) {
    char err[1024] = "";
    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    CHECK(ds == NULL);
    if (ds) indexed_dataset_close(ds);
    int ok = strncmp(err, start, strlen(start)) == 0 && (!contains || strstr(err, contains));
    CHECK(ok);
    if (!ok) fprintf(stderr, "  message: %s\n  expected start: %s, containing: %s\n", err, start,
                     contains ? contains : "");
}

static void test_corrupt(void) {
    char prefix[512], idx[600], bin[600], err[1024], start[700];
    snprintf(prefix, sizeof prefix, "%s/corrupt", g_dir);
    snprintf(idx, sizeof idx, "%s.idx", prefix);
    snprintf(bin, sizeof bin, "%s.bin", prefix);
    idx_builder *b = idx_builder_create(prefix, IDX_DTYPE_UINT16, err, sizeof err);
    int32_t t[5] = {5, 6, 7, 8, 9};
    idx_builder_add_document(b, t, 5, err, sizeof err);
    idx_builder_add_document(b, t, 2, err, sizeof err);
    idx_builder_add_document(b, t, 4, err, sizeof err);
    CHECK(idx_builder_finalize(b, err, sizeof err) == 0);
    size_t n_idx, n_bin;
    unsigned char *orig = slurp(idx, &n_idx), *orig_bin = slurp(bin, &n_bin);
    CHECK(n_idx == 34 + 3 * 12 + 4 * 8);
    CHECK(n_bin == 22);
    unsigned char *m = malloc(n_idx);

    /* intact opens */
    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    CHECK(ds != NULL);
    indexed_dataset_close(ds);

    /* wrong magic */
    memcpy(m, orig, n_idx);
    m[3] = 'X';
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 0: expected magic 'MMIDIDX\\x00\\x00', found 'MMIXIDX", idx);
    expect_refused(prefix, start, NULL);
    memcpy(m, orig, n_idx);
    m[8] = 1;
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 0: expected magic", idx);
    expect_refused(prefix, start, "found 'MMIDIDX\\x00\\x01'");

    /* wrong version */
    memcpy(m, orig, n_idx);
    m[9] = 2;
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 9: expected version 1, found 2", idx);
    expect_refused(prefix, start, NULL);

    /* unknown dtype codes */
    int codes[3] = {0, 9, 255};
    for (int c = 0; c < 3; c++) {
        memcpy(m, orig, n_idx);
        m[17] = (unsigned char)codes[c];
        spit(idx, m, n_idx);
        char found[32];
        snprintf(found, sizeof found, "found %d", codes[c]);
        snprintf(start, sizeof start, "%s: offset 17: expected dtype code 1-8", idx);
        expect_refused(prefix, start, found);
    }

    /* every truncation of the .idx */
    for (size_t L = 0; L < n_idx; L++) {
        spit(idx, orig, L);
        size_t off;
        if (L < 9) off = 0;
        else if (L < 17) off = 9;
        else if (L < 18) off = 17;
        else if (L < 26) off = 18;
        else if (L < 34) off = 26;
        else if (L < 34 + 12) off = 34;
        else if (L < 34 + 36) off = 34 + 12;
        else off = 34 + 36;
        snprintf(start, sizeof start, "%s: offset %zu: expected ", idx, off);
        expect_refused(prefix, start, "found");
    }

    /* counts that overrun the file */
    memcpy(m, orig, n_idx);
    uint64_t huge = (uint64_t)1 << 62;
    memcpy(m + 18, &huge, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 34: expected sequence_lengths[4611686018427387904]", idx);
    expect_refused(prefix, start, NULL);
    memcpy(m, orig, n_idx);
    uint64_t five = 5;
    memcpy(m + 26, &five, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 70: expected document_indices[5] (40 bytes), found 32", idx);
    expect_refused(prefix, start, NULL);
    memcpy(m, orig, n_idx);
    uint64_t zero = 0;
    memcpy(m + 26, &zero, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 26: expected document count >= 1", idx);
    expect_refused(prefix, start, NULL);

    /* non-monotonic / wrong document indices */
    memcpy(m, orig, n_idx);
    int64_t v = 3;
    memcpy(m + 70 + 8, &v, 8); /* [0, 3, 2, 3] */
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 86: expected document_indices[2] in [3, 3]", idx);
    expect_refused(prefix, start, "found 2");
    memcpy(m, orig, n_idx);
    v = 1;
    memcpy(m + 70, &v, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 70: expected document_indices[0] = 0, found 1", idx);
    expect_refused(prefix, start, NULL);
    memcpy(m, orig, n_idx);
    v = 2;
    memcpy(m + 70 + 24, &v, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 94: expected document_indices[3] = sequence count 3, found 2", idx);
    expect_refused(prefix, start, NULL);

    /* negative length, pointer past the .bin */
    memcpy(m, orig, n_idx);
    int32_t neg = -1;
    memcpy(m + 34 + 4, &neg, 4);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 38: expected sequence_lengths[1] >= 0, found -1", idx);
    expect_refused(prefix, start, NULL);
    memcpy(m, orig, n_idx);
    int64_t far = 1000;
    memcpy(m + 46 + 16, &far, 8);
    spit(idx, m, n_idx);
    snprintf(start, sizeof start, "%s: offset 62: expected sequence_pointers[2] in [0, 22]", idx);
    expect_refused(prefix, start, "found 1000");
    spit(idx, orig, n_idx);

    /* .bin shorter than the pointers say: sequence 2 starts at byte 14, needs 8 bytes */
    spit(bin, orig_bin, n_bin - 1);
    snprintf(start, sizeof start,
             "%s: offset 14: expected 8 bytes of sequence 2 (4 uint16 tokens), found 7 bytes", bin);
    expect_refused(prefix, start, NULL);
    spit(bin, orig_bin, 0);
    snprintf(start, sizeof start, "%s: offset 0: expected 10 bytes of sequence 0", bin);
    expect_refused(prefix, start, NULL);
    spit(bin, orig_bin, n_bin);

    /* missing files */
    unlink(bin);
    snprintf(start, sizeof start, "%s: cannot open: No such file or directory", bin);
    expect_refused(prefix, start, NULL);
    unlink(idx);
    snprintf(start, sizeof start, "%s: cannot open: No such file or directory", idx);
    expect_refused(prefix, start, NULL);
    free(m);
    free(orig);
    free(orig_bin);
}

static void test_tokenizers(void) {
    char err[512];
    tokenizer *t = tokenizer_create("ByteLevel", 0, err, sizeof err);
    CHECK(t && tokenizer_vocab_size(t) == 257 && tokenizer_eod(t) == 256);
    const char *text = "héllo\nworld\t\x01";
    int32_t *ids;
    size_t n;
    CHECK(tokenizer_encode(t, text, strlen(text), &ids, &n, err, sizeof err) == 0);
    CHECK(n == strlen(text));
    CHECK(ids[1] == 0xc3 && ids[2] == 0xa9);
    int32_t with_eod[64];
    memcpy(with_eod, ids, n * sizeof(int32_t));
    with_eod[n] = 256;
    with_eod[n + 1] = 300; /* padded-vocabulary id: dropped */
    char *dec = tokenizer_decode(t, with_eod, n + 2);
    CHECK(dec && strcmp(dec, text) == 0);
    free(dec);
    free(ids);
    tokenizer_free(t);

    t = tokenizer_create("NullTokenizer", 1000, err, sizeof err);
    CHECK(t && tokenizer_vocab_size(t) == 1001 && tokenizer_eod(t) == 1000);
    CHECK(tokenizer_encode(t, " 12 0\n999  7 ", 13, &ids, &n, err, sizeof err) == 0);
    CHECK(n == 4 && ids[0] == 12 && ids[1] == 0 && ids[2] == 999 && ids[3] == 7);
    int32_t e2[5] = {12, 0, 1000, 999, 7};
    dec = tokenizer_decode(t, e2, 5);
    CHECK(dec && strcmp(dec, "12 0 999 7") == 0);
    free(dec);
    free(ids);
    CHECK(tokenizer_encode(t, "1 2 x3 4", 8, &ids, &n, err, sizeof err) != 0);
    CHECK(strstr(err, "token 'x3' at byte 4 is not an integer") != NULL);
    CHECK(tokenizer_encode(t, "1 1000", 6, &ids, &n, err, sizeof err) != 0);
    CHECK(strstr(err, "token '1000' at byte 2") != NULL);
    tokenizer_free(t);

    CHECK(tokenizer_create("NullTokenizer", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "--vocab-size") != NULL);
    CHECK(tokenizer_create("GPT2BPETokenizer", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file") != NULL);
    CHECK(tokenizer_create("HuggingFaceTokenizer", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "HuggingFaceTokenizer needs --tokenizer-model") != NULL);
    CHECK(tokenizer_create("SentencePieceTokenizer", 0, err, sizeof err) == NULL);
    CHECK(strstr(err, "--tokenizer-type: expected ByteLevel, NullTokenizer, GPT2BPETokenizer or "
                      "HuggingFaceTokenizer, found 'SentencePieceTokenizer'") != NULL);
}

static void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/test_indexed_dataset.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    int dtypes[8] = {IDX_DTYPE_UINT8, IDX_DTYPE_INT8,  IDX_DTYPE_INT16,   IDX_DTYPE_INT32,
                     IDX_DTYPE_INT64, IDX_DTYPE_FLOAT64, IDX_DTYPE_FLOAT32, IDX_DTYPE_UINT16};
    for (int i = 0; i < 8; i++) test_roundtrip(dtypes[i]);
    test_layout();
    test_corrupt();
    test_tokenizers();
    rm_rf(g_dir);
    TEST_DONE();
}
