/* ByteLevel and NullTokenizer, and the dispatch to the BPE tokenizers (see tokenizer.h). */
#include "training/tokenizer/tokenizer.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "training/tokenizer/bpe.h"
#include "core/util/error.h"
#include "core/util/parse.h"

enum { TOK_BYTELEVEL = 0, TOK_NULL = 1, TOK_GPT2 = 2, TOK_HF = 3 };

static const char *const KIND_NAMES[] = {"ByteLevel", "NullTokenizer", "GPT2BPETokenizer",
                                         "HuggingFaceTokenizer"};

struct tokenizer {
    int kind;
    int vocab_size; /* including eod */
    int eod;
    int bos, pad, mask; /* HuggingFaceTokenizer's, -1 when none */
    int add_bos;        /* every encoding starts with bos (add_bos_token) */
    int strip_space;    /* decoding drops one leading space (SentencePiece style's Strip) */
    bpe_model *bpe; /* GPT2BPETokenizer, HuggingFaceTokenizer */
};

/* HuggingFaceTokenizer's --tokenizer-model: a tokenizer directory (hf_dir.c) or a lone
 * tokenizer.json (hf_tokenizer.c). */
static bpe_model *hf_load(const char *path, hf_special_ids *ids, char *err, size_t errlen) {
    *ids = (hf_special_ids){-1, -1, -1, -1, -1, 0};
    if (!path || !path[0]) {
        snprintf(err, errlen, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model "
                              "(a tokenizer directory or a tokenizer.json)");
        return NULL;
    }
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return hf_dir_load(path, ids, err, errlen);
    return hf_tokenizer_load(path, ids, err, errlen);
}

tokenizer *tokenizer_create(const char *type, int vocab_size, char *err, size_t errlen) {
    tokenizer_options o = {.type = type, .vocab_size = vocab_size};
    return tokenizer_create_opts(&o, err, errlen);
}

/* The kind a --tokenizer-type name means (KIND_NAMES, the one list of names), or -1. */
static int kind_of(const char *type) {
    for (int k = 0; type && k < (int)(sizeof KIND_NAMES / sizeof *KIND_NAMES); k++)
        if (strcmp(type, KIND_NAMES[k]) == 0) return k;
    return -1;
}

tokenizer *tokenizer_create_opts(const tokenizer_options *o, char *err, size_t errlen) {
    const char *type = o->type;
    int vocab_size = o->vocab_size;
    int kind = kind_of(type);
    if (kind == TOK_GPT2 || kind == TOK_HF) {
        int is_gpt2 = kind == TOK_GPT2;
        hf_special_ids sp = {-1, -1, -1, -1, -1, 0};
        char e2[1024];
        bpe_model *m = is_gpt2
                           ? gpt2_bpe_load(o->vocab_file, o->merge_file, &sp.eod, e2, sizeof e2)
                           : hf_load(o->tokenizer_model, &sp, e2, sizeof e2);
        if (!m) {
            err_set(err, errlen, "%s", e2);
            return NULL;
        }
        tokenizer *t = calloc(1, sizeof *t);
        if (!t) {
            bpe_free(m);
            err_set(err, errlen, "out of memory");
            return NULL;
        }
        t->kind = is_gpt2 ? TOK_GPT2 : TOK_HF;
        t->bpe = m;
        t->eod = sp.eod;
        t->bos = sp.bos;
        t->pad = sp.pad;
        t->mask = sp.mask;
        t->add_bos = sp.add_bos;
        t->strip_space = bpe_is_sentencepiece(m);
        t->vocab_size = bpe_vocab_size(m);
        return t;
    }
    if (kind == TOK_NULL) {
        if (vocab_size <= 0) {
            err_set(err, errlen,
                   "--vocab-size: NullTokenizer needs a vocabulary size V > 0 (ids 0..V-1, "
                   "end-of-document V), found %d",
                   vocab_size);
            return NULL;
        }
    } else if (kind != TOK_BYTELEVEL) {
        err_set(err, errlen,
               "--tokenizer-type: expected ByteLevel, NullTokenizer, GPT2BPETokenizer or "
               "HuggingFaceTokenizer, found '%s'",
               type ? type : "");
        return NULL;
    }
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        err_set(err, errlen, "out of memory");
        return NULL;
    }
    t->kind = kind;
    t->bos = t->pad = t->mask = -1;
    if (kind == TOK_BYTELEVEL) {
        t->vocab_size = 257;
        t->eod = 256;
    } else {
        t->vocab_size = vocab_size + 1;
        t->eod = vocab_size;
    }
    return t;
}

void tokenizer_free(tokenizer *tok) {
    if (!tok) return;
    bpe_free(tok->bpe);
    free(tok);
}

const char *tokenizer_type(const tokenizer *tok) { return KIND_NAMES[tok->kind]; }
int tokenizer_vocab_size(const tokenizer *tok) { return tok->vocab_size; }
int tokenizer_eod(const tokenizer *tok) { return tok->eod; }
int tokenizer_bos(const tokenizer *tok) { return tok->bos; }
int tokenizer_pad(const tokenizer *tok) { return tok->pad; }
int tokenizer_mask(const tokenizer *tok) { return tok->mask; }

