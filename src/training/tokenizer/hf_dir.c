/* HuggingFaceTokenizer from a tokenizer directory, as Megatron's _HuggingFaceTokenizer loads
 * one with transformers.AutoTokenizer.from_pretrained (a fast tokenizer):
 *   tokenizer.json              the model (hf_tokenizer.c); without it, vocab.json + merges.txt
 *                               as GPT-2's converter builds one (GPT-2's regex, ByteLevel with
 *                               tokenizer_config.json's add_prefix_space, no normalizer);
 *   tokenizer_config.json       the special tokens (bos_token, eos_token, unk_token, sep_token,
 *                               pad_token, cls_token, mask_token, additional_special_tokens; a
 *                               string or {"content": ...}) and added_tokens_decoder;
 *   special_tokens_map.json     the same special tokens; transformers lets this file override
 *                               tokenizer_config.json, so it is read last;
 *   added_tokens.json           {content: id} of added tokens (older directories).
 * Added tokens of these files that the model does not have yet are added (with their flags;
 * added_tokens.json's: normalized unless special), and every special token is an added token
 * (transformers adds them all), at the id HF's add_tokens gives (bpe_hf_added_id).
 * Megatron's eod is eos_token_id: the id of eos_token, which must exist. bos/pad/mask/unk are
 * the ids of those tokens (-1 when not set). add_bos_token true starts every encoding with
 * bos, as transformers' fast tokenizers (and so Megatron's tokenize()) do; add_eos_token true
 * is refused (--append-eod appends the end of document). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util/error.h"
#include "training/tokenizer/bpe.h"
#include "training/tokenizer/tokenizer_file.h"

/* The special-token attributes of transformers' SpecialTokensMixin, in its order. */
static const char *const SPECIAL_KEYS[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                           "pad_token", "cls_token", "mask_token"};
enum { N_SPECIAL = 7, MAX_EXTRA = 4096 };

typedef struct {
    const char *dir;
    char *err;
    size_t errlen;
    cJSON *config, *map, *added; /* the optional files (NULL: absent) */
    const char *special[N_SPECIAL]; /* content of each attribute, NULL: not set */
    const char *extra[MAX_EXTRA];   /* additional_special_tokens */
    int nextra;
} dir_ctx;

/* "--tokenizer-model DIR/FILE: message" (FILE NULL: the directory itself); -1 */
#define dfail(d, file, ...)                                                                    \
    tokenizer_model_fail((d)->err, (d)->errlen, (d)->dir, (file), NULL, __VA_ARGS__)

static void join(char *out, size_t n, const char *dir, const char *file) {
    snprintf(out, n, "%s/%s", dir, file);
}

static int exists(const char *dir, const char *file) {
    char p[PATH_MAX];
    join(p, sizeof p, dir, file);
    return access(p, F_OK) == 0;
}

/* Whether the directory holds `file`: 1, 0 when there is no such name (or a dangling link,
 * as transformers' os.path.isfile sees it), -1 with the reason when it cannot be told (a
 * symbolic link loop, no permission): such a file is not taken for absent. */
static int present(dir_ctx *d, const char *file) {
    char p[PATH_MAX];
    join(p, sizeof p, d->dir, file);
    if (access(p, F_OK) == 0) return 1;
    if (errno == ENOENT || errno == ENOTDIR) return 0;
    return dfail(d, file, "cannot access: %s%s", strerror(errno),
                 errno == ELOOP ? " (a symbolic link loop)" : "");
}

/* An optional JSON file of the directory: 0 with *out NULL when absent. */
static int read_opt(dir_ctx *d, const char *file, cJSON **out) {
    char p[PATH_MAX];
    *out = NULL;
    int here = present(d, file);
    if (here <= 0) return here;
    join(p, sizeof p, d->dir, file);
    size_t len;
    char *text = tokenizer_read_file("--tokenizer-model", p, 1, &len, d->err, d->errlen);
    if (!text) return -1;
    *out = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(*out)) return dfail(d, file, "not a JSON object");
    return 0;
}

