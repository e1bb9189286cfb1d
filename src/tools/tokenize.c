/* `megadlm tokenize`: text -> token ids, or ids -> text with --decode, one line at a time.
 *
 *   megadlm tokenize --tokenizer-type TYPE [--vocab-file F --merge-file F | --tokenizer-model F
 *                    | --vocab-size V] [--decode] [--append-eod] < input
 *
 * Encoding: every input line (without its '\n') is encoded on its own and printed as its ids,
 * space-separated, one output line per input line (an empty line gives an empty line).
 * --append-eod adds the end-of-document id to every line. Decoding: every line of
 * whitespace-separated ids is printed as text followed by '\n' (end-of-document ids are
 * dropped). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/tools.h"
#include "training/tokenizer/tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: megadlm tokenize --tokenizer-type TYPE [tokenizer files] [--decode] "
            "[--append-eod] < input\n\n"
            "Encodes stdin line by line and prints the token ids of each line, space-separated\n"
            "(one output line per input line); --decode reads lines of ids and prints text.\n\n"
            "  --tokenizer-type TYPE   ByteLevel, NullTokenizer, GPT2BPETokenizer or\n"
            "                          HuggingFaceTokenizer (required)\n"
            "  --vocab-file FILE       GPT2BPETokenizer: vocab.json (encoder.json)\n"
            "  --merge-file FILE       GPT2BPETokenizer: merges.txt (vocab.bpe)\n"
            "  --tokenizer-model FILE  HuggingFaceTokenizer: tokenizer.json\n"
            "  --vocab-size V          NullTokenizer: ids are < V, end-of-document is V\n"
            "  --decode                ids -> text\n"
            "  --append-eod            append the end-of-document id to every encoded line\n"
            "  --help                  print this help\n");
}

int tokenize_main(int argc, char **argv) {
    tokenizer_options o = {0};
    int decode = 0, append_eod = 0;
    static const struct option opts[] = {
        TOKENIZER_LONG_OPTIONS,          {"decode", no_argument, 0, 'd'},
        {"append-eod", no_argument, 0, 'e'}, {"help", no_argument, 0, 'h'},
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
    int vocab = tokenizer_vocab_size(tok), rc = 0;
    char *line = NULL, *obuf = NULL;
    size_t lcap = 0, ocap = 0, lineno = 0;
    int32_t *ids = NULL;
    size_t icap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, stdin)) >= 0) {
        size_t len = (size_t)got;
        lineno++;
        if (len && line[len - 1] == '\n') len--;
        if (!decode) {
            int32_t *out;
            size_t n;
            if (tokenizer_encode(tok, line, len, &out, &n, err, sizeof err) != 0) {
                fprintf(stderr, "error: stdin:%zu: %s\n", lineno, err);
                rc = 1;
                break;
            }
            if (append_eod) {
                int32_t *q = realloc(out, (n + 1) * sizeof *q);
                if (!q) {
                    free(out);
                    fprintf(stderr, "error: out of memory\n");
                    rc = 1;
                    break;
                }
                out = q;
                out[n++] = tokenizer_eod(tok);
            }
            if (ocap < n * 12 + 2) {
                ocap = n * 12 + 2;
                char *nb = realloc(obuf, ocap);
                if (!nb) {
                    free(out);
                    fprintf(stderr, "error: out of memory\n");
                    rc = 1;
                    break;
                }
                obuf = nb;
            }
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                k += (size_t)sprintf(obuf + k, i ? " %d" : "%d", (int)out[i]);
            obuf[k++] = '\n';
            fwrite(obuf, 1, k, stdout);
            free(out);
            continue;
        }
        /* --decode */
        size_t n = 0;
        line[len] = 0;
        for (char *p = line;;) {
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
                rc = 1;
                break;
            }
            if (n == icap) {
                icap = icap ? icap * 2 : 256;
                int32_t *q = realloc(ids, icap * sizeof *q);
                if (!q) {
                    fprintf(stderr, "error: out of memory\n");
                    rc = 1;
                    break;
                }
                ids = q;
            }
            ids[n++] = (int32_t)v;
            p = end;
        }
        if (rc) break;
        size_t tl;
        char *text = tokenizer_decode_len(tok, ids, n, &tl);
        if (!text) {
            fprintf(stderr, "error: out of memory\n");
            rc = 1;
            break;
        }
        fwrite(text, 1, tl, stdout);
        fputc('\n', stdout);
        free(text);
    }
    free(line);
    free(obuf);
    free(ids);
    tokenizer_free(tok);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "error: writing stdout: %s\n", strerror(errno));
        rc = 1;
    }
    return rc;
}
