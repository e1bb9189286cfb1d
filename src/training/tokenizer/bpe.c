/* Byte-level BPE engine (see bpe.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "training/tokenizer/bpe.h"

#include <pcre2.h>
#include <ctype.h>
#include <pthread.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/tokenizer/unicode_nfc.h"
#include "core/util/alloc.h"
#include "core/util/error.h"

const char *const BPE_GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p; /* FNV-1a, then a final mix */
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 32);
}

static uint64_t hash_u64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* ---- string -> id map (open addressing; keys point into entries owned by the model) ---- */

typedef struct {
    char *key; /* NULL = empty slot */
    size_t len;
    int id;
} smap_slot;

typedef struct {
    smap_slot *slots;
    size_t cap, count; /* cap: power of two */
} smap;

static int smap_grow(smap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    smap_slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = hash_bytes(m->slots[i].key, m->slots[i].len) & (ncap - 1);
        while (ns[j].key) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

static smap_slot *smap_find(const smap *m, const char *k, size_t len) {
    if (!m->cap) return NULL;
    size_t j = hash_bytes(k, len) & (m->cap - 1);
    while (m->slots[j].key) {
        if (m->slots[j].len == len && memcmp(m->slots[j].key, k, len) == 0) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

/* Inserts (key is copied); 1 if it existed (nothing changed), 0 inserted, -1 out of memory. */
static int smap_put(smap *m, const char *k, size_t len, int id) {
    if (smap_find(m, k, len)) return 1;
    if ((m->count + 1) * 2 > m->cap && smap_grow(m)) return -1;
    char *kc = malloc(len + 1);
    if (!kc) return -1;
    memcpy(kc, k, len);
    kc[len] = 0;
    size_t j = hash_bytes(k, len) & (m->cap - 1);
    while (m->slots[j].key) j = (j + 1) & (m->cap - 1);
    m->slots[j] = (smap_slot){kc, len, id};
    m->count++;
    return 0;
}

static void smap_free(smap *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

/* ---- merges: (left id, right id) -> (rank, merged id) ---- */

typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty */
    int32_t rank, merged;
} merge_slot;

typedef struct {
    merge_slot *slots;
    size_t cap, count;
} mmap_t;

static int mmap_grow(mmap_t *m) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    merge_slot *ns = malloc(ncap * sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < ncap; i++) ns[i].key = UINT64_MAX;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->slots[i].key == UINT64_MAX) continue;
        size_t j = hash_u64(m->slots[i].key) & (ncap - 1);
        while (ns[j].key != UINT64_MAX) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

static inline const merge_slot *mmap_find(const mmap_t *m, uint32_t a, uint32_t b) {
    uint64_t key = (uint64_t)a << 32 | b;
    size_t j = hash_u64(key) & (m->cap - 1);
    while (m->slots[j].key != UINT64_MAX) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

/* ---- the model ---- */

typedef struct {
    pcre2_code *re; /* NULL: no split */
    int prefix_space;
} split_step;

typedef struct {
    char *content; /* as given (what decode prints) */
    size_t len;
    char *match; /* what is searched for: content, NFC'd when normalized and the model is NFC */
    size_t mlen;
    int id;
    int own_str; /* id_str[id] is this token's (not a vocabulary entry's) */
    bpe_added_flags f;
} added_token;

/* Merge cache: piece bytes -> ids, sharded so that preprocess's threads rarely wait. A shard
 * that fills up is emptied (the cache only saves time). */
#define CACHE_SHARDS 64
#define CACHE_SHARD_MAX 4096
#define CACHE_MAX_PIECE 256

typedef struct centry {
    struct centry *next;
    uint64_t h;
    uint32_t klen, nids;
    int32_t data[]; /* nids ids, then klen key bytes */
} centry;

typedef struct {
    pthread_mutex_t mu;
    centry *buckets[512];
    size_t count;
} cache_shard;

struct bpe_model {
    smap vocab;         /* byte-level string -> id */
    char **id_str;      /* id -> decoded bytes (NULL: unused id) */
    size_t *id_len;
    int id_cap, max_id; /* max_id: largest id in vocab or added tokens */
    mmap_t merges;
    int32_t (*rank_pair)[3]; /* rank -> (left, right, merged); left -1 = unused rank */
    int nranks;
    int byte_id[256];
    split_step *steps;
    int nsteps;
    added_token *added;
    int nadded;
    int first_by_byte[256][2]; /* range [lo, hi) of `sorted` whose content starts with a byte */
    int *sorted;               /* added tokens sorted by first byte, then longest first */
    int nfc, ignore_merges;
    int lossy;              /* a byte that never occurs in UTF-8 has no token: decode lossily */
    int sp;                 /* SentencePiece-style BPE (Llama 2): see bpe_set_sentencepiece */
    pcre2_code *word_re;    /* single_word's word character (NULL: no single_word token) */
    int byte_cp[256];  /* bytes_to_unicode */
    int cp_byte[324];  /* its inverse (-1: not a byte-level character) */
    cache_shard cache[CACHE_SHARDS];
};

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static void byte_to_unicode(int cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        cp[b] = printable ? b : 256 + n++;
    }
}


/* Length of the valid UTF-8 sequence at s (1..4), or 0 if the bytes there are not one
 * (overlong forms, surrogates and values above U+10FFFF are invalid, as in PCRE2). */
static size_t utf8_valid_len(const unsigned char *s, size_t n, int *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = (int)c;
        return 1;
    }
    size_t k;
    unsigned v, min;
    if (c >= 0xC2 && c <= 0xDF) k = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, v = c & 0x07, min = 0x10000;
    else return 0;
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = (int)v;
    return k;
}

static int is_white_space(int c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

bpe_model *bpe_new(void) {
    bpe_model *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->max_id = -1;
    for (int b = 0; b < 256; b++) m->byte_id[b] = -1;
    byte_to_unicode(m->byte_cp);
    for (int c = 0; c < 324; c++) m->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) m->cp_byte[m->byte_cp[b]] = b;
    for (int s = 0; s < CACHE_SHARDS; s++) pthread_mutex_init(&m->cache[s].mu, NULL);
    return m;
}

static void cache_clear_shard(cache_shard *s) {
    for (int b = 0; b < 512; b++) {
        centry *e = s->buckets[b];
        while (e) {
            centry *nx = e->next;
            free(e);
            e = nx;
        }
        s->buckets[b] = NULL;
    }
    s->count = 0;
}

void bpe_free(bpe_model *m) {
    if (!m) return;
    smap_free(&m->vocab);
    for (int i = 0; i < m->id_cap; i++) free(m->id_str[i]);
    free(m->id_str);
    free(m->id_len);
    free(m->merges.slots);
    free(m->rank_pair);
    for (int i = 0; i < m->nsteps; i++) pcre2_code_free(m->steps[i].re);
    free(m->steps);
    for (int i = 0; i < m->nadded; i++) free(m->added[i].content), free(m->added[i].match);
    pcre2_code_free(m->word_re);
    free(m->added);
    free(m->sorted);
    for (int s = 0; s < CACHE_SHARDS; s++) {
        cache_clear_shard(&m->cache[s]);
        pthread_mutex_destroy(&m->cache[s].mu);
    }
    free(m);
}

/* The capacity of a table indexed by id or merge rank that holds index i: the current one
 * (or 1024) doubled until above i. Callers refuse i > BPE_MAX_ID first, so it cannot overflow. */
static int grown_cap(int cap, int i) {
    int ncap = cap ? cap : 1024;
    while (ncap <= i) ncap *= 2;
    return ncap;
}

/* An id (or rank) above BPE_MAX_ID: -1 with a message naming what and the limit. */
static int check_index(const char *what, const char *tok, size_t len, int i, char *err,
                       size_t errlen) {
    if (i <= BPE_MAX_ID) return 0;
    err_set(err, errlen, "%s '%.*s' has id %d, above the largest supported id %d", what,
            (int)(len > 60 ? 60 : len), tok, i, BPE_MAX_ID);
    return -1;
}

static int ensure_id(bpe_model *m, int id) {
    if (id < m->id_cap) return 0;
    int ncap = grown_cap(m->id_cap, id);
    char **ns = realloc(m->id_str, (size_t)ncap * sizeof *ns);
    if (!ns) return -1;
    m->id_str = ns;
    size_t *nl = realloc(m->id_len, (size_t)ncap * sizeof *nl);
    if (!nl) return -1;
    m->id_len = nl;
    for (int i = m->id_cap; i < ncap; i++) ns[i] = NULL, nl[i] = 0;
    m->id_cap = ncap;
    return 0;
}

/* Decoded bytes of a byte-level token string: every character through the inverse of
 * bytes_to_unicode; a string with a character outside that alphabet decodes verbatim (as HF's
 * ByteLevel decoder does). */
static char *byte_level_decode(const bpe_model *m, const char *tok, size_t len, size_t *outlen) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        int c;
        size_t k = utf8_valid_len((const unsigned char *)tok + i, len - i, &c);
        if (!k || c >= 324 || m->cp_byte[c] < 0) {
            memcpy(out, tok, len);
            *outlen = len;
            return out;
        }
        out[o++] = (char)m->cp_byte[c];
        i += k;
    }
    *outlen = o;
    return out;
}

