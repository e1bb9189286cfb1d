/* Reading a tokenizer file (vocab.json, merges.txt, tokenizer.json and the JSON files of a
 * tokenizer directory) before anything parses it, refusing what Megatron's Python readers and
 * Hugging Face's tokenizers refuse and what would otherwise hang or exhaust memory:
 *   - a path that is not a regular file (a FIFO would block forever, /dev/zero never ends);
 *   - a file over TOKENIZER_FILE_MAX_BYTES (the largest published tokenizer.json files are
 *     tens of MB; the parsed JSON takes several times the text);
 *   - text that is not valid UTF-8 (Python's open(..., encoding='utf-8') and serde_json both
 *     refuse it), named by byte, line and column;
 *   - JSON files only: a string holding a NUL character, escaped ("\u0000") or raw. The JSON
 *     reader (cJSON) ends its strings at a NUL, so "!\u0000x" would silently become "!";
 *     megadlm refuses the file instead (Hugging Face keeps such a key; no published
 *     tokenizer has one: a byte-level vocabulary spells byte 0 as U+0100). A raw control
 *     character in a string is invalid JSON (serde_json refuses it too). */
#ifndef MEGADLM_TRAINING_TOKENIZER_TOKENIZER_FILE_H
#define MEGADLM_TRAINING_TOKENIZER_TOKENIZER_FILE_H

#include <stddef.h>

#define TOKENIZER_FILE_MAX_BYTES ((size_t)256 << 20) /* 256 MiB */

/* The error of a --tokenizer-model's content, the same shape from the directory reader and the
 * tokenizer.json parser: "--tokenizer-model MODEL[/FILE]: [FIELD: ]message" into err (the
 * message cut at 511 bytes); returns -1. */
int tokenizer_model_fail(char *err, size_t errlen, const char *model, const char *file,
                         const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Reads path (given by `flag`, for messages) whole: NUL-terminated, *len bytes, malloc'ed.
 * json: also the string checks above. NULL with "FLAG PATH: ..." in err. */
char *tokenizer_read_file(const char *flag, const char *path, int json, size_t *len, char *err,
                          size_t errlen);

/* The checks alone on text[len] (for tests and for text read elsewhere): 0, or -1 with
 * "byte N (line L, column C): ..." in err. */
int tokenizer_check_text(const char *text, size_t len, int json, char *err, size_t errlen);

#endif
