/* HuggingFaceTokenizer: byte-level BPE models described by a Hugging Face tokenizer.json
 * (GPT-2, GPT-NeoX, Qwen2, Llama-3 style), and SentencePiece-style BPE in Llama 2's exact shape
 * (sp_shape, bpe_set_sentencepiece); a tokenizer directory around it is hf_dir.c's (tokenizer.c
 * tells the two apart).
 * What is read (anything else is refused with a message naming the file and the field):
 *   model          {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or [["a", "b"], ...],
 *                   "ignore_merges"}; dropout must be null, continuing_subword_prefix and
 *                   end_of_word_suffix empty; unk_token / fuse_unk have no effect (every byte
 *                   that valid UTF-8 can hold has a token); byte_fallback true: Llama 2's
 *                   SentencePiece style, whose normalizer, pre_tokenizer and decoder must be
 *                   exactly Llama 2's (SP_PARTS).
 *   normalizer     null, NFC, or a Sequence of those (byte-level).
 *   pre_tokenizer  ByteLevel {add_prefix_space, use_regex} (GPT-2's regex), or a Sequence of
 *                  Split {pattern: {"Regex"|"String"}, behavior "Isolated", invert false}
 *                  steps ending with ByteLevel.
 *   added_tokens   matched as HF's AddedVocabulary does (bpe.h: normalized, lstrip, rstrip,
 *                  single_word); their ids are the ones HF gives them (bpe_hf_added_id), which
 *                  are the file's "id" in every tokenizer.json that HF itself wrote.
 *   decoder        null or ByteLevel.
 *   post_processor not applied: encoding never adds BOS/EOS tokens.
 * End of document of a lone tokenizer.json: "<|endoftext|>" (an added token or a vocabulary
 * entry) if there is one, else the first added token with "special": true. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/tokenizer/bpe.h"
#include "training/tokenizer/tokenizer_file.h"

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} ctx;

/* "--tokenizer-model PATH: FIELD: message" (FIELD NULL: none); -1 */
#define fail(c, field, ...)                                                                    \
    tokenizer_model_fail((c)->err, (c)->errlen, (c)->path, NULL, (field), __VA_ARGS__)

static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* true/false field with a default; -1 if present and not a bool */
static int get_bool(const cJSON *o, const char *name, int deflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    if (!v || cJSON_IsNull(v)) return deflt;
    if (!cJSON_IsBool(v)) return -1;
    return cJSON_IsTrue(v);
}

static int empty_or_null(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == 0);
}

static int load_model(ctx *c, bpe_model *m, const cJSON *model) {
    if (!cJSON_IsObject(model)) return fail(c, "model", "missing or not an object");
    const char *type = type_of(model);
    if (type && strcmp(type, "BPE") != 0)
        return fail(c, "model.type", "'%s' is not supported (only byte-level BPE)", type);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (dropout && !cJSON_IsNull(dropout) && !(cJSON_IsNumber(dropout) && dropout->valuedouble == 0))
        return fail(c, "model.dropout", "BPE dropout is not supported (must be null)");
    if (!empty_or_null(model, "continuing_subword_prefix"))
        return fail(c, "model.continuing_subword_prefix", "not supported (must be null)");
    if (!empty_or_null(model, "end_of_word_suffix"))
        return fail(c, "model.end_of_word_suffix", "not supported (must be null)");
    int im = get_bool(model, "ignore_merges", 0);
    if (im < 0) return fail(c, "model.ignore_merges", "not a boolean");
    bpe_set_ignore_merges(m, im);

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return fail(c, "model.vocab", "missing or not an object");
    char e2[512];
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v <= 2147483647.0 && v == floor(v)))
            return fail(c, "model.vocab", "token '%.60s': id is not a non-negative integer",
                        it->string);
        if (bpe_add_vocab(m, it->string, strlen(it->string), (int)v, e2, sizeof e2))
            return fail(c, "model.vocab", "%s", e2);
    }
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges)) return fail(c, "model.merges", "missing or not an array");
    int rank = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a, *b;
        size_t al, bl;
        if (cJSON_IsString(it)) { /* "a b" (HF splits on ' ' and wants exactly two parts) */
            a = it->valuestring;
            const char *sp = strchr(a, ' ');
            if (!sp || strchr(sp + 1, ' '))
                return fail(c, "model.merges", "entry %d '%.60s' is not two tokens 'a b'", rank,
                            a);
            al = (size_t)(sp - a);
            b = sp + 1;
            bl = strlen(b);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            a = cJSON_GetArrayItem(it, 0)->valuestring;
            b = cJSON_GetArrayItem(it, 1)->valuestring;
            al = strlen(a);
            bl = strlen(b);
        } else {
            return fail(c, "model.merges", "entry %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
        }
        if (bpe_add_merge(m, a, al, b, bl, rank, e2, sizeof e2))
            return fail(c, "model.merges", "entry %d: %s", rank, e2);
        rank++;
    }
    return 0;
}