/* The text of a SentencePiece-style token: <0xNN> is that byte, U+2581 ('\u2581') a space (HF's
 * decoders Replace and ByteFallback). */
static char *sp_decode(const char *tok, size_t len, size_t *outlen) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    unsigned b;
    char tail;
    if (len == 6 && sscanf(tok, "<0x%2X%c", &b, &tail) == 2 && tail == '>' &&
        isxdigit((unsigned char)tok[3]) && isxdigit((unsigned char)tok[4])) {
        out[0] = (char)b;
        *outlen = 1;
        return out;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (i + 3 <= len && memcmp(tok + i, "\xE2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = tok[i];
        }
    }
    *outlen = o;
    return out;
}

int bpe_add_vocab(bpe_model *m, const char *tok, size_t len, int id, char *err, size_t errlen) {
    if (id < 0) {
        err_set(err, errlen, "token '%.*s' has a negative id %d", (int)(len > 60 ? 60 : len), tok,
               id);
        return -1;
    }
    if (check_index("token", tok, len, id, err, errlen)) return -1;
    if (ensure_id(m, id)) goto oom;
    if (m->id_str[id]) {
        err_set(err, errlen, "id %d is given to two tokens", id);
        return -1;
    }
    int rc = smap_put(&m->vocab, tok, len, id);
    if (rc < 0) goto oom;
    if (rc > 0) {
        err_set(err, errlen, "token '%.*s' is listed twice", (int)(len > 60 ? 60 : len), tok);
        return -1;
    }
    m->id_str[id] = m->sp ? sp_decode(tok, len, &m->id_len[id])
                          : byte_level_decode(m, tok, len, &m->id_len[id]);
    if (!m->id_str[id]) goto oom;
    if (id > m->max_id) m->max_id = id;
    return 0;
oom:
    err_set(err, errlen, "out of memory");
    return -1;
}

