/* Tokenizer interface (Megatron's megatron/training/tokenizer). Implementations now:
 *   ByteLevel      ids 0..255 are the bytes of UTF-8 text, 256 is the end-of-document token;
 *                  vocab_size 257.
 *   NullTokenizer  (Megatron's) text is already whitespace-separated integer ids < V;
 *                  vocab_size V + 1, end-of-document id V.  Needs --vocab-size V.
 * GPT-2 BPE and Hugging Face tokenizers come later behind the same interface. */
#ifndef MEGADLM_TRAINING_TOKENIZER_H
#define MEGADLM_TRAINING_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer;

/* type: "ByteLevel" or "NullTokenizer" (vocab_size used by NullTokenizer only).
 * Returns NULL and writes a message naming --tokenizer-type / --vocab-size into err. */
tokenizer *tokenizer_create(const char *type, int vocab_size, char *err, size_t errlen);
void tokenizer_free(tokenizer *tok);

const char *tokenizer_type(const tokenizer *tok);
int tokenizer_vocab_size(const tokenizer *tok); /* including the end-of-document id */
int tokenizer_eod(const tokenizer *tok);

/* Encodes len bytes of text. *ids is malloc'd (caller frees), *n its length. 0 on success,
 * -1 with a message in err (e.g. NullTokenizer: "token 'x' at byte 12 is not an integer"). */
int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int32_t **ids,
                     size_t *n, char *err, size_t errlen);
/* Decodes ids into a malloc'd NUL-terminated string (end-of-document ids are dropped,
 * ByteLevel ids >= 257 that a model may sample from the padded vocabulary too). */
char *tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n);

#endif
