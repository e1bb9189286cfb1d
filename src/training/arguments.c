/* Command-line arguments of `megadlm train`: Megatron-LM's flag names, defaults and rules
 * (megatron/training/arguments.py: the _add_*_args functions and validate_args).
 *
 * The flag list (arguments.def) generates the option table (OPTIONS: getopt_long and --help),
 * the defaults, and the field table (FIELDS: args_print and the JSON round trip). Flags of
 * features that arrive later are in the list too, and are refused with "<flag>: not supported
 * yet". */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* open_memstream */
#endif
#include "training/arguments.h"

#define ARGS_STR_(x) #x
#define ARGS_STR(x) ARGS_STR_(x)

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/num_microbatches_calculator.h"
#include "core/transformer/transformer_config.h"
#include "core/util/parse.h"
#include "training/tokenizer/tokenizer.h"

/* ------------------------------------------------------------------------------------------ */
/* errors                                                                                      */

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Python's repr of a number: the shortest digits that read back as the same value (as a
 * float when f32, so 0.1f prints "0.1"), fixed notation for exponents -4..15 ("10000.0",
 * "0.02"), scientific otherwise ("1e-05", "1e-08"). NaN prints as None (an unset value). */
static void fmt_num(char *buf, size_t n, double x, int f32) {
    if (isnan(x)) {
        snprintf(buf, n, "None");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, n, "%sinf", x < 0 ? "-" : "");
        return;
    }
    char tmp[64];
    int p;
    for (p = 0; p < 17; p++) {
        snprintf(tmp, sizeof(tmp), "%.*e", p, x);
        double back = strtod(tmp, NULL);
        if (f32 ? ((float)back == (float)x) : (back == x)) break;
    }
    if (p == 17) snprintf(tmp, sizeof(tmp), "%.16e", x);
    /* tmp: [-]D[.DDD]e[+-]XX */
    const char *q = tmp;
    int neg = 0;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    char digits[32];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 31) digits[nd++] = *q;
    int e = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char out[96];
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) out[k++] = digits[i];
            else
                out[k++] = '0';
        } else {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -e - 1; i++) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof(out) - k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, n, "%s", out);
}

static void fmt_float(char *buf, size_t n, float x) { fmt_num(buf, n, (double)x, 1); }
static void fmt_double(char *buf, size_t n, double x) { fmt_num(buf, n, x, 0); }

/* ------------------------------------------------------------------------------------------ */
/* strict number parsing                                                                       */

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || !isdigit((unsigned char)*s)) return -1; /* no sign, no space */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno == ERANGE) return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    if (!s || !*s || isspace((unsigned char)*s)) return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}


/* ------------------------------------------------------------------------------------------ */
/* the option table                                                                            */

enum opt_kind {
    K_INT,       /* int, any value >= INT_MIN */
    K_POS,       /* int > 0 */
    K_NONNEG,    /* int >= 0 */
    K_U64,       /* uint64_t */
    K_FLOAT,     /* float */
    K_STR,       /* char[] */
    K_TRUE,      /* store_true: sets the int field to 1, takes no value */
    K_FALSE,     /* store_false (Megatron's --disable-* / --no-*): sets the int field to 0 */
    K_DATA,      /* --data-path W1 P1 W2 P2 ... */
    K_DATA_STR,  /* --train-data-path etc.: the same words, kept as one string */
    K_HELP,      /* --help */
    K_HELP_MD,   /* --help-markdown: the tables of docs/FLAGS.md */
    K_LATER,     /* a flag of a later feature: refused */
};

enum opt_group { G_MODEL, G_DATA, G_TRAIN, G_LOG, G_RECOMPUTE, G_PAR, G_MOE, G_LATER, G_COUNT };

/* the names docs/FLAGS.md.in places each group's table by ({{flags:KEY}}) */
static const char *const GROUP_KEYS[] = {
    "model", "data", "training", "logging", "recompute", "parallel", "moe", "refused",
};
_Static_assert(sizeof GROUP_KEYS / sizeof GROUP_KEYS[0] == G_COUNT,
               "a --help group needs its docs/FLAGS.md.in key");

static const char *const GROUP_TITLES[G_COUNT] = {
    "model", "data and tokenizer", "training (batch, optimizer, learning rate)",
    "logging, evaluation and checkpoints", "activation recomputation", "parallelism",
    "mixture of experts", "refused (features of later releases)",
};

typedef struct {
    const char *name;    /* without the leading "--" */
    int kind;
    int group;
    size_t off;          /* offset of the field in megadlm_args */
    size_t size;         /* for K_STR: the size of the char array */
    const char *metavar; /* NULL for flags without a value */
    const char *deflt;   /* shown as the default; NULL = format the value args_defaults gives */
    const char *help;
    int none;            /* the type's "unset prints None" (a negative FLOAT_NONE: None) */
} opt_def;

#define OFF(f) offsetof(megadlm_args, f)
#define SZ(f) sizeof(((megadlm_args *)0)->f)

static const opt_def OPTIONS[] = {
#define ARG_FLAG(field, type, deflt, check, config, group, flag, metavar, shown, help) \
    {flag, ARGS_KIND(type), group, OFF(field), SZ(field), metavar, shown, help, ARGS_NONE(type)},
#define ARG_ALIAS(field, type, group, flag, metavar, shown, help) \
    {flag, ARGS_KIND(type), group, OFF(field), SZ(field), metavar, shown, help, ARGS_NONE(type)},
#define ARG_OPTION(kind, group, flag, metavar, shown, help) \
    {flag, K_##kind, group, 0, 0, metavar, shown, help, 0},
#define ARG_LATER(flag) {flag, K_LATER, G_LATER, 0, 0, NULL, NULL, NULL, 0},
#include "training/arguments.def"
};

#define NUM_OPTIONS ((int)(sizeof(OPTIONS) / sizeof(OPTIONS[0])))
#define OPT_VAL_BASE 256

static void *field_ptr(megadlm_args *a, size_t off) { return (char *)a + off; }
static const void *cfield_ptr(const megadlm_args *a, size_t off) { return (const char *)a + off; }

/* ------------------------------------------------------------------------------------------ */
/* defaults                                                                                    */

static const megadlm_args DEFAULTS = {
#define ARG_FLAG(field, type, deflt, ...) .field = deflt,
#define ARG_FIELD(field, type, deflt, ...) .field = deflt,
#include "training/arguments.def"
};

void args_defaults(megadlm_args *a) { memcpy(a, &DEFAULTS, sizeof(*a)); }

void args_free(megadlm_args *a) {
    if (!a) return;
    for (int i = 0; i < a->num_data_paths && i < ARGS_MAX_DATA_PATHS; i++) {
        free(a->data_paths[i]);
        a->data_paths[i] = NULL;
    }
    a->num_data_paths = 0;
    a->data_weighted = 0;
}

/* ------------------------------------------------------------------------------------------ */
/* help                                                                                        */

static void format_default(const opt_def *o, const megadlm_args *d, char *buf, size_t n) {
    if (o->deflt) {
        snprintf(buf, n, "%s", o->deflt);
        return;
    }
    const void *p = cfield_ptr(d, o->off);
    switch (o->kind) {
    case K_INT: case K_POS: case K_NONNEG:
        snprintf(buf, n, "%d", *(const int *)p);
        break;
    case K_U64:
        snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p);
        break;
    case K_FLOAT:
        fmt_float(buf, n, *(const float *)p);
        break;
    case K_STR:
        snprintf(buf, n, "%s", (const char *)p);
        break;
    default:
        buf[0] = 0;
    }
}

static void print_help_to(const char *command, FILE *out);

/* The help is composed in memory and written with one write(): `megadlm train --help | grep -q`
 * then never sees a second write fail with SIGPIPE after grep has exited. */
void args_print_help(const char *command, FILE *out) {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) {
        print_help_to(command, out);
        return;
    }
    print_help_to(command, mem);
    fclose(mem);
    fflush(out);
    int fd = fileno(out);
    size_t done = 0;
    if (fd >= 0) {
        while (done < len) {
            ssize_t w = write(fd, buf + done, len - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) break;
            done += (size_t)w;
        }
    }
    if (done < len) fwrite(buf + done, 1, len - done, out);
    free(buf);
}

static void print_help_to(const char *command, FILE *out) {
    megadlm_args d;
    args_defaults(&d);
    const char *cmd = (command && *command) ? command : "train";
    fprintf(out, "Usage: megadlm %s [flags]\n\n", cmd);
    fprintf(out, "Flags have Megatron-LM's names, defaults and rules (see docs/FLAGS.md).\n");
    fprintf(out, "Values follow the flag (--lr 3e-4 or --lr=3e-4); numbers are parsed strictly.\n");
    for (int g = 0; g < G_COUNT; g++) {
        fprintf(out, "\n%s:\n", GROUP_TITLES[g]);
        if (g == G_LATER) {
            fprintf(out, "  (each is refused with \"<flag>: not supported yet\")\n");
            int col = 0;
            for (int i = 0; i < NUM_OPTIONS; i++) {
                if (OPTIONS[i].group != g) continue;
                int w = (int)strlen(OPTIONS[i].name) + 3;
                if (col && col + w > 96) {
                    fprintf(out, "\n");
                    col = 0;
                }
                fprintf(out, "%s--%s", col ? " " : "  ", OPTIONS[i].name);
                col += col ? w : w + 1;
            }
            fprintf(out, "\n");
            continue;
        }
        for (int i = 0; i < NUM_OPTIONS; i++) {
            const opt_def *o = &OPTIONS[i];
            if (o->group != g) continue;
            char left[96], def[128];
            snprintf(left, sizeof(left), "--%s%s%s", o->name, o->metavar ? " " : "",
                     o->metavar ? o->metavar : "");
            format_default(o, &d, def, sizeof(def));
            fprintf(out, "  %-44s %s [default: %s]\n", left, o->help, def);
        }
    }
    fprintf(out, "\n  %-44s %s\n", "-h, --help", "Print this help and exit.");
    fprintf(out, "  %-44s %s\n", "--help-markdown",
            "Print the flag tables of docs/FLAGS.md (scripts/flags_doc.sh) and exit.");
}