int bpe_vocab_id(const bpe_model *m, const char *tok, size_t len) {
    const smap_slot *s = smap_find(&m->vocab, tok, len);
    return s ? s->id : -1;
}

int bpe_add_merge(bpe_model *m, const char *a, size_t al, const char *b, size_t bl, int rank,
                  char *err, size_t errlen) {
    int ia = bpe_vocab_id(m, a, al), ib = bpe_vocab_id(m, b, bl);
    if (ia < 0 || ib < 0) {
        err_set(err, errlen, "token '%.*s' is not in the vocabulary",
               (int)(ia < 0 ? (al > 60 ? 60 : al) : (bl > 60 ? 60 : bl)), ia < 0 ? a : b);
        return -1;
    }
    char stack[512];
    char *ab = al + bl <= sizeof stack ? stack : malloc(al + bl);
    if (!ab) goto oom;
    memcpy(ab, a, al);
    memcpy(ab + al, b, bl);
    int im = bpe_vocab_id(m, ab, al + bl);
    if (ab != stack) free(ab);
    if (im < 0) {
        err_set(err, errlen, "the merge '%.*s' + '%.*s' is not in the vocabulary",
               (int)(al > 60 ? 60 : al), a, (int)(bl > 60 ? 60 : bl), b);
        return -1;
    }
    if (rank < 0) {
        err_set(err, errlen, "negative merge rank %d", rank);
        return -1;
    }
    if (rank > BPE_MAX_ID) {
        err_set(err, errlen, "more than %d merges", BPE_MAX_ID + 1);
        return -1;
    }
    if (rank >= m->nranks) {
        int ncap = grown_cap(m->nranks, rank);
        int32_t(*np)[3] = realloc(m->rank_pair, (size_t)ncap * sizeof *np);
        if (!np) goto oom;
        for (int i = m->nranks; i < ncap; i++) np[i][0] = -1;
        m->rank_pair = np;
        m->nranks = ncap;
    }
    if ((m->merges.count + 1) * 2 > m->merges.cap && mmap_grow(&m->merges)) goto oom;
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t j = hash_u64(key) & (m->merges.cap - 1);
    while (m->merges.slots[j].key != UINT64_MAX && m->merges.slots[j].key != key)
        j = (j + 1) & (m->merges.cap - 1);
    if (m->merges.slots[j].key == key) {
        m->rank_pair[m->merges.slots[j].rank][0] = -1; /* the pair's earlier rank is void */
    } else {
        m->merges.count++;
    }
    m->merges.slots[j] = (merge_slot){key, rank, im};
    m->rank_pair[rank][0] = ia;
    m->rank_pair[rank][1] = ib;
    m->rank_pair[rank][2] = im;
    return 0;
oom:
    err_set(err, errlen, "out of memory");
    return -1;
}

/* Rewrites \s and \S into Unicode White_Space (PCRE2's UCP \s also matches U+180E, Python's
 * regex and Oniguruma do not). */
static char *translate_pattern(const char *p) {
    size_t n = strlen(p), o = 0;
    char *out = malloc(n * 8 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n) {
            if (p[i + 1] == 's' || p[i + 1] == 'S') {
                o += (size_t)sprintf(out + o, "\\%c{White_Space}", p[i + 1] == 's' ? 'p' : 'P');
            } else {
                out[o++] = p[i];
                out[o++] = p[i + 1];
            }
            i++;
        } else {
            out[o++] = p[i];
        }
    }
    out[o] = 0;
    return out;
}

int bpe_add_split(bpe_model *m, const char *pattern, int literal, int prefix_space, char *err,
                  size_t errlen) {
    pcre2_code *re = NULL;
    if (pattern) {
        char *tp = literal ? strdup(pattern) : translate_pattern(pattern);
        if (!tp) {
            err_set(err, errlen, "out of memory");
            return -1;
        }
        int ec;
        PCRE2_SIZE eo;
        re = pcre2_compile((PCRE2_SPTR)tp, PCRE2_ZERO_TERMINATED,
                           literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &ec, &eo,
                           NULL);
        free(tp);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            err_set(err, errlen, "regex '%s': %s (at offset %zu)", pattern, (char *)msg,
                   (size_t)eo);
            return -1;
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    }
    split_step *ns = realloc(m->steps, (size_t)(m->nsteps + 1) * sizeof *ns);
    if (!ns) {
        pcre2_code_free(re);
        err_set(err, errlen, "out of memory");
        return -1;
    }
    m->steps = ns;
    m->steps[m->nsteps++] = (split_step){re, prefix_space};
    return 0;
}