/* A normalizer or pre-tokenizer loader; `state` is the loader's own (load_pre: ByteLevel seen). */
typedef int (*step_loader)(ctx *c, bpe_model *m, const cJSON *n, const char *field, void *state);

/* A "Sequence" step: each item of n[key] in order, named FIELD.KEY[i] in messages. */
static int load_sequence(ctx *c, bpe_model *m, const cJSON *n, const char *field, const char *key,
                         step_loader load_one, void *state) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, key);
    if (!cJSON_IsArray(list)) return fail(c, field, "Sequence without '%s'", key);
    const cJSON *it;
    char sub[128];
    int i = 0;
    cJSON_ArrayForEach(it, list) {
        snprintf(sub, sizeof sub, "%s.%s[%d]", field, key, i++);
        if (load_one(c, m, it, sub, state)) return -1;
    }
    return 0;
}

static int load_normalizer(ctx *c, bpe_model *m, const cJSON *n, const char *field, void *state) {
    (void)state;
    if (!n || cJSON_IsNull(n)) return 0;
    const char *type = type_of(n);
    if (!type) return fail(c, field, "no type");
    if (!strcmp(type, "NFC")) {
        bpe_set_nfc(m, 1);
        return 0;
    }
    if (!strcmp(type, "Sequence")) {
        return load_sequence(c, m, n, field, "normalizers", load_normalizer, NULL);
    }
    return fail(c, field, "type '%s' is not supported (null or NFC)", type);
}

/* One pre-tokenizer; *saw_bytelevel is set by ByteLevel, which must come last. */
static int load_pre(ctx *c, bpe_model *m, const cJSON *p, const char *field, void *state) {
    int *saw_bytelevel = state;
    const char *type = type_of(p);
    char e2[512];
    if (!type) return fail(c, field, "no type");
    if (*saw_bytelevel)
        return fail(c, field, "'%s' after ByteLevel is not supported (ByteLevel must be last)",
                    type);
    if (!strcmp(type, "ByteLevel")) {
        int prefix = get_bool(p, "add_prefix_space", 1), use_regex = get_bool(p, "use_regex", 1);
        if (prefix < 0 || use_regex < 0) return fail(c, field, "bad ByteLevel flags");
        *saw_bytelevel = 1;
        if (!prefix && !use_regex) return 0;
        if (bpe_add_split(m, use_regex ? BPE_GPT2_PATTERN : NULL, 0, prefix, e2, sizeof e2))
            return fail(c, field, "%s", e2);
        return 0;
    }
    if (!strcmp(type, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        int invert = get_bool(p, "invert", 0);
        if (!cJSON_IsString(re) && !cJSON_IsString(str))
            return fail(c, field, "Split pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") != 0)
            return fail(c, field, "Split behavior '%s' is not supported (Isolated only)",
                        cJSON_IsString(beh) ? beh->valuestring : "?");
        if (invert != 0) return fail(c, field, "Split with invert true is not supported");
        if (bpe_add_split(m, cJSON_IsString(re) ? re->valuestring : str->valuestring,
                          !cJSON_IsString(re), 0, e2, sizeof e2))
            return fail(c, field, "%s", e2);
        return 0;
    }
    if (!strcmp(type, "Sequence")) {
        return load_sequence(c, m, p, field, "pretokenizers", load_pre, saw_bytelevel);
    }
    return fail(c, field, "type '%s' is not supported (ByteLevel, Split, Sequence)", type);
}

int hf_added_flags(const cJSON *it, bpe_added_flags *f, int *special) {
    f->lstrip = get_bool(it, "lstrip", 0);
    f->rstrip = get_bool(it, "rstrip", 0);
    f->single_word = get_bool(it, "single_word", 0);
    *special = get_bool(it, "special", 0);
    /* HF's AddedToken: normalized defaults to the opposite of special */
    f->normalized = get_bool(it, "normalized", !(*special > 0));
    return f->lstrip < 0 || f->rstrip < 0 || f->single_word < 0 || *special < 0 ||
                   f->normalized < 0
               ? -1
               : 0;
}

static int load_added(ctx *c, bpe_model *m, const cJSON *added, int *first_special) {
    *first_special = -1;
    if (!added || cJSON_IsNull(added)) return 0;
    if (!cJSON_IsArray(added)) return fail(c, "added_tokens", "not an array");
    const cJSON *it;
    int i = 0;
    char e2[512];
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%d]", i++);
        if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble <= 2147483647.0) ||
            id->valuedouble != floor(id->valuedouble) || !cJSON_IsString(content))
            return fail(c, field, "needs an integer 'id' and a string 'content'");
        bpe_added_flags f;
        int special;
        if (hf_added_flags(it, &f, &special))
            return fail(c, field, "lstrip, rstrip, single_word, normalized and special must be "
                                  "booleans");
        const char *t = content->valuestring;
        if (bpe_added_id(m, t) >= 0) continue; /* listed again: HF keeps the first */
        int hid = bpe_hf_added_id(m, t, strlen(t));
        if (bpe_add_special(m, t, strlen(t), hid, &f, e2, sizeof e2))
            return fail(c, field, "%s", e2);
        if (special && *first_special < 0) *first_special = hid;
    }
    return 0;
}