/* Writes s into a Markdown table cell: '|' escaped (it would end the cell). */
static void md_cell(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

/* --help-markdown: each group's table, after a line "@@flags:KEY@@" that
 * scripts/flags_doc.sh replaces the template's {{flags:KEY}} line with. The same rows as
 * --help, so docs/FLAGS.md cannot drift from arguments.def. */
static void print_help_markdown(FILE *out) {
    megadlm_args d;
    args_defaults(&d);
    for (int g = 0; g < G_COUNT; g++) {
        fprintf(out, "@@flags:%s@@\n", GROUP_KEYS[g]);
        if (g == G_LATER) {
            int first = 1;
            for (int i = 0; i < NUM_OPTIONS; i++) {
                if (OPTIONS[i].group != g) continue;
                fprintf(out, "%s`--%s`", first ? "" : ", ", OPTIONS[i].name);
                first = 0;
            }
            fprintf(out, "\n");
            continue;
        }
        fprintf(out, "| flag | default | meaning |\n| --- | --- | --- |\n");
        for (int i = 0; i < NUM_OPTIONS; i++) {
            const opt_def *o = &OPTIONS[i];
            if (o->group != g) continue;
            char def[128];
            format_default(o, &d, def, sizeof(def));
            fprintf(out, "| `--");
            md_cell(out, o->name);
            if (o->metavar) {
                fputc(' ', out);
                md_cell(out, o->metavar);
            }
            fprintf(out, "` | ");
            md_cell(out, def[0] ? def : "\"\"");
            fprintf(out, " | ");
            md_cell(out, o->help);
            fprintf(out, " |\n");
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* parsing                                                                                     */

static void clear_data_paths(megadlm_args *a) {
    for (int i = 0; i < a->num_data_paths && i < ARGS_MAX_DATA_PATHS; i++) {
        free(a->data_paths[i]);
        a->data_paths[i] = NULL;
    }
    a->num_data_paths = 0;
    a->data_weighted = 0;
}

/* A word Python's float() would read: Megatron's get_blend_from_list takes such words in the
 * weight positions as weights (inf and nan included; they are refused afterwards). */
static int is_number_word(const char *s) {
    if (!s || !*s || isspace((unsigned char)*s)) return 0;
    char *end;
    (void)strtod(s, &end);
    return *end == 0;
}

/* Copies words[first], words[first + step], ... (count of them) into paths (strdup'ed). */
static int copy_prefixes(const char *flag, char **words, int first, int step, int count,
                         char **paths, char *err, size_t errlen) {
    for (int i = 0; i < count; i++) {
        paths[i] = strdup(words[first + step * i]);
        if (!paths[i]) {
            for (int k = 0; k < i; k++) free(paths[k]);
            return fail(err, errlen, "%s: out of memory", flag);
        }
    }
    return 0;
}

/* Weight/prefix pairs W1 P1 W2 P2 ...: n even, every weight position a number. */
static int parse_weighted_words(const char *flag, char **words, int n, char **paths,
                                double *weights, char *err, size_t errlen) {
    double w[ARGS_MAX_DATA_PATHS];
    double sum = 0;
    for (int i = 0; i < n / 2; i++) {
        w[i] = strtod(words[2 * i], NULL);
        if (!isfinite(w[i]))
            return fail(err, errlen, "%s: weight '%s': expected a finite number", flag,
                        words[2 * i]);
        if (w[i] < 0) return fail(err, errlen, "%s: weight '%s' is negative", flag, words[2 * i]);
        sum += w[i];
    }
    if (!(sum > 0)) return fail(err, errlen, "%s: the weights sum to 0", flag);
    if (copy_prefixes(flag, words, 1, 2, n / 2, paths, err, errlen)) return -1;
    for (int i = 0; i < n / 2; i++) weights[i] = w[i];
    return 0;
}

/* words: the values that followed a data-path flag, read as Megatron's get_blend_from_list
 * reads them: an odd count is prefixes only; an even count is weight/prefix pairs when every
 * other word (from the first) is a number, and prefixes only when none is. Prefixes only
 * (one or several) means no weights: Megatron then blends whole datasets by their sizes.
 * Fills paths (strdup'ed), weights (1 each without weights), *count and *weighted. */
static int parse_blend_words(const char *flag, char **words, int n, char **paths,
                             double *weights, int *count, int *weighted, char *err,
                             size_t errlen) {
    int numbers = 0, first_number = -1, first_word = -1;
    for (int i = 0; i < n; i += 2) {
        if (is_number_word(words[i])) {
            numbers++;
            if (first_number < 0) first_number = i;
        } else if (first_word < 0) {
            first_word = i;
        }
    }
    int pairs = n % 2 == 0 && numbers == n / 2;
    if (n % 2 == 0 && numbers > 0 && !pairs)
        /* Megatron asserts here, or (its iterator quirk) reads the weights as prefixes */
        return fail(err, errlen,
                    "%s: '%s' (word %d) is a weight but '%s' (word %d) is not: give "
                    "weight/prefix pairs W1 P1 W2 P2 ..., or prefixes only P1 P2 ...",
                    flag, words[first_number], first_number + 1, words[first_word],
                    first_word + 1);
    int m = pairs ? n / 2 : n;
    if (m > ARGS_MAX_DATA_PATHS)
        return fail(err, errlen, "%s: %d datasets, at most %d", flag, m, ARGS_MAX_DATA_PATHS);
    if (pairs) {
        if (parse_weighted_words(flag, words, n, paths, weights, err, errlen)) return -1;
    } else {
        if (copy_prefixes(flag, words, 0, 1, n, paths, err, errlen)) return -1;
        for (int i = 0; i < n; i++) weights[i] = 1.0;
    }
    *count = m;
    *weighted = pairs;
    return 0;
}

/* words: the values that followed --data-path. */
static int set_data_paths(megadlm_args *a, char **words, int n, char *err, size_t errlen) {
    clear_data_paths(a);
    return parse_blend_words("--data-path", words, n, a->data_paths, a->data_weights,
                             &a->num_data_paths, &a->data_weighted, err, errlen);
}

int args_parse_blend(const char *flag, const char *spec, char **paths, double *weights,
                     int *count, int *weighted, char *err, size_t errlen) {
    char buf[sizeof(((megadlm_args *)0)->train_data_path)];
    char *words[2 * ARGS_MAX_DATA_PATHS + 2];
    int n = 0;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        if (n >= 2 * ARGS_MAX_DATA_PATHS + 1)
            return fail(err, errlen, "%s: more than %d datasets", flag, ARGS_MAX_DATA_PATHS);
        words[n++] = t;
    }
    if (n == 0) return fail(err, errlen, "%s: expected PREFIX or W1 P1 W2 P2 ...", flag);
    return parse_blend_words(flag, words, n, paths, weights, count, weighted, err, errlen);
}

/* The flag word as typed, up to '=' (for messages). */
static void flag_word(const char *word, char *buf, size_t n) {
    size_t len = strcspn(word, "=");
    if (len >= n) len = n - 1;
    memcpy(buf, word, len);
    buf[len] = 0;
}

/* Stores option o's value (optarg) in a; --data-path and the per-split paths also take the
 * words that follow, up to the next flag (advancing optind). */
static int set_option(megadlm_args *a, const opt_def *o, int argc, char **argv, char *err,
                      size_t errlen) {
    void *p = field_ptr(a, o->off);
    char flag[128];
    snprintf(flag, sizeof flag, "--%s", o->name);
    parse_status st;
    switch (o->kind) {
    case K_INT:
    case K_POS:
    case K_NONNEG: {
        if (parse_int_flag(flag, optarg, o->kind == K_POS ? 1 : o->kind == K_NONNEG ? 0 : INT_MIN,
                           (int *)p, err, errlen))
            return -1;
        break;
    }
    case K_U64:
        if (parse_u64(optarg, (uint64_t *)p))
            return fail(err, errlen, "--%s: expected a non-negative integer, found '%s'",
                        o->name, optarg);
        break;
    case K_FLOAT:
        st = parse_float_status(optarg, (float *)p);
        if (st != PARSE_OK) {
            parse_message(err, errlen, flag, optarg, st, "a number", 1);
            return -1;
        }
        /* the type's None is a negative value: one given would silently mean None (except
         * FLOAT_NEG_NONE's, where a negative value given means None, as in Megatron) */
        if (o->none == 1 && *(float *)p < 0.0f)
            return fail(err, errlen, "--%s: expected a %s number, found '%s' (leave the flag "
                        "out for Megatron's None%s)", o->name,
                        o->off == OFF(loss_scale) ? "positive" : "non-negative", optarg,
                        o->off == OFF(loss_scale) ? ": dynamic loss scaling with --fp16" : "");
        break;
    case K_STR:
        if (o->none && !optarg[0])
            return fail(err, errlen, "--%s '': expected one of its choices (leave the flag out "
                        "for the default)", o->name);
        if (strlen(optarg) >= o->size)
            return fail(err, errlen, "--%s: value longer than %zu characters", o->name,
                        o->size - 1);
        snprintf((char *)p, o->size, "%s", optarg);
        break;
    case K_TRUE:
        *(int *)p = 1;
        break;
    case K_FALSE:
        *(int *)p = 0;
        break;
    case K_DATA_STR: {
        /* the same words as --data-path, joined with spaces into the string field */
        char *dst = (char *)p;
        size_t used = 0;
        int ok = 1;
        used = (size_t)snprintf(dst, o->size, "%s", optarg);
        ok = used < o->size;
        while (ok && optind < argc && strncmp(argv[optind], "--", 2) != 0) {
            const char *w = argv[optind++];
            if (!w[0]) continue;
            size_t len = strlen(w);
            if (used + 1 + len >= o->size) {
                ok = 0;
                break;
            }
            dst[used++] = ' ';
            memcpy(dst + used, w, len + 1);
            used += len;
        }
        if (!ok) return fail(err, errlen, "--%s: value too long", o->name);
        break;
    }
    case K_DATA: {
        /* nargs: optarg, then every following word up to the next "--" flag */
        char *words[2 * ARGS_MAX_DATA_PATHS + 2];
        int n = 0;
        words[n++] = optarg;
        while (optind < argc && strncmp(argv[optind], "--", 2) != 0) {
            if (!argv[optind][0]) { /* empty word: no argument */
                optind++;
                continue;
            }
            if (n >= 2 * ARGS_MAX_DATA_PATHS + 1)
                return fail(err, errlen, "--data-path: more than %d datasets",
                            ARGS_MAX_DATA_PATHS);
            words[n++] = argv[optind++];
        }
        if (set_data_paths(a, words, n, err, errlen)) return -1;
        break;
    }
    default:
        return fail(err, errlen, "--%s: internal error (kind %d)", o->name, o->kind);
    }
    return 0;
}

int args_parse(megadlm_args *a, int argc, char **argv, char *err, size_t errlen) {
    static struct option longopts[NUM_OPTIONS + 1];
    for (int i = 0; i < NUM_OPTIONS; i++) {
        const opt_def *o = &OPTIONS[i];
        longopts[i].name = o->name;
        longopts[i].has_arg = (o->kind == K_TRUE || o->kind == K_FALSE || o->kind == K_HELP ||
                               o->kind == K_HELP_MD)
                                  ? no_argument
                              : o->kind == K_LATER ? optional_argument
                                                   : required_argument;
        longopts[i].flag = NULL;
        longopts[i].val = OPT_VAL_BASE + i;
    }
    memset(&longopts[NUM_OPTIONS], 0, sizeof(longopts[0]));

    const char *cmd = (argc > 0 && argv[0] && argv[0][0]) ? argv[0] : "train";
    if (err && errlen) err[0] = 0;
    if (argc <= 1) return 0;

    optind = 0; /* glibc: full re-initialisation */
    opterr = 0;
    for (;;) {
        int start = optind ? optind : 1;
        int c = getopt_long(argc, argv, "+:h", longopts, NULL);
        if (c == -1) {
            /* empty words (a shell's "${args[@]/--flag/}") are no arguments: skip them */
            if (optind < argc && argv[optind] && !argv[optind][0]) {
                optind++;
                continue;
            }
            break;
        }
        const char *word = start < argc ? argv[start] : "";
        char fw[128];
        flag_word(word, fw, sizeof(fw));

        if (c == 'h') {
            args_print_help(cmd, stdout);
            return 1;
        }
        if (c == '?') {
            if (optopt >= OPT_VAL_BASE && optopt < OPT_VAL_BASE + NUM_OPTIONS) {
                /* no_argument flag given "=value" (or an abbreviation of one) */
                const opt_def *o = &OPTIONS[optopt - OPT_VAL_BASE];
                char exact[128];
                snprintf(exact, sizeof(exact), "--%s", o->name);
                if (!strcmp(fw, exact)) return fail(err, errlen, "--%s: takes no value", o->name);
            }
            return fail(err, errlen, "unknown flag '%s' (see megadlm %s --help)", fw, cmd);
        }
        if (c == ':') {
            if (optopt >= OPT_VAL_BASE && optopt < OPT_VAL_BASE + NUM_OPTIONS) {
                const opt_def *o = &OPTIONS[optopt - OPT_VAL_BASE];
                char exact[128];
                snprintf(exact, sizeof(exact), "--%s", o->name);
                if (strcmp(fw, exact))
                    return fail(err, errlen, "unknown flag '%s' (see megadlm %s --help)", fw, cmd);
                return fail(err, errlen, "--%s: expects a value", o->name);
            }
            return fail(err, errlen, "unknown flag '%s' (see megadlm %s --help)", fw, cmd);
        }
        if (c < OPT_VAL_BASE || c >= OPT_VAL_BASE + NUM_OPTIONS)
            return fail(err, errlen, "unknown flag '%s' (see megadlm %s --help)", fw, cmd);

        const opt_def *o = &OPTIONS[c - OPT_VAL_BASE];
        /* Megatron's argparse has allow_abbrev=False: only the exact name is a flag. */
        {
            char exact[128];
            snprintf(exact, sizeof(exact), "--%s", o->name);
            if (strcmp(fw, exact))
                return fail(err, errlen, "unknown flag '%s' (see megadlm %s --help)", fw, cmd);
        }
        if (o->kind == K_LATER) return fail(err, errlen, "--%s: not supported yet", o->name);
        if (o->kind == K_POS && o->off == OFF(world_size) && strcmp(cmd, "memory") != 0 &&
            strcmp(cmd, "plan") != 0)
            return fail(err, errlen,
                        "--world-size: only for `megadlm memory` and `megadlm plan` (%s takes the "
                        "world size from mpirun)", cmd);
        if (o->kind == K_HELP) {
            args_print_help(cmd, stdout);
            return 1;
        }
        if (o->kind == K_HELP_MD) {
            print_help_markdown(stdout);
            fflush(stdout);
            return 1;
        }
        /* "--lr --seed 1": the next flag is not a value (argparse: "expected one argument") */
        if (optarg && !strchr(word, '=') && !strncmp(optarg, "--", 2))
            return fail(err, errlen, "--%s: expects a value", o->name);

        if (set_option(a, o, argc, argv, err, errlen)) return -1;
    }
    if (optind < argc)
        return fail(err, errlen, "unexpected argument '%s' (flags start with --; see megadlm %s --help)",
                    argv[optind], cmd);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* validation                                                                                  */

static int one_of(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

/* Every choice of every choice flag (arguments.def's ARG_CHOICE entries). */
static const struct {
    const char *field, *value;
    args_choice id;
} CHOICES[] = {
#define ARG_CHOICE(field, name, value) {#field, value, name},
#include "training/arguments.def"
};

args_choice args_choice_of(const char *field, const char *value) {
    for (size_t i = 0; i < sizeof CHOICES / sizeof CHOICES[0]; i++)
        if (!strcmp(CHOICES[i].field, field) && !strcmp(CHOICES[i].value, value))
            return CHOICES[i].id;
    return ARGS_CHOICE_NONE;
}

const char *args_choice_name(args_choice c) {
    for (size_t i = 0; i < sizeof CHOICES / sizeof CHOICES[0]; i++)
        if (CHOICES[i].id == c) return CHOICES[i].value;
    return "";
}

/* Is the field's value one of its choices (the table's, not a list of the validator's)? */
#define IS_CHOICE(a, field) (ARGS_CHOICE(a, field) != ARGS_CHOICE_NONE)

/* Megatron's parse_and_normalize_split: numbers separated by commas (spaces allowed), at most
 * three (train, valid, test; missing ones are 0), all >= 0, not all 0. */
static int check_split(const char *s, char *err, size_t errlen) {
    double v[3];
    int n = 0;
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        const char *q = p;
        while (*q && *q != ',') q++;
        const char *e = q;
        while (e > p && (e[-1] == ' ' || e[-1] == '\t')) e--;
        char tok[64];
        size_t len = (size_t)(e - p);
        if (len == 0 || len >= sizeof(tok))
            return fail(err, errlen,
                        "--split '%s': expected up to 3 comma-separated non-negative numbers "
                        "(e.g. \"969,30,1\")", s);
        memcpy(tok, p, len);
        tok[len] = 0;
        if (n >= 3)
            return fail(err, errlen, "--split '%s': more than 3 proportions (train, validation, test)",
                        s);
        if (parse_double(tok, &v[n]))
            return fail(err, errlen, "--split '%s': '%s' is not a number", s, tok);
        if (v[n] < 0) return fail(err, errlen, "--split '%s': '%s' is negative", s, tok);
        n++;
        if (!*q) break;
        p = q + 1;
    }
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    if (!(sum > 0)) return fail(err, errlen, "--split '%s': the proportions sum to 0", s);
    return 0;
}

/* --moe-layer-freq's list expressions: what Megatron's moe_freq_type hands to Python's eval,
 * read by a parser instead (nothing is evaluated). The grammar:
 *   expr := term ('+' term)*        lists joined, or integers added
 *   term := atom ('*' atom)*        a list repeated an integer number of times (either side),
 *                                   or integers multiplied
 *   atom := INTEGER | '[' [expr (',' expr)* [',']] ']' | '(' expr ')'
 * with spaces anywhere between; a list's entries are integers, 0 or 1. Lists are built in place
 * in one buffer of MOE_MAX_PATTERN_LAYERS entries: a value is an integer, or a list of n
 * entries at out[start .. start + n) (the right operand of '+' or '*' is built after the left
 * one, so joining needs no copy). */
#define MOE_PATTERN_MAX_DEPTH 64
#define MOE_PATTERN_MAX_INT 1000000000LL

typedef struct {
    const char *text, *p;
    uint8_t *out;
    int depth;
    char *err;
    size_t errlen;
} moe_pattern_parser;

typedef struct {
    int is_list;
    long long n; /* the integer, or the list's length */
} moe_pattern_value;

static int moe_pattern_fail(moe_pattern_parser *P, const char *why) {
    return fail(P->err, P->errlen,
                "--moe-layer-freq '%.200s': %s at character %d (expected an integer N, or a "
                "list of 0 and 1 such as \"([1]*3+[0]*1)*3\" with --num-layers entries)",
                P->text, why, (int)(P->p - P->text) + 1);
}

static void moe_pattern_space(moe_pattern_parser *P) {
    while (*P->p == ' ' || *P->p == '\t') P->p++;
}

static int moe_pattern_expr(moe_pattern_parser *P, long long start, moe_pattern_value *v);

/* A list literal [e, e, ...] at out[start ..), each entry 0 or 1. */
static int moe_pattern_list(moe_pattern_parser *P, long long start, moe_pattern_value *v) {
    P->p++; /* '[' */
    long long n = 0;
    moe_pattern_space(P);
    while (*P->p != ']') {
        const char *at = P->p;
        moe_pattern_value e;
        if (moe_pattern_expr(P, start + n, &e)) return -1;
        if (e.is_list || (e.n != 0 && e.n != 1)) {
            char why[96];
            P->p = at;
            if (e.is_list)
                snprintf(why, sizeof why, "entry %lld is a list, not 0 or 1", n + 1);
            else
                snprintf(why, sizeof why, "entry %lld is %lld: expected 0 (a dense layer) or 1 "
                         "(an MoE layer)", n + 1, e.n);
            return moe_pattern_fail(P, why);
        }
        if (start + n >= MOE_MAX_PATTERN_LAYERS)
            return moe_pattern_fail(P, "more than " ARGS_STR(MOE_MAX_PATTERN_LAYERS) " entries");
        P->out[start + n++] = (uint8_t)e.n;
        moe_pattern_space(P);
        if (*P->p == ',') {
            P->p++;
            moe_pattern_space(P);
        } else if (*P->p != ']') {
            return moe_pattern_fail(P, *P->p ? "expected ',' or ']'" : "unexpected end");
        }
    }
    P->p++; /* ']' */
    *v = (moe_pattern_value){1, n};
    return 0;
}

static int moe_pattern_atom(moe_pattern_parser *P, long long start, moe_pattern_value *v) {
    moe_pattern_space(P);
    if (isdigit((unsigned char)*P->p)) {
        long long x = 0;
        for (; isdigit((unsigned char)*P->p); P->p++) {
            x = x * 10 + (*P->p - '0');
            if (x > MOE_PATTERN_MAX_INT) return moe_pattern_fail(P, "a number too large");
        }
        *v = (moe_pattern_value){0, x};
        return 0;
    }
    if (*P->p != '[' && *P->p != '(')
        return moe_pattern_fail(P, *P->p ? "unexpected character" : "unexpected end");
    if (++P->depth > MOE_PATTERN_MAX_DEPTH) return moe_pattern_fail(P, "nested too deeply");
    int rc;
    if (*P->p == '[') {
        rc = moe_pattern_list(P, start, v);
    } else {
        P->p++; /* '(' */
        rc = moe_pattern_expr(P, start, v);
        moe_pattern_space(P);
        if (rc == 0 && *P->p != ')')
            rc = moe_pattern_fail(P, *P->p ? "expected ')'" : "unexpected end");
        if (rc == 0) P->p++;
    }
    P->depth--;
    return rc;
}

/* l * r: a list repeated (its copies after it in out), or a product of integers. */
static int moe_pattern_times(moe_pattern_parser *P, long long start, moe_pattern_value *l,
                             moe_pattern_value r) {
    if (l->is_list && r.is_list) return moe_pattern_fail(P, "a list times a list");
    if (!l->is_list && !r.is_list) {
        if (l->n * r.n > MOE_PATTERN_MAX_INT) return moe_pattern_fail(P, "a number too large");
        l->n *= r.n;
        return 0;
    }
    /* the list is at start either way: the right operand starts after an integer's nothing */
    long long len = l->is_list ? l->n : r.n, times = l->is_list ? r.n : l->n;
    if (len > 0 && times > (MOE_MAX_PATTERN_LAYERS - start) / len)
        return moe_pattern_fail(P, "more than " ARGS_STR(MOE_MAX_PATTERN_LAYERS) " entries");
    for (long long k = 1; len > 0 && k < times; k++)
        memcpy(P->out + start + k * len, P->out + start, (size_t)len);
    *l = (moe_pattern_value){1, len * times};
    return 0;
}

static int moe_pattern_term(moe_pattern_parser *P, long long start, moe_pattern_value *v) {
    if (moe_pattern_atom(P, start, v)) return -1;
    for (;;) {
        moe_pattern_space(P);
        if (*P->p != '*') return 0;
        P->p++;
        moe_pattern_value r;
        if (moe_pattern_atom(P, start + (v->is_list ? v->n : 0), &r) ||
            moe_pattern_times(P, start, v, r))
            return -1;
    }
}

static int moe_pattern_expr(moe_pattern_parser *P, long long start, moe_pattern_value *v) {
    if (moe_pattern_term(P, start, v)) return -1;
    for (;;) {
        moe_pattern_space(P);
        if (*P->p != '+') return 0;
        P->p++;
        moe_pattern_value r;
        if (moe_pattern_term(P, start + (v->is_list ? v->n : 0), &r)) return -1;
        if (v->is_list != r.is_list) return moe_pattern_fail(P, "a list plus an integer");
        if (!v->is_list && v->n + r.n > MOE_PATTERN_MAX_INT)
            return moe_pattern_fail(P, "a number too large");
        v->n += r.n; /* joined: r was built right after v */
    }
}

int args_moe_layer_pattern(const char *s, int num_layers, int *freq, uint8_t *pattern,
                           char *err, size_t errlen) {
    if (!strchr(s, '[')) {
        /* Megatron: int(x), surrounding spaces allowed */
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        while (*end == ' ' || *end == '\t') end++;
        if (end == s || *end || errno || v <= 0 || v > INT_MAX)
            return fail(err, errlen,
                        "--moe-layer-freq '%.200s': expected a positive integer N (an MoE layer "
                        "every N layers) or a list of 0 and 1 such as \"([1]*3+[0]*1)*3\" with "
                        "--num-layers entries", s);
        *freq = (int)v;
        return 0;
    }
    moe_pattern_parser P = {s, s, pattern, 0, err, errlen};
    moe_pattern_value v;
    if (moe_pattern_expr(&P, 0, &v)) return -1;
    moe_pattern_space(&P);
    if (*P.p) return moe_pattern_fail(&P, "unexpected character");
    if (!v.is_list) return moe_pattern_fail(&P, "an integer, not a list, at the end");
    if (v.n != num_layers) {
        /* Megatron's message (gpt_layer_specs.py), the pattern printed as Python prints it */
        char list[400];
        size_t k = (size_t)snprintf(list, sizeof list, "[");
        for (long long i = 0; i < v.n && k < sizeof list - 16; i++)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", i ? ", " : "", pattern[i]);
        snprintf(list + k, sizeof list - k, "%s]", k >= sizeof list - 16 ? ", ..." : "");
        return fail(err, errlen,
                    "--moe-layer-freq '%.200s': Invalid length of moe_layer_pattern: %lld, "
                    "expected %d (--num-layers), current moe layer pattern: %s",
                    s, v.n, num_layers, list);
    }
    *freq = 0;
    return 0;
}

/* GPT2BPETokenizer / HuggingFaceTokenizer: the files are required and made absolute (so that
 * a checkpoint's arguments find them from any directory), and the tokenizer is loaded once for
 * its vocabulary size (Megatron's tokenizer.vocab_size, before padding). */
static int validate_tokenizer_files(megadlm_args *a, int *tok_vocab, char *err, size_t errlen) {
    int gpt2 = !strcmp(a->tokenizer_type, "GPT2BPETokenizer");
    if (gpt2 && (!a->vocab_file[0] || !a->merge_file[0]))
        return fail(err, errlen,
                    "--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json) and "
                    "--merge-file (merges.txt)");
    if (!gpt2 && !a->tokenizer_model[0])
        return fail(err, errlen,
                    "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model "
                    "(a tokenizer directory or a tokenizer.json)");
    struct tok_file {
        const char *flag;
        char *path;
        size_t size;
    } files[2] = {{"--vocab-file", a->vocab_file, sizeof a->vocab_file},
                  {"--merge-file", a->merge_file, sizeof a->merge_file}};
    if (!gpt2)
        files[0] = (struct tok_file){"--tokenizer-model", a->tokenizer_model,
                                     sizeof a->tokenizer_model};
    for (int i = 0; i < (gpt2 ? 2 : 1); i++) {
        char *abs = realpath(files[i].path, NULL);
        if (!abs) return fail(err, errlen, "%s %s: %s", files[i].flag, files[i].path, strerror(errno));
        if (strlen(abs) >= files[i].size) {
            free(abs);
            return fail(err, errlen, "%s %s: the absolute path is longer than %zu characters",
                        files[i].flag, files[i].path, files[i].size - 1);
        }
        snprintf(files[i].path, files[i].size, "%s", abs);
        free(abs);
    }
    tokenizer_options o = {.type = a->tokenizer_type,
                           .vocab_file = a->vocab_file,
                           .merge_file = a->merge_file,
                           .tokenizer_model = a->tokenizer_model};
    tokenizer *t = tokenizer_create_opts(&o, err, errlen);
    if (!t) return -1;
    *tok_vocab = tokenizer_vocab_size(t);
    tokenizer_free(t);
    return 0;
}

static const char *const MEGATRON_TOKENIZERS[] = {
    "BertWordPieceLowerCase", "BertWordPieceCase", "GPT2BPETokenizer", "SentencePieceTokenizer",
    "GPTSentencePieceTokenizer", "HuggingFaceTokenizer", "Llama2Tokenizer", "TikTokenizer",
    "MultimodalTokenizer", "NullMultimodalTokenizer", "SFTTokenizer", NULL};

/* The rest of MegaDLMs' custom_args/difflm.py and Megatron's --attention-backend: choices
 * that select among implementations giving the same numbers, and flags MegaDLMs reads
 * nowhere. */
static int validate_difflm_extras(megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, base_model))
        return fail(err, errlen, "--base-model %s: expected vanilla (MegaDLMs' only choice: "
                                 "Megatron's GPT model)", a->base_model);
    if (!IS_CHOICE(a, core_attn_implementation))
        return fail(err, errlen, "--core-attn-implementation %s: expected TEDotProductAttention "
                                 "or FlexAttention", a->core_attn_implementation);
    if (!IS_CHOICE(a, attention_backend))
        return fail(err, errlen, "--attention-backend %s: expected flash, fused, unfused, local "
                                 "or auto%s", a->attention_backend,
                    strcmp(a->attention_backend, "custom") ? ""
                        : " (custom needs a Python attention module)");
    if (a->gpt_block_return_loss_and_logits)
        return fail(err, errlen, "--gpt-block-return-loss-and-logits: MegaDLMs uses it only in "
                                 "its conversion check (its training step cannot take the "
                                 "logits either), which megadlm does not have");
    return 0;
}

/* MegaDLMs' running modes and masks (pretrain_difflm.py, models/difflm/gpt_model.py). */
static int validate_difflm_mode(megadlm_args *a, int dlm, char *err, size_t errlen) {
    if (!IS_CHOICE(a, model_running_mode))
        return fail(err, errlen, "--model-running-mode %s: expected vanilla, difflm-noshift or "
                                 "test-forward", a->model_running_mode);
    if (!a->attention_mask_type[0])
        snprintf(a->attention_mask_type, sizeof(a->attention_mask_type), "%s",
                 dlm ? "no_mask" : "causal");
    if (!strcmp(a->attention_mask_type, "block_causal"))
        return fail(err, errlen, "--attention-mask-type block_causal: MegaDLMs declares it "
                                 "(\"conditional difflm attention\") but neither of its attention "
                                 "implementations builds it (TransformerEngine rejects the mask "
                                 "type, FlexAttention ignores it); use causal_bottom_right, "
                                 "causal or no_mask");
    if (!IS_CHOICE(a, attention_mask_type))
        return fail(err, errlen, "--attention-mask-type %s: expected causal_bottom_right, causal "
                                 "or no_mask", a->attention_mask_type);
    return 0;
}

/* Supervised fine-tuning (--sft, --sft-padding). */
static int validate_sft(const megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, sft_padding))
        return fail(err, errlen, "--sft-padding %s: expected none, pad or eos", a->sft_padding);
    if (!a->sft && ARGS_CHOICE(a, sft_padding) != ARGS_SFT_PACKED)
        return fail(err, errlen, "--sft-padding %s needs --sft", a->sft_padding);
    if (a->sft && a->eod_mask_loss)
        return fail(err, errlen, "--eod-mask-loss with --sft: the loss mask of preprocess --sft "
                                 "decides, and it trains the end of document that closes each "
                                 "response (the model learns to stop)");
    if (a->sft && a->mock_data)
        return fail(err, errlen, "--sft: --mock-data has no loss masks; give --data-path the "
                                 "output of megadlm preprocess --sft");
    return 0;
}

