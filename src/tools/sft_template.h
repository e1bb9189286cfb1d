/* `megadlm preprocess --sft`: the prompt template and the encoding of a prompt/response pair.
 *
 * --prompt-template T wraps each prompt before it is encoded: T's text with "{prompt}" (once)
 * replaced by the prompt; "{bos}", "{eos}", "{pad}", "{mask}" insert the id of that special
 * token of the tokenizer (eos: the end-of-document id; the others: a Hugging Face directory's
 * bos_token / pad_token / mask_token), "{{" and "}}" are literal braces. The text between
 * special tokens is encoded as one piece each (the prompt inside its surrounding text, so BPE
 * merges across the boundary as it would on the whole string); added tokens of a Hugging Face
 * tokenizer written in T as text (e.g. "<|im_start|>") are matched by the tokenizer itself.
 * The response is encoded on its own after the prompt. A tokenizer that puts a BOS first in
 * every encoding (add_bos_token) gets it once, first in the document (before the template's
 * own first token). */
#ifndef MEGADLM_TOOLS_SFT_TEMPLATE_H
#define MEGADLM_TOOLS_SFT_TEMPLATE_H

#include <stddef.h>
#include <stdint.h>

#include "training/tokenizer/tokenizer.h"

typedef struct sft_template sft_template;

/* NULL with a message naming --prompt-template and what is wrong. spec NULL: "{prompt}". */
sft_template *sft_template_parse(const char *spec, const tokenizer *tok, char *err,
                                 size_t errlen);
void sft_template_free(sft_template *t);

/* The ids of the wrapped prompt (*ids malloc'd). 0, or -1 with the tokenizer's message. */
int sft_template_prompt(const sft_template *t, const tokenizer *tok, const char *prompt,
                        size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);
/* The ids of a response (without the tokenizer's BOS; no end-of-document appended). */
int sft_template_response(const sft_template *t, const tokenizer *tok, const char *text,
                          size_t len, int32_t **ids, size_t *n, char *err, size_t errlen);

#endif
