/* Fuzz target: GPT2BPETokenizer's loader (vocab.json + merges.txt) through
 * tokenizer_create_opts, as --vocab-file / --merge-file reach it. Input: vocab.json, FUZZ_SEP,
 * merges.txt, optionally FUZZ_SEP and a text. A tokenizer that loads then encodes the text (a
 * fixed sample when none is given) and decodes the ids. */
#include "fuzz/fuzz_tokenizer_util.h"

#include "training/tokenizer/tokenizer.h"

static const char SAMPLE[] = "Hello world! <|endoftext|> In the beginning\n\tcaf\xc3\xa9 \xff 12345";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char vocab[PATH_MAX], merges[PATH_MAX];
    if (!vocab[0]) {
        fuzz_path(vocab, sizeof vocab, "vocab.json");
        fuzz_path(merges, sizeof merges, "merges.txt");
    }
    size_t vlen, rest_len, mlen, tlen;
    const uint8_t *rest, *text;
    fuzz_split(data, size, &vlen, &rest, &rest_len);
    fuzz_split(rest, rest_len, &mlen, &text, &tlen);
    fuzz_write(vocab, data, vlen);
    fuzz_write(merges, rest, mlen);
    tokenizer_options o = {.type = "GPT2BPETokenizer", .vocab_file = vocab, .merge_file = merges};
    return fuzz_tokenizer(&o, text, tlen, SAMPLE);
}