int bpe_add_special(bpe_model *m, const char *content, size_t len, int id,
                    const bpe_added_flags *f, char *err, size_t errlen) {
    if (len == 0) {
        err_set(err, errlen, "added token %d has empty content", id);
        return -1;
    }
    if (id < 0) {
        err_set(err, errlen, "added token '%.*s' has a negative id", (int)len, content);
        return -1;
    }
    if (check_index("added token", content, len, id, err, errlen)) return -1;
    if (ensure_id(m, id)) goto oom;
    int own = !m->id_str[id];
    if (m->id_str[id]) { /* already in the vocabulary: it must be the same string */
        const smap_slot *s = smap_find(&m->vocab, content, len);
        if (!s || s->id != id) {
            err_set(err, errlen, "added token '%.*s' has id %d, which the vocabulary gives to "
                                "another token",
                   (int)len, content, id);
            return -1;
        }
    } else {
        m->id_str[id] = malloc(len + 1);
        if (!m->id_str[id]) goto oom;
        memcpy(m->id_str[id], content, len);
        m->id_str[id][len] = 0;
        m->id_len[id] = len;
    }
    for (int i = 0; i < m->nadded; i++)
        if (m->added[i].len == len && memcmp(m->added[i].content, content, len) == 0) {
            err_set(err, errlen, "added token '%.*s' is listed twice", (int)len, content);
            return -1;
        }
    added_token *na = realloc(m->added, (size_t)(m->nadded + 1) * sizeof *na);
    if (!na) goto oom;
    m->added = na;
    char *c = malloc(len + 1), *mc = malloc(len + 1);
    if (!c || !mc) {
        free(c), free(mc);
        goto oom;
    }
    memcpy(c, content, len);
    c[len] = 0;
    memcpy(mc, content, len + 1);
    m->added[m->nadded++] = (added_token){c, len, mc, len, id, own, *f};
    if (id > m->max_id) m->max_id = id;
    return 0;
oom:
    err_set(err, errlen, "out of memory");
    return -1;
}

void bpe_set_nfc(bpe_model *m, int on) { m->nfc = on; }
void bpe_set_sentencepiece(bpe_model *m) { m->sp = m->lossy = 1; }
int bpe_is_sentencepiece(const bpe_model *m) { return m->sp; }
void bpe_set_ignore_merges(bpe_model *m, int on) { m->ignore_merges = on; }

static const bpe_model *g_sort_model;
static int cmp_added(const void *x, const void *y) {
    const added_token *a = &g_sort_model->added[*(const int *)x],
                      *b = &g_sort_model->added[*(const int *)y];
    unsigned char ca = (unsigned char)a->match[0], cb = (unsigned char)b->match[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->mlen != b->mlen) return a->mlen > b->mlen ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

/* Bytes that no valid UTF-8 holds: overlong leads and leads above U+10FFFF. */
static int never_in_utf8(int b) { return b == 0xC0 || b == 0xC1 || b >= 0xF5; }

/* Normalized added tokens are searched for in normalized text, so their content is normalized
 * as well (HF's AddedVocabulary normalizes them when it builds its matcher). */
static int utf8_all_valid(const char *s, size_t n) {
    int c;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_valid_len((const unsigned char *)s + i, n - i, &c))) return 0;
    return 1;
}

/* Llama 2's normalizer on a token's content: U+2581 in front and for every ' '. */
static char *sp_normalized(const char *s, size_t n, size_t *outn) {
    char *out = malloc(3 * n + 4), *o = out;
    if (!out) return NULL;
    memcpy(o, "\xE2\x96\x81", 3), o += 3;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(o, "\xE2\x96\x81", 3), o += 3;
        else *o++ = s[i];
    }
    *o = 0;
    *outn = (size_t)(o - out);
    return out;
}

/* What decoding prints for an added token that is no vocabulary entry: its (normalized)
 * content through the model's decoder, as HF decodes it (ByteLevel: a content made only of
 * byte-level characters becomes those bytes; SentencePiece style: U+2581 is a space). */
static int decode_added(bpe_model *m) {
    for (int i = 0; i < m->nadded; i++) {
        added_token *t = &m->added[i];
        if (!t->own_str) continue;
        const char *c = t->f.normalized ? t->match : t->content;
        size_t n = t->f.normalized ? t->mlen : t->len, outn;
        char *d = m->sp ? sp_decode(c, n, &outn) : byte_level_decode(m, c, n, &outn);
        if (!d) return -1;
        free(m->id_str[t->id]);
        m->id_str[t->id] = d;
        m->id_len[t->id] = outn;
    }
    return 0;
}

static int normalize_added(bpe_model *m) {
    for (int i = 0; i < m->nadded && (m->nfc || m->sp); i++) {
        added_token *t = &m->added[i];
        char *norm = NULL;
        size_t nlen;
        if (!t->f.normalized || !utf8_all_valid(t->match, t->mlen)) continue;
        int r = m->sp ? ((norm = sp_normalized(t->match, t->mlen, &nlen)) ? 1 : -1)
                      : unicode_nfc(t->match, t->mlen, &norm, &nlen);
        if (r < 0) return -1;
        if (r > 0) {
            char *nm = realloc(norm, nlen + 1);
            if (!nm) {
                free(norm);
                return -1;
            }
            nm[nlen] = 0;
            free(t->match);
            t->match = nm;
            t->mlen = nlen;
        }
    }
    return 0;
}

/* Rust regex's \w, which HF's single_word tests on the characters around a match. */
static const char WORD_CLASS[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

static int compile_word_re(bpe_model *m, char *err, size_t errlen) {
    int any = 0;
    for (int i = 0; i < m->nadded; i++) any |= m->added[i].f.single_word;
    if (!any) return 0;
    int ec;
    PCRE2_SIZE eo;
    m->word_re = pcre2_compile((PCRE2_SPTR)WORD_CLASS, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &ec, &eo, NULL);
    if (!m->word_re) {
        err_set(err, errlen, "cannot compile the word-character class of single_word (%d)", ec);
        return -1;
    }
    return 0;
}

/* SentencePiece style: the byte symbols are the 256 tokens <0x00>..<0xFF>. */
static int sp_bytes(bpe_model *m, char *err, size_t errlen) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        m->byte_id[b] = bpe_vocab_id(m, s, 6);
        if (m->byte_id[b] < 0) {
            err_set(err, errlen, "byte_fallback: the vocabulary has no token '%s'", s);
            return -1;
        }
    }
    return 0;
}

