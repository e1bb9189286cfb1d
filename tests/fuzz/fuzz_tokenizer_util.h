/* What both tokenizer fuzz targets do once their files are written: create the tokenizer from
 * `o`, and if it loads, encode `text` (SAMPLE when the input carries none) and decode the ids. */
#ifndef MEGADLM_TESTS_FUZZ_TOKENIZER_UTIL_H
#define MEGADLM_TESTS_FUZZ_TOKENIZER_UTIL_H

#include "fuzz/fuzz_util.h"
#include "training/tokenizer/tokenizer.h"

static inline int fuzz_tokenizer(const tokenizer_options *o, const uint8_t *text, size_t tlen,
                                 const char *sample) {
    if (tlen == 0) {
        text = (const uint8_t *)sample;
        tlen = strlen(sample);
    }
    char err[1024];
    tokenizer *tok = tokenizer_create_opts(o, err, sizeof err);
    if (!tok) {
        fuzz_note("refused", err);
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, (const char *)text, tlen, &ids, &n, err, sizeof err) == 0) {
        fuzz_note("accepted; tokens of the text", n ? "some" : "none");
        size_t len;
        free(tokenizer_decode_len(tok, ids, n, &len));
        free(ids);
    }
    tokenizer_free(tok);
    return 0;
}

#endif
