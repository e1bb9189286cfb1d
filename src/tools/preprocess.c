/* megadlm preprocess: Megatron's tools/preprocess_data.py in C.
 *
 *   megadlm preprocess --input FILE --output-prefix P --tokenizer-type TYPE
 *                      [--vocab-size V | --vocab-file F --merge-file F | --tokenizer-model F]
 *                      [--json-keys text] [--append-eod] [--workers N]
 *                      [--log-interval N] [--strict]
 *
 * Input .jsonl (any name not ending in .txt): one JSON object per line; for every key of
 * --json-keys the value (a string, or a list of strings = sentences, as Megatron) is encoded
 * into its own indexed dataset P_{key}_document.bin/.idx. Each non-empty sentence becomes one
 * sequence; --append-eod appends the end-of-document id to a non-empty document (added to its
 * last sequence); an empty document adds no sequence but still ends a document — all as
 * Megatron's Encoder.encode + IndexedDatasetBuilder.add_document. Lines holding only
 * whitespace are skipped (Megatron would fail on them).
 * A JSONL line that is not a JSON object, lacks a key, or holds a value that is not a string or
 * a list of strings is reported (FILE:LINE) and skipped, for every key, and counted in the
 * summary; with --strict it is fatal. Tokenizer errors are always fatal.
 * Input .txt: documents are runs of non-blank lines separated by blank (whitespace-only)
 * lines; a document's text is its lines joined by their newlines, without the final newline
 * (CRLF line ends read as LF). A NUL in a JSON string ("\u0000" or a raw byte) is kept, as
 * Megatron's json.loads keeps it.
 * Written as P_text_document.
 *
 * Encoding runs in parallel (OpenMP, --workers threads) over chunks of lines; documents are
 * written in input order, so the output does not depend on --workers. A progress line goes to
 * stderr each time another --log-interval documents are written (at most once per chunk):
 * documents, docs/s, MB/s of input, and the share of the input read and an ETA when its size
 * is known. Outputs are written to temporary files renamed on success; on any failure (and on
 * SIGINT/SIGTERM, checked between chunks) they are removed. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "core/datasets/indexed_dataset.h"
#include "core/util/alloc.h"
#include "core/util/parse.h"
#include "core/datasets/sft_dataset.h"
#include "tools/sft_template.h"
#include "tools/tools.h"
#include "training/tokenizer/tokenizer.h"

#define MAX_KEYS 32
#define CHUNK_LINES 4096
#define CHUNK_BYTES (32u << 20)

typedef struct {
    char *text; /* owned; a JSON line or a text document */
    size_t len;
    long line; /* first line number (1-based) */
} item;

typedef struct {
    int32_t *ids;
    size_t n;
    int32_t *seq_lens; /* one per non-empty sentence */
    size_t n_seq;
} encoded;

typedef struct {
    encoded enc[MAX_KEYS];
    char *error;   /* malloc'd message, NULL if fine */
    int malformed; /* the error is the line's own (bad JSON, missing key, wrong value type):
                      skipped unless --strict; other errors (the tokenizer's) are fatal */
} item_result;

/* Frees an item's text and its result, and clears the result for the next line. */
static void item_release(item *it, item_result *r, int nkeys) {
    for (int k = 0; k < nkeys; k++) {
        free(r->enc[k].ids);
        free(r->enc[k].seq_lens);
    }
    free(r->error);
    free(it->text);
    memset(r, 0, sizeof *r);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: megadlm preprocess --input FILE --output-prefix PREFIX --tokenizer-type TYPE "
            "[options]\n"
            "\n"
            "Tokenizes a .jsonl (one JSON object per line) or .txt (documents separated by blank\n"
            "lines) file into Megatron indexed datasets PREFIX_{key}_document.bin/.idx.\n"
            "\n"
            "  --input FILE            input file, .jsonl or .txt (required)\n"
            "  --output-prefix PREFIX  output path prefix (required)\n"
            TOKENIZER_OPTIONS_HELP
            "                          (--tokenizer-type is required; each type needs the\n"
            "                          flags named for it)\n"
            "  --json-keys KEYS        JSON keys to extract, space- or comma-separated; each writes\n"
            "                          PREFIX_{key}_document (default: text; ignored for .txt)\n"
            "  --append-eod            append the end-of-document id to every non-empty document\n"
            "                          (default: off)\n"
            "  --workers N             OpenMP threads used for encoding (default: the OpenMP\n"
            "                          default, $OMP_NUM_THREADS or the number of cores: %d here)\n"
            "  --log-interval N        print a progress line on stderr (documents, docs/s, MB/s,\n"
            "                          ETA) every N documents; 0: none (default: 100)\n"
            "  --strict                a malformed JSONL line (not a JSON object, a key missing,\n"
            "                          a value not a string or list of strings) is fatal\n"
            "                          (default: reported with FILE:LINE and skipped)\n"
            "  --sft                   supervised fine-tuning pairs: --json-keys PROMPT RESPONSE;\n"
            "                          writes PREFIX_sft_document (template(prompt), response,\n"
            "                          end of document: one document a line) and its loss\n"
            "                          mask PREFIX_sft_document_loss_mask (uint8: 0 prompt,\n"
            "                          1 response)\n"
            "  --prompt-template T     --sft: wraps each prompt; {prompt} is the prompt, {bos}\n"
            "                          {eos} {pad} {mask} the tokenizer's special tokens, {{ }}\n"
            "                          braces (default: {prompt})\n"
            "  --help                  print this help and exit\n",
            omp_get_max_threads());
}