/* MegaDLMs' masked-diffusion flags. */
static int validate_difflm(megadlm_args *a, char *err, size_t errlen) {
    int dlm = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    if (validate_difflm_mode(a, dlm, err, errlen) || validate_difflm_extras(a, err, errlen))
        return -1;
    if (!dlm) return 0; /* --mask-token: unused, as MegaDLMs (whose default is always set) */
    if (a->mask_token < 0)
        return fail(err, errlen, "--model-running-mode difflm-noshift needs --mask-token ID");
    if (a->padded_vocab_size > 0 && a->mask_token >= a->padded_vocab_size)
        return fail(err, errlen, "--mask-token %d is outside the (padded) vocabulary of %d",
                    a->mask_token, a->padded_vocab_size);
    if (!(a->difflm_varilen_prob >= 0.0f && a->difflm_varilen_prob <= 1.0f))
        return fail(err, errlen, "--difflm-varilen-prob must be in [0, 1]");
    if (a->seq_length < 2)
        return fail(err, errlen, "--model-running-mode difflm-noshift needs --seq-length >= 2");
    /* MegaDLMs' _get_packed_seq_params: packing across the sequences of a micro-batch is not
     * supported ("the dataset blending & shuffling will break the consecutive sequence
     * assumption"), so each sequence must be cut off at its own end */
    /* MegaDLMs packs a masked-diffusion batch only with both flags ("we must turn on both to use
     * packed sequence"): the mask alone would be accepted and change nothing */
    if (a->reset_attention_mask && !a->reset_position_ids)
        return fail(err, errlen, "--reset-attention-mask under difflm-noshift needs "
                                 "--reset-position-ids too: MegaDLMs packs documents only with "
                                 "both flags");
    if (a->reset_position_ids && a->reset_attention_mask && !a->cut_off_varlen_to_seqlen)
        return fail(err, errlen, "--reset-position-ids with --reset-attention-mask (packed "
                                 "documents) under difflm-noshift needs "
                                 "--cut-off-varlen-to-seqlen, as MegaDLMs: packing across the "
                                 "sequences of a micro-batch is not supported");
    /* the model sees seq-length - 1 tokens (or a random length), padded to what sequence and
     * context parallelism split evenly, the padding's keys masked and its loss weight 0
     * (training/difflm.h: difflm_padded_length_cp): no length is refused */
    return 0;
}

/* Megatron's recompute rules (arguments.py validate_args and TransformerConfig.__post_init__). */
static int validate_recompute(megadlm_args *a, char *err, size_t errlen) {
    if (a->enable_cuda_graph)
        return fail(err, errlen, "--enable-cuda-graph: there are no CUDA graphs on CPUs (and "
                                 "Megatron does not allow them with activation recomputation)");
    if (a->recompute_activations) {
        if (a->recompute_granularity[0] && strcmp(a->recompute_granularity, "selective") != 0)
            return fail(err, errlen, "--recompute-activations means --recompute-granularity "
                                     "selective; it conflicts with --recompute-granularity %s",
                        a->recompute_granularity);
        snprintf(a->recompute_granularity, sizeof(a->recompute_granularity), "selective");
        a->recompute_activations = 0; /* as Megatron: folded into the granularity */
    }
    const char *g = a->recompute_granularity, *m = a->recompute_method;
    int stage_layers = a->num_layers / (a->pipeline_model_parallel_size > 0
                                            ? a->pipeline_model_parallel_size : 1);
    /* interleaved: each model chunk is a block of its own (Megatron's TransformerBlock per
     * virtual stage), whose layers the recompute plan counts */
    int vp = a->virtual_pipeline_model_parallel_size;
    if (vp > 1) stage_layers /= vp;
    if (g[0] && !IS_CHOICE(a, recompute_granularity))
        return fail(err, errlen, "--recompute-granularity %s: expected full or selective", g);
    if (m[0] && !IS_CHOICE(a, recompute_method))
        return fail(err, errlen, "--recompute-method %s: expected uniform or block", m);
    if (!g[0] && (m[0] || a->recompute_num_layers))
        return fail(err, errlen, "--recompute-method / --recompute-num-layers need "
                                 "--recompute-granularity full");
    if (!strcmp(g, "selective") && m[0])
        return fail(err, errlen, "--recompute-method %s: not used with --recompute-granularity "
                                 "selective (only with full)", m);
    if (!strcmp(g, "selective") && a->recompute_num_layers)
        return fail(err, errlen, "--recompute-num-layers: must not be set with "
                                 "--recompute-granularity selective (only with full)");
    if (!strcmp(g, "full") && !m[0])
        return fail(err, errlen, "--recompute-granularity full needs --recompute-method "
                                 "uniform or block");
    if (!strcmp(g, "full") && !a->recompute_num_layers)
        return fail(err, errlen, "--recompute-granularity full needs --recompute-num-layers N");
    if (a->recompute_num_layers && (a->recompute_num_layers < 1 ||
                                    a->recompute_num_layers > stage_layers))
        return fail(err, errlen, "--recompute-num-layers %d: must be between 1 and the %d layers "
                                 "of a %s",
                    a->recompute_num_layers, stage_layers,
                    vp > 1 ? "model chunk (--num-layers / (--pipeline-model-parallel-size x "
                             "--virtual-pipeline-model-parallel-size))"
                           : "pipeline stage (--num-layers / --pipeline-model-parallel-size)");
    /* Megatron: tp > 1, full granularity with a method (arguments.py); not with sequence
     * parallelism (TransformerConfig) */
    if (a->num_microbatches_with_partial_activation_checkpoints >= 0 && strcmp(g, "full") != 0)
        return fail(err, errlen, "--num-microbatches-with-partial-activation-checkpoints needs "
                                 "--recompute-granularity full");
    if (a->distribute_saved_activations) {
        if (a->tensor_model_parallel_size <= 1)
            return fail(err, errlen, "--distribute-saved-activations needs tensor parallelism "
                                     "(--tensor-model-parallel-size > 1)");
        if (strcmp(g, "full") != 0)
            return fail(err, errlen, "--distribute-saved-activations needs --recompute-granularity "
                                     "full with a --recompute-method (it splits the inputs of "
                                     "checkpointed layers)");
        if (a->sequence_parallel)
            return fail(err, errlen, "--distribute-saved-activations cannot be combined with "
                                     "--sequence-parallel (the checkpointed inputs are already "
                                     "split along the sequence)");
    }
    return 0;
}

/* ---- mixture of experts (MegaDLMs' _add_moe_args; validate_args and TransformerConfig's
 *      __post_init__ rules; the router's asserts) ---- */

/* A mixture-of-experts flag given for a dense model would be parsed and ignored: refused. */
static int validate_moe_unused(const megadlm_args *a, char *err, size_t errlen) {
    const megadlm_args *d = &DEFAULTS;
    const struct {
        int given;
        const char *flag;
    } MOE_FLAGS[] = {
        {a->expert_model_parallel_size != d->expert_model_parallel_size,
         "--expert-model-parallel-size"},
        {a->expert_tensor_parallel_size != 0, "--expert-tensor-parallel-size"},
        {strcmp(a->moe_layer_freq, d->moe_layer_freq) != 0, "--moe-layer-freq"},
        {a->moe_ffn_hidden_size != 0, "--moe-ffn-hidden-size"},
        {a->moe_shared_expert_intermediate_size != 0, "--moe-shared-expert-intermediate-size"},
        {a->moe_shared_expert_overlap, "--moe-shared-expert-overlap"},
        {a->moe_grouped_gemm, "--moe-grouped-gemm"},
        {a->moe_use_legacy_grouped_gemm, "--moe-use-legacy-grouped-gemm"},
        {strcmp(a->moe_router_load_balancing_type, d->moe_router_load_balancing_type) != 0,
         "--moe-router-load-balancing-type"},
        {a->moe_router_topk != d->moe_router_topk, "--moe-router-topk"},
        {a->moe_router_pre_softmax, "--moe-router-pre-softmax"},
        {a->moe_router_topk_limited_devices != 0, "--moe-router-topk-limited-devices"},
        {a->moe_router_topk_scaling_factor >= 0.0f, "--moe-router-topk-scaling-factor"},
        {a->moe_aux_loss_coeff != d->moe_aux_loss_coeff, "--moe-aux-loss-coeff"},
        {a->moe_z_loss_coeff >= 0.0f, "--moe-z-loss-coeff"},
        {a->moe_input_jitter_eps >= 0.0f, "--moe-input-jitter-eps"},
        {strcmp(a->moe_token_dispatcher_type, d->moe_token_dispatcher_type) != 0,
         "--moe-token-dispatcher-type"},
        {a->moe_per_layer_logging, "--moe-per-layer-logging"},
        {a->moe_expert_capacity_factor >= 0.0f, "--moe-expert-capacity-factor"},
        {a->moe_pad_expert_input_to_capacity, "--moe-pad-expert-input-to-capacity"},
        {strcmp(a->moe_token_drop_policy, d->moe_token_drop_policy) != 0,
         "--moe-token-drop-policy"},
        {a->moe_layer_recompute, "--moe-layer-recompute"},
        {a->moe_extended_tp, "--moe-extended-tp"},
        {a->moe_use_upcycling, "--moe-use-upcycling"},
    };
    for (size_t i = 0; i < sizeof MOE_FLAGS / sizeof MOE_FLAGS[0]; i++)
        if (MOE_FLAGS[i].given)
            return fail(err, errlen, "%s needs --num-experts (without it the model is dense "
                        "and the flag would be ignored)", MOE_FLAGS[i].flag);
    return 0;
}

/* The choices, the sizes (the derived ones: Megatron's expert TP = TP and expert ffn = ffn)
 * and the layer pattern. */
static int validate_moe_sizes(megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, moe_router_load_balancing_type))
        return fail(err, errlen, "--moe-router-load-balancing-type '%s': expected aux_loss, "
                    "seq_aux_loss, sinkhorn, none, softmax_expert_choice or "
                    "sinkhorn_expert_choice", a->moe_router_load_balancing_type);
    if (!IS_CHOICE(a, moe_token_dispatcher_type))
        return fail(err, errlen, "--moe-token-dispatcher-type '%s': expected allgather, "
                    "alltoall or alltoall_seq", a->moe_token_dispatcher_type);
    if (!IS_CHOICE(a, moe_token_drop_policy))
        return fail(err, errlen, "--moe-token-drop-policy '%s': expected probs or position",
                    a->moe_token_drop_policy);
    /* (negative values come only from a state.json: the parser refuses them) */
    if (a->expert_model_parallel_size < 1)
        return fail(err, errlen, "--expert-model-parallel-size must be positive");
    if (a->expert_tensor_parallel_size < 0)
        return fail(err, errlen, "--expert-tensor-parallel-size must be positive");
    if (a->expert_tensor_parallel_size == 0)
        a->expert_tensor_parallel_size = a->tensor_model_parallel_size;
    if (a->moe_ffn_hidden_size < 0) return fail(err, errlen, "--moe-ffn-hidden-size must be positive");
    if (a->moe_ffn_hidden_size == 0) a->moe_ffn_hidden_size = a->ffn_hidden_size;
    if (a->moe_shared_expert_intermediate_size < 0)
        return fail(err, errlen, "--moe-shared-expert-intermediate-size %d: must be "
                    "num_shared_experts * ffn_size_of_each_shared_expert, a positive size (leave "
                    "it out for no shared expert)", a->moe_shared_expert_intermediate_size);
    if (a->moe_router_topk_limited_devices < 0)
        return fail(err, errlen, "--moe-router-topk-limited-devices must be positive");
    int freq;
    uint8_t pattern[MOE_MAX_PATTERN_LAYERS];
    return args_moe_layer_pattern(a->moe_layer_freq, a->num_layers, &freq, pattern, err, errlen);
}