/* A special token's value: "content" or {"content": "..."}; NULL when null or absent. */
static const char *token_content(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* The special tokens of one file (a later file overrides an earlier one). */
static int read_specials(dir_ctx *d, const cJSON *f, const char *file) {
    if (!f) return 0;
    for (int k = 0; k < N_SPECIAL; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(f, SPECIAL_KEYS[k]);
        if (!v || cJSON_IsNull(v)) continue;
        if (!token_content(v))
            return dfail(d, file, "%s: expected a string or {\"content\": ...}", SPECIAL_KEYS[k]);
        d->special[k] = token_content(v);
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(f, "additional_special_tokens");
    if (!extra || cJSON_IsNull(extra)) return 0;
    if (!cJSON_IsArray(extra)) return dfail(d, file, "additional_special_tokens: not a list");
    d->nextra = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, extra) {
        if (!token_content(it))
            return dfail(d, file, "additional_special_tokens: expected strings or objects "
                                  "with a \"content\"");
        if (d->nextra == MAX_EXTRA)
            return dfail(d, file, "more than %d additional_special_tokens", MAX_EXTRA);
        d->extra[d->nextra++] = token_content(it);
    }
    return 0;
}

static int is_special(const dir_ctx *d, const char *content) {
    for (int k = 0; k < N_SPECIAL; k++)
        if (d->special[k] && strcmp(d->special[k], content) == 0) return 1;
    for (int k = 0; k < d->nextra; k++)
        if (strcmp(d->extra[k], content) == 0) return 1;
    return 0;
}

/* Adds an added token unless the model already has it, at the id HF's add_tokens gives it
 * (bpe_hf_added_id: the id the file names is not used, as in transformers). */
static int add_missing(dir_ctx *d, bpe_model *m, const char *file, const char *content,
                       const bpe_added_flags *f) {
    if (bpe_added_id(m, content) >= 0) return 0;
    char e2[512];
    size_t len = strlen(content);
    if (bpe_add_special(m, content, len, bpe_hf_added_id(m, content, len), f, e2, sizeof e2))
        return dfail(d, file, "%s", e2);
    return 0;
}

static int add_config_tokens(dir_ctx *d, bpe_model *m) {
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(d->config, "added_tokens_decoder");
    const cJSON *it;
    if (dec && !cJSON_IsNull(dec) && !cJSON_IsObject(dec))
        return dfail(d, "tokenizer_config.json", "added_tokens_decoder: not an object");
    cJSON_ArrayForEach(it, dec) {
        char *end;
        long id = strtol(it->string, &end, 10);
        bpe_added_flags f;
        int special;
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (*end || id < 0 || id > BPE_MAX_ID || !cJSON_IsString(c) ||
            hf_added_flags(it, &f, &special))
            return dfail(d, "tokenizer_config.json",
                         "added_tokens_decoder '%.20s': expected an id and {\"content\": ...} "
                         "with boolean flags",
                         it->string);
        if (add_missing(d, m, "tokenizer_config.json", c->valuestring, &f)) return -1;
    }
    cJSON_ArrayForEach(it, d->added) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v <= BPE_MAX_ID && v == floor(v)))
            return dfail(d, "added_tokens.json", "'%.60s': id is not a non-negative integer",
                         it->string);
        int special = is_special(d, it->string);
        bpe_added_flags f = {0, 0, 0, !special};
        if (add_missing(d, m, "added_tokens.json", it->string, &f)) return -1;
    }
    bpe_added_flags sf = {0, 0, 0, 0}; /* transformers' special AddedToken: not normalized */
    for (int k = 0; k < N_SPECIAL; k++)
        if (d->special[k] && add_missing(d, m, "special_tokens_map.json", d->special[k], &sf))
            return -1;
    for (int k = 0; k < d->nextra; k++)
        if (add_missing(d, m, "special_tokens_map.json", d->extra[k], &sf)) return -1;
    return 0;
}

static int token_id(const bpe_model *m, const char *content) {
    if (!content) return -1;
    int id = bpe_added_id(m, content);
    return id >= 0 ? id : bpe_vocab_id(m, content, strlen(content));
}

