/* Fuzz target: the input reader and JSONL line parser of `megadlm preprocess`
 * (preprocess_encode_stream: the lines, JSON objects, --json-keys values as strings or lists of
 * strings, exactly as preprocess encodes them). Input: the input file. It is read twice: as
 * .jsonl with --json-keys 'text title' --append-eod and ByteLevel, and as .txt (documents
 * separated by blank lines) with NullTokenizer (--vocab-size 50000), whose ids are parsed from
 * the text. */
#include "fuzz/fuzz_util.h"

#include "tools/tools.h"
#include "training/tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static tokenizer *byte_level, *null_tok;
    char err[512];
    if (!byte_level) {
        byte_level = tokenizer_create("ByteLevel", 0, err, sizeof err);
        null_tok = tokenizer_create("NullTokenizer", 50000, err, sizeof err);
        if (!byte_level || !null_tok) {
            fprintf(stderr, "fuzz: %s\n", err);
            abort();
        }
    }
    if (size == 0) return 0;
    char k0[] = "text", k1[] = "title";
    char *keys[2] = {k0, k1};
    uint64_t tokens, malformed, failed;
    for (int txt = 0; txt < 2; txt++) {
        FILE *f = fmemopen((void *)data, size, "rb");
        if (!f) abort();
        long n = preprocess_encode_stream(f, txt, txt ? null_tok : byte_level, txt ? 1 : 2, keys,
                                          !txt, &tokens, &malformed, &failed);
        fclose(f);
        if (n < 0) abort();
        char msg[128];
        snprintf(msg, sizeof msg, "%ld items, %llu tokens, %llu malformed, %llu failed", n,
                 (unsigned long long)tokens, (unsigned long long)malformed,
                 (unsigned long long)failed);
        fuzz_note(txt ? ".txt" : ".jsonl", msg);
    }
    return 0;
}