/* Megatron's rules: expert parallelism, the router, the shared expert, token dropping. */
static int validate_moe_rules(const megadlm_args *a, char *err, size_t errlen) {
    int E = a->num_experts, ep = a->expert_model_parallel_size, k = a->moe_router_topk;
    if (E % ep != 0)
        return fail(err, errlen, "--num-experts %d is not divisible by "
                    "--expert-model-parallel-size %d (Megatron: \"Number of experts should be a "
                    "multiple of expert model parallel_size.\")", E, ep);
    if (ep > 1 && a->fp16)
        return fail(err, errlen, "--expert-model-parallel-size %d with --fp16: \"Expert "
                    "parallelism is not supported with fp16 training.\" (Megatron)", ep);
    if (ep > 1 && a->use_torch_fsdp2)
        return fail(err, errlen, "--use-torch-fsdp2 is not supported with expert parallelism "
                    "(--expert-model-parallel-size %d)", ep);
    if (k < 1 || k > E)
        return fail(err, errlen, "--moe-router-topk %d: expected 1 to --num-experts %d (each "
                    "token is routed to k of the experts)", k, E);
    args_choice lb = ARGS_CHOICE(a, moe_router_load_balancing_type);
    int topk_router = lb == ARGS_MOE_LB_AUX_LOSS || lb == ARGS_MOE_LB_SEQ_AUX_LOSS ||
                      lb == ARGS_MOE_LB_NONE;
    if (topk_router && k == 1 && !a->moe_router_pre_softmax)
        return fail(err, errlen, "--moe-router-topk 1 needs --moe-router-pre-softmax (Megatron: "
                    "\"Please use --moe-router-pre-softmax when topk is 1.\": a softmax over the "
                    "one chosen logit is 1, its gradient 0)");
    if (lb == ARGS_MOE_LB_SINKHORN && a->moe_aux_loss_coeff != 0.0f)
        return fail(err, errlen, "--moe-router-load-balancing-type sinkhorn with "
                    "--moe-aux-loss-coeff %g: \"Sinkhorn routing does not support aux loss.\" "
                    "(Megatron; give --moe-aux-loss-coeff 0)", (double)a->moe_aux_loss_coeff);
    if (lb == ARGS_MOE_LB_NONE && a->moe_aux_loss_coeff != 0.0f)
        return fail(err, errlen, "--moe-aux-loss-coeff has no effect with "
                    "--moe-router-load-balancing-type none (no load-balancing loss)");
    if (a->moe_input_jitter_eps == 0.0f)
        return fail(err, errlen, "--moe-input-jitter-eps 0: expected a positive number (leave "
                    "the flag out for no jitter)");
    if (a->moe_router_topk_limited_devices > ep)
        return fail(err, errlen, "--moe-router-topk-limited-devices %d is larger than "
                    "--expert-model-parallel-size %d (Megatron: it must not exceed "
                    "expert_model_parallel_size)", a->moe_router_topk_limited_devices, ep);
    args_choice disp = ARGS_CHOICE(a, moe_token_dispatcher_type);
    if (a->moe_shared_expert_overlap && !a->moe_shared_expert_intermediate_size)
        return fail(err, errlen, "--moe-shared-expert-overlap has no effect without "
                    "--moe-shared-expert-intermediate-size (no shared expert)");
    if (a->moe_shared_expert_overlap && disp != ARGS_MOE_DISPATCHER_ALLTOALL)
        return fail(err, errlen, "--moe-shared-expert-overlap needs --moe-token-dispatcher-type "
                    "alltoall (Megatron: \"moe_shared_expert_overlap only works with alltoall "
                    "token dispatcher.\")");
    int capacity = a->moe_expert_capacity_factor >= 0.0f;
    if (capacity && disp == ARGS_MOE_DISPATCHER_ALLGATHER)
        return fail(err, errlen, "--moe-expert-capacity-factor needs --moe-token-dispatcher-type "
                    "alltoall or alltoall_seq (Megatron: \"moe_expert_capacity_factor only works "
                    "with alltoall token dispatcher\")");
    if (capacity && !topk_router)
        return fail(err, errlen, "--moe-expert-capacity-factor with "
                    "--moe-router-load-balancing-type %s: it needs aux_loss, seq_aux_loss or "
                    "none balancing (Megatron)", a->moe_router_load_balancing_type);
    if (a->moe_pad_expert_input_to_capacity && !capacity)
        return fail(err, errlen, "--moe-pad-expert-input-to-capacity needs "
                    "--moe-expert-capacity-factor (Megatron: \"moe_expert_capacity_factor must "
                    "be set to use moe_pad_expert_input_to_capacity\")");
    if (ARGS_CHOICE(a, moe_token_drop_policy) != ARGS_MOE_DROP_PROBS && !capacity)
        return fail(err, errlen, "--moe-token-drop-policy %s has no effect without "
                    "--moe-expert-capacity-factor (no token is dropped)", a->moe_token_drop_policy);
    if (a->moe_use_upcycling && !a->save[0])
        return fail(err, errlen, "--moe-use-upcycling needs --save DIR (Megatron: \"When using "
                    "upcycling, the --save option must be specified.\")");
    return 0;
}

/* --moe-use-upcycling (Megatron's upcycling_utils, checkpointing.c's upcycle_checkpoint): the
 * dense checkpoint of --load becomes this MoE model, every expert a copy of its layer's dense
 * MLP. What such copies cannot make is refused: Megatron converts every layer's MLP and loads
 * the result strictly, so a dense layer, a shared expert (nothing to load it from) or experts of
 * another size than the dense MLP (granular upcycling, which it does not build) fail there. */
static int validate_moe_upcycling(const megadlm_args *a, char *err, size_t errlen) {
    if (!a->moe_use_upcycling) return 0;
    if (!a->load[0])
        return fail(err, errlen, "--moe-use-upcycling needs --load DIR (the dense checkpoint "
                    "to upcycle)");
    int freq = 0;
    uint8_t pattern[MOE_MAX_PATTERN_LAYERS];
    if (args_moe_layer_pattern(a->moe_layer_freq, a->num_layers, &freq, pattern, err, errlen))
        return -1;
    for (int l = 0; l < a->num_layers; l++)
        if (freq > 0 ? l % freq != 0 : !pattern[l])
            return fail(err, errlen, "--moe-use-upcycling with --moe-layer-freq %s: layer %d "
                        "would stay dense; Megatron's upcycling turns every layer's MLP into "
                        "experts (give every layer to the MoE: --moe-layer-freq 1)",
                        a->moe_layer_freq, l);
    if (a->moe_ffn_hidden_size != a->ffn_hidden_size)
        return fail(err, errlen, "--moe-use-upcycling with --moe-ffn-hidden-size %d, not "
                    "--ffn-hidden-size %d: granular upcycling (experts cut from the dense MLP) "
                    "is not built; each expert is a copy of the whole dense MLP, as Megatron's",
                    a->moe_ffn_hidden_size, a->ffn_hidden_size);
    if (a->moe_shared_expert_intermediate_size)
        return fail(err, errlen, "--moe-use-upcycling with "
                    "--moe-shared-expert-intermediate-size: the dense checkpoint has no shared "
                    "expert to load (Megatron's strict load of the upcycled model fails)");
    if (a->use_checkpoint_args)
        return fail(err, errlen, "--moe-use-upcycling with --use-checkpoint-args: Megatron's "
                    "load_args_from_checkpoint takes num_experts from the dense checkpoint, "
                    "which makes the model dense");
    return 0;
}

/* ======== NOT YET SUPPORTED with --num-experts ========
 * What megadlm's MoE model does not build yet, each refused by name (never trained as
 * something else). When the model takes one, lift its entry here (and its line in docs/MOE.md
 * and docs/FLAGS.md.in). */
static int validate_moe_not_yet(const megadlm_args *a, char *err, size_t errlen) {
    char etp[64], lb[96], disp[96];
    snprintf(etp, sizeof etp, "--expert-tensor-parallel-size %d", a->expert_tensor_parallel_size);
    snprintf(lb, sizeof lb, "--moe-router-load-balancing-type %s",
             a->moe_router_load_balancing_type);
    snprintf(disp, sizeof disp, "--moe-token-dispatcher-type %s", a->moe_token_dispatcher_type);
    args_choice lbc = ARGS_CHOICE(a, moe_router_load_balancing_type);
    const struct {
        int bad;
        const char *what;
    } NOT_YET[] = {
        {a->use_torch_fsdp2 && a->expert_model_parallel_size > 1, "--use-torch-fsdp2 with --expert-model-parallel-size > 1"},
        {a->use_megatron_fsdp && a->expert_model_parallel_size > 1, "--use-megatron-fsdp with --expert-model-parallel-size > 1"},
        {a->use_custom_fsdp && a->expert_model_parallel_size > 1, "--use-custom-fsdp with --expert-model-parallel-size > 1"},
        {a->expert_tensor_parallel_size != a->tensor_model_parallel_size, etp},
        /* MegaDLMs' expert-choice routers (not in Megatron-LM) */
        {lbc == ARGS_MOE_LB_SOFTMAX_EXPERT_CHOICE || lbc == ARGS_MOE_LB_SINKHORN_EXPERT_CHOICE, lb},
        {ARGS_CHOICE(a, moe_token_dispatcher_type) == ARGS_MOE_DISPATCHER_ALLTOALL_SEQ, disp},
        {a->expert_model_parallel_size > 1 && a->num_distributed_optimizer_instances > 1,
         "--num-distributed-optimizer-instances > 1 with --expert-model-parallel-size > 1"},
    };
    for (size_t i = 0; i < sizeof NOT_YET / sizeof NOT_YET[0]; i++)
        if (NOT_YET[i].bad)
            return fail(err, errlen, "%s: not supported yet with --num-experts (docs/MOE.md)",
                        NOT_YET[i].what);
    /* Megatron writes the per-layer values to TensorBoard (and W&B) only */
    if (a->moe_per_layer_logging && !a->tensorboard_dir[0])
        fprintf(stderr, "note: --moe-per-layer-logging writes each layer's moe/<name>_layer_<i> "
                        "to TensorBoard: without --tensorboard-dir there is nothing to write "
                        "(the log line shows the mean over the layers, as Megatron's)\n");
    /* MegaDLMs' Megatron keeps the flag and reads it nowhere (deprecated for
     * --expert-tensor-parallel-size) */
    if (a->moe_extended_tp)
        fprintf(stderr, "note: --moe-extended-tp has no effect (as in Megatron, where it is "
                        "deprecated: --expert-tensor-parallel-size sets the experts' tensor "
                        "parallelism)\n");
    /* Megatron reads it only to pick GroupedMLP over TEGroupedMLP for --moe-grouped-gemm, the
     * same computation (megadlm has one grouped schedule) */
    if (a->moe_use_legacy_grouped_gemm && !a->moe_grouped_gemm)
        return fail(err, errlen, "--moe-use-legacy-grouped-gemm needs --moe-grouped-gemm (it "
                    "chooses Megatron's legacy GroupedMLP for the grouped GEMM and is read "
                    "nowhere else)");
    /* the chosen groups must hold k experts (Megatron's topk would pick excluded ones) */
    if (a->moe_router_topk_limited_devices > 0 && a->expert_model_parallel_size > 0 &&
        (long long)a->moe_router_topk_limited_devices * (a->num_experts /
                                                       a->expert_model_parallel_size) <
            a->moe_router_topk)
        return fail(err, errlen, "--moe-router-topk %d with --moe-router-topk-limited-devices "
                    "%d: the %d chosen ranks hold %d experts, fewer than top-k",
                    a->moe_router_topk, a->moe_router_topk_limited_devices,
                    a->moe_router_topk_limited_devices,
                    a->moe_router_topk_limited_devices *
                        (a->num_experts / a->expert_model_parallel_size));
    /* with one expert-parallel rank there is no exchange to run the shared expert under */
    if (a->moe_shared_expert_overlap && a->expert_model_parallel_size == 1)
        fprintf(stderr, "note: --moe-shared-expert-overlap overlaps the shared expert with the "
                        "expert-parallel all-to-all: with --expert-model-parallel-size 1 there is "
                        "none, the shared expert runs after the routed ones\n");
    /* Megatron's sinkhorn routing never reads it: refused rather than ignored */
    if (a->moe_router_topk_limited_devices > 0 &&
        ARGS_CHOICE(a, moe_router_load_balancing_type) == ARGS_MOE_LB_SINKHORN)
        return fail(err, errlen, "--moe-router-topk-limited-devices with "
                    "--moe-router-load-balancing-type sinkhorn: Sinkhorn routing chooses among "
                    "every expert (Megatron's ignores the flag)");
    /* Megatron's MoELayer: "During training, performance may degrade if MoE and tensor
     * parallelism are enabled without also enabling sequence parallelism" (a ValueError) */
    if (a->tensor_model_parallel_size > 1 && !a->sequence_parallel)
        return fail(err, errlen, "--num-experts with --tensor-model-parallel-size %d needs "
                    "--sequence-parallel (Megatron's MoE layer refuses tensor parallelism without "
                    "it)", a->tensor_model_parallel_size);
    /* Megatron's sequence_load_balancing_loss_func: "Do not support sequence aux loss in
     * sequence partition case" */
    if ((a->tensor_model_parallel_size > 1 || a->context_parallel_size > 1) &&
        ARGS_CHOICE(a, moe_router_load_balancing_type) == ARGS_MOE_LB_SEQ_AUX_LOSS)
        return fail(err, errlen, "--moe-router-load-balancing-type seq_aux_loss with "
                    "--%s-parallel-size %d: the per-sequence loss needs whole "
                    "sequences on a rank (Megatron: \"Do not support sequence aux loss in sequence "
                    "partition case\")",
                    a->tensor_model_parallel_size > 1 ? "tensor-model" : "context",
                    a->tensor_model_parallel_size > 1 ? a->tensor_model_parallel_size
                                                      : a->context_parallel_size);
    if (a->add_bias_linear)
        return fail(err, errlen, "--num-experts without --disable-bias-linear: not supported "
                    "yet (MoE layers have no biases: add --disable-bias-linear; docs/MOE.md)");
    return 0;
}
/* ======== end of NOT YET SUPPORTED ======== */

/* The mixture-of-experts flags: without --num-experts none may be given; with it, Megatron's
 * rules, then what megadlm does not build yet. */
static int args_validate_moe(megadlm_args *a, char *err, size_t errlen) {
    if (a->num_experts < 0) /* from a state.json: the parser refuses it */
        return fail(err, errlen, "--num-experts %d: expected a number of experts (0 or none: "
                    "a dense model)", a->num_experts);
    if (a->num_experts == 0) return validate_moe_unused(a, err, errlen);
    if (validate_moe_sizes(a, err, errlen) || validate_moe_rules(a, err, errlen) ||
        validate_moe_upcycling(a, err, errlen))
        return -1;
    return validate_moe_not_yet(a, err, errlen);
}

/* Expert parallelism takes its EP ranks from the data-parallel ones (Megatron's
 * initialize_model_parallel: the world divisible by expert TP x EP x PP). */
static int validate_expert_world(const megadlm_args *a, char *err, size_t errlen) {
    if (a->num_experts <= 0) return 0;
    long long group = (long long)a->expert_tensor_parallel_size *
                      a->expert_model_parallel_size * a->pipeline_model_parallel_size;
    if (a->world_size % group != 0)
        return fail(err, errlen, "world size (%d) is not divisible by "
                    "--expert-model-parallel-size %d x --expert-tensor-parallel-size %d x "
                    "--pipeline-model-parallel-size %d (the experts are split across "
                    "data-parallel ranks)", a->world_size, a->expert_model_parallel_size,
                    a->expert_tensor_parallel_size, a->pipeline_model_parallel_size);
    return 0;
}

/* Megatron's parallel rules for the model: heads and query groups divisible by TP
 * (TransformerConfig); the ffn size too (the column/row split of linear_fc1/linear_fc2);
 * sequence parallelism off at TP 1 (arguments.py, with a warning), and the sequence divisible
 * by TP with it (its scatter along the sequence); layers divisible by PP, and the interleaved
 * schedule's rules. The world size is checked later (validate_world), so a layout that cannot
 * split the model is refused with the same words whatever the world size (`train` takes it
 * from the launcher, `megadlm memory` from --world-size). */
/* --tp-comm-overlap and its switches (Megatron's arguments.py: "Tensor parallel
 * communication/GEMM overlap can happen only when sequence parallelism is enabled"). The
 * switches without --tp-comm-overlap would do nothing, so they are refused. */
static int validate_tp_comm_overlap(megadlm_args *a, int t, char *err, size_t errlen) {
    if (a->tp_comm_overlap && !(a->sequence_parallel && t > 1))
        return fail(err, errlen,
                    "--tp-comm-overlap needs --sequence-parallel and "
                    "--tensor-model-parallel-size > 1 (got %s, --tensor-model-parallel-size "
                    "%d): the overlapped communication is sequence parallelism's",
                    a->sequence_parallel ? "--sequence-parallel" : "no --sequence-parallel", t);
    const char *given = !a->tp_comm_overlap_ag         ? "--disable-tp-comm-overlap-ag"
                        : !a->tp_comm_overlap_rs       ? "--disable-tp-comm-overlap-rs"
                        : a->tp_comm_overlap_rs_dgrad  ? "--tp-comm-overlap-rs-dgrad"
                        : !a->tp_comm_bulk_dgrad       ? "--disable-tp-comm-bulk-dgrad"
                        : !a->tp_comm_bulk_wgrad       ? "--disable-tp-comm-bulk-wgrad"
                        : a->tp_comm_overlap_disable_qkv ? "--tp-comm-overlap-disable-qkv"
                        : a->tp_comm_overlap_disable_fc1 ? "--tp-comm-overlap-disable-fc1"
                        : a->tp_comm_overlap_progress[0] ? "--tp-comm-overlap-progress"
                                                         : NULL;
    if (!a->tp_comm_overlap && given)
        return fail(err, errlen, "%s has no effect without --tp-comm-overlap", given);
    /* the pieces are sequence parallelism's row plan (parallel_linear.c), overlapped or not */
    if (a->tp_comm_overlap_num_splits && !(a->sequence_parallel && t > 1))
        return fail(err, errlen,
                    "--tp-comm-overlap-num-splits has no effect without --sequence-parallel and "
                    "--tensor-model-parallel-size > 1");
    if (a->tp_comm_overlap_progress[0] && !IS_CHOICE(a, tp_comm_overlap_progress))
        return fail(err, errlen, "--tp-comm-overlap-progress %s: expected test or thread",
                    a->tp_comm_overlap_progress);
    if (!a->tp_comm_overlap) return 0;
    if (!a->tp_comm_overlap_progress[0])
        snprintf(a->tp_comm_overlap_progress, sizeof(a->tp_comm_overlap_progress), "thread");
    return 0;
}