int bpe_finish(bpe_model *m, char *err, size_t errlen) {
    if (m->sp && sp_bytes(m, err, errlen)) return -1;
    for (int b = 0; b < 256 && !m->sp; b++) {
        char s[4];
        size_t k = unicode_utf8_put(s, (uint32_t)m->byte_cp[b]);
        m->byte_id[b] = bpe_vocab_id(m, s, k);
        if (m->byte_id[b] < 0 && never_in_utf8(b)) {
            m->lossy = 1;
            continue;
        }
        if (m->byte_id[b] < 0) {
            err_set(err, errlen,
                   "the vocabulary has no token for byte 0x%02X ('%.*s'): not a byte-level BPE "
                   "vocabulary",
                   b, (int)k, s);
            return -1;
        }
    }
    if (normalize_added(m) || decode_added(m)) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    if (compile_word_re(m, err, errlen)) return -1;
    if (m->merges.cap == 0 && mmap_grow(&m->merges)) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    m->sorted = malloc((size_t)(m->nadded ? m->nadded : 1) * sizeof(int));
    if (!m->sorted) {
        err_set(err, errlen, "out of memory");
        return -1;
    }
    for (int i = 0; i < m->nadded; i++) m->sorted[i] = i;
    g_sort_model = m; /* load happens on one thread */
    qsort(m->sorted, (size_t)m->nadded, sizeof(int), cmp_added);
    for (int b = 0; b < 256; b++) m->first_by_byte[b][0] = m->first_by_byte[b][1] = 0;
    for (int i = 0; i < m->nadded; i++) {
        unsigned char b = (unsigned char)m->added[m->sorted[i]].match[0];
        if (m->first_by_byte[b][1] == 0) m->first_by_byte[b][0] = i;
        m->first_by_byte[b][1] = i + 1;
    }
    return 0;
}

int bpe_vocab_size(const bpe_model *m) { return m->max_id + 1; }

int bpe_hf_added_id(const bpe_model *m, const char *content, size_t len) {
    int v = bpe_vocab_id(m, content, len), n = (int)m->vocab.count, top = -1;
    if (v >= 0) return v;
    for (int i = 0; i < m->nadded; i++)
        if (m->added[i].id > top) top = m->added[i].id;
    return top < 0 ? n : top >= n || n == 0 ? top + 1 : n;
}

int bpe_added_id(const bpe_model *m, const char *content) {
    size_t len = strlen(content);
    for (int i = 0; i < m->nadded; i++)
        if (m->added[i].len == len && memcmp(m->added[i].content, content, len) == 0)
            return m->added[i].id;
    return -1;
}

const char *bpe_id_bytes(const bpe_model *m, int id, size_t *len) {
    if (id < 0 || id >= m->id_cap || !m->id_str[id]) return NULL;
    *len = m->id_len[id];
    return m->id_str[id];
}

/* ---- encoding ---- */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x) {
    int32_t *nv = grow_array(a->v, &a->cap, a->n + 1, sizeof *nv, 256);
    if (!nv) return -1;
    a->v = nv;
    a->v[a->n++] = x;
    return 0;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], x = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = x;
    return top;
}

/* SentencePiece-style BPE's first symbols (HF's BPE with byte_fallback): each character is its
 * vocabulary token, or when it has none the <0xNN> tokens of its bytes. Returns the count. */
static size_t sp_symbols(const bpe_model *m, const unsigned char *s, size_t n, int32_t *id) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int c;
        size_t l = utf8_valid_len(s + i, n - i, &c);
        int v = l ? bpe_vocab_id(m, (const char *)s + i, l) : -1;
        if (!l) l = 1; /* not reached: the text is decoded lossily first */
        if (v >= 0) {
            id[k++] = v;
        } else {
            for (size_t j = 0; j < l; j++) id[k++] = m->byte_id[s[i + j]];
        }
        i += l;
    }
    return k;
}

/* GPT-2's bpe() on one piece, by ids: node i starts as byte i (SentencePiece style: as
 * sp_symbols); a merge keeps the left node.
 * The heap holds (rank << 32 | left node) for adjacent pairs that have a rank; stale entries
 * are skipped when popped. All entries of the lowest rank are taken at once and merged left to
 * right, which is encoder.py's "merge every occurrence of the best bigram" (a merge never
 * re-creates the pair it merged, so the batch is complete). */