static void errmsg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "preprocess: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
}

static char *xstrdup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n' && s[i] != '\f' &&
            s[i] != '\v')
            return 0;
    return 1;
}

/* Appends the tokens of one sentence (Megatron's per-sentence loop). */
static int encode_sentence(const tokenizer *tok, const char *s, size_t len, encoded *e,
                           size_t *cap, char *err, size_t errlen) {
    int32_t *ids;
    size_t n;
    if (tokenizer_encode(tok, s, len, &ids, &n, err, errlen) != 0) return -1;
    if (n > 0) {
        if (e->n + n + 1 > *cap) {
            size_t nc = (*cap ? *cap : 64);
            while (nc < e->n + n + 1) nc *= 2;
            int32_t *q = realloc(e->ids, nc * sizeof(int32_t));
            if (!q) {
                free(ids);
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            e->ids = q;
            *cap = nc;
        }
        memcpy(e->ids + e->n, ids, n * sizeof(int32_t));
        e->n += n;
        int32_t *q = realloc(e->seq_lens, (e->n_seq + 1) * sizeof(int32_t));
        if (!q) {
            free(ids);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        e->seq_lens = q;
        e->seq_lens[e->n_seq++] = (int32_t)n;
    }
    free(ids);
    return 0;
}

static void finish_doc(const tokenizer *tok, int append_eod, encoded *e, size_t *cap) {
    if (e->n > 0 && append_eod) {
        if (e->n + 1 > *cap) {
            e->ids = xrealloc(e->ids, (e->n + 1) * sizeof(int32_t), "a document's tokens");
            *cap = e->n + 1;
        }
        e->ids[e->n++] = tokenizer_eod(tok);
        e->seq_lens[e->n_seq - 1] += 1;
    }
}

/* ---- NUL inside JSON strings ----
 * Megatron's json.loads keeps "\u0000" (and the tokenizer encodes the byte), but cJSON's
 * strings end at their first NUL. A line holding "\u0000" or a raw NUL byte is therefore
 * parsed with each of them replaced by the escape of a code point the line does not use (a
 * sentinel from the private use area), and the decoded strings map it back to NUL. */
typedef struct {
    char utf8[4]; /* the sentinel's UTF-8 bytes (3 of them), "" when the line has no NUL */
} nul_map;

/* Whether line[0..n) uses private-use code point c, as UTF-8 or as a \u escape. */
static int uses_code_point(const char *line, size_t n, unsigned c) {
    char u8[4] = {(char)(0xE0 | (c >> 12)), (char)(0x80 | ((c >> 6) & 0x3F)),
                  (char)(0x80 | (c & 0x3F)), 0};
    char esc[8];
    snprintf(esc, sizeof esc, "\\u%04x", c);
    for (size_t i = 0; i + 3 <= n; i++) {
        if (!memcmp(line + i, u8, 3)) return 1;
        if (i + 6 <= n && !strncasecmp(line + i, esc, 6)) return 1;
    }
    return 0;
}

/* The line to parse: itself when it has no NUL, else a copy with every "\u0000" escape and
 * raw NUL byte replaced by the sentinel's escape (*owned set; free it). */
static const char *line_without_nul(const char *line, size_t n, size_t *out_len, nul_map *m,
                                    char **owned) {
    m->utf8[0] = 0;
    *owned = NULL;
    *out_len = n;
    int has = memchr(line, 0, n) != NULL;
    for (size_t i = 0; !has && i + 6 <= n; i++)
        if (line[i] == '\\') has = !strncmp(line + i + 1, "u0000", 5), i++;
    if (!has) return line;
    unsigned c = 0xE000;
    while (c < 0xF8FF && uses_code_point(line, n, c)) c++;
    snprintf(m->utf8, sizeof m->utf8, "%c%c%c", 0xE0 | (c >> 12), 0x80 | ((c >> 6) & 0x3F),
             0x80 | (c & 0x3F));
    char esc[8];
    snprintf(esc, sizeof esc, "\\u%04x", c);
    char *o = xmalloc(6 * n + 1, "a JSON line with its NUL bytes escaped");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (line[i] == 0 || (line[i] == '\\' && i + 6 <= n && !strncmp(line + i + 1, "u0000", 5))) {
            memcpy(o + k, esc, 6), k += 6;
            i += line[i] ? 5 : 0;
        } else if (line[i] == '\\' && i + 1 < n) { /* another escape: both characters as they are */
            o[k++] = line[i++];
            o[k++] = line[i];
        } else {
            o[k++] = line[i];
        }
    }
    o[k] = 0;
    *owned = o;
    *out_len = k;
    return o;
}

/* A decoded string's text and length with the sentinel turned back into NUL (in place). */
static size_t restore_nul(char *s, const nul_map *m) {
    size_t n = strlen(s);
    if (!m->utf8[0]) return n;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 3 <= n && !memcmp(s + i, m->utf8, 3)) {
            s[k++] = 0;
            i += 2;
        } else {
            s[k++] = s[i];
        }
    }
    return k;
}