/* Context parallelism (Megatron's rules): a known --cp-comm-type, the sequence split into
 * 2 x CP equal chunks (Megatron's "seq-length should be a multiple of 2 *
 * context-parallel-size"; a masked-diffusion sequence of any length is padded to one instead,
 * training/difflm.h), and the exchanges built here. */
static int validate_context_parallel(megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, cp_comm_type))
        return fail(err, errlen, "--cp-comm-type %s: expected p2p, a2a, allgather or a2a+p2p",
                    a->cp_comm_type);
    int cp = a->context_parallel_size;
    if (cp <= 1) return 0;
    if (!strcmp(a->cp_comm_type, "a2a+p2p"))
        return fail(err, errlen,
                    "--cp-comm-type a2a+p2p: not built yet with --context-parallel-size %d (the "
                    "built exchanges are p2p, the default, a2a and allgather)",
                    cp);
    int t_groups = a->num_query_groups / a->tensor_model_parallel_size;
    if (!strcmp(a->cp_comm_type, "a2a") && t_groups % cp != 0)
        return fail(err, errlen,
                    "--cp-comm-type a2a: a tensor-parallel rank's %d query groups "
                    "(--num-query-groups / --tensor-model-parallel-size) are not divisible by "
                    "--context-parallel-size %d (the all-to-all splits them)",
                    t_groups, cp);
    if (!strcmp(a->cp_comm_type, "p2p") && (a->bf16 || a->fp16))
        return fail(err, errlen,
                    "--cp-comm-type p2p with %s: not built yet (the ring merges fp32 blocks; "
                    "--cp-comm-type allgather keeps the 16-bit attention)",
                    a->bf16 ? "--bf16" : "--fp16");
    /* difflm-noshift: its seq-length - 1 tokens are padded to 2 x CP chunks (difflm.h) */
    if (!strcmp(a->model_running_mode, "difflm-noshift")) return 0;
    int s = a->seq_length;
    if (s % (2 * cp) != 0)
        return fail(err, errlen,
                    "--context-parallel-size %d: --seq-length %d is not divisible by 2 x %d "
                    "(each rank holds 2 of the sequence's 2 x CP chunks; Megatron: \"seq-length "
                    "should be a multiple of 2 * context-parallel-size\")",
                    cp, s, cp);
    int t = a->tensor_model_parallel_size;
    if (a->sequence_parallel && t > 1 && ((long long)a->micro_batch_size * (s / cp)) % t != 0)
        return fail(err, errlen,
                    "--context-parallel-size %d with --sequence-parallel: a rank's micro-batch x "
                    "sequence / CP = %d tokens is not divisible by --tensor-model-parallel-size %d",
                    cp, a->micro_batch_size * (s / cp), t);
    return 0;
}

static int validate_parallel(megadlm_args *a, char *err, size_t errlen) {
    int t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    if (a->num_attention_heads % t != 0)
        return fail(err, errlen,
                    "--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d",
                    a->num_attention_heads, t);
    if (a->num_query_groups % t != 0)
        return fail(err, errlen,
                    "--num-query-groups %d is not divisible by --tensor-model-parallel-size %d "
                    "(each tensor-parallel rank holds whole key/value groups)",
                    a->num_query_groups, t);
    if (a->ffn_hidden_size % t != 0)
        return fail(err, errlen,
                    "--ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d "
                    "(linear_fc1 and linear_fc2 are split along it)",
                    a->ffn_hidden_size, t);
    if (a->sequence_parallel && t == 1) {
        fprintf(stderr, "note: --sequence-parallel is off at --tensor-model-parallel-size 1 (as "
                        "Megatron: \"Disabling sequence parallelism because tensor model "
                        "parallelism is disabled\")\n");
        a->sequence_parallel = 0;
    }
    if (validate_tp_comm_overlap(a, t, err, errlen)) return -1;
    /* difflm-noshift pads its seq-length - 1 tokens to a split length (training/difflm.h) */
    if (a->sequence_parallel && strcmp(a->model_running_mode, "difflm-noshift") != 0 &&
        a->seq_length % t != 0)
        return fail(err, errlen,
                    "--sequence-parallel: --seq-length %d is not divisible by "
                    "--tensor-model-parallel-size %d (the sequence is split across its ranks)",
                    a->seq_length, t);
    if (a->num_layers % p != 0)
        return fail(err, errlen,
                    "--num-layers %d is not divisible by --pipeline-model-parallel-size %d",
                    a->num_layers, p);
    int v = a->virtual_pipeline_model_parallel_size;
    if (a->num_layers_per_virtual_pipeline_stage > 0) {
        int n = a->num_layers_per_virtual_pipeline_stage, stage = a->num_layers / p;
        if (stage % n != 0)
            return fail(err, errlen,
                        "--num-layers-per-virtual-pipeline-stage %d does not divide the %d layers "
                        "of a pipeline stage (--num-layers / --pipeline-model-parallel-size)",
                        n, stage);
        if (v > 0 && v != stage / n && !(v == 1 && stage / n == 1))
            return fail(err, errlen,
                        "give one of --num-layers-per-virtual-pipeline-stage and "
                        "--virtual-pipeline-model-parallel-size (%d layers per virtual stage make "
                        "%d model chunks per rank, not %d)",
                        n, stage / n, v);
        v = stage / n;
    }
    if (v == 1) v = 0; /* Megatron: one model chunk per rank is no interleaving (None) */
    if (v > 0) {
        /* Megatron: > 1 with its default p2p overlap (--no-overlap-p2p-communication asks for
         * > 2, an NCCL batching limit; megadlm's transfers are tagged MPI pairs) */
        if (p < 2)
            return fail(err, errlen,
                        "the interleaved schedule (%d model chunks per rank) needs "
                        "--pipeline-model-parallel-size > 1",
                        v);
        if (a->num_layers % ((long long)p * v) != 0)
            return fail(err, errlen,
                        "--num-layers %d is not divisible by --pipeline-model-parallel-size %d x "
                        "%d model chunks (--virtual-pipeline-model-parallel-size)",
                        a->num_layers, p, v);
    }
    a->virtual_pipeline_model_parallel_size = v;
    if (validate_context_parallel(a, err, errlen)) return -1;
    /* Megatron: overlap_param_gather asserts use_distributed_optimizer and overlap_grad_reduce */
    if (a->overlap_param_gather && !a->use_distributed_optimizer)
        return fail(err, errlen, "--overlap-param-gather needs --use-distributed-optimizer "
                                 "(Megatron: only supported with distributed optimizer)");
    if (a->overlap_param_gather && !a->overlap_grad_reduce)
        return fail(err, errlen, "--overlap-param-gather needs --overlap-grad-reduce (Megatron: "
                                 "must use --overlap-param-gather with --overlap-grad-reduce)");
    return 0;
}

/* Megatron's rules for torch FSDP2 (validate_args): its fully_shard is optim_grads_params. */
static int validate_torch_fsdp2(megadlm_args *a, char *err, size_t errlen) {
    const char *s = a->data_parallel_sharding_strategy;
    if (a->use_custom_fsdp)
        return fail(err, errlen, "--use-torch-fsdp2 and --use-megatron-fsdp (--use-custom-fsdp) "
                                 "exclude each other (one FSDP implementation)");
    if (a->pipeline_model_parallel_size > 1)
        return fail(err, errlen, "--use-torch-fsdp2 is not supported with pipeline parallelism");
    if (a->use_distributed_optimizer && !a->fsdp_distributed_optimizer)
        return fail(err, errlen, "--use-torch-fsdp2 is not supported with MCore's distributed "
                                 "optimizer (--use-distributed-optimizer)");
    if (a->gradient_accumulation_fusion)
        return fail(err, errlen, "--use-torch-fsdp2 is not supported with gradient accumulation "
                                 "fusion (add --no-gradient-accumulation-fusion)");
    if (!a->untie_embeddings_and_output_weights)
        return fail(err, errlen, "--use-torch-fsdp2 requires "
                                 "--untie-embeddings-and-output-weights");
    if (a->fp16) return fail(err, errlen, "--use-torch-fsdp2 not supported with fp16 yet");
    if (s[0] && strcmp(s, "optim_grads_params") != 0)
        return fail(err, errlen, "--use-torch-fsdp2 with --data-parallel-sharding-strategy %s: "
                    "FSDP2's fully_shard shards parameters, gradients and optimizer state "
                    "(optim_grads_params)", s);
    snprintf(a->data_parallel_sharding_strategy, sizeof a->data_parallel_sharding_strategy,
             "optim_grads_params");
    return 0;
}

/* FSDP: the strategy decides what is sharded. Without an FSDP flag Megatron's DDP ignores the
 * strategy; megadlm refuses it instead, except no_shard (plain data parallelism: MegaDLMs'
 * standard launch line). Under Megatron-FSDP, whose v1 always turns on its distributed
 * optimizer, that optimizer shards what the strategy says: optim is megadlm's distributed
 * optimizer (the same code), no_shard plain data parallelism. */
static int validate_fsdp(megadlm_args *a, char *err, size_t errlen) {
    char *s = a->data_parallel_sharding_strategy;
    if (s[0] && !IS_CHOICE(a, data_parallel_sharding_strategy))
        return fail(err, errlen, "--data-parallel-sharding-strategy '%s': expected no_shard, "
                    "optim, optim_grads or optim_grads_params", s);
    if (a->use_megatron_fsdp) a->use_custom_fsdp = 1; /* Megatron: the deprecated name too */
    if (!a->use_custom_fsdp && !a->use_torch_fsdp2) {
        if (s[0] && strcmp(s, "no_shard") != 0)
            return fail(err, errlen, "--data-parallel-sharding-strategy %s needs "
                        "--use-megatron-fsdp, --use-custom-fsdp or --use-torch-fsdp2 (without "
                        "them Megatron ignores it; the optimizer state alone is sharded by "
                        "--use-distributed-optimizer)", s);
        if (s[0] && a->use_distributed_optimizer)
            return fail(err, errlen, "--data-parallel-sharding-strategy no_shard with "
                        "--use-distributed-optimizer: no_shard keeps the whole optimizer state "
                        "on every rank");
        return 0;
    }
    if (a->use_torch_fsdp2) {
        if (validate_torch_fsdp2(a, err, errlen)) return -1;
    } else if (!s[0]) {
        snprintf(a->data_parallel_sharding_strategy, sizeof a->data_parallel_sharding_strategy,
                 "optim_grads_params"); /* Megatron's default */
    }
    if (!strcmp(s, "no_shard")) {
        a->use_distributed_optimizer = 0;
        a->fsdp_distributed_optimizer = 0;
        return 0;
    }
    if (a->fp16)
        return fail(err, errlen, "--fp16 with FSDP (--data-parallel-sharding-strategy %s): not "
                    "supported yet (its loss scaler has not been tested with sharded state)", s);
    if (!strcmp(s, "optim_grads_params") && a->debug && a->detect_anomaly)
        return fail(err, errlen, "--detect-anomaly with --data-parallel-sharding-strategy "
                    "optim_grads_params: not supported yet (its check reads the whole "
                    "gradient buffer, which this strategy never holds)");
    if (strcmp(s, "optim") != 0 && a->pipeline_model_parallel_size > 1)
        return fail(err, errlen, "--data-parallel-sharding-strategy %s with pipeline "
                    "parallelism: not supported yet (the tied embedding's sum across stages "
                    "needs its whole gradient)", s);
    /* the distributed optimizer's pieces are the shards (optim: its code path unchanged) */
    if (!a->use_distributed_optimizer) a->fsdp_distributed_optimizer = 1;
    a->use_distributed_optimizer = 1;
    return 0;
}

int args_fsdp_shards_grads(const megadlm_args *a) {
    return (a->use_custom_fsdp || a->use_torch_fsdp2) &&
           (!strcmp(a->data_parallel_sharding_strategy, "optim_grads") ||
            !strcmp(a->data_parallel_sharding_strategy, "optim_grads_params"));
}

/* The world divisible by TP x PP (Megatron's first check; here after every rule of the model
 * and the recompute plan, which do not depend on it), and the data-parallel size. */
static int validate_world(megadlm_args *a, char *err, size_t errlen) {
    int t = a->tensor_model_parallel_size, p = a->pipeline_model_parallel_size;
    int cp = a->context_parallel_size;
    long long model = (long long)t * p * cp;
    if (model > INT_MAX)
        return fail(err, errlen, "--tensor-model-parallel-size x --pipeline-model-parallel-size "
                                 "x --context-parallel-size is too large");
    if (a->world_size == 0) a->world_size = (int)model; /* not given: one model replica */
    if (a->world_size % model != 0)
        return fail(err, errlen,
                    "world size (%d) is not divisible by --tensor-model-parallel-size %d x "
                    "--pipeline-model-parallel-size %d%s%.0d",
                    a->world_size, t, p, cp > 1 ? " x --context-parallel-size " : "",
                    cp > 1 ? cp : 0);
    a->data_parallel_size = (int)(a->world_size / model);
    return 0;
}

/* Required flags (Megatron: _check_arg_is_not_none and the asserts on None), all missing ones
 * named */
static int validate_required(megadlm_args *a, char *err, size_t errlen) {
    char missing[512] = "";
    int nmiss = 0;
#define REQ(cond, flag)                                                            \
    if (cond) {                                                                    \
        size_t l = strlen(missing);                                                \
        snprintf(missing + l, sizeof(missing) - l, "%s%s", nmiss ? ", " : "", flag); \
        nmiss++;                                                                   \
    }
    REQ(a->num_layers <= 0, "--num-layers");
    REQ(a->hidden_size <= 0, "--hidden-size");
    REQ(a->num_attention_heads <= 0, "--num-attention-heads");
    REQ(a->seq_length <= 0, "--seq-length");
    REQ(a->max_position_embeddings <= 0, "--max-position-embeddings");
    REQ(a->micro_batch_size <= 0, "--micro-batch-size");
    REQ(a->train_iters <= 0 && a->train_samples <= 0, "--train-iters (or --train-samples)");
    REQ(isnan(a->lr), "--lr");
#undef REQ
    if (nmiss)
        return fail(err, errlen, "missing required flag%s %s", nmiss > 1 ? "s" : "", missing);
    return 0;
}

/* The parallel sizes positive, then the attention and MLP shapes (the model's divisibility
 * and the world size follow the MLP) */
static int validate_shape(megadlm_args *a, char *err, size_t errlen) {
    /* ---- parallel sizes ---- */
    if (a->tensor_model_parallel_size < 1)
        return fail(err, errlen, "--tensor-model-parallel-size must be positive");
    if (a->pipeline_model_parallel_size < 1)
        return fail(err, errlen, "--pipeline-model-parallel-size must be positive");
    if (a->world_size < 0) return fail(err, errlen, "world size %d must be positive", a->world_size);
    if (a->num_layers_per_virtual_pipeline_stage < 0)
        return fail(err, errlen, "--num-layers-per-virtual-pipeline-stage must be positive");
    if (a->virtual_pipeline_model_parallel_size < 0)
        return fail(err, errlen, "--virtual-pipeline-model-parallel-size must be positive");

    /* ---- attention shape ---- */
    if (a->kv_channels < 0) return fail(err, errlen, "--kv-channels must be positive");
    if (a->kv_channels == 0) {
        if (a->hidden_size % a->num_attention_heads != 0)
            return fail(err, errlen,
                        "--hidden-size %d is not divisible by --num-attention-heads %d "
                        "(give --kv-channels to set the head dimension explicitly)",
                        a->hidden_size, a->num_attention_heads);
        a->kv_channels = a->hidden_size / a->num_attention_heads;
    }
    if (a->num_query_groups < 0) return fail(err, errlen, "--num-query-groups must be positive");
    if (a->group_query_attention) {
        if (a->num_query_groups == 0) a->num_query_groups = 1; /* Megatron's default */
    } else {
        /* Megatron ignores --num-query-groups without --group-query-attention; refuse it
         * instead of silently training plain multi-head attention. (A value equal to the head
         * count is what validation itself derives, so re-validating stays possible.) */
        if (a->num_query_groups != 0 && a->num_query_groups != a->num_attention_heads)
            return fail(err, errlen,
                        "--num-query-groups %d needs --group-query-attention (without it "
                        "Megatron ignores the value and uses one group per head)",
                        a->num_query_groups);
        a->num_query_groups = a->num_attention_heads;
    }
    if (a->num_attention_heads % a->num_query_groups != 0)
        return fail(err, errlen, "--num-attention-heads %d is not divisible by --num-query-groups %d",
                    a->num_attention_heads, a->num_query_groups);

    /* ---- MLP ---- */
    if (a->openai_gelu && a->swiglu)
        return fail(err, errlen,
                    "--openai-gelu cannot be combined with --swiglu (SwiGLU uses SiLU, not GeLU)");
    if (a->ffn_hidden_size < 0) return fail(err, errlen, "--ffn-hidden-size must be positive");
    if (a->ffn_hidden_size == 0) {
        if (a->swiglu) {
            /* Megatron: int((4 * hidden_size * 2 / 3) / 64) * 64, in Python float arithmetic */
            double f = ((double)(8LL * a->hidden_size) / 3.0) / 64.0;
            long long v = (long long)f * 64;
            if (v <= 0)
                return fail(err, errlen,
                            "--swiglu with --hidden-size %d gives a feed-forward size of 0 "
                            "(int(4*h*2/3/64)*64); give --ffn-hidden-size", a->hidden_size);
            if (v > INT_MAX) return fail(err, errlen, "--hidden-size %d is too large", a->hidden_size);
            a->ffn_hidden_size = (int)v;
        } else {
            long long v = 4LL * a->hidden_size;
            if (v > INT_MAX) return fail(err, errlen, "--hidden-size %d is too large", a->hidden_size);
            a->ffn_hidden_size = (int)v;
        }
    }
    /* Megatron: "if not args.add_bias_linear: args.bias_gelu_fusion = False"; with --swiglu the
     * GeLU fusion does not apply (Megatron uses bias_swiglu_fusion there). */
    if (!a->add_bias_linear || a->swiglu) a->bias_gelu_fusion = 0;
    return 0;
}