static int bpe_merge(const bpe_model *m, const unsigned char *s, size_t n, ivec *out) {
    int32_t st_id[128], st_nx[128], st_pv[128];
    uint64_t st_heap[3 * 128], st_batch[128];
    int32_t *id = st_id, *nx = st_nx, *pv = st_pv;
    uint64_t *heap = st_heap, *batch = st_batch;
    if (n > 128) {
        id = malloc(n * sizeof *id);
        nx = malloc(n * sizeof *nx);
        pv = malloc(n * sizeof *pv);
        heap = malloc(3 * n * sizeof *heap);
        batch = malloc(n * sizeof *batch);
        if (!id || !nx || !pv || !heap || !batch) {
            free(id), free(nx), free(pv), free(heap), free(batch);
            return -1;
        }
    }
    size_t hn = 0, nbytes = n;
    if (m->sp) {
        n = sp_symbols(m, s, n, id);
    } else {
        for (size_t i = 0; i < n; i++) id[i] = m->byte_id[s[i]];
    }
    for (size_t i = 0; i < n; i++) {
        nx[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        pv[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const merge_slot *ms = mmap_find(&m->merges, (uint32_t)id[i], (uint32_t)id[i + 1]);
        if (ms) heap_push(heap, &hn, (uint64_t)ms->rank << 32 | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t rank = (uint32_t)(top >> 32);
        size_t nb = 0;
        batch[nb++] = top;
        while (hn && (uint32_t)(heap[0] >> 32) == rank) {
            uint64_t e = heap_pop(heap, &hn);
            if (e != batch[nb - 1]) batch[nb++] = e; /* duplicate entries: once */
        }
        int32_t a = m->rank_pair[rank][0], b = m->rank_pair[rank][1], ab = m->rank_pair[rank][2];
        for (size_t k = 0; k < nb; k++) {
            int32_t p = (int32_t)(uint32_t)batch[k];
            int32_t q = nx[p];
            if (id[p] != a || q < 0 || id[q] != b) continue; /* stale */
            id[p] = ab;
            id[q] = -1;
            nx[p] = nx[q];
            if (nx[q] >= 0) pv[nx[q]] = p;
            if (pv[p] >= 0) {
                const merge_slot *ms = mmap_find(&m->merges, (uint32_t)id[pv[p]], (uint32_t)ab);
                if (ms) heap_push(heap, &hn, (uint64_t)ms->rank << 32 | (uint32_t)pv[p]);
            }
            if (nx[p] >= 0) {
                const merge_slot *ms = mmap_find(&m->merges, (uint32_t)ab, (uint32_t)id[nx[p]]);
                if (ms) heap_push(heap, &hn, (uint64_t)ms->rank << 32 | (uint32_t)p);
            }
        }
    }
    int rc = 0;
    for (int32_t i = 0; i >= 0; i = nx[i])
        if (ivec_push(out, id[i])) rc = -1;
    if (nbytes > 128) free(id), free(nx), free(pv), free(heap), free(batch);
    return rc;
}

static int bpe_piece(const bpe_model *m, const unsigned char *s, size_t n, ivec *out) {
    if (n == 0) return 0;
    if (n == 1 && !m->sp) return ivec_push(out, m->byte_id[s[0]]);
    if (m->ignore_merges && !m->sp) { /* HF: a piece that is a vocabulary token is taken whole */
        char stack[1024];
        char *bl = 2 * n <= sizeof stack ? stack : malloc(2 * n);
        if (!bl) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += unicode_utf8_put(bl + k, m->byte_cp[s[i]]);
        int v = bpe_vocab_id(m, bl, k);
        if (bl != stack) free(bl);
        if (v >= 0) return ivec_push(out, v);
    }
    if (n > CACHE_MAX_PIECE) return bpe_merge(m, s, n, out);
    uint64_t h = hash_bytes(s, n);
    cache_shard *sh = (cache_shard *)&m->cache[h % CACHE_SHARDS];
    size_t bucket = (h / CACHE_SHARDS) % 512;
    pthread_mutex_lock(&sh->mu);
    for (centry *e = sh->buckets[bucket]; e; e = e->next) {
        if (e->h == h && e->klen == n && memcmp(e->data + e->nids, s, n) == 0) {
            int rc = 0;
            for (uint32_t i = 0; i < e->nids; i++)
                if (ivec_push(out, e->data[i])) rc = -1;
            pthread_mutex_unlock(&sh->mu);
            return rc;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    size_t first = out->n;
    if (bpe_merge(m, s, n, out)) return -1;
    size_t nids = out->n - first;
    centry *e = malloc(sizeof *e + nids * sizeof(int32_t) + n);
    if (!e) return 0;
    e->h = h;
    e->klen = (uint32_t)n;
    e->nids = (uint32_t)nids;
    memcpy(e->data, out->v + first, nids * sizeof(int32_t));
    memcpy(e->data + nids, s, n);
    pthread_mutex_lock(&sh->mu);
    if (sh->count >= CACHE_SHARD_MAX) cache_clear_shard(sh);
    e->next = sh->buckets[bucket];
    sh->buckets[bucket] = e;
    sh->count++;
    pthread_mutex_unlock(&sh->mu);
    return 0;
}

typedef struct {
    const char *p;
    size_t n;
} span;

typedef struct {
    span *v;
    size_t n, cap;
} spans;

static int spans_push(spans *a, const char *p, size_t n) {
    span *nv = grow_array(a->v, &a->cap, a->n + 1, sizeof *nv, 64);
    if (!nv) return -1;
    a->v = nv;
    a->v[a->n++] = (span){p, n};
    return 0;
}

/* Owned buffers of one encode call (normalized text, prefixed pieces). */
typedef struct {
    char **v;
    size_t n, cap;
} owned;

static char *owned_alloc(owned *o, size_t n) {
    char **nv = grow_array(o->v, &o->cap, o->n + 1, sizeof *nv, 16);
    if (!nv) return NULL;
    o->v = nv;
    char *b = malloc(n ? n : 1);
    if (b) o->v[o->n++] = b;
    return b;
}

/* Splits one piece by a step's regex into `out`: matches and the text between them. */
static int split_piece(const split_step *st, span piece, pcre2_match_data *md, spans *out,
                       owned *own) {
    if (st->prefix_space && (piece.n == 0 || piece.p[0] != ' ')) {
        char *b = owned_alloc(own, piece.n + 1);
        if (!b) return -1;
        b[0] = ' ';
        memcpy(b + 1, piece.p, piece.n);
        piece = (span){b, piece.n + 1};
    }
    if (!st->re) return spans_push(out, piece.p, piece.n);
    size_t pos = 0, last = 0;
    while (pos <= piece.n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)piece.p, piece.n, pos, PCRE2_NO_UTF_CHECK, md,
                             NULL);
        if (rc < 0) break; /* no match (or a matching error: the rest is one piece) */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s = ov[0], e = ov[1];
        if (e == s) { /* empty match: step over one character */
            if (s >= piece.n) break;
            int c;
            size_t k = utf8_valid_len((const unsigned char *)piece.p + s, piece.n - s, &c);
            pos = s + (k ? k : 1);
            continue;
        }
        if (s > last && spans_push(out, piece.p + last, s - last)) return -1;
        if (spans_push(out, piece.p + s, e - s)) return -1;
        last = pos = e;
    }
    if (last < piece.n && spans_push(out, piece.p + last, piece.n - last)) return -1;
    return 0;
}

/* State of one encode call. */
typedef struct {
    const bpe_model *m;
    pcre2_match_data *md;
    ivec out;
    owned own; /* normalized and decoded copies of the text */
} enc_state;

/* Pre-tokenizes and merges one run of valid (already normalized) UTF-8. */
static int encode_valid(enc_state *st, const char *text, size_t len) {
    const bpe_model *m = st->m;
    spans a = {0}, b = {0};
    int rc = 0;
    if (spans_push(&a, text, len)) rc = -1;
    for (int s = 0; s < m->nsteps && rc == 0; s++) {
        b.n = 0;
        for (size_t i = 0; i < a.n && rc == 0; i++)
            rc = split_piece(&m->steps[s], a.v[i], st->md, &b, &st->own);
        spans t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < a.n && rc == 0; i++)
        rc = bpe_piece(m, (const unsigned char *)a.v[i].p, a.v[i].n, &st->out);
    free(a.v);
    free(b.v);
    return rc;
}

/* Text between added tokens: valid UTF-8 runs go through encode_valid, invalid bytes are
 * pieces of one byte. */
static int encode_text(enc_state *st, const char *text, size_t len) {
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        int c;
        size_t k;
        while (j < len && (k = utf8_valid_len((const unsigned char *)text + j, len - j, &c)))
            j += k;
        if (j > i && encode_valid(st, text + i, j - i)) return -1;
        if (j < len && ivec_push(&st->out, st->m->byte_id[(unsigned char)text[j]])) return -1;
        i = j + 1;
    }
    return 0;
}

/* Takes ownership of a malloc'd buffer for the rest of the call (freed on failure too). */
static int own_buffer(owned *o, char *b) {
    char **nv = grow_array(o->v, &o->cap, o->n + 1, sizeof *nv, 16);
    if (!nv) {
        free(b);
        return -1;
    }
    o->v = nv;
    o->v[o->n++] = b;
    return 0;
}

/* Llama 2's normalizer: Prepend U+2581 (to a non-empty text), then Replace ' ' by U+2581. */
static int sp_normalize(enc_state *st, const char *text, size_t len, const char **out,
                        size_t *outlen) {
    if (len == 0) return 0;
    size_t spaces = 0;
    for (size_t i = 0; i < len; i++) spaces += text[i] == ' ';
    char *buf = malloc(len + 2 * spaces + 3);
    if (!buf || own_buffer(&st->own, buf)) return -1;
    size_t o = 0;
    memcpy(buf, "\xE2\x96\x81", 3);
    o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + o, "\xE2\x96\x81", 3);
            o += 3;
        } else {
            buf[o++] = text[i];
        }
    }
    *out = buf;
    *outlen = o;
    return 0;
}

