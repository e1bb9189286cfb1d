/* GPT2BPETokenizer (Megatron's megatron/training/tokenizer/gpt2_tokenization.py, OpenAI's
 * encoder.py): vocab.json (token -> id) and merges.txt ("#version" line, then one "a b" merge
 * per line in rank order), GPT-2's pre-tokenizer regex, `<|endoftext|>` as end of document.
 * Special tokens are not matched in the text (as in Megatron: "<|endoftext|>" written in the
 * text is encoded as the characters it is made of). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/error.h"
#include "training/tokenizer/bpe.h"
#include "training/tokenizer/tokenizer_file.h"

static int load_vocab(bpe_model *m, const char *path, char *err, size_t errlen) {
    size_t len;
    char e2[512];
    char *text = tokenizer_read_file("--vocab-file", path, 1, &len, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        err_set(err, errlen, "--vocab-file %s: not a JSON object of token -> id", path);
        cJSON_Delete(root);
        return -1;
    }
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v <= 2147483647.0 && v == floor(v))) {
            err_set(err, errlen, "--vocab-file %s: token '%.60s': id is not a non-negative integer",
                   path, it->string);
            rc = -1;
            break;
        }
        if (bpe_add_vocab(m, it->string, strlen(it->string), (int)v, e2, sizeof e2)) {
            err_set(err, errlen, "--vocab-file %s: %s", path, e2);
            rc = -1;
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static int load_merges(bpe_model *m, const char *path, char *err, size_t errlen) {
    size_t len;
    char e2[512];
    char *text = tokenizer_read_file("--merge-file", path, 0, &len, err, errlen);
    if (!text) return -1;
    int rank = 0, rc = 0;
    size_t lineno = 0;
    for (char *p = text; p < text + len && rc == 0;) {
        char *nl = memchr(p, '\n', (size_t)(text + len - p));
        char *end = nl ? nl : text + len;
        lineno++;
        /* fields separated by whitespace, as Python's str.split() */
        char *f[3];
        size_t fl[3];
        int nf = 0;
        for (char *q = p; q < end;) {
            while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\f' || *q == '\v'))
                q++;
            if (q >= end) break;
            char *s = q;
            while (q < end && !(*q == ' ' || *q == '\t' || *q == '\r' || *q == '\f' || *q == '\v'))
                q++;
            if (nf < 3) f[nf] = s, fl[nf] = (size_t)(q - s);
            nf++;
        }
        if (lineno == 1 && end - p >= 8 && memcmp(p, "#version", 8) == 0) {
            /* the header */
        } else if (nf == 0) {
            /* blank line (the file's last newline) */
        } else if (nf != 2) {
            err_set(err, errlen, "--merge-file %s:%zu: expected two tokens 'a b', found %d", path,
                   lineno, nf);
            rc = -1;
        } else if (bpe_add_merge(m, f[0], fl[0], f[1], fl[1], rank++, e2, sizeof e2)) {
            err_set(err, errlen, "--merge-file %s:%zu: %s (of --vocab-file)", path, lineno, e2);
            rc = -1;
        }
        p = nl ? nl + 1 : text + len;
    }
    free(text);
    return rc;
}

/* flag: what messages start with; empty for GPT2BPETokenizer (its file flags name
 * themselves), "--tokenizer-model DIR: " for a tokenizer directory. */
bpe_model *gpt2_bpe_load_files(const char *flag, const char *vocab_file, const char *merge_file,
                               int prefix_space, char *err, size_t errlen) {
    bpe_model *m = bpe_new();
    char e2[512], e3[1024];
    if (!m) {
        err_set(err, errlen, "out of memory");
        return NULL;
    }
    if (load_vocab(m, vocab_file, e3, sizeof e3) || load_merges(m, merge_file, e3, sizeof e3)) {
        err_set(err, errlen, "%s%s", flag, e3);
        goto fail;
    }
    if (bpe_add_split(m, BPE_GPT2_PATTERN, 0, prefix_space, e2, sizeof e2)) {
        err_set(err, errlen, "%s--vocab-file %s: %s", flag, vocab_file, e2);
        goto fail;
    }
    return m;
fail:
    bpe_free(m);
    return NULL;
}

bpe_model *gpt2_bpe_load(const char *vocab_file, const char *merge_file, int *eod, char *err,
                         size_t errlen) {
    if (!vocab_file || !vocab_file[0] || !merge_file || !merge_file[0]) {
        err_set(err, errlen, "--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json) "
                            "and --merge-file (merges.txt)");
        return NULL;
    }
    bpe_model *m = gpt2_bpe_load_files("", vocab_file, merge_file, 0, err, errlen);
    char e2[512];
    if (!m) return NULL;
    if (bpe_finish(m, e2, sizeof e2)) {
        err_set(err, errlen, "--vocab-file %s: %s", vocab_file, e2);
        bpe_free(m);
        return NULL;
    }
    *eod = bpe_vocab_id(m, "<|endoftext|>", 13);
    if (*eod < 0) {
        err_set(err, errlen,
               "--vocab-file %s: no '<|endoftext|>' token (GPT-2's end of document)", vocab_file);
        bpe_free(m);
        return NULL;
    }
    return m;
}