/* --sft: key k's value (0 the prompt, wrapped by the template; 1 the response) as one
 * sequence. 0, or -1 with r->error set. */
static int encode_sft_value(const tokenizer *tok, const sft_template *sft, const char *input,
                            const item *it, const char *key, int k, cJSON *v, const nul_map *nm,
                            item_result *r) {
    char err[512];
    if (!cJSON_IsString(v)) {
        r->error = xstrdup_printf("%s:%ld: key '%s': expected a string (--sft)", input, it->line,
                                  key);
        r->malformed = 1;
        return -1;
    }
    size_t len = restore_nul(v->valuestring, nm);
    encoded *e = &r->enc[k];
    size_t n;
    int rc = k == 0 ? sft_template_prompt(sft, tok, v->valuestring, len, &e->ids, &n, err,
                                          sizeof err)
                    : sft_template_response(sft, tok, v->valuestring, len, &e->ids, &n, err,
                                            sizeof err);
    if (rc != 0) {
        r->error = xstrdup_printf("%s:%ld: key '%s': %s", input, it->line, key, err);
        return -1;
    }
    e->n = n;
    return 0;
}

static void encode_item(const tokenizer *tok, const char *input, int is_txt, int nkeys,
                        char **keys, int append_eod, const sft_template *sft, const item *it,
                        item_result *r) {
    char err[512];
    if (is_txt) {
        size_t cap = 0;
        if (encode_sentence(tok, it->text, it->len, &r->enc[0], &cap, err, sizeof err) != 0) {
            r->error = xstrdup_printf("%s:%ld: %s", input, it->line, err);
            return;
        }
        finish_doc(tok, append_eod, &r->enc[0], &cap);
        return;
    }
    const char *endp = NULL;
    nul_map nm;
    char *owned;
    size_t text_len;
    const char *text = line_without_nul(it->text, it->len, &text_len, &nm, &owned);
    cJSON *root = cJSON_ParseWithLengthOpts(text, text_len, &endp, 0);
    /* cJSON reports where parsing stopped through endp (its global error pointer is not
     * thread-safe); columns count in the parsed text (the line's, unless raw NULs were
     * replaced) */
    long col = (endp && endp >= text && endp <= text + text_len) ? (long)(endp - text) + 1 : 0;
    int trailing = root && endp && !is_blank(endp, (size_t)(text + text_len - endp));
    free(owned);
    if (!root) {
        r->error = xstrdup_printf("%s:%ld: not valid JSON (near column %ld)", input, it->line, col);
        r->malformed = 1;
        return;
    }
    if (trailing) { /* text after the object */
        r->error = xstrdup_printf("%s:%ld: not valid JSON (unexpected text at column %ld)", input,
                                  it->line, col);
        r->malformed = 1;
        cJSON_Delete(root);
        return;
    }
    if (!cJSON_IsObject(root)) {
        r->error = xstrdup_printf("%s:%ld: expected a JSON object, found another JSON value",
                                  input, it->line);
        r->malformed = 1;
        cJSON_Delete(root);
        return;
    }
    for (int k = 0; k < nkeys; k++) {
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[k]);
        size_t cap = 0;
        if (!v) {
            r->error = xstrdup_printf("%s:%ld: key '%s' missing (--json-keys)", input, it->line,
                                      keys[k]);
            r->malformed = 1;
            break;
        }
        if (sft) {
            if (encode_sft_value(tok, sft, input, it, keys[k], k, v, &nm, r) != 0) break;
            continue;
        }
        if (cJSON_IsString(v)) {
            if (encode_sentence(tok, v->valuestring, restore_nul(v->valuestring, &nm),
                                &r->enc[k], &cap, err, sizeof err) != 0) {
                r->error = xstrdup_printf("%s:%ld: key '%s': %s", input, it->line, keys[k], err);
                break;
            }
        } else if (cJSON_IsArray(v)) {
            cJSON *s;
            int bad = 0;
            cJSON_ArrayForEach(s, v) {
                if (!cJSON_IsString(s)) {
                    r->error = xstrdup_printf(
                        "%s:%ld: key '%s': expected a string or a list of strings, found a list "
                        "holding a non-string",
                        input, it->line, keys[k]);
                    r->malformed = 1;
                    bad = 1;
                    break;
                }
                if (encode_sentence(tok, s->valuestring, restore_nul(s->valuestring, &nm),
                                    &r->enc[k], &cap, err, sizeof err) != 0) {
                    r->error =
                        xstrdup_printf("%s:%ld: key '%s': %s", input, it->line, keys[k], err);
                    bad = 1;
                    break;
                }
            }
            if (bad) break;
        } else {
            r->error = xstrdup_printf("%s:%ld: key '%s': expected a string or a list of strings",
                                      input, it->line, keys[k]);
            r->malformed = 1;
            break;
        }
        finish_doc(tok, append_eod, &r->enc[k], &cap);
    }
    cJSON_Delete(root);
}