int tokenizer_encode(const tokenizer *tok, const char *text, size_t len, int32_t **ids,
                     size_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    if (tok->bpe) {
        size_t cap = 0;
        if (tok->add_bos) { /* transformers' post-processor of add_bos_token */
            *ids = malloc(64 * sizeof(int32_t));
            if (*ids) (*ids)[(*n)++] = tok->bos, cap = 64;
        }
        if ((tok->add_bos && !*ids) || bpe_encode(tok->bpe, text, len, ids, n, &cap) != 0) {
            free(*ids);
            *ids = NULL;
            *n = 0;
            err_set(err, errlen, "out of memory encoding %zu bytes", len);
            return -1;
        }
        if (!*ids) *ids = malloc(sizeof(int32_t)); /* empty text: a valid pointer */
        return 0;
    }
    if (tok->kind == TOK_BYTELEVEL) {
        int32_t *out = malloc((len ? len : 1) * sizeof(int32_t));
        if (!out) {
            err_set(err, errlen, "out of memory encoding %zu bytes", len);
            return -1;
        }
        for (size_t i = 0; i < len; i++) out[i] = (unsigned char)text[i];
        *ids = out;
        *n = len;
        return 0;
    }
    /* NullTokenizer: whitespace-separated decimal ids in [0, V) */
    size_t cap = 16, cnt = 0;
    int32_t *out = malloc(cap * sizeof(int32_t));
    if (!out) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    size_t i = 0;
    while (i < len) {
        while (i < len && isspace((unsigned char)text[i])) i++;
        if (i >= len) break;
        size_t start = i;
        while (i < len && !isspace((unsigned char)text[i])) i++;
        size_t tl = i - start;
        char buf[32];
        int ok = tl > 0 && tl < sizeof buf;
        long v = 0;
        if (ok) {
            memcpy(buf, text + start, tl);
            buf[tl] = 0;
            char *e;
            errno = 0;
            v = strtol(buf, &e, 10);
            ok = *e == 0 && errno == 0 && (isdigit((unsigned char)buf[0]) ||
                                           ((buf[0] == '-' || buf[0] == '+') && tl > 1));
        }
        if (!ok) {
            err_set(err, errlen, "token '%.*s' at byte %zu is not an integer",
                   (int)(tl > 40 ? 40 : tl), text + start, start);
            free(out);
            return -1;
        }
        if (v < 0 || v >= tok->eod) {
            err_set(err, errlen, "token '%.*s' at byte %zu is outside [0, %d) (--vocab-size %d)",
                   (int)tl, text + start, start, tok->eod, tok->eod);
            free(out);
            return -1;
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *q = realloc(out, cap * sizeof(int32_t));
            if (!q) {
                free(out);
                err_set(err, errlen, "out of memory");
                return -1;
            }
            out = q;
        }
        out[cnt++] = (int32_t)v;
    }
    *ids = out;
    *n = cnt;
    return 0;
}

char *tokenizer_decode(const tokenizer *tok, const int32_t *ids, size_t n) {
    return tokenizer_decode_len(tok, ids, n, NULL);
}

char *tokenizer_decode_len(const tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    if (tok->bpe) {
        size_t total = 0, l;
        for (size_t i = 0; i < n; i++)
            if (ids[i] != tok->eod && bpe_id_bytes(tok->bpe, ids[i], &l)) total += l;
        char *s = malloc(total + 1);
        if (!s) return NULL;
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
            const char *b;
            if (ids[i] == tok->eod || !(b = bpe_id_bytes(tok->bpe, ids[i], &l))) continue;
            memcpy(s + o, b, l);
            o += l;
        }
        if (tok->strip_space && o > 0 && s[0] == ' ') memmove(s, s + 1, --o);
        s[o] = 0;
        if (len) *len = o;
        return s;
    }
    if (tok->kind == TOK_BYTELEVEL) {
        char *s = malloc(n + 1);
        if (!s) return NULL;
        size_t o = 0;
        for (size_t i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < 256) s[o++] = (char)ids[i];
        s[o] = 0;
        if (len) *len = o;
        return s;
    }
    size_t cap = n * 12 + 1, o = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    s[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == tok->eod) continue;
        o += (size_t)snprintf(s + o, cap - o, o ? " %d" : "%d", (int)ids[i]);
    }
    if (len) *len = o;
    return s;
}

int tokenizer_option(tokenizer_options *o, int c, const char *arg, char *err, size_t errlen) {
    switch (c) {
    case TOKENIZER_OPT_TYPE: o->type = arg; return 1;
    case TOKENIZER_OPT_VOCAB_FILE: o->vocab_file = arg; return 1;
    case TOKENIZER_OPT_MERGE_FILE: o->merge_file = arg; return 1;
    case TOKENIZER_OPT_MODEL: o->tokenizer_model = arg; return 1;
    case TOKENIZER_OPT_VOCAB_SIZE:
        return parse_int_flag("--vocab-size", arg, 1, &o->vocab_size, err, errlen) ? -1 : 1;
    default: return 0;
    }
}