/* NFC of text (each valid run; invalid bytes stay as they are) when the model normalizes:
 * *out is text itself or a buffer owned by st. */
static int normalize(enc_state *st, const char *text, size_t len, const char **out,
                     size_t *outlen) {
    *out = text;
    *outlen = len;
    if (st->m->sp) return sp_normalize(st, text, len, out, outlen);
    if (!st->m->nfc) return 0;
    char *buf = NULL;
    size_t o = 0, cap = 0, i = 0;
    int changed = 0;
    while (i < len) {
        size_t j = i, k;
        int c;
        while (j < len && (k = utf8_valid_len((const unsigned char *)text + j, len - j, &c)))
            j += k;
        char *norm = NULL;
        size_t nlen = j - i;
        int r = j > i ? unicode_nfc(text + i, j - i, &norm, &nlen) : 0;
        if (r < 0) goto oom;
        changed |= r;
        size_t need = o + nlen + (j < len);
        char *nb = need > cap ? grow_array(buf, &cap, need, 1, len + 16) : buf;
        if (!nb) {
            free(norm);
            goto oom;
        }
        buf = nb;
        memcpy(buf + o, r ? norm : text + i, nlen);
        o += nlen;
        free(norm);
        if (j < len) buf[o++] = text[j];
        i = j + 1;
    }
    if (!changed) {
        free(buf);
        return 0;
    }
    if (own_buffer(&st->own, buf)) return -1;
    *out = buf;
    *outlen = o;
    return 0;
oom:
    free(buf);
    return -1;
}

/* White_Space character ending right before text[end] (start of it in *start), or 0. */
static int ws_before(const char *text, size_t lo, size_t end, size_t *start) {
    for (size_t k = 1; k <= 4 && k <= end - lo; k++) {
        int c;
        size_t l = utf8_valid_len((const unsigned char *)text + end - k, k, &c);
        if (l == k) {
            if (!is_white_space(c)) return 0;
            *start = end - k;
            return 1;
        }
    }
    return 0;
}