typedef struct {
    FILE *f;
    int is_txt;
    long line; /* lines read so far */
    char *buf;
    size_t cap;
    int eof;
} reader;

/* A .txt line's length with a CRLF ending made LF (Python reads text with universal
 * newlines: a Windows file gives the same documents as a Unix one). */
static size_t lf_line(char *line, size_t len) {
    if (len >= 2 && line[len - 2] == '\r' && line[len - 1] == '\n') {
        line[len - 2] = '\n';
        return len - 1;
    }
    return len;
}

/* A text document (paragraph) being assembled from its lines. */
typedef struct {
    char *s;
    size_t len, cap;
    long line; /* its first line */
} text_doc;

static void doc_append(text_doc *d, const char *line, size_t len) {
    if (d->len + len + 1 > d->cap) {
        d->cap = (d->len + len + 1) * 2;
        d->s = xrealloc(d->s, d->cap, "a text document");
    }
    memcpy(d->s + d->len, line, len);
    d->len += len;
}

/* Hands the document over to *it (without its last newline) and starts an empty one. */
static size_t doc_finish(text_doc *d, item *it) {
    if (d->s[d->len - 1] == '\n') d->len--;
    d->s[d->len] = 0;
    *it = (item){.text = d->s, .len = d->len, .line = d->line};
    size_t len = d->len;
    *d = (text_doc){0};
    return len;
}