/* tokenizer.json, or vocab.json + merges.txt; not finished. */
static bpe_model *load_model_files(dir_ctx *d) {
    char p[PATH_MAX], q[PATH_MAX];
    int json = present(d, "tokenizer.json");
    if (json < 0) return NULL;
    if (json) {
        bpe_model *m = bpe_new();
        int first_special;
        join(p, sizeof p, d->dir, "tokenizer.json");
        if (!m) err_set(d->err, d->errlen, "out of memory");
        if (m && hf_json_load(p, m, &first_special, d->err, d->errlen)) {
            bpe_free(m);
            return NULL;
        }
        return m;
    }
    int vocab = present(d, "vocab.json"), merges = vocab < 0 ? -1 : present(d, "merges.txt");
    if (vocab < 0 || merges < 0) return NULL;
    if (!vocab || !merges) {
        dfail(d, NULL, "a Hugging Face tokenizer directory needs tokenizer.json, or vocab.json "
                       "and merges.txt");
        return NULL;
    }
    const cJSON *aps = cJSON_GetObjectItemCaseSensitive(d->config, "add_prefix_space");
    if (aps && !cJSON_IsNull(aps) && !cJSON_IsBool(aps)) {
        dfail(d, "tokenizer_config.json", "add_prefix_space: not a boolean");
        return NULL;
    }
    char flag[PATH_MAX + 32];
    snprintf(flag, sizeof flag, "--tokenizer-model %s: ", d->dir);
    join(p, sizeof p, d->dir, "vocab.json");
    join(q, sizeof q, d->dir, "merges.txt");
    return gpt2_bpe_load_files(flag, p, q, cJSON_IsTrue(aps), d->err, d->errlen);
}

/* add_bos_token true: every encoding starts with bos (transformers' post-processor, which
 * Megatron's tokenize() runs); add_eos_token true is refused (--append-eod appends the end of
 * document). */
static int bos_eos(dir_ctx *d, hf_special_ids *ids) {
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d->config, "add_eos_token")))
        return dfail(d, "tokenizer_config.json",
                     "add_eos_token true is not supported (encoding adds no EOS token; "
                     "--append-eod appends the end of document)");
    ids->add_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d->config, "add_bos_token"));
    if (ids->add_bos && ids->bos < 0)
        return dfail(d, "tokenizer_config.json", "add_bos_token true without a bos_token");
    return 0;
}

bpe_model *hf_dir_load(const char *dir, hf_special_ids *ids, char *err, size_t errlen) {
    dir_ctx d = {.dir = dir, .err = err, .errlen = errlen};
    bpe_model *m = NULL;
    char e2[512];
    if (read_opt(&d, "tokenizer_config.json", &d.config) ||
        read_opt(&d, "special_tokens_map.json", &d.map) ||
        read_opt(&d, "added_tokens.json", &d.added) ||
        read_specials(&d, d.config, "tokenizer_config.json") ||
        read_specials(&d, d.map, "special_tokens_map.json"))
        goto bad;
    if (!(m = load_model_files(&d)) || add_config_tokens(&d, m)) goto bad;
    if (bpe_finish(m, e2, sizeof e2)) {
        dfail(&d, exists(dir, "tokenizer.json") ? "tokenizer.json" : "vocab.json", "%s", e2);
        goto bad;
    }
    ids->bos = token_id(m, d.special[0]);
    ids->eod = token_id(m, d.special[1]);
    ids->unk = token_id(m, d.special[2]);
    ids->pad = token_id(m, d.special[4]);
    ids->mask = token_id(m, d.special[6]);
    if (bos_eos(&d, ids)) goto bad;
    if (ids->eod < 0) {
        dfail(&d, NULL, "no eos_token in tokenizer_config.json or special_tokens_map.json "
                        "(Megatron's end of document is the tokenizer's eos_token_id)");
        goto bad;
    }
    cJSON_Delete(d.config), cJSON_Delete(d.map), cJSON_Delete(d.added);
    return m;
bad:
    cJSON_Delete(d.config), cJSON_Delete(d.map), cJSON_Delete(d.added);
    bpe_free(m);
    return NULL;
}