/* Is the character at p (n bytes left; before: the one ending at p) a word character? */
static int word_char(enc_state *st, const char *text, size_t len, size_t pos, int before) {
    size_t s = pos, k = 0;
    int c;
    if (before) {
        for (size_t t = 1; t <= 4 && t <= pos && !k; t++)
            if (utf8_valid_len((const unsigned char *)text + pos - t, t, &c) == t) s = pos - t, k = t;
    } else if (pos < len) {
        k = utf8_valid_len((const unsigned char *)text + pos, len - pos, &c);
    }
    if (!k) return 0; /* start or end of the text, or an invalid byte */
    return pcre2_match(st->m->word_re, (PCRE2_SPTR)text + s, k, 0, PCRE2_NO_UTF_CHECK, st->md,
                       NULL) > 0;
}

/* The added token of the given kind (normalized or not) that starts at text[i], the longest
 * one; -1 if none. */
static int added_at(const bpe_model *m, const char *text, size_t len, size_t i, int normalized) {
    unsigned char b = (unsigned char)text[i];
    for (int k = m->first_by_byte[b][0]; k < m->first_by_byte[b][1]; k++) {
        const added_token *t = &m->added[m->sorted[k]];
        if (t->f.normalized == normalized && t->mlen <= len - i &&
            memcmp(text + i, t->match, t->mlen) == 0)
            return m->sorted[k];
    }
    return -1;
}

static int encode_stage(enc_state *st, const char *text, size_t len, int normalized);

/* The text between two matches of one stage: the non-normalized stage hands it, normalized,
 * to the normalized stage; that one hands it to the pre-tokenizer. */
static int encode_gap(enc_state *st, const char *text, size_t len, int normalized) {
    if (normalized) return encode_text(st, text, len);
    const char *norm;
    size_t nlen;
    if (normalize(st, text, len, &norm, &nlen)) return -1;
    return encode_stage(st, norm, nlen, 1);
}

/* HF's AddedVocabulary::find_matches on one sentence: leftmost-longest matches of the tokens
 * of one kind, a single_word match with a word character next to it skipped (the search goes
 * on after it), lstrip/rstrip widening the match over White_Space. */
static int encode_stage(enc_state *st, const char *text, size_t len, int normalized) {
    const bpe_model *m = st->m;
    size_t seg = 0, i = 0; /* text[seg, i) not yet encoded */
    while (i < len && m->nadded) {
        int hit = added_at(m, text, len, i, normalized);
        if (hit < 0) {
            i++;
            continue;
        }
        const added_token *t = &m->added[hit];
        size_t s = i, e = i + t->mlen, ws;
        if (t->f.single_word &&
            (word_char(st, text, len, s, 1) || word_char(st, text, len, e, 0))) {
            i = e;
            continue;
        }
        if (t->f.lstrip)
            while (s > seg && ws_before(text, seg, s, &ws)) s = ws;
        if (t->f.rstrip) {
            int c;
            size_t k;
            while (e < len && (k = utf8_valid_len((const unsigned char *)text + e, len - e, &c)) &&
                   is_white_space(c))
                e += k;
        }
        if (s > seg && encode_gap(st, text + seg, s - seg, normalized)) return -1;
        if (ivec_push(&st->out, t->id)) return -1;
        seg = i = e;
    }
    return seg < len ? encode_gap(st, text + seg, len - seg, normalized) : 0;
}

/* Length of the maximal ill-formed subsequence at s (Unicode 3.9, "U+FFFD substitution of
 * maximal subparts", which Rust's from_utf8_lossy, Python and WHATWG's decoder follow). */
static size_t utf8_bad_len(const unsigned char *s, size_t n) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) need = 2, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) need = 2, hi = 0x9F;
    else if (c == 0xF0) need = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) need = 3, hi = 0x8F;
    else return 1;
    size_t k = 1;
    while (k <= need && k < n && s[k] >= lo && s[k] <= hi) k++, lo = 0x80, hi = 0xBF;
    return k;
}

/* text with every maximal ill-formed subsequence replaced by U+FFFD (*out is text itself when
 * it is valid UTF-8). */
static int decode_lossy(enc_state *st, const char *text, size_t len, const char **out,
                        size_t *outlen) {
    *out = text;
    *outlen = len;
    size_t i = 0, o = 0;
    int c;
    char *buf = NULL;
    while (i < len) {
        size_t k = utf8_valid_len((const unsigned char *)text + i, len - i, &c);
        if (k) {
            if (buf) memcpy(buf + o, text + i, k);
            i += k, o += k;
            continue;
        }
        if (!buf) { /* each bad byte becomes at most 3 bytes */
            buf = malloc(3 * len);
            if (!buf || own_buffer(&st->own, buf)) return -1;
            memcpy(buf, text, i);
        }
        memcpy(buf + o, "\xEF\xBF\xBD", 3);
        o += 3;
        i += utf8_bad_len((const unsigned char *)text + i, len - i);
    }
    if (buf) *out = buf, *outlen = o;
    return 0;
}

int bpe_encode(const bpe_model *m, const char *text, size_t len, int32_t **ids, size_t *n,
               size_t *cap) {
    enc_state st = {m, pcre2_match_data_create(4, NULL), {*ids, *n, *cap}, {0}};
    int rc = st.md ? 0 : -1;
    if (rc == 0 && m->lossy) rc = decode_lossy(&st, text, len, &text, &len);
    if (rc == 0) rc = encode_stage(&st, text, len, 0);
    for (size_t k = 0; k < st.own.n; k++) free(st.own.v[k]);
    free(st.own.v);
    pcre2_match_data_free(st.md);
    *ids = st.out.v;
    *n = st.out.n;
    *cap = st.out.cap;
    return rc;
}
