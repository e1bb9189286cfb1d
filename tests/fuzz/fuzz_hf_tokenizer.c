/* Fuzz target: HuggingFaceTokenizer's loader (tokenizer.json) through tokenizer_create_opts, as
 * --tokenizer-model reaches it. Input: tokenizer.json, optionally FUZZ_SEP and a text. A
 * tokenizer that loads then encodes the text (a fixed sample when none is given) and decodes
 * the ids. */
#include "fuzz/fuzz_tokenizer_util.h"

#include "training/tokenizer/tokenizer.h"

static const char SAMPLE[] = "Hello world! <|endoftext|> In the beginning\n\tcaf\xc3\xa9 \xff 12345 "
                             "e\xcc\x81 <|im_start|>user";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[PATH_MAX];
    if (!path[0]) fuzz_path(path, sizeof path, "tokenizer.json");
    size_t jlen, tlen;
    const uint8_t *text;
    fuzz_split(data, size, &jlen, &text, &tlen);
    fuzz_write(path, data, jlen);
    tokenizer_options o = {.type = "HuggingFaceTokenizer", .tokenizer_model = path};
    return fuzz_tokenizer(&o, text, tlen, SAMPLE);
}