/* Reads the next chunk of items. Returns the count (0 at end). */
static size_t read_chunk(reader *rd, item *items, size_t max_items) {
    size_t n = 0, bytes = 0;
    text_doc doc = {0};
    while (n < max_items && bytes < CHUNK_BYTES && !rd->eof) {
        ssize_t got = getline(&rd->buf, &rd->cap, rd->f);
        if (got < 0) {
            rd->eof = 1;
            break;
        }
        rd->line++;
        size_t len = (size_t)got;
        if (!rd->is_txt) {
            if (is_blank(rd->buf, len)) continue;
            if (len && rd->buf[len - 1] == '\n') len--;
            items[n].text = xmalloc(len + 1, "a JSON line");
            memcpy(items[n].text, rd->buf, len);
            items[n].text[len] = 0;
            items[n].len = len;
            items[n].line = rd->line;
            n++;
            bytes += len;
            continue;
        }
        if (is_blank(rd->buf, len)) {
            if (doc.len) bytes += doc_finish(&doc, &items[n++]);
            continue;
        }
        len = lf_line(rd->buf, len);
        if (!doc.len) doc.line = rd->line;
        doc_append(&doc, rd->buf, len);
    }
    if (doc.len) {
        /* A text document cut by the chunk limit continues: read on to its end. */
        for (;;) {
            ssize_t got = rd->eof ? -1 : getline(&rd->buf, &rd->cap, rd->f);
            if (got < 0) {
                rd->eof = 1;
                break;
            }
            rd->line++;
            if (is_blank(rd->buf, (size_t)got)) break;
            doc_append(&doc, rd->buf, lf_line(rd->buf, (size_t)got));
        }
        doc_finish(&doc, &items[n++]);
    } else {
        free(doc.s);
    }
    return n;
}

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static double seconds_since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

/* Megatron's "Processed N documents (X docs/s, Y MB/s)." plus the share read and an ETA when
 * the input size is known (total > 0). */
static void progress(uint64_t docs, double secs, long long done, long long total) {
    if (secs <= 0) secs = 1e-9;
    double mbs = (double)done / secs / 1e6;
    fprintf(stderr, "preprocess: processed %" PRIu64 " documents (%.0f docs/s, %.2f MB/s", docs,
            (double)docs / secs, mbs);
    if (total > 0 && done <= total) {
        double eta = done > 0 ? secs * (double)(total - done) / (double)done : 0;
        long e = (long)(eta + 0.5);
        fprintf(stderr, ", %.1f%% of %.1f MB, ETA %ld:%02ld:%02ld",
                100.0 * (double)done / (double)total, (double)total / 1e6, e / 3600, e / 60 % 60,
                e % 60);
    }
    fprintf(stderr, ").\n");
}

static int split_keys(char *spec, char **keys, int *nkeys) {
    *nkeys = 0;
    for (char *tok = strtok(spec, " ,\t"); tok; tok = strtok(NULL, " ,\t")) {
        if (*nkeys >= MAX_KEYS) return -1;
        keys[(*nkeys)++] = tok;
    }
    return *nkeys > 0 ? 0 : -1;
}

/* The flags of `megadlm preprocess`. */
typedef struct {
    const char *input, *output_prefix, *json_keys;
    const char *prompt_template; /* --prompt-template (NULL: "{prompt}") */
    tokenizer_options tok;
    int append_eod, workers, strict; /* workers 0: every OpenMP thread */
    int sft;                         /* --sft */
    long log_interval;
} pp_flags;