/* Normalization, embeddings, initialization, dropout */
static int validate_embeddings(megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, normalization))
        return fail(err, errlen, "--normalization '%s': expected LayerNorm or RMSNorm",
                    a->normalization);
    if (!(a->norm_epsilon > 0))
        return fail(err, errlen, "--norm-epsilon must be positive");

    /* Megatron's validate_args, "Legacy RoPE arguments" */
    if (a->use_rotary_position_embeddings)
        snprintf(a->position_embedding_type, sizeof(a->position_embedding_type), "rope");
    static const char *const PE_LATER[] = {"mrope", "relative", "none", NULL};
    if (one_of(a->position_embedding_type, PE_LATER))
        return fail(err, errlen, "--position-embedding-type %s: not supported yet",
                    a->position_embedding_type);
    if (!IS_CHOICE(a, position_embedding_type))
        return fail(err, errlen,
                    "--position-embedding-type '%s': expected learned_absolute or rope",
                    a->position_embedding_type);
    /* Megatron asserts max_position_embeddings >= seq_length for every embedding type */
    if (a->seq_length > a->max_position_embeddings)
        return fail(err, errlen,
                    "--seq-length %d is larger than --max-position-embeddings %d "
                    "(max_position_embeddings must be >= seq_length)",
                    a->seq_length, a->max_position_embeddings);
    if (!strcmp(a->position_embedding_type, "rope")) {
        if (!(a->rotary_percent > 0 && a->rotary_percent <= 1)) {
            char b[32];
            fmt_float(b, sizeof(b), a->rotary_percent);
            return fail(err, errlen, "--rotary-percent %s: must be in (0, 1]", b);
        }
        if (!(a->rotary_base > 0))
            return fail(err, errlen, "--rotary-base must be positive");
        /* Megatron's RotaryEmbedding: dim = int(kv_channels * rotary_percent), frequencies
         * for arange(0, dim, 2): an odd dim does not fit the head. */
        int rot = (int)((double)a->kv_channels * (double)a->rotary_percent);
        if (rot <= 0 || rot % 2 != 0) {
            char b[32];
            fmt_float(b, sizeof(b), a->rotary_percent);
            return fail(err, errlen,
                        "--rotary-percent %s x --kv-channels %d = %d rotary dimensions; "
                        "must be even and positive",
                        b, a->kv_channels, rot);
        }
    }
    if (!(a->init_method_std >= 0)) return fail(err, errlen, "--init-method-std must be >= 0");
    if (!(a->hidden_dropout >= 0 && a->hidden_dropout < 1))
        return fail(err, errlen, "--hidden-dropout must be in [0, 1)");
    if (!(a->attention_dropout >= 0 && a->attention_dropout < 1))
        return fail(err, errlen, "--attention-dropout must be in [0, 1)");
    if (a->make_vocab_size_divisible_by <= 0)
        return fail(err, errlen, "--make-vocab-size-divisible-by must be positive");
    return 0;
}

/* The data source: blends, per-split paths, split */
static int validate_data(megadlm_args *a, char *err, size_t errlen) {
    int per_split = a->train_data_path[0] || a->valid_data_path[0] || a->test_data_path[0];
    if (per_split) {
        if (a->mock_data || a->num_data_paths > 0)
            return fail(err, errlen, "--train-data-path / --valid-data-path / --test-data-path "
                                     "exclude --data-path and --mock-data (Megatron's rule)");
        if (!a->train_data_path[0])
            return fail(err, errlen, "--valid-data-path / --test-data-path need "
                                     "--train-data-path");
        const char *flags[3] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
        const char *specs[3] = {a->train_data_path, a->valid_data_path, a->test_data_path};
        for (int k = 0; k < 3; k++) {
            if (!specs[k][0]) continue;
            char *paths[ARGS_MAX_DATA_PATHS];
            double w[ARGS_MAX_DATA_PATHS];
            int count = 0, weighted = 0;
            if (args_parse_blend(flags[k], specs[k], paths, w, &count, &weighted, err, errlen))
                return -1;
            for (int i = 0; i < count; i++) free(paths[i]);
        }
    } else if (a->mock_data && a->num_data_paths > 0)
        return fail(err, errlen,
                    "--mock-data and --data-path are exclusive (a single data source)");
    if (!a->mock_data && a->num_data_paths <= 0 && !per_split)
        return fail(err, errlen, "no data: give --data-path PREFIX (or --train-data-path ...) "
                                 "or --mock-data");
    if (a->num_data_paths > ARGS_MAX_DATA_PATHS)
        return fail(err, errlen, "--data-path: at most %d datasets", ARGS_MAX_DATA_PATHS);
    if (a->data_weighted) {
        double sum = 0;
        for (int i = 0; i < a->num_data_paths; i++) {
            if (!(a->data_weights[i] >= 0) || !isfinite(a->data_weights[i]))
                return fail(err, errlen, "--data-path: weights must be non-negative numbers");
            sum += a->data_weights[i];
        }
        if (!(sum > 0)) return fail(err, errlen, "--data-path: the weights sum to 0");
        if (!isfinite(sum))
            return fail(err, errlen, "--data-path: the weights sum to %g: expected a finite sum",
                        sum);
    }
    for (int i = 0; i < a->num_data_paths; i++)
        if (!a->data_paths[i] || !a->data_paths[i][0])
            return fail(err, errlen, "--data-path: empty prefix");
    if (check_split(a->split, err, errlen)) return -1;
    return 0;
}

/* The tokenizer and the padded vocabulary */
static int validate_vocab(megadlm_args *a, char *err, size_t errlen) {
    if (!a->tokenizer_type[0]) {
        if (a->mock_data)
            snprintf(a->tokenizer_type, sizeof(a->tokenizer_type), "NullTokenizer");
        else
            return fail(err, errlen,
                        "--tokenizer-type is required with --data-path (ByteLevel, NullTokenizer, "
                        "GPT2BPETokenizer or HuggingFaceTokenizer)");
    }
    int tok_vocab = 0;
    args_choice tok = ARGS_CHOICE(a, tokenizer_type);
    if (tok == ARGS_TOKENIZER_BYTE_LEVEL) {
        tok_vocab = 257; /* --vocab-size is not used (Megatron ignores it too) */
    } else if (tok == ARGS_TOKENIZER_NULL) {
        if (a->vocab_size <= 0)
            return fail(err, errlen,
                        "--tokenizer-type NullTokenizer%s needs --vocab-size",
                        a->mock_data ? " (the tokenizer of --mock-data)" : "");
        if (a->vocab_size == INT_MAX) return fail(err, errlen, "--vocab-size is too large");
        tok_vocab = a->vocab_size + 1; /* Megatron's _NullTokenizer: eod = vocab_size */
    } else if (tok == ARGS_TOKENIZER_GPT2BPE || tok == ARGS_TOKENIZER_HUGGINGFACE) {
        if (validate_tokenizer_files(a, &tok_vocab, err, errlen))
            return ARGS_INVALID_TOKENIZER_FILE;
    } else if (one_of(a->tokenizer_type, MEGATRON_TOKENIZERS)) {
        return fail(err, errlen,
                    "--tokenizer-type %s: not supported yet (ByteLevel, NullTokenizer, "
                    "GPT2BPETokenizer or HuggingFaceTokenizer)",
                    a->tokenizer_type);
    } else {
        return fail(err, errlen,
                    "--tokenizer-type '%s': expected ByteLevel, NullTokenizer, GPT2BPETokenizer "
                    "or HuggingFaceTokenizer",
                    a->tokenizer_type);
    }
    {
        /* Megatron's _vocab_size_with_padding */
        long long multiple =
            (long long)a->make_vocab_size_divisible_by * a->tensor_model_parallel_size;
        long long padded = ((long long)tok_vocab + multiple - 1) / multiple * multiple;
        if (padded > INT_MAX) return fail(err, errlen, "--vocab-size: padded vocabulary too large");
        a->padded_vocab_size = (int)padded;
    }
    return 0;
}

/* The global batch (after the world size) */
static int validate_batch(megadlm_args *a, char *err, size_t errlen) {
    long long mdp = (long long)a->micro_batch_size * a->data_parallel_size;
    if (a->global_batch_size < 0) return fail(err, errlen, "--global-batch-size must be positive");
    if (a->global_batch_size == 0) {
        if (mdp > INT_MAX) return fail(err, errlen, "--micro-batch-size is too large");
        a->global_batch_size = (int)mdp;
    }
    if (a->global_batch_size % mdp != 0)
        return fail(err, errlen,
                    "--global-batch-size %d is not divisible by --micro-batch-size %d x "
                    "data-parallel size %d",
                    a->global_batch_size, a->micro_batch_size, a->data_parallel_size);
    /* Megatron's interleaved schedule: micro-batches in groups of the pipeline size */
    long long m = args_num_microbatches(a); /* mdp divides the global batch: it fits an int */
    if (a->virtual_pipeline_model_parallel_size > 0 &&
        m % a->pipeline_model_parallel_size != 0)
        return fail(err, errlen,
                    "number of micro-batches (%lld = --global-batch-size %d / (--micro-batch-size "
                    "%d x data-parallel size %d)) is not divisible by "
                    "--pipeline-model-parallel-size %d, as the interleaved schedule needs",
                    m, a->global_batch_size, a->micro_batch_size, a->data_parallel_size,
                    a->pipeline_model_parallel_size);
    return 0;
}

/* Iteration- or sample-based training (Megatron's validate_args): one length flag, and the
 * schedule's lengths in the same unit. Derives the decay length (--train-iters / -samples). */
static int validate_training_length(megadlm_args *a, char *err, size_t errlen) {
    if (a->train_iters > 0 && a->train_samples > 0)
        return fail(err, errlen,
                    "--train-iters %d and --train-samples %d: give one (iteration- or "
                    "sample-based training)", a->train_iters, a->train_samples);
    /* a flag of the other unit: Megatron asserts "expected iteration-based ..." and the like */
    int it = a->train_iters > 0;
    const char *unit = it ? "--train-iters" : "--train-samples";
    const char *given = NULL, *instead = NULL;
    if (it && a->lr_decay_samples > 0) given = "--lr-decay-samples", instead = "--lr-decay-iters";
    if (it && a->lr_warmup_samples > 0)
        given = "--lr-warmup-samples", instead = "--lr-warmup-iters or --lr-warmup-fraction";
    if (it && a->lr_wsd_decay_samples >= 0)
        given = "--lr-wsd-decay-samples", instead = "--lr-wsd-decay-iters";
    if (!it && a->lr_decay_iters > 0) given = "--lr-decay-iters", instead = "--lr-decay-samples";
    if (!it && a->lr_warmup_iters > 0)
        given = "--lr-warmup-iters", instead = "--lr-warmup-samples or --lr-warmup-fraction";
    if (!it && a->lr_wsd_decay_iters >= 0)
        given = "--lr-wsd-decay-iters", instead = "--lr-wsd-decay-samples";
    if (given)
        return fail(err, errlen, "%s does not apply with %s (the schedule is counted in %s: "
                    "give %s)", given, unit, it ? "iterations" : "samples", instead);
    if (it) {
        if (a->lr_decay_iters == 0) a->lr_decay_iters = a->train_iters;
        return 0;
    }
    if (a->train_samples < a->global_batch_size)
        return fail(err, errlen,
                    "--train-samples %d is smaller than --global-batch-size %d (no iteration: "
                    "training runs train-samples // global-batch-size iterations)",
                    a->train_samples, a->global_batch_size);
    if (a->lr_decay_samples == 0) a->lr_decay_samples = a->train_samples;
    return 0;
}

/* Megatron's OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps (in samples),
 * and with WSD an annealing phase within the decay. */
static int validate_lr_lengths(const megadlm_args *a, char *err, size_t errlen) {
    int it = a->train_iters > 0;
    const char *wflag = it ? "--lr-warmup-iters" : "--lr-warmup-samples";
    const char *dflag = it ? "--lr-decay-iters" : "--lr-decay-samples";
    const char *tflag = it ? "--train-iters" : "--train-samples";
    int warm = it ? a->lr_warmup_iters : a->lr_warmup_samples;
    int decay = it ? a->lr_decay_iters : a->lr_decay_samples;
    if (a->lr_warmup_fraction >= 0 && warm != 0)
        return fail(err, errlen, "can only specify one of --lr-warmup-fraction and %s", wflag);
    double warmup;
    int64_t decay_samples, wsd;
    args_lr_schedule_samples(a, &warmup, &decay_samples, &wsd);
    if (!(warmup < (double)decay_samples)) {
        if (a->lr_warmup_fraction >= 0) {
            char b[32];
            fmt_float(b, sizeof(b), a->lr_warmup_fraction);
            return fail(err, errlen, "--lr-warmup-fraction %s must be smaller than 1 (warmup "
                        "shorter than %s)", b, dflag);
        }
        return fail(err, errlen, "%s %d must be smaller than %s %d (which defaults to %s)",
                    wflag, warm, dflag, decay, tflag);
    }
    if (!strcmp(a->lr_decay_style, "WSD")) {
        const char *sflag = it ? "--lr-wsd-decay-iters" : "--lr-wsd-decay-samples";
        int wsd_given = it ? a->lr_wsd_decay_iters : a->lr_wsd_decay_samples;
        if (wsd_given < 0) return fail(err, errlen, "--lr-decay-style WSD needs %s", sflag);
        if (wsd_given > decay)
            return fail(err, errlen, "%s %d is larger than %s %d (which defaults to %s)",
                        sflag, wsd_given, dflag, decay, tflag);
    }
    return 0;
}

/* The learning-rate schedule: its values, its style, its lengths */
static int validate_lr_schedule(megadlm_args *a, char *err, size_t errlen) {
    char b1[32], b2[32];
    if (!(a->lr >= 0)) return fail(err, errlen, "--lr must be >= 0");
    if (!(a->min_lr >= 0)) return fail(err, errlen, "--min-lr must be >= 0");
    fmt_float(b2, sizeof(b2), a->lr);
    if (a->min_lr > a->lr) {
        fmt_float(b1, sizeof(b1), a->min_lr);
        return fail(err, errlen, "--min-lr %s is larger than --lr %s (min_lr <= lr)", b1, b2);
    }
    fmt_float(b1, sizeof(b1), a->lr_warmup_init);
    if (!(a->lr_warmup_init >= 0))
        return fail(err, errlen, "--lr-warmup-init %s must be >= 0", b1);
    if (a->lr_warmup_init > a->lr) /* Megatron's scheduler: assert init_lr <= max_lr */
        return fail(err, errlen, "--lr-warmup-init %s is larger than --lr %s (init <= lr)", b1,
                    b2);
    if (!IS_CHOICE(a, lr_decay_style))
        return fail(err, errlen,
                    "--lr-decay-style '%s': expected constant, linear, cosine, "
                    "inverse-square-root or WSD", a->lr_decay_style);
    if (!IS_CHOICE(a, lr_wsd_decay_style))
        return fail(err, errlen,
                    "--lr-wsd-decay-style '%s': expected exponential, linear, cosine or minus_sqrt",
                    a->lr_wsd_decay_style);
    if (validate_training_length(a, err, errlen)) return -1;
    return validate_lr_lengths(a, err, errlen);
}

int args_train_iters(const megadlm_args *a) {
    if (a->train_iters > 0) return a->train_iters;
    return a->global_batch_size > 0 ? a->train_samples / a->global_batch_size : 0;
}

int args_num_microbatches(const megadlm_args *a) {
    return num_microbatches_calculate(a->global_batch_size, a->micro_batch_size,
                                      a->data_parallel_size);
}

int args_grad_reduce_ranks(const megadlm_args *a) {
    const int dp = a->data_parallel_size > 0 ? a->data_parallel_size : 1;
    return dp * (a->context_parallel_size > 1 ? a->context_parallel_size : 1);
}

double args_decimal(float x) {
    char b[48];
    for (int p = 0; p < 9; p++) { /* 9 significant digits always read back as the float */
        snprintf(b, sizeof b, "%.*e", p, (double)x);
        double back = strtod(b, NULL);
        if ((float)back == x) return back;
    }
    return (double)x;
}

/* Megatron's get_optimizer_param_scheduler: iteration-based lengths times the global batch;
 * a warmup fraction of the decay in samples, unrounded. */
void args_lr_schedule_samples(const megadlm_args *a, double *warmup, int64_t *decay,
                              int64_t *wsd_decay) {
    int64_t gbs = a->global_batch_size;
    int it = a->train_iters > 0;
    *decay = it ? (int64_t)a->lr_decay_iters * gbs : (int64_t)a->lr_decay_samples;
    int wsd = it ? a->lr_wsd_decay_iters : a->lr_wsd_decay_samples;
    *wsd_decay = wsd > 0 ? (it ? (int64_t)wsd * gbs : (int64_t)wsd) : 0;
    if (a->lr_warmup_fraction >= 0)
        *warmup = args_decimal(a->lr_warmup_fraction) * (double)*decay;
    else
        *warmup = it ? (double)((int64_t)a->lr_warmup_iters * gbs) : (double)a->lr_warmup_samples;
}

/* Adam and the learning-rate schedule */
static int validate_optimizer(megadlm_args *a, char *err, size_t errlen) {
    /* ---- optimizer ---- */
    if (!IS_CHOICE(a, optimizer)) {
        static const char *const OPT_LATER[] = {"sgd", "muon", "dist_muon", NULL};
        if (one_of(a->optimizer, OPT_LATER))
            return fail(err, errlen, "--optimizer %s: not supported yet (adam only)", a->optimizer);
        return fail(err, errlen, "--optimizer '%s': expected adam", a->optimizer);
    }
    if (!(a->adam_beta1 >= 0 && a->adam_beta1 < 1))
        return fail(err, errlen, "--adam-beta1 must be in [0, 1)");
    if (!(a->adam_beta2 >= 0 && a->adam_beta2 < 1))
        return fail(err, errlen, "--adam-beta2 must be in [0, 1)");
    if (!(a->adam_eps >= 0)) return fail(err, errlen, "--adam-eps must be >= 0");
    if (!(a->weight_decay >= 0)) return fail(err, errlen, "--weight-decay must be >= 0");
    if (!(a->clip_grad >= 0)) return fail(err, errlen, "--clip-grad must be >= 0 (0 disables clipping)");
    return validate_lr_schedule(a, err, errlen);
}

