/* `megadlm tokenize`: text -> token ids, or ids -> text with --decode, one line at a time.
 *
 *   megadlm tokenize --tokenizer-type TYPE [--vocab-file F --merge-file F | --tokenizer-model F
 *                    | --vocab-size V] [--decode] [--append-eod] < input
 *
 * Encoding: every input line (without its '\n') is encoded on its own and printed as its ids,
 * space-separated, one output line per input line (an empty line gives an empty line).
 * --append-eod adds the end-of-document id to every line. Decoding: every line of
 * whitespace-separated ids is printed as text followed by '\n' (end-of-document ids are
 * dropped). --special-ids prints the tokenizer's vocabulary size and special ids instead. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/alloc.h"
#include "core/util/die.h"
#include "tools/tools.h"
#include "training/tokenizer/tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: megadlm tokenize --tokenizer-type TYPE [tokenizer files] [--decode] "
            "[--append-eod] < input\n\n"
            "Encodes stdin line by line and prints the token ids of each line, space-separated\n"
            "(one output line per input line); --decode reads lines of ids and prints text.\n\n"
            TOKENIZER_OPTIONS_HELP
            "                          (--tokenizer-type is required; each type needs the\n"
            "                          flags named for it)\n"
            "  --decode                ids -> text\n"
            "  --append-eod            append the end-of-document id to every encoded line\n"
            "  --special-ids           print 'vocab V eod E bos B pad P mask M' (-1: none; bos,\n"
            "                          pad, mask: a HuggingFaceTokenizer directory's) and exit\n"
            "  --help                  print this help\n");
}

/* The buffers the lines go through, grown as needed. */
typedef struct {
    char *line, *text; /* the input line; the encoded line's text */
    size_t line_cap, text_cap;
    int32_t *ids; /* the decoded line's ids */
    size_t ids_cap;
} line_io;

/* Prints the ids of the line (len bytes), space-separated. 0, or 1 after the message. */
static int encode_line(const tokenizer *tok, line_io *io, size_t len, size_t lineno,
                       int append_eod) {
    int32_t *out;
    size_t n;
    char err[1024];
    if (tokenizer_encode(tok, io->line, len, &out, &n, err, sizeof err) != 0) {
        fprintf(stderr, "error: stdin:%zu: %s\n", lineno, err);
        return 1;
    }
    if (append_eod) {
        out = xrealloc(out, (n + 1) * sizeof *out, "the encoded line");
        out[n++] = tokenizer_eod(tok);
    }
    if (io->text_cap < n * 12 + 2) {
        io->text_cap = n * 12 + 2;
        io->text = xrealloc(io->text, io->text_cap, "the output line");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)sprintf(io->text + k, i ? " %d" : "%d", (int)out[i]);
    io->text[k++] = '\n';
    fwrite(io->text, 1, k, stdout);
    free(out);
    return 0;
}

/* Prints the text of the line's ids (NUL-terminated line). 0, or 1 after the message. */
static int decode_line(const tokenizer *tok, line_io *io, size_t lineno) {
    const int vocab = tokenizer_vocab_size(tok);
    size_t n = 0;
    for (char *p = io->line;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\r') ||
            v < 0 || v >= vocab) {
            int w = (int)strcspn(p, " \t\r");
            fprintf(stderr, "error: stdin:%zu: '%.*s' is not a token id in [0, %d)\n", lineno,
                    w > 40 ? 40 : w, p, vocab);
            return 1;
        }
        if (n == io->ids_cap) {
            io->ids_cap = io->ids_cap ? io->ids_cap * 2 : 256;
            io->ids = xrealloc(io->ids, io->ids_cap * sizeof *io->ids, "the decoded ids");
        }
        io->ids[n++] = (int32_t)v;
        p = end;
    }
    size_t tl;
    char *text = tokenizer_decode_len(tok, io->ids, n, &tl);
    if (!text) die(1, "out of memory decoding a line");
    fwrite(text, 1, tl, stdout);
    fputc('\n', stdout);
    free(text);
    return 0;
}

int tokenize_main(int argc, char **argv) {
    tokenizer_options o = {0};
    int decode = 0, append_eod = 0, special_ids = 0;
    static const struct option opts[] = {
        TOKENIZER_LONG_OPTIONS,          {"decode", no_argument, 0, 'd'},
        {"append-eod", no_argument, 0, 'e'}, {"special-ids", no_argument, 0, 's'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int c;
    char err[1024];
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        int tflag = tokenizer_option(&o, c, optarg, err, sizeof err);
        if (tflag < 0) {
            fprintf(stderr, "error: %s\n", err);
            return 1;
        }
        if (tflag) continue;
        switch (c) {
        case 'd': decode = 1; break;
        case 'e': append_eod = 1; break;
        case 's': special_ids = 1; break;
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "error: %s: missing value (see megadlm tokenize --help)\n",
                    argv[optind - 1]);
            return 1;
        default:
            fprintf(stderr, "error: unknown option '%s' (see megadlm tokenize --help)\n",
                    argv[optind - 1]);
            return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "error: unexpected argument '%s' (the text comes on stdin)\n",
                argv[optind]);
        return 1;
    }
    if (!o.type) {
        fprintf(stderr, "error: --tokenizer-type: missing (see megadlm tokenize --help)\n");
        return 1;
    }
    if (decode && append_eod) {
        fprintf(stderr, "error: --append-eod is for encoding, not with --decode\n");
        return 1;
    }
    tokenizer *tok = tokenizer_create_opts(&o, err, sizeof err);
    if (!tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    if (special_ids) {
        printf("vocab %d eod %d bos %d pad %d mask %d\n", tokenizer_vocab_size(tok),
               tokenizer_eod(tok), tokenizer_bos(tok), tokenizer_pad(tok), tokenizer_mask(tok));
        tokenizer_free(tok);
        return 0;
    }
    line_io io = {0};
    int rc = 0;
    size_t lineno = 0;
    ssize_t got;
    while (rc == 0 && (got = getline(&io.line, &io.line_cap, stdin)) >= 0) {
        size_t len = (size_t)got;
        lineno++;
        if (len && io.line[len - 1] == '\n') len--;
        io.line[len] = 0;
        rc = decode ? decode_line(tok, &io, lineno) : encode_line(tok, &io, len, lineno, append_eod);
    }
    free(io.line);
    free(io.text);
    free(io.ids);
    tokenizer_free(tok);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "error: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}