/* The parts of a SentencePiece-style tokenizer.json, exactly as Llama 2's (any other
 * normalizer, pre-tokenizer or decoder with byte_fallback is refused). */
static const char *const SP_PARTS[][2] = {
    {"normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
                   "\"prepend\": \"\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": "
                   "\" \"}, \"content\": \"\u2581\"}]}"},
    {"pre_tokenizer", "null"},
    {"decoder", "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                "{\"String\": \"\u2581\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, "
                "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                "\"stop\": 0}]}"}};

static int sp_shape(ctx *c, const cJSON *root) {
    for (int i = 0; i < 3; i++) {
        cJSON *want = cJSON_Parse(SP_PARTS[i][1]);
        const cJSON *got = cJSON_GetObjectItemCaseSensitive(root, SP_PARTS[i][0]);
        int same = want && (got ? cJSON_Compare(got, want, 1) : cJSON_IsNull(want));
        cJSON_Delete(want);
        if (!same)
            return fail(c, SP_PARTS[i][0],
                        "with model.byte_fallback true (SentencePiece-style BPE) only Llama 2's "
                        "is supported: %s",
                        SP_PARTS[i][1]);
    }
    return 0;
}

/* Reads and parses a JSON file; NULL with "--tokenizer-model PATH: ..." in c->err. */
static cJSON *read_json(ctx *c, const char *path) {
    size_t len;
    char *text = tokenizer_read_file("--tokenizer-model", path, 1, &len, c->err, c->errlen);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root)
        fail(c, NULL, "not valid JSON (parsing stopped at byte %ld)",
             end ? (long)(end - text) : 0L);
    free(text);
    return root;
}

/* Everything of a tokenizer.json but the final bpe_finish (a directory adds tokens to it). */
static int load_json(ctx *c, bpe_model *m, int *first_special) {
    cJSON *root = read_json(c, c->path);
    if (!root) return -1;
    int saw_bytelevel = 0, rc = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(root)) {
        fail(c, NULL, "not a JSON object (a Hugging Face tokenizer.json)");
        goto done;
    }
    if (get_bool(model, "byte_fallback", 0) == 1) { /* SentencePiece style: Llama 2's shape */
        if (sp_shape(c, root)) goto done;
        bpe_set_sentencepiece(m);
        if (load_model(c, m, model)) goto done;
        rc = load_added(c, m, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"),
                        first_special);
        goto done;
    }
    if (load_model(c, m, model) ||
        load_normalizer(c, m, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), "normalizer",
                        NULL))
        goto done;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!pre || cJSON_IsNull(pre)) {
        fail(c, "pre_tokenizer", "null: not a byte-level BPE tokenizer (needs ByteLevel)");
        goto done;
    }
    if (load_pre(c, m, pre, "pre_tokenizer", &saw_bytelevel)) goto done;
    if (!saw_bytelevel) {
        fail(c, "pre_tokenizer", "no ByteLevel step: not a byte-level BPE tokenizer");
        goto done;
    }
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    if (dec && !cJSON_IsNull(dec) && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel") != 0)) {
        fail(c, "decoder", "type '%s' is not supported (ByteLevel)",
             type_of(dec) ? type_of(dec) : "?");
        goto done;
    }
    rc = load_added(c, m, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), first_special);
done:
    cJSON_Delete(root);
    return rc;
}

int hf_json_load(const char *path, bpe_model *m, int *first_special, char *err, size_t errlen) {
    ctx c = {path, err, errlen};
    return load_json(&c, m, first_special);
}

static int finish(ctx *c, bpe_model *m) {
    char e2[512];
    if (bpe_finish(m, e2, sizeof e2)) return fail(c, "model.vocab", "%s", e2);
    return 0;
}

/* A single tokenizer.json: end of document "<|endoftext|>" (an added token or a vocabulary
 * entry) if there is one, else the first special added token. */
static bpe_model *load_file(ctx *c, hf_special_ids *ids) {
    bpe_model *m = bpe_new();
    int first_special = -1;
    if (!m) {
        snprintf(c->err, c->errlen, "out of memory");
        return NULL;
    }
    if (load_json(c, m, &first_special) || finish(c, m)) goto bad;
    ids->eod = bpe_added_id(m, "<|endoftext|>");
    if (ids->eod < 0) ids->eod = bpe_vocab_id(m, "<|endoftext|>", 13);
    if (ids->eod < 0) ids->eod = first_special;
    if (ids->eod < 0) {
        fail(c, "added_tokens",
             "no end-of-document token: neither '<|endoftext|>' nor a special added token");
        goto bad;
    }
    return m;
bad:
    bpe_free(m);
    return NULL;
}

bpe_model *hf_tokenizer_load(const char *path, hf_special_ids *ids, char *err, size_t errlen) {
    ctx c = {path, err, errlen};
    *ids = (hf_special_ids){-1, -1, -1, -1, -1, 0};
    return load_file(&c, ids);
}
