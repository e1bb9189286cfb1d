/* Byte-level BPE, the engine under GPT2BPETokenizer (gpt2_bpe.c) and HuggingFaceTokenizer
 * (hf_tokenizer.c). Private to src/training/tokenizer/.
 *
 * encode(text):
 *   0. a vocabulary without tokens for the bytes UTF-8 never holds (GPT-NeoX) first decodes
 *      text that is not UTF-8 lossily (U+FFFD), the string HF would be handed;
 *   1. added tokens (HF only) are matched first, leftmost-longest: those with normalized
 *      false on the text, those with normalized true on the NFC of the text between them
 *      (bpe_add_special);
 *   2. the text between them is cut into maximal runs of valid UTF-8; an invalid byte is a
 *      piece of its own (GPT-2 and HF need decoded text; this keeps encode lossless);
 *   3. a valid run (normalized in step 1 when HF's normalizer is NFC) is pre-tokenized by
 *      the regex steps in order
 *      (each step splits every piece of the previous one; matches and the gaps between them
 *      are both pieces: HF's "Isolated"). `\s`/`\S` in a pattern mean Unicode White_Space, as
 *      in Python's `regex` module (GPT-2, Megatron) and Oniguruma (HF tokenizers);
 *   4. each piece's bytes become the byte-level symbols (GPT-2's bytes_to_unicode) and are
 *      merged by rank exactly as GPT-2's encoder.py does: repeatedly take the adjacent pair of
 *      lowest rank and merge all its occurrences left to right.
 * Ids are the vocabulary's; merges are resolved to ids at load time. */
#ifndef MEGADLM_TRAINING_TOKENIZER_BPE_H
#define MEGADLM_TRAINING_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_model bpe_model;

bpe_model *bpe_new(void);
void bpe_free(bpe_model *m);

/* Ids index dense tables (id -> token), so an id sizes them: ids (and merge ranks) above
 * BPE_MAX_ID are refused. The largest real vocabularies have about 2^18 ids. */
#define BPE_MAX_ID ((1 << 24) - 1)

/* Vocabulary entry: the byte-level token string (UTF-8) and its id (0 .. BPE_MAX_ID). -1 if
 * the id is out of range or the id or the string is already taken (err says which). */
int bpe_add_vocab(bpe_model *m, const char *tok, size_t len, int id, char *err, size_t errlen);
/* Id of a vocabulary string, or -1. */
int bpe_vocab_id(const bpe_model *m, const char *tok, size_t len);
/* Merge of rank `rank` (its position in the merges list): a + b -> the vocabulary entry a||b.
 * All three must be in the vocabulary (-1 and a message otherwise). A pair listed twice keeps
 * its last rank, as Python's dict() and HF do. */
int bpe_add_merge(bpe_model *m, const char *a, size_t al, const char *b, size_t bl, int rank,
                  char *err, size_t errlen);
/* Appends a pre-tokenizer step: split every piece by the regex (may be NULL: no split) after
 * prepending a space to pieces that do not start with one when prefix_space (HF ByteLevel's
 * add_prefix_space). literal: the pattern is a plain string (HF Split {"String": ...}).
 * -1 with PCRE2's message (and the offset) on a bad pattern. */
int bpe_add_split(bpe_model *m, const char *pattern, int literal, int prefix_space, char *err,
                  size_t errlen);
/* GPT-2's pre-tokenizer regex (also HF's ByteLevel use_regex). */
extern const char *const BPE_GPT2_PATTERN;
/* Added token (HF added_tokens), as Hugging Face's AddedVocabulary matches it: tokens with
 * normalized false are found first, leftmost-longest, in the text as given; the text between
 * them is normalized (NFC) and searched for the tokens with normalized true (their content is
 * normalized too); only what lies between both kinds is pre-tokenized and merged. lstrip /
 * rstrip absorb the White_Space before/after a match; single_word drops a match that has a
 * word character (Rust regex's \w) right before or after it. Its id may or may not be in the
 * vocabulary. */
typedef struct {
    int lstrip, rstrip, single_word, normalized;
} bpe_added_flags;
int bpe_add_special(bpe_model *m, const char *content, size_t len, int id,
                    const bpe_added_flags *f, char *err, size_t errlen);