/* W&B's flags are recorded, not acted on (no network): what wandb.init would refuse is refused
 * here too, and Megatron's own rule (_set_wandb_writer: an experiment name with a project). */
static int validate_monitoring(megadlm_args *a, char *err, size_t errlen) {
    if (a->wandb_project[0] && !a->wandb_exp_name[0])
        return fail(err, errlen, "--wandb-project %s needs --wandb-exp-name NAME (Megatron: "
                    "\"Please specify the wandb experiment name!\")", a->wandb_project);
    if (!IS_CHOICE(a, wandb_mode))
        return fail(err, errlen, "--wandb-mode %s: expected online, offline, disabled or shared",
                    a->wandb_mode);
    if (!IS_CHOICE(a, wandb_resume))
        return fail(err, errlen, "--wandb-resume %s: expected allow, must, never or auto",
                    a->wandb_resume);
    return 0;
}

/* Logging, evaluation, checkpoints */
/* --use-on-the-fly-eval scores the model as `megadlm eval` does, on a model that holds every
 * tensor whole on each rank: data parallelism only. */
static int validate_on_the_fly_eval(const megadlm_args *a, char *err, size_t errlen) {
    if (!a->use_on_the_fly_eval) {
        if (a->on_the_fly_eval_task[0])
            return fail(err, errlen, "--on-the-fly-eval-task %s needs --use-on-the-fly-eval",
                        a->on_the_fly_eval_task);
        return 0;
    }
    if (!a->on_the_fly_eval_task[0])
        return fail(err, errlen, "--use-on-the-fly-eval needs --on-the-fly-eval-task FILE (the "
                    "task it scores the model on, as megadlm eval --task-file)");
    const struct {
        int bad;
        const char *layout;
    } layouts[] = {{a->tensor_model_parallel_size > 1, "--tensor-model-parallel-size > 1"},
                   {a->pipeline_model_parallel_size > 1, "--pipeline-model-parallel-size > 1"},
                   {a->context_parallel_size > 1, "--context-parallel-size > 1"},
                   {a->use_custom_fsdp || a->use_torch_fsdp2 || a->use_megatron_fsdp, "FSDP"}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].bad)
            return fail(err, errlen, "--use-on-the-fly-eval scores a model held whole on each "
                        "rank (data parallelism); %s is not supported with it", layouts[i].layout);
    return 0;
}

static int validate_logging(megadlm_args *a, char *err, size_t errlen) {
    if (a->log_interval <= 0) return fail(err, errlen, "--log-interval must be positive");
    if (a->eval_interval <= 0) return fail(err, errlen, "--eval-interval must be positive");
    if (a->eval_iters < 0) return fail(err, errlen, "--eval-iters must be >= 0");
    if (a->save_interval < 0) return fail(err, errlen, "--save-interval must be positive");
    if (a->exit_interval < 0) return fail(err, errlen, "--exit-interval must be positive");
    if (!(a->distributed_timeout_minutes > 0.0f))
        return fail(err, errlen, "--distributed-timeout-minutes must be positive");
    if (a->save_interval > 0 && !a->save[0])
        return fail(err, errlen, "--save-interval %d needs --save DIR", a->save_interval);
    if (validate_on_the_fly_eval(a, err, errlen)) return -1;
    return validate_monitoring(a, err, errlen);
}

/* --checkpoint-steps "a,b,c": MegaDLMs' int(step) for each non-empty item. 0 when every item
 * is a positive integer (*max: the largest, 0 for none), else -1 naming the item. */
static int parse_checkpoint_steps(const char *list, int *max, char *err, size_t errlen) {
    *max = 0;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0) {
            char item[32];
            char *end;
            long v = n < sizeof item ? (memcpy(item, p, n), item[n] = 0, strtol(item, &end, 10))
                                     : -1;
            if (n >= sizeof item || *end || end == item || v <= 0 || v > INT_MAX)
                return fail(err, errlen, "--checkpoint-steps %s: expected comma-separated "
                            "positive iteration numbers, found \"%.*s\"", list, (int)n, p);
            if (v > *max) *max = (int)v;
        }
        p += n + (e ? 1 : 0);
    }
    return 0;
}

int args_checkpoint_step(const megadlm_args *a, int iteration) {
    for (const char *p = a->checkpoint_steps; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end != p && v == iteration) return 1;
        const char *e = strchr(p, ',');
        if (!e) break;
        p = e + 1;
    }
    return 0;
}

/* Are x and y the same directory name, trailing slashes aside? */
static int same_dir(const char *x, const char *y) {
    size_t nx = strlen(x), ny = strlen(y);
    while (nx > 1 && x[nx - 1] == '/') nx--;
    while (ny > 1 && y[ny - 1] == '/') ny--;
    return nx == ny && !strncmp(x, y, nx);
}

/* A checkpoint format megadlm cannot write, named by the flag that asked for it. */
static int refuse_ckpt_format(const char *flag, const char *fmt, char *err, size_t errlen) {
    if (!strcmp(fmt, "torch"))
        return fail(err, errlen, "%s torch: megadlm does not write PyTorch pickles (torch.save "
                    "of a state dict); use torch_dist (megadlm's own layout-independent "
                    "safetensors checkpoint), and `megadlm convert --to hf` for PyTorch tools",
                    flag);
    if (!strcmp(fmt, "zarr"))
        return fail(err, errlen, "%s zarr: megadlm does not write zarr arrays (deprecated in "
                    "Megatron); use torch_dist (megadlm's own safetensors checkpoint)", flag);
    return fail(err, errlen, "%s %s: expected torch_dist (or Megatron's torch, zarr, which "
                "megadlm refuses)", flag, fmt);
}

/* Megatron's checkpointing group (docs/CHECKPOINT.md): formats, non-persistent checkpoints,
 * convert mode, and the flags that only mean something with --save or --load. */
static int validate_checkpointing(megadlm_args *a, char *err, size_t errlen) {
    if (!IS_CHOICE(a, ckpt_format))
        return refuse_ckpt_format("--ckpt-format", a->ckpt_format, err, errlen);
    const char *np = a->non_persistent_ckpt_type;
    if (np[0] && !IS_CHOICE(a, non_persistent_ckpt_type)) {
        if (!strcmp(np, "local") || !strcmp(np, "in_memory"))
            return fail(err, errlen, "--non-persistent-ckpt-type %s: not supported (Megatron "
                        "does not implement it either); use global", np);
        return fail(err, errlen, "--non-persistent-ckpt-type %s: expected global", np);
    }
    if (a->non_persistent_save_interval < 0)
        return fail(err, errlen, "--non-persistent-save-interval must be positive");
    /* (convert mode does not train: MegaDLMs' conversion line drops the type and keeps the
     * interval) */
    if (a->non_persistent_save_interval > 0 && !a->ckpt_convert_format[0] &&
        (!a->save[0] || !np[0]))
        return fail(err, errlen, "--non-persistent-save-interval %d needs --save DIR and "
                    "--non-persistent-ckpt-type global", a->non_persistent_save_interval);
    if (a->non_persistent_global_ckpt_dir[0] && !np[0])
        return fail(err, errlen, "--non-persistent-global-ckpt-dir needs "
                    "--non-persistent-ckpt-type global");
    /* only the latest non-persistent iteration is kept: never in --save itself */
    if (np[0] && a->save[0] && same_dir(a->non_persistent_global_ckpt_dir, a->save))
        return fail(err, errlen, "--non-persistent-global-ckpt-dir %s is --save: its older "
                    "checkpoints would be removed; use another directory",
                    a->non_persistent_global_ckpt_dir);
    int max_step;
    if (parse_checkpoint_steps(a->checkpoint_steps, &max_step, err, errlen)) return -1;
    if (max_step > 0 && !a->save[0])
        return fail(err, errlen, "--checkpoint-steps needs --save DIR");
    if (a->async_save && !a->save[0] && !a->ckpt_convert_format[0])
        return fail(err, errlen, "--async-save needs --save DIR");
    const char *needs_load = a->ckpt_step >= 0                ? "--ckpt-step"
                             : a->exit_on_missing_checkpoint ? "--exit-on-missing-checkpoint"
                             : a->use_checkpoint_args        ? "--use-checkpoint-args"
                             : a->ckpt_convert_format[0]     ? "--ckpt-convert-format"
                                                             : NULL;
    if (needs_load && !a->load[0]) return fail(err, errlen, "%s needs --load DIR", needs_load);
    if (a->ckpt_convert_format[0]) {
        if (!IS_CHOICE(a, ckpt_convert_format))
            return refuse_ckpt_format("--ckpt-convert-format", a->ckpt_convert_format, err,
                                      errlen);
        if (!a->ckpt_convert_save[0])
            return fail(err, errlen, "--ckpt-convert-format %s needs --ckpt-convert-save DIR",
                        a->ckpt_convert_format);
    } else if (a->ckpt_convert_save[0]) {
        return fail(err, errlen, "--ckpt-convert-save needs --ckpt-convert-format torch or "
                    "torch_dist");
    }
    return 0;
}

/* The loss scaler's flags (Megatron's get_megatron_optimizer: --loss-scale gives a constant
 * scaler under --fp16 or --bf16, --fp16 without it a dynamic one; DynamicGradScaler's asserts).
 * A flag the run's scaler does not read is refused rather than ignored. */
static int validate_loss_scale(megadlm_args *a, char *err, size_t errlen) {
    megadlm_args d;
    args_defaults(&d);
    const int constant = a->loss_scale >= 0.0f, dynamic = a->fp16 && !constant;
    if (constant && !(a->loss_scale > 0.0f))
        return fail(err, errlen, "--loss-scale must be positive (leave it out for dynamic loss "
                    "scaling with --fp16)");
    if (constant && !a->fp16 && !a->bf16)
        return fail(err, errlen, "--loss-scale needs --fp16 or --bf16 (fp32 training has no loss "
                    "scaler)");
    const char *given = a->initial_loss_scale != d.initial_loss_scale ? "--initial-loss-scale"
                        : a->min_loss_scale != d.min_loss_scale       ? "--min-loss-scale"
                        : a->loss_scale_window != d.loss_scale_window ? "--loss-scale-window"
                        : a->hysteresis != d.hysteresis               ? "--hysteresis"
                                                                      : NULL;
    if (given && !dynamic)
        return fail(err, errlen, "%s has no effect %s", given,
                    a->fp16 ? "with --loss-scale (a constant scale)"
                            : "without --fp16 (dynamic loss scaling)");
    if (!dynamic) return 0;
    if (!(a->initial_loss_scale > 0.0f))
        return fail(err, errlen, "--initial-loss-scale must be positive");
    if (!(a->min_loss_scale > 0.0f)) return fail(err, errlen, "--min-loss-scale must be positive");
    if (a->min_loss_scale > a->initial_loss_scale)
        return fail(err, errlen, "--min-loss-scale %g is above --initial-loss-scale %g",
                    (double)a->min_loss_scale, (double)a->initial_loss_scale);
    /* Megatron compares it with a count of iterations: a fraction would never be reached */
    if (!(a->loss_scale_window >= 1.0f) || a->loss_scale_window > (float)INT_MAX / 2 ||
        a->loss_scale_window != floorf(a->loss_scale_window))
        return fail(err, errlen, "--loss-scale-window must be a positive whole number of "
                    "iterations");
    if (a->hysteresis <= 0) return fail(err, errlen, "--hysteresis must be positive");
    /* Megatron: an overflow is the dynamic scaler's signal, not an error */
    a->check_for_nan_in_loss_and_grad = 0;
    return 0;
}

/* --bf16 and --fp16 (Megatron's validate_args: not both; bf16 forces
 * accumulate_allreduce_grads_in_fp32, fp16 does not, and fp16 with dynamic loss scaling turns
 * check_for_nan_in_loss_and_grad off). Mixed precision runs in one process so far: every
 * parallel layout is refused by name rather than trained with an untested precision path. */
static int validate_precision(megadlm_args *a, char *err, size_t errlen) {
    if (a->bf16 && a->fp16)
        return fail(err, errlen, "--fp16 and --bf16 exclude each other (one parameter type)");
    if (validate_loss_scale(a, err, errlen)) return -1;
    if (!a->bf16 && !a->fp16) return 0;
    /* Megatron: "bfloat16 requires gradient accumulation and all-reduce to be performed in
     * fp32" */
    if (a->bf16) a->accumulate_allreduce_grads_in_fp32 = 1;
    /* --bf16 and --fp16 take TP, SP, PP and DP; --bf16 also the distributed optimizer (which
     * shards the fp32 main parameters: Megatron's 6 + 12/DP bytes per parameter); --fp16's
     * loss scaler has not been tested with it yet. */
    if (a->fp16 && a->use_distributed_optimizer)
        return fail(err, errlen, "--fp16 with --use-distributed-optimizer: not supported yet");
    return 0;
}

/* MegaDLMs' launch lines: the precision-aware optimizer's dtypes, the distributed optimizer's
 * instances and the rerun mode (Megatron's choices; the ones megadlm does not compute are
 * refused by name rather than accepted and ignored). */
static int validate_launch_extras(megadlm_args *a, char *err, size_t errlen) {
#define ARGS_DTYPE(field, flag, ...) {flag, #field, offsetof(megadlm_args, field), {__VA_ARGS__}}
    static const struct {
        const char *flag, *field;
        size_t off;
        const char *const later[4]; /* Megatron's other choices */
    } DTYPES[] = {
        ARGS_DTYPE(main_params_dtype, "--main-params-dtype", "fp16", NULL),
        ARGS_DTYPE(main_grads_dtype, "--main-grads-dtype", "bf16", NULL),
        ARGS_DTYPE(exp_avg_dtype, "--exp-avg-dtype", "fp16", "fp8", NULL),
        ARGS_DTYPE(exp_avg_sq_dtype, "--exp-avg-sq-dtype", "fp16", "fp8", NULL),
    };
#undef ARGS_DTYPE
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++) {
        const char *v = (const char *)a + DTYPES[i].off;
        if (args_choice_of(DTYPES[i].field, v) != ARGS_CHOICE_NONE) continue; /* fp32 */
        if (one_of(v, DTYPES[i].later))
            return fail(err, errlen, "%s %s: not supported yet (megadlm's optimizer keeps fp32 "
                        "main parameters, gradients and moments: fp32 only)", DTYPES[i].flag, v);
        return fail(err, errlen, "%s '%s': expected fp32", DTYPES[i].flag, v);
    }
    /* Megatron's validate_args: instances need the distributed optimizer and divide DP */
    int n = a->num_distributed_optimizer_instances;
    if (n > 1 && !a->use_distributed_optimizer)
        return fail(err, errlen, "--num-distributed-optimizer-instances %d needs "
                    "--use-distributed-optimizer", n);
    if (n > 1 && a->data_parallel_size % n != 0)
        return fail(err, errlen, "--num-distributed-optimizer-instances %d does not divide the "
                    "data-parallel size %d", n, a->data_parallel_size);
    if (!IS_CHOICE(a, rerun_mode))
        return fail(err, errlen, "--rerun-mode '%s': expected disabled, validate_results or "
                    "report_stats", a->rerun_mode);
    if (a->check_for_spiky_loss && ARGS_CHOICE(a, rerun_mode) != ARGS_RERUN_VALIDATE_RESULTS)
        return fail(err, errlen, "--check-for-spiky-loss needs --rerun-mode validate_results "
                    "(Megatron validates results only in that mode)");
    return 0;
}

/* The arguments of an fp32 run: --bf16, --fp16 and the loss scaler's flags back to their
 * defaults. */
void args_fp32(megadlm_args *a) {
    megadlm_args d;
    args_defaults(&d);
    a->bf16 = d.bf16;
    a->fp16 = d.fp16;
    a->loss_scale = d.loss_scale;
    a->initial_loss_scale = d.initial_loss_scale;
    a->min_loss_scale = d.min_loss_scale;
    a->loss_scale_window = d.loss_scale_window;
    a->hysteresis = d.hysteresis;
}

void args_one_process(megadlm_args *a) {
    a->tensor_model_parallel_size = 1;
    a->pipeline_model_parallel_size = 1;
    a->virtual_pipeline_model_parallel_size = 0;
    a->context_parallel_size = 1;
    a->sequence_parallel = 0;
    a->tp_comm_overlap = 0;
    a->distribute_saved_activations = 0;
    a->expert_model_parallel_size = 1;
}

args_validity args_validate_kind(megadlm_args *a, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    /* in this order: a layout that cannot split the model gets the same message whatever the
     * world size */
    if (validate_required(a, err, errlen) || validate_shape(a, err, errlen) ||
        validate_fsdp(a, err, errlen) || /* before the rules of the distributed optimizer */
        validate_parallel(a, err, errlen) || /* tensor, sequence, pipeline: not the world yet */
        validate_embeddings(a, err, errlen) || validate_data(a, err, errlen) ||
        validate_sft(a, err, errlen))
        return ARGS_INVALID;
    int vocab = validate_vocab(a, err, errlen); /* the one that tells its failures apart */
    if (vocab != 0) return vocab == ARGS_INVALID_TOKENIZER_FILE ? vocab : ARGS_INVALID;
    if (validate_difflm(a, err, errlen) || validate_recompute(a, err, errlen) ||
        args_validate_moe(a, err, errlen) || /* after the recompute flags are folded */
        validate_world(a, err, errlen) || validate_expert_world(a, err, errlen) ||
        validate_precision(a, err, errlen) ||
        validate_batch(a, err, errlen) || validate_optimizer(a, err, errlen) ||
        validate_logging(a, err, errlen) || validate_launch_extras(a, err, errlen) ||
        validate_checkpointing(a, err, errlen))
        return ARGS_INVALID;
    return args_check_sizes(a, err, errlen) ? ARGS_INVALID : ARGS_VALID;
}

