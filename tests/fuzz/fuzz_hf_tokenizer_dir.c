/* Fuzz target: HuggingFaceTokenizer's directory loader through tokenizer_create_opts, as
 * --tokenizer-model DIR reaches it. Input: tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json and added_tokens.json separated by FUZZ_SEP, optionally FUZZ_SEP and
 * a text; an empty part leaves its file out of the directory. A tokenizer that loads then
 * encodes the text (a fixed sample when none is given) and decodes the ids. */
#include "fuzz/fuzz_tokenizer_util.h"

#include "training/tokenizer/tokenizer.h"

static const char SAMPLE[] = "Hello world! <|endoftext|><|mask_token|> In the  beginning\n\tcaf"
                             "\xc3\xa9 \xff\xc0\x80 12345 e\xcc\x81 <|pad_token|>";

static const char *const FILES[] = {"tokenizer.json", "tokenizer_config.json",
                                    "special_tokens_map.json", "added_tokens.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[PATH_MAX];
    if (!dir[0]) {
        fuzz_path(dir, sizeof dir, "tokenizer");
        fuzz_mkdir(dir);
    }
    const uint8_t *rest = data;
    size_t rest_len = size;
    for (int i = 0; i < 4; i++) {
        size_t len, next_len;
        const uint8_t *next;
        char path[PATH_MAX + 64];
        fuzz_split(rest, rest_len, &len, &next, &next_len);
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        if (len) fuzz_write(path, rest, len);
        else unlink(path);
        rest = next;
        rest_len = next_len;
    }
    tokenizer_options o = {.type = "HuggingFaceTokenizer", .tokenizer_model = dir};
    return fuzz_tokenizer(&o, rest, rest_len, SAMPLE);
}
