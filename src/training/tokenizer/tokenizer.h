/* Tokenizer interface (Megatron's megatron/training/tokenizer). Implementations:
 *   ByteLevel             ids 0..255 are the bytes of UTF-8 text, 256 is the end-of-document
 *                         token; vocab_size 257.
 *   NullTokenizer         (Megatron's) text is already whitespace-separated integer ids < V;
 *                         vocab_size V + 1, end-of-document id V.  Needs --vocab-size V.
 *   GPT2BPETokenizer      GPT-2's byte-level BPE from --vocab-file (vocab.json) and
 *                         --merge-file (merges.txt); end of document '<|endoftext|>'
 *                         (gpt2_bpe.c).
 *   HuggingFaceTokenizer  BPE of a Hugging Face tokenizer directory or tokenizer.json
 *                         (--tokenizer-model): byte-level (GPT-2, GPT-NeoX, Qwen2 style) or
 *                         Llama 2's SentencePiece style (hf_tokenizer.c, hf_dir.c).
 * The two BPE tokenizers share the engine of bpe.c; docs/DATA.md describes them. */
#ifndef MEGADLM_TRAINING_TOKENIZER_H
#define MEGADLM_TRAINING_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* What selects and loads a tokenizer: the flags of the same names. */
typedef struct {
    const char *type;            /* --tokenizer-type */
    int vocab_size;              /* --vocab-size (NullTokenizer only) */
    const char *vocab_file;      /* --vocab-file (GPT2BPETokenizer) */
    const char *merge_file;      /* --merge-file (GPT2BPETokenizer) */
    const char *tokenizer_model; /* --tokenizer-model (HuggingFaceTokenizer): dir or file */
} tokenizer_options;

/* The tokenizer flags, parsed the same way by every subcommand (train's table in arguments.c
 * has the same names and checks): a subcommand puts TOKENIZER_LONG_OPTIONS (or only the file
 * flags, TOKENIZER_FILE_LONG_OPTIONS) in its getopt_long table and hands every option it
 * returns to tokenizer_option first. */
enum {
    TOKENIZER_OPT_TYPE = 0x7400, /* above any character a subcommand uses for its own flags */
    TOKENIZER_OPT_VOCAB_SIZE,
    TOKENIZER_OPT_VOCAB_FILE,
    TOKENIZER_OPT_MERGE_FILE,
    TOKENIZER_OPT_MODEL
};
#define TOKENIZER_FILE_LONG_OPTIONS                                                               \
    {"vocab-file", required_argument, 0, TOKENIZER_OPT_VOCAB_FILE},                               \
        {"merge-file", required_argument, 0, TOKENIZER_OPT_MERGE_FILE},                           \
        {"tokenizer-model", required_argument, 0, TOKENIZER_OPT_MODEL}
#define TOKENIZER_LONG_OPTIONS                                                                    \
    {"tokenizer-type", required_argument, 0, TOKENIZER_OPT_TYPE},                                 \
        {"vocab-size", required_argument, 0, TOKENIZER_OPT_VOCAB_SIZE}, TOKENIZER_FILE_LONG_OPTIONS
/* The --help lines of TOKENIZER_LONG_OPTIONS (each subcommand adds what is required for it). */
#define TOKENIZER_OPTIONS_HELP                                                                    \
    "  --tokenizer-type TYPE   ByteLevel, NullTokenizer, GPT2BPETokenizer or\n"                    \
    "                          HuggingFaceTokenizer\n"                                            \
    "  --vocab-size V          NullTokenizer: ids 0..V-1, end-of-document V\n"                     \
    "  --vocab-file FILE       GPT2BPETokenizer: vocab.json (encoder.json)\n"                      \
    "  --merge-file FILE       GPT2BPETokenizer: merges.txt (vocab.bpe)\n"                         \
    "  --tokenizer-model PATH  HuggingFaceTokenizer: a Hugging Face tokenizer directory\n"      \
    "                          (tokenizer.json or vocab.json + merges.txt, with\n"              \
    "                          tokenizer_config.json, special_tokens_map.json) or a\n"          \
    "                          tokenizer.json\n"
/* getopt_long's option c with its argument: 1 when it is a tokenizer flag (stored in o, which
 * keeps pointing at arg), 0 when it is not one; -1 with "--vocab-size: expected a positive
 * integer, found '...'" in err. */
int tokenizer_option(tokenizer_options *o, int c, const char *arg, char *err, size_t errlen);

/* Returns NULL and writes a message naming the flag (and the file and field) into err. */
tokenizer *tokenizer_create_opts(const tokenizer_options *o, char *err, size_t errlen);
/* type: "ByteLevel" or "NullTokenizer" (vocab_size used by NullTokenizer only); the file-based
 * types need tokenizer_create_opts. */
tokenizer *tokenizer_create(const char *type, int vocab_size, char *err, size_t errlen);
void tokenizer_free(tokenizer *tok);

const char *tokenizer_type(const tokenizer *tok);
int tokenizer_vocab_size(const tokenizer *tok); /* including the end-of-document id */
int tokenizer_eod(const tokenizer *tok);
/* The bos_token / pad_token / mask_token ids of a HuggingFaceTokenizer directory's
 * tokenizer_config.json / special_tokens_map.json; -1 when not set (and for the other types).
 * Megatron's _HuggingFaceTokenizer exposes only eod; these are for display and checks. */
int tokenizer_bos(const tokenizer *tok);
int tokenizer_pad(const tokenizer *tok);
int tokenizer_mask(const tokenizer *tok);

/* Encodes len bytes of text (a HuggingFaceTokenizer directory whose tokenizer_config.json sets
 * add_bos_token puts its bos first, as Megatron's tokenize() gets it from transformers).
 * *ids is malloc'd (caller frees), *n its length. 0 on success,
 * -1 with a message in err (e.g. NullTokenizer: "token 'x' at byte 12 is not an integer"). */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int32_t **ids,
                     size_t *n, char *err, size_t errlen);
/* Decodes ids into a malloc'd NUL-terminated string (end-of-document ids are dropped, and so
 * are ids outside the vocabulary that a model may sample from the padded rows). *len, when
 * not NULL, receives the length (the text may hold NUL bytes). */
char *tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n);
char *tokenizer_decode_len(const tokenizer *tok, const int32_t *ids, size_t n, size_t *len);

#endif