int args_validate(megadlm_args *a, char *err, size_t errlen) {
    return args_validate_kind(a, err, errlen) == ARGS_VALID ? 0 : -1;
}

/* Sizes whose products the model takes as int (a tensor's rows or width): at most INT_MAX. */
static int check_int_product(long long x, const char *what, char *err, size_t errlen) {
    if (x <= INT_MAX) return 0;
    return fail(err, errlen, "%s is %lld: at most %d is supported", what, x, INT_MAX);
}

/* With --num-experts: the experts' MLP widths and their packed rows, and the routed token
 * rows (B x T x topk), as int; the experts' parameters (at most every layer an MoE layer)
 * added to *params. */
static int check_moe_sizes(const megadlm_args *a, double *params, char *err, size_t errlen) {
    if (a->num_experts <= 0) return 0;
    long long E = a->num_experts, h = a->hidden_size, mult = a->swiglu ? 2 : 1;
    long long Fm = (a->moe_ffn_hidden_size > 0 ? a->moe_ffn_hidden_size : a->ffn_hidden_size) *
                   mult;
    long long Fs = (long long)a->moe_shared_expert_intermediate_size * mult;
    long long rows = (long long)a->micro_batch_size * a->seq_length * a->moe_router_topk;
    const char *sw = a->swiglu ? " x 2, SwiGLU" : "";
    char what[200];
    snprintf(what, sizeof what, "--num-experts %lld x the expert MLP width "
             "(--moe-ffn-hidden-size%s)", E, sw);
    if (check_int_product(E * Fm, what, err, errlen)) return -1;
    snprintf(what, sizeof what, "the shared expert's MLP width "
             "(--moe-shared-expert-intermediate-size%s)", sw);
    if (check_int_product(Fs, what, err, errlen)) return -1;
    snprintf(what, sizeof what, "--micro-batch-size x --seq-length x --moe-router-topk %d (the "
             "routed token rows)", a->moe_router_topk);
    if (check_int_product(rows, what, err, errlen)) return -1;
    *params += (double)a->num_layers * (1.5 * E * h * Fm + 1.5 * h * Fs + (double)h * E);
    return 0;
}

int args_check_sizes(const megadlm_args *a, char *err, size_t errlen) {
    const struct {
        const char *flag;
        int value;
    } sizes[] = {{"--num-layers", a->num_layers},
                 {"--hidden-size", a->hidden_size},
                 {"--ffn-hidden-size", a->ffn_hidden_size},
                 {"--num-attention-heads", a->num_attention_heads},
                 {"--kv-channels", a->kv_channels},
                 {"--num-query-groups", a->num_query_groups},
                 {"--max-position-embeddings", a->max_position_embeddings},
                 {"--seq-length", a->seq_length},
                 {"--micro-batch-size", a->micro_batch_size},
                 {"the padded vocabulary", a->padded_vocab_size}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value <= 0)
            return fail(err, errlen, "%s is %d: expected a positive size", sizes[i].flag,
                        sizes[i].value);
    char what[160];
    long long B = a->micro_batch_size, T = a->seq_length, h = a->hidden_size;
    long long heads = a->num_attention_heads, d = a->kv_channels, g = a->num_query_groups;
    long long F = a->ffn_hidden_size * (a->swiglu ? 2LL : 1LL), V = a->padded_vocab_size;
    snprintf(what, sizeof what, "--micro-batch-size %lld x --seq-length %lld (tokens per "
             "micro-batch)", B, T);
    if (check_int_product(B * T, what, err, errlen)) return -1;
    snprintf(what, sizeof what, "(--num-attention-heads %lld + 2 x %lld query groups) x "
             "--kv-channels %lld (the QKV width)", heads, g, d);
    if (check_int_product((heads + 2 * g) * d, what, err, errlen)) return -1;
    snprintf(what, sizeof what, "the MLP width (--ffn-hidden-size%s)", a->swiglu ? " x 2, SwiGLU" : "");
    if (check_int_product(F, what, err, errlen)) return -1;
    /* whole-model totals in double (exact enough, never overflowing): parameters with their
     * gradients and two moments, and the largest activations of one micro-batch */
    double layer = (double)h * (heads + 2 * g) * d + (double)heads * d * h + 1.5 * h * F;
    double params = (double)a->num_layers * layer + (double)V * h * 2 +
                    (double)a->max_position_embeddings * h;
    double acts = (double)B * T * ((double)V + (double)heads * T + (double)a->num_layers * 16 * h);
    if (check_moe_sizes(a, &params, err, errlen)) return -1;
    const double limit = 1152921504606846976.0; /* 2^60 bytes: beyond any machine */
    if (params * 16 > limit || acts * 4 > limit)
        return fail(err, errlen,
                    "the model (--num-layers %d, --hidden-size %lld, --ffn-hidden-size %d, "
                    "vocabulary %lld, --micro-batch-size %lld, --seq-length %lld) needs about "
                    "%.3g bytes for %.3g parameters and %.3g bytes of activations: more than "
                    "any machine holds (2^60 bytes)",
                    a->num_layers, h, a->ffn_hidden_size, V, B, T, params * 16, params, acts * 4);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* fields: args_print and JSON                                                                 */

enum field_type { T_INT, T_BOOL, T_FLOAT, T_U64, T_STR };

typedef struct {
    const char *name;
    int type;
    int none; /* Megatron's None for an unset value: an int 0, a negative float */
    size_t off;
    size_t size;
} field_def;

static const field_def FIELDS[] = {
#define FIELD_DEF(field, type) {#field, ARGS_JSON(type), ARGS_NONE(type), OFF(field), SZ(field)},
#define ARG_FLAG(field, type, ...) FIELD_DEF(field, type)
#define ARG_FIELD(field, type, ...) FIELD_DEF(field, type)
#include "training/arguments.def"
};
#define NUM_FIELDS ((int)(sizeof(FIELDS) / sizeof(FIELDS[0])))

const char *const args_model_flags[] = {
#define ARG_FLAG(field, type, deflt, check, ...) ARGS_IF_##check(#field,)
#define ARG_FIELD(field, type, deflt, check, ...) ARGS_IF_##check(#field,)
#include "training/arguments.def"
    NULL};

static void format_field(const megadlm_args *a, const field_def *f, char *buf, size_t n) {
    const void *p = cfield_ptr(a, f->off);
    switch (f->type) {
    case T_INT:
        if ((f->none == 1 && *(const int *)p == 0) || (f->none == 2 && *(const int *)p < 0))
            snprintf(buf, n, "None");
        else
            snprintf(buf, n, "%d", *(const int *)p);
        break;
    case T_BOOL: snprintf(buf, n, "%s", *(const int *)p ? "True" : "False"); break;
    case T_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case T_FLOAT:
        if (f->none && *(const float *)p < 0)
            snprintf(buf, n, "None");
        else
            fmt_float(buf, n, *(const float *)p);
        break;
    case T_STR: {
        const char *s = (const char *)p;
        snprintf(buf, n, "%s", s[0] ? s : "None");
        break;
    }
    }
}

static int cmp_lines(const void *x, const void *y) {
    return strcasecmp(*(char *const *)x, *(char *const *)y);
}

void args_print(const megadlm_args *a, FILE *out) {
    char *lines[NUM_FIELDS + 1];
    int n = 0;
    for (int i = 0; i < NUM_FIELDS; i++) {
        char val[4200]; /* the longest field (--moe-layer-freq's STR4096) whole */
        format_field(a, &FIELDS[i], val, sizeof(val));
        int dots = 48 - (int)strlen(FIELDS[i].name);
        if (dots < 1) dots = 1;
        size_t len = strlen(FIELDS[i].name) + (size_t)dots + strlen(val) + 8;
        char *l = malloc(len);
        if (!l) continue;
        snprintf(l, len, "  %s %.*s %s", FIELDS[i].name, dots,
                 "................................................", val);
        lines[n++] = l;
    }
    /* data_path, as Megatron prints its list: ['0.3', 'P1', '0.7', 'P2'] or None */
    {
        size_t cap = 64;
        for (int i = 0; i < a->num_data_paths; i++)
            cap += strlen(a->data_paths[i] ? a->data_paths[i] : "") + 40;
        char *l = malloc(cap);
        if (l) {
            size_t k = (size_t)snprintf(l, cap, "  data_path %.*s ", 48 - 9,
                                        "................................................");
            if (a->num_data_paths == 0) {
                snprintf(l + k, cap - k, "None");
            } else {
                k += (size_t)snprintf(l + k, cap - k, "[");
                for (int i = 0; i < a->num_data_paths; i++) {
                    if (a->data_weighted) {
                        char w[40];
                        fmt_double(w, sizeof(w), a->data_weights[i]);
                        k += (size_t)snprintf(l + k, cap - k, "%s'%s', ", i ? ", " : "", w);
                    } else if (i) {
                        k += (size_t)snprintf(l + k, cap - k, ", ");
                    }
                    k += (size_t)snprintf(l + k, cap - k, "'%s'",
                                          a->data_paths[i] ? a->data_paths[i] : "");
                }
                snprintf(l + k, cap - k, "]");
            }
            lines[n++] = l;
        }
    }
    qsort(lines, (size_t)n, sizeof(lines[0]), cmp_lines);
    fprintf(out, "------------------------ arguments ------------------------\n");
    for (int i = 0; i < n; i++) {
        fprintf(out, "%s\n", lines[i]);
        free(lines[i]);
    }
    fprintf(out, "-------------------- end of arguments ---------------------\n");
}

/* Floats go to JSON as the shortest decimal that reads back as the same float ("0.1", not
 * 0.10000000149011612); NaN (an unset --lr) as null. */
static cJSON *float_json(float x) {
    if (isnan(x)) return cJSON_CreateNull();
    char b[48];
    int p;
    for (p = 1; p <= 9; p++) {
        snprintf(b, sizeof(b), "%.*g", p, (double)x);
        if ((float)strtod(b, NULL) == x) break;
    }
    if (p > 9) return cJSON_CreateNumber((double)x);
    return cJSON_CreateNumber(strtod(b, NULL));
}

cJSON *args_to_json(const megadlm_args *a) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    for (int i = 0; i < NUM_FIELDS; i++) {
        const field_def *f = &FIELDS[i];
        const void *p = cfield_ptr(a, f->off);
        cJSON *v = NULL;
        switch (f->type) {
        case T_INT: v = cJSON_CreateNumber(*(const int *)p); break;
        case T_BOOL: v = cJSON_CreateBool(*(const int *)p != 0); break;
        case T_FLOAT: v = float_json(*(const float *)p); break;
        case T_U64: {
            uint64_t u = *(const uint64_t *)p;
            if (u <= (1ULL << 53)) {
                v = cJSON_CreateNumber((double)u);
            } else {
                char b[32];
                snprintf(b, sizeof(b), "%llu", (unsigned long long)u);
                v = cJSON_CreateString(b);
            }
            break;
        }
        case T_STR: v = cJSON_CreateString((const char *)p); break;
        }
        if (!v) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, f->name, v);
    }
    cJSON *paths = cJSON_CreateArray();
    cJSON *weights = cJSON_CreateArray();
    if (!paths || !weights) {
        cJSON_Delete(paths);
        cJSON_Delete(weights);
        cJSON_Delete(o);
        return NULL;
    }
    for (int i = 0; i < a->num_data_paths && i < ARGS_MAX_DATA_PATHS; i++) {
        cJSON_AddItemToArray(paths, cJSON_CreateString(a->data_paths[i] ? a->data_paths[i] : ""));
        cJSON_AddItemToArray(weights, cJSON_CreateNumber(a->data_weights[i]));
    }
    cJSON_AddItemToObject(o, "num_data_paths", cJSON_CreateNumber(a->num_data_paths));
    cJSON_AddItemToObject(o, "data_path", paths);
    cJSON_AddItemToObject(o, "data_weights", weights);
    cJSON_AddItemToObject(o, "data_weighted", cJSON_CreateBool(a->data_weighted != 0));
    return o;
}

static int json_int(const cJSON *v, const char *name, int *out, char *err, size_t errlen) {
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v) ? 1 : 0;
        return 0;
    }
    if (!cJSON_IsNumber(v))
        return fail(err, errlen, "arguments JSON: '%s' is not a number", name);
    double d = v->valuedouble;
    if (!(d == floor(d)) || d < INT_MIN || d > INT_MAX)
        return fail(err, errlen, "arguments JSON: '%s' is not an integer", name);
    *out = (int)d;
    return 0;
}

int args_from_json(megadlm_args *a, const cJSON *obj, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (!cJSON_IsObject(obj)) return fail(err, errlen, "arguments JSON: not an object");
    /* Parse into a copy so that an error leaves *a untouched (data paths are shared until the
     * end: the copy never frees them). */
    megadlm_args t = *a;
    for (int i = 0; i < NUM_FIELDS; i++) {
        const field_def *f = &FIELDS[i];
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, f->name);
        if (!v) continue;
        void *p = field_ptr(&t, f->off);
        switch (f->type) {
        case T_INT:
        case T_BOOL:
            if (json_int(v, f->name, (int *)p, err, errlen)) return -1;
            if (f->type == T_BOOL) *(int *)p = *(int *)p != 0;
            break;
        case T_FLOAT:
            if (cJSON_IsNull(v)) {
                *(float *)p = NAN;
            } else if (cJSON_IsNumber(v)) {
                if (!isfinite(v->valuedouble) || fabs(v->valuedouble) > FLT_MAX)
                    return fail(err, errlen, "arguments JSON: '%s' is out of range", f->name);
                *(float *)p = (float)v->valuedouble;
            } else {
                return fail(err, errlen, "arguments JSON: '%s' is not a number", f->name);
            }
            break;
        case T_U64:
            if (cJSON_IsString(v)) {
                if (parse_u64(v->valuestring, (uint64_t *)p))
                    return fail(err, errlen, "arguments JSON: '%s' is not an unsigned integer",
                                f->name);
            } else if (cJSON_IsNumber(v)) {
                double d = v->valuedouble;
                if (!(d >= 0 && d == floor(d) && d <= 18446744073709551615.0))
                    return fail(err, errlen, "arguments JSON: '%s' is not an unsigned integer",
                                f->name);
                *(uint64_t *)p = (uint64_t)d;
            } else {
                return fail(err, errlen, "arguments JSON: '%s' is not a number", f->name);
            }
            break;
        case T_STR:
            if (!cJSON_IsString(v))
                return fail(err, errlen, "arguments JSON: '%s' is not a string", f->name);
            if (strlen(v->valuestring) >= f->size)
                return fail(err, errlen, "arguments JSON: '%s' is longer than %zu characters",
                            f->name, f->size - 1);
            snprintf((char *)p, f->size, "%s", v->valuestring);
            break;
        }
    }

    /* data paths */
    const cJSON *paths = cJSON_GetObjectItemCaseSensitive(obj, "data_path");
    const cJSON *weights = cJSON_GetObjectItemCaseSensitive(obj, "data_weights");
    const cJSON *weighted = cJSON_GetObjectItemCaseSensitive(obj, "data_weighted");
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(obj, "num_data_paths");
    char *newp[ARGS_MAX_DATA_PATHS];
    double neww[ARGS_MAX_DATA_PATHS];
    int n = -1, nw = 0;
    if (paths && !cJSON_IsNull(paths)) {
        if (!cJSON_IsArray(paths))
            return fail(err, errlen, "arguments JSON: 'data_path' is not an array");
        n = cJSON_GetArraySize(paths);
        if (n > ARGS_MAX_DATA_PATHS)
            return fail(err, errlen, "arguments JSON: 'data_path' has more than %d entries",
                        ARGS_MAX_DATA_PATHS);
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, paths) {
            if (!cJSON_IsString(e))
                return fail(err, errlen, "arguments JSON: 'data_path' entries must be strings");
            i++;
        }
        (void)i;
    } else if (paths) {
        n = 0;
    }
    if (count) {
        int c;
        if (json_int(count, "num_data_paths", &c, err, errlen)) return -1;
        if (n >= 0 && c != n)
            return fail(err, errlen,
                        "arguments JSON: 'num_data_paths' is %d but 'data_path' has %d entries", c,
                        n);
        if (n < 0 && c != a->num_data_paths)
            return fail(err, errlen, "arguments JSON: 'num_data_paths' without 'data_path'");
    }
    if (weights && !cJSON_IsNull(weights)) {
        if (!cJSON_IsArray(weights))
            return fail(err, errlen, "arguments JSON: 'data_weights' is not an array");
        nw = cJSON_GetArraySize(weights);
        int ncmp = n >= 0 ? n : a->num_data_paths;
        if (nw != ncmp)
            return fail(err, errlen,
                        "arguments JSON: 'data_weights' has %d entries for %d data paths", nw,
                        ncmp);
        const cJSON *e;
        int i = 0;
        cJSON_ArrayForEach(e, weights) {
            if (!cJSON_IsNumber(e))
                return fail(err, errlen, "arguments JSON: 'data_weights' entries must be numbers");
            neww[i++] = e->valuedouble;
        }
    }
    int wflag = t.data_weighted;
    if (weighted && json_int(weighted, "data_weighted", &wflag, err, errlen)) return -1;

    /* commit */
    if (n >= 0) {
        int i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, paths) {
            newp[i] = strdup(e->valuestring);
            if (!newp[i]) {
                for (int j = 0; j < i; j++) free(newp[j]);
                return fail(err, errlen, "arguments JSON: out of memory");
            }
            i++;
        }
        /* t shares a's path pointers: free them once, through a */
        clear_data_paths(a);
        for (int j = 0; j < ARGS_MAX_DATA_PATHS; j++) t.data_paths[j] = NULL;
        for (int j = 0; j < n; j++) {
            t.data_paths[j] = newp[j];
            t.data_weights[j] = 1.0;
        }
        t.num_data_paths = n;
    }
    if (weights && !cJSON_IsNull(weights))
        for (int j = 0; j < nw; j++) t.data_weights[j] = neww[j];
    t.data_weighted = wflag != 0;
    *a = t;
    return 0;
}