void bpe_set_nfc(bpe_model *m, int on);           /* HF normalizer NFC */
/* SentencePiece-style BPE (HF's BPE with byte_fallback, Llama 2), set before the vocabulary is
 * added: the text between added tokens gets U+2581 in front and for every ' ' (Llama 2's
 * Prepend + Replace normalizer) and is one piece (no pre-tokenizer); its first symbols are its
 * characters, a character without a token its <0xNN> byte tokens; merges as for byte-level
 * BPE. Decoding maps <0xNN> to the byte and U+2581 to ' ' (the caller strips the first
 * space). Text that is not UTF-8 is decoded lossily first. */
void bpe_set_sentencepiece(bpe_model *m);
int bpe_is_sentencepiece(const bpe_model *m);
void bpe_set_ignore_merges(bpe_model *m, int on); /* HF BPE ignore_merges */
/* Finishes loading: the 256 byte symbols must be in the vocabulary, except the 13 bytes that
 * never occur in UTF-8 (0xC0, 0xC1, 0xF5..0xFF; GPT-NeoX's vocabulary lacks them). Without
 * them, text that is not valid UTF-8 is first decoded as Rust's String::from_utf8_lossy and
 * Python's errors="replace" do (each maximal ill-formed subsequence becomes U+FFFD), which is
 * the string Hugging Face's tokenizer would be given; with all 256, an invalid byte is a token
 * of its own (lossless). */
int bpe_finish(bpe_model *m, char *err, size_t errlen);

int bpe_vocab_size(const bpe_model *m); /* largest id + 1 */
/* The id Hugging Face's AddedVocabulary gives a new added token, whatever id its file names:
 * its vocabulary id when the content is a vocabulary entry, else one above the largest added
 * id when that is at or above the number of vocabulary entries, else that number. */
int bpe_hf_added_id(const bpe_model *m, const char *content, size_t len);
/* Id of an added token's content, or -1. */
int bpe_added_id(const bpe_model *m, const char *content);

/* Appends the ids of len bytes of text to *ids (realloc'd; *n, *cap updated). 0 or -1 (out of
 * memory). Thread-safe: the merge cache is sharded and locked. */
int bpe_encode(const bpe_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
               size_t *cap);
/* The bytes of one id (byte-level decoded; added tokens verbatim); NULL for an unknown id. */
const char *bpe_id_bytes(const bpe_model *m, int id, size_t *len);

/* Loaders. Messages name the flag and the file. *eod: the end-of-document id. */
bpe_model *gpt2_bpe_load(const char *vocab_file, const char *merge_file, int *eod, char *err,
                         size_t errlen);
/* The special token ids of a Hugging Face tokenizer (-1: none). eod is Megatron's
 * _HuggingFaceTokenizer.eod, the tokenizer's eos_token_id. */
typedef struct {
    int eod, bos, pad, mask, unk;
    int add_bos; /* tokenizer_config.json's add_bos_token: every encoding starts with bos */
} hf_special_ids;
/* The parts of HuggingFaceTokenizer; tokenizer.c picks one by what --tokenizer-model names
 * (a directory or a file), so that neither part calls the other's loader:
 *   hf_tokenizer_load  a lone tokenizer.json (hf_tokenizer.c);
 *   hf_json_load       a tokenizer.json read into m (not finished: a directory adds tokens
 *                      first; *first_special: the first special added token's id or -1);
 *   hf_dir_load        a tokenizer directory (tokenizer.json or vocab.json + merges.txt, with
 *                      tokenizer_config.json, special_tokens_map.json, added_tokens.json;
 *                      hf_dir.c).
 * Messages name --tokenizer-model and the file. */
bpe_model *hf_tokenizer_load(const char *path, hf_special_ids *ids, char *err, size_t errlen);
int hf_json_load(const char *path, bpe_model *m, int *first_special, char *err, size_t errlen);
bpe_model *hf_dir_load(const char *dir, hf_special_ids *ids, char *err, size_t errlen);
/* The flags of an added token object (tokenizer.json's added_tokens, tokenizer_config.json's
 * added_tokens_decoder; normalized defaults to !special as in HF's AddedToken); *special too.
 * -1 when one is not a boolean. */
struct cJSON;
int hf_added_flags(const struct cJSON *it, bpe_added_flags *f, int *special);
/* GPT-2's vocab.json + merges.txt with an optional prefix space (HF ByteLevel's
 * add_prefix_space), not finished (bpe_finish); messages start with `flag` and name the
 * files. */
bpe_model *gpt2_bpe_load_files(const char *flag, const char *vocab_file, const char *merge_file,
                               int prefix_space, char *err, size_t errlen);

#endif