/* 0, 1 after --help, or -1 after printing what is wrong. */
static int parse_flags(int argc, char **argv, pp_flags *o) {
    *o = (pp_flags){.json_keys = "text", .log_interval = 100};
    static const struct option opts[] = {
        {"input", required_argument, 0, 'i'},        {"output-prefix", required_argument, 0, 'o'},
        TOKENIZER_LONG_OPTIONS,
        {"json-keys", required_argument, 0, 'k'},    {"append-eod", no_argument, 0, 'e'},
        {"workers", required_argument, 0, 'w'},      {"help", no_argument, 0, 'h'},
        {"log-interval", required_argument, 0, 'l'}, {"strict", no_argument, 0, 's'},
        {"sft", no_argument, 0, 'S'},                {"prompt-template", required_argument, 0, 'T'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c, v;
    char err[1024];
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        int tflag = tokenizer_option(&o->tok, c, optarg, err, sizeof err);
        if (tflag < 0) {
            errmsg("%s", err);
            return -1;
        }
        if (tflag) continue;
        switch (c) {
        case 'i': o->input = optarg; break;
        case 'o': o->output_prefix = optarg; break;
        case 'k': o->json_keys = optarg; break;
        case 'e': o->append_eod = 1; break;
        case 's': o->strict = 1; break;
        case 'S': o->sft = 1; break;
        case 'T': o->prompt_template = optarg; break;
        case 'l':
            if (parse_int_flag("--log-interval", optarg, 0, &v, err, sizeof err)) {
                errmsg("%s", err);
                return -1;
            }
            o->log_interval = v;
            break;
        case 'w':
            if (parse_int_flag("--workers", optarg, 1, &v, err, sizeof err)) {
                errmsg("%s", err);
                return -1;
            }
            if (v > 4096) {
                errmsg("--workers: expected a positive integer up to 4096, found '%s'", optarg);
                return -1;
            }
            o->workers = v;
            break;
        case 'h': usage(stdout); return 1;
        case ':':
            errmsg("%s: missing value (see megadlm preprocess --help)", argv[optind - 1]);
            return -1;
        default:
            errmsg("unknown option '%s' (see megadlm preprocess --help)", argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        errmsg("unexpected argument '%s' (--json-keys takes one space- or comma-separated "
               "list, e.g. --json-keys 'text title')",
               argv[optind]);
        return -1;
    }
    if (!o->input) {
        errmsg("--input: missing (see megadlm preprocess --help)");
        return -1;
    }
    if (!o->output_prefix) {
        errmsg("--output-prefix: missing (see megadlm preprocess --help)");
        return -1;
    }
    if (o->prompt_template && !o->sft) {
        errmsg("--prompt-template needs --sft");
        return -1;
    }
    if (o->sft && ends_with(o->input, ".txt")) {
        errmsg("--sft: expected a .jsonl input of prompt/response pairs, found '%s'", o->input);
        return -1;
    }
    if (!o->tok.type) {
        errmsg("--tokenizer-type: missing, expected ByteLevel, NullTokenizer, GPT2BPETokenizer or "
               "HuggingFaceTokenizer");
        return -1;
    }
    return 0;
}

/* --sft: one document of one sequence, the wrapped prompt, the response and the end of
 * document, into builders[0]; its loss mask (0 on the prompt, 1 on the rest) into builders[1]. */
static int store_sft_item(idx_builder **builders, int32_t eod, const item_result *r, char *err,
                          size_t errlen) {
    size_t np = r->enc[0].n, nr = r->enc[1].n, n = np + nr + 1;
    int32_t *ids = xmalloc(n * sizeof(int32_t), "an SFT document");
    int32_t *mask = xmalloc(n * sizeof(int32_t), "an SFT loss mask");
    if (np) memcpy(ids, r->enc[0].ids, np * sizeof(int32_t));
    if (nr) memcpy(ids + np, r->enc[1].ids, nr * sizeof(int32_t));
    ids[n - 1] = eod;
    for (size_t i = 0; i < n; i++) mask[i] = i >= np;
    int rc = idx_builder_add_document(builders[0], ids, n, err, errlen);
    if (rc == 0) rc = idx_builder_add_document(builders[1], mask, n, err, errlen);
    free(ids);
    free(mask);
    return rc;
}

/* Appends the chunk's encoded items to the builders, in input order, and frees them. A
 * malformed line is skipped with a warning (fatal with --strict). 0, or 1 after printing the
 * first failure (the rest of the chunk is only freed). */
static int store_chunk(idx_builder **builders, int nkeys, const pp_flags *o, int32_t eod,
                       item *items, item_result *results, size_t n, uint64_t *docs,
                       uint64_t *skipped) {
    char err[1024];
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        int skip = 0;
        if (!failed && results[i].error) {
            if (results[i].malformed && !o->strict) {
                fprintf(stderr,
                        "preprocess: warning: %s; line skipped (--strict makes this fatal)\n",
                        results[i].error);
                (*skipped)++;
                skip = 1;
            } else {
                errmsg("%s", results[i].error);
                failed = 1;
            }
        }
        if (o->sft && !failed && !skip &&
            store_sft_item(builders, eod, &results[i], err, sizeof err) != 0) {
            errmsg("%s:%ld: %s", o->input, items[i].line, err);
            failed = 1;
        }
        for (int k = 0; k < nkeys && !failed && !skip && !o->sft; k++) {
            encoded *e = &results[i].enc[k];
            size_t off = 0;
            for (size_t s = 0; s < e->n_seq && !failed; s++) {
                if (idx_builder_add_item(builders[k], e->ids + off, (size_t)e->seq_lens[s], err,
                                         sizeof err) != 0) {
                    errmsg("%s:%ld: %s", o->input, items[i].line, err);
                    failed = 1;
                }
                off += (size_t)e->seq_lens[s];
            }
            if (!failed) idx_builder_end_document(builders[k], err, sizeof err);
        }
        if (!failed && !skip) (*docs)++;
        item_release(&items[i], &results[i], nkeys);
    }
    return failed;
}

/* Finishes each output (a temporary file renamed into place) and says what it holds; a builder
 * finished or failed is set to NULL, so the caller aborts only the ones left. */
static int finalize_outputs(idx_builder **builders, char **prefixes, int nkeys, char **keys,
                            const pp_flags *o, int dtype) {
    char err[1024];
    for (int k = 0; k < nkeys; k++) {
        uint64_t nd = idx_builder_num_documents(builders[k]);
        uint64_t ns = idx_builder_num_sequences(builders[k]);
        uint64_t nt = idx_builder_num_tokens(builders[k]);
        idx_builder *b = builders[k];
        builders[k] = NULL;
        if (idx_builder_finalize(b, err, sizeof err) != 0) {
            errmsg("%s", err);
            return -1;
        }
        char what[160];
        if (!o->sft)
            snprintf(what, sizeof what, "key '%s'", keys[k]);
        else
            snprintf(what, sizeof what, "--sft '%s' + '%s'%s", keys[0], keys[1],
                     k ? ", its loss mask" : "");
        printf("preprocess: %s: %" PRIu64 " documents, %" PRIu64 " sequences, %" PRIu64
               " %s -> %s.bin, %s.idx (dtype %s)\n",
               what, nd, ns, nt, o->sft && k ? "values" : "tokens", prefixes[k], prefixes[k],
               idx_dtype_name(o->sft && k ? IDX_DTYPE_UINT8 : dtype));
    }
    return 0;
}

int preprocess_main(int argc, char **argv) {
    pp_flags o;
    int pr = parse_flags(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 1;
    const char *input = o.input, *output_prefix = o.output_prefix, *json_keys_arg = o.json_keys;
    int append_eod = o.append_eod, workers = o.workers;
    long log_interval = o.log_interval;
    char err[1024];
    tokenizer *tok = tokenizer_create_opts(&o.tok, err, sizeof err);
    if (!tok) {
        errmsg("%s", err);
        return 1;
    }
    int is_txt = ends_with(input, ".txt");
    char *keys_buf = strdup(is_txt ? "text" : json_keys_arg);
    char *keys[MAX_KEYS];
    int nkeys;
    if (split_keys(keys_buf, keys, &nkeys) != 0) {
        errmsg("--json-keys: expected 1 to %d keys, found '%s'", MAX_KEYS, json_keys_arg);
        free(keys_buf);
        tokenizer_free(tok);
        return 1;
    }
    for (int a = 0; a < nkeys; a++)
        for (int b = 0; b < a; b++)
            if (strcmp(keys[a], keys[b]) == 0) {
                errmsg("--json-keys: key '%s' given twice", keys[a]);
                free(keys_buf);
                tokenizer_free(tok);
                return 1;
            }
    FILE *f = fopen(input, "rb");
    if (!f) {
        errmsg("--input: %s: cannot open: %s", input, strerror(errno));
        free(keys_buf);
        tokenizer_free(tok);
        return 1;
    }
    if (workers <= 0) workers = omp_get_max_threads();
    long long in_size = 0; /* 0: unknown (a pipe) */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) in_size = (long long)st.st_size;

    int dtype = idx_dtype_optimal(tokenizer_vocab_size(tok));
    idx_builder *builders[MAX_KEYS] = {0};
    char *prefixes[MAX_KEYS] = {0};
    int rc = 1, sigs_set = 0;
    struct sigaction old_int, old_term;
    sft_template *sft = NULL;
    if (o.sft && nkeys != 2) {
        errmsg("--sft: expected --json-keys PROMPT_KEY RESPONSE_KEY (two keys), found '%s'",
               json_keys_arg);
        goto done;
    }
    if (o.sft && !(sft = sft_template_parse(o.prompt_template, tok, err, sizeof err))) {
        errmsg("%s", err);
        goto done;
    }
    for (int k = 0; k < nkeys; k++) {
        /* --sft: the tokens P_sft_document and their loss mask beside them (sft_dataset.h) */
        prefixes[k] = !o.sft ? xstrdup_printf("%s_%s_document", output_prefix, keys[k])
                      : k == 0 ? xstrdup_printf("%s_sft_document", output_prefix)
                               : xstrdup_printf("%s_sft_document%s", output_prefix,
                                                SFT_MASK_SUFFIX);
        builders[k] = idx_builder_create(prefixes[k], o.sft && k ? IDX_DTYPE_UINT8 : dtype, err,
                                         sizeof err);
        if (!builders[k]) {
            errmsg("--output-prefix: %s", err);
            goto done;
        }
    }

    /* an interrupt between chunks aborts cleanly: the temporary outputs are removed */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = 0; /* no SA_RESTART: a read blocked on a pipe returns, and we abort */
    sigemptyset(&sa.sa_mask);
    interrupted = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigs_set = 1;

    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    reader rd = {.f = f, .is_txt = is_txt};
    item *items = xcalloc(CHUNK_LINES + 1, sizeof(item), "a chunk of lines");
    item_result *results = xcalloc(CHUNK_LINES + 1, sizeof(item_result), "a chunk's results");
    uint64_t docs = 0, skipped = 0, next_log = (uint64_t)log_interval;
    long long bytes_read = 0;
    int failed = 0;
    for (;;) {
        size_t n = read_chunk(&rd, items, CHUNK_LINES);
        if (interrupted) {
            errmsg("interrupted (signal %d); no output written", (int)interrupted);
            failed = 1;
        } else if (ferror(f)) {
            errmsg("--input: %s: read error: %s", input, strerror(errno));
            failed = 1;
        }
        if (n == 0 || failed) break;
        for (size_t i = 0; i < n; i++) bytes_read += (long long)items[i].len;
#pragma omp parallel for schedule(dynamic, 16) num_threads(workers)
        for (size_t i = 0; i < n; i++)
            encode_item(tok, input, is_txt, nkeys, keys, append_eod, sft, &items[i],
                        &results[i]);
        failed = store_chunk(builders, nkeys, &o, tokenizer_eod(tok), items, results, n, &docs,
                             &skipped);
        if (failed) break;
        if (log_interval > 0 && docs >= next_log) {
            /* bytes: the input consumed so far (newlines included), for MB/s and the ETA */
            long long pos = in_size > 0 ? (long long)ftello(f) : bytes_read;
            progress(docs, seconds_since(&t0), pos, in_size);
            next_log = (docs / (uint64_t)log_interval + 1) * (uint64_t)log_interval;
        }
    }
    free(items);
    free(results);
    free(rd.buf);
    if (failed) goto done;
    double secs = seconds_since(&t0);

    if (finalize_outputs(builders, prefixes, nkeys, keys, &o, dtype) != 0) goto done;
    printf("preprocess: %s: %" PRIu64 " documents read, %" PRIu64 " malformed line%s skipped, "
           "tokenizer %s (vocab %d, eod %d%s), %d workers, %.3f s, %.2f MB/s\n",
           input, docs, skipped, skipped == 1 ? "" : "s", tokenizer_type(tok),
           tokenizer_vocab_size(tok), tokenizer_eod(tok),
           append_eod || o.sft ? ", appended" : ", not appended", workers, secs,
           secs > 0 ? (double)(in_size > 0 ? in_size : bytes_read) / secs / 1e6 : 0.0);
    rc = 0;
done:
    for (int k = 0; k < nkeys; k++) {
        if (builders[k]) idx_builder_abort(builders[k]);
        free(prefixes[k]);
    }
    if (sigs_set) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    fclose(f);
    free(keys_buf);
    sft_template_free(sft);
    tokenizer_free(tok);
    return rc;
}

long preprocess_encode_stream(FILE *f, int is_txt, const tokenizer *tok, int nkeys, char **keys,
                              int append_eod, uint64_t *tokens, uint64_t *malformed,
                              uint64_t *failed) {
    if (nkeys < 1 || nkeys > MAX_KEYS) return -1;
    reader rd = {.f = f, .is_txt = is_txt};
    item *items = xcalloc(CHUNK_LINES + 1, sizeof(item), "a chunk of lines");
    item_result *results = xcalloc(CHUNK_LINES + 1, sizeof(item_result), "a chunk's results");
    long count = 0;
    *tokens = *malformed = *failed = 0;
    if (!items || !results) {
        free(items);
        free(results);
        return -1;
    }
    size_t n;
    while ((n = read_chunk(&rd, items, CHUNK_LINES)) > 0) {
        for (size_t i = 0; i < n; i++) {
            encode_item(tok, "input", is_txt, nkeys, keys, append_eod, NULL, &items[i],
                        &results[i]);
            if (results[i].error) {
                if (results[i].malformed) (*malformed)++;
                else (*failed)++;
            }
            for (int k = 0; k < nkeys; k++) *tokens += results[i].enc[k].n;
            item_release(&items[i], &results[i], nkeys);
        }
        count += (long)n;
    }
    free(items);
    free(results);
    free(rd.buf);
    return count;
}
