/* The prompt template of `megadlm preprocess --sft`: sft_template.h. */
#include "tools/sft_template.h"

#include <stdlib.h>
#include <string.h>

#include "core/util/alloc.h"
#include "core/util/error.h"

/* A template is a list of pieces: text (which may hold the prompt's place) or a special id. */
typedef struct {
    char *text;   /* NULL for a special token */
    size_t len;
    int has_prompt_at; /* -1, or the offset in text where the prompt goes */
    int32_t id;
} piece;

struct sft_template {
    piece *p;
    int n;
    int32_t *prefix;   /* the ids every encoding starts with (a BOS with add_bos_token) */
    size_t bos_prefix; /* their count */
};

static void add_piece(sft_template *t, piece pc) {
    t->p = xrealloc(t->p, (size_t)(t->n + 1) * sizeof(piece), "template pieces");
    t->p[t->n++] = pc;
}

/* Ends the current text piece (if it has text or the prompt) and starts a new one. */
static void flush_text(sft_template *t, char *buf, size_t *len, int *prompt_at) {
    if (*len == 0 && *prompt_at < 0) return;
    piece pc = {.text = xmalloc(*len + 1, "template text"), .len = *len,
                .has_prompt_at = *prompt_at};
    memcpy(pc.text, buf, *len);
    pc.text[*len] = 0;
    add_piece(t, pc);
    *len = 0;
    *prompt_at = -1;
}

/* The id of special token `name` ({eos}, {bos}, {pad}, {mask}), or -1 with a message. */
static int32_t special_id(const char *name, size_t n, const tokenizer *tok, char *err,
                          size_t errlen) {
    int id = -2;
    if (n == 3 && !memcmp(name, "eos", 3)) id = tokenizer_eod(tok);
    else if (n == 3 && !memcmp(name, "bos", 3)) id = tokenizer_bos(tok);
    else if (n == 3 && !memcmp(name, "pad", 3)) id = tokenizer_pad(tok);
    else if (n == 4 && !memcmp(name, "mask", 4)) id = tokenizer_mask(tok);
    if (id == -2)
        err_set(err, errlen,
                "--prompt-template: unknown placeholder '{%.*s}': expected {prompt}, {bos}, "
                "{eos}, {pad} or {mask} (write {{ and }} for literal braces)",
                (int)n, name);
    else if (id < 0)
        err_set(err, errlen, "--prompt-template: {%.*s}: the %s tokenizer has no %.*s token",
                (int)n, name, tokenizer_type(tok), (int)n, name);
    return id < 0 ? -1 : id;
}

/* Reads one "{name}" at spec[*i] (spec[*i] == '{'); appends to the text or the pieces. */
static int placeholder(sft_template *t, const char *spec, size_t *i, const tokenizer *tok,
                       char *buf, size_t *len, int *prompt_at, int *prompts, char *err,
                       size_t errlen) {
    const char *close = strchr(spec + *i, '}');
    if (!close) {
        err_set(err, errlen, "--prompt-template: '{' at byte %zu is never closed (write {{ for "
                             "a literal brace)", *i);
        return -1;
    }
    const char *name = spec + *i + 1;
    size_t n = (size_t)(close - name);
    *i = (size_t)(close - spec);
    if (n == 6 && !memcmp(name, "prompt", 6)) {
        if (++*prompts > 1) {
            err_set(err, errlen, "--prompt-template: {prompt} given twice, expected once");
            return -1;
        }
        *prompt_at = (int)*len;
        return 0;
    }
    int32_t id = special_id(name, n, tok, err, errlen);
    if (id < 0) return -1;
    flush_text(t, buf, len, prompt_at);
    add_piece(t, (piece){.id = id, .has_prompt_at = -1});
    return 0;
}

sft_template *sft_template_parse(const char *spec, const tokenizer *tok, char *err,
                                 size_t errlen) {
    if (!spec) spec = "{prompt}";
    sft_template *t = xcalloc(1, sizeof *t, "the prompt template");
    size_t L = strlen(spec), len = 0;
    char *buf = xmalloc(L + 1, "template text");
    int prompt_at = -1, prompts = 0, rc = 0;
    for (size_t i = 0; i < L && rc == 0; i++) {
        if ((spec[i] == '{' || spec[i] == '}') && spec[i + 1] == spec[i]) {
            buf[len++] = spec[i++];
        } else if (spec[i] == '{') {
            rc = placeholder(t, spec, &i, tok, buf, &len, &prompt_at, &prompts, err, errlen);
        } else if (spec[i] == '}') {
            err_set(err, errlen, "--prompt-template: '}' at byte %zu without '{' (write }} for "
                                 "a literal brace)", i);
            rc = -1;
        } else {
            buf[len++] = spec[i];
        }
    }
    if (rc == 0 && prompts == 0) {
        err_set(err, errlen, "--prompt-template '%s': expected {prompt} where the prompt goes",
                spec);
        rc = -1;
    }
    if (rc == 0) flush_text(t, buf, &len, &prompt_at);
    free(buf);
    if (rc == 0 && tokenizer_encode(tok, "", 0, &t->prefix, &t->bos_prefix, err, errlen) != 0)
        rc = -1;
    if (rc == 0) return t;
    sft_template_free(t);
    return NULL;
}

void sft_template_free(sft_template *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->p[i].text);
    free(t->p);
    free(t->prefix);
    free(t);
}

/* Appends ids[skip..n) to *out (length *on). */
static void append_ids(int32_t **out, size_t *on, const int32_t *ids, size_t n, size_t skip) {
    if (skip >= n) return;
    *out = xrealloc(*out, (*on + n - skip + 1) * sizeof(int32_t), "a document's tokens");
    memcpy(*out + *on, ids + skip, (n - skip) * sizeof(int32_t));
    *on += n - skip;
}

int sft_template_prompt(const sft_template *t, const tokenizer *tok, const char *prompt,
                        size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    *ids = NULL;
    *n = 0;
    /* the tokenizer's BOS prefix comes once, at the start of the document, whatever the
     * template starts with; every encoded piece drops its own */
    append_ids(ids, n, t->prefix, t->bos_prefix, 0);
    for (int i = 0; i < t->n; i++) {
        const piece *pc = &t->p[i];
        if (!pc->text) {
            append_ids(ids, n, &pc->id, 1, 0);
            continue;
        }
        size_t tl = pc->len + (pc->has_prompt_at >= 0 ? len : 0);
        char *text = xmalloc(tl + 1, "a templated prompt");
        size_t at = pc->has_prompt_at >= 0 ? (size_t)pc->has_prompt_at : pc->len;
        memcpy(text, pc->text, at);
        if (pc->has_prompt_at >= 0) memcpy(text + at, prompt, len);
        memcpy(text + at + (tl - pc->len), pc->text + at, pc->len - at);
        int32_t *piece_ids = NULL;
        size_t pn = 0;
        int rc = tokenizer_encode(tok, text, tl, &piece_ids, &pn, err, errlen);
        free(text);
        if (rc != 0) {
            free(*ids);
            *ids = NULL;
            return -1;
        }
        append_ids(ids, n, piece_ids, pn, t->bos_prefix);
        free(piece_ids);
    }
    return 0;
}

int sft_template_response(const sft_template *t, const tokenizer *tok, const char *text,
                          size_t len, int32_t **ids, size_t *n, char *err, size_t errlen) {
    int32_t *raw = NULL;
    size_t rn = 0;
    *ids = NULL;
    *n = 0;
    if (tokenizer_encode(tok, text, len, &raw, &rn, err, errlen) != 0) return -1;
    append_ids(ids, n, raw, rn, t->bos_prefix);
    free(raw);
    return 0;
}
