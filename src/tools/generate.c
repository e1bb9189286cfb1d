/* `megadlm generate`: sample from an autoregressive checkpoint, Megatron's text-generation
 * semantics: logits / temperature, then top-k or top-p (nucleus) filtering (not both), then a
 * draw from the softmax. The model is rebuilt from the arguments saved in the checkpoint. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/kernels/gemm.h"
#include "core/models/gpt_model.h"
#include "core/parallel_state.h"
#include "core/random/philox.h"
#include "core/util/alloc.h"
#include "core/util/parse.h"
#include "tools/diffusion_sampling.h"
#include "tools/checkpoint_model.h"
#include "tools/text_generation.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/checkpoint_files.h"
#include "training/tokenizer/tokenizer.h"

typedef struct {
    const char *load;
    const char *prompt;
    const char *input_file; /* one prompt per line; NULL: --prompt */
    int max_batch;          /* --inference-max-batch-size */
    int max_new_tokens;
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    tokenizer_options files; /* the file flags only: override the checkpoint's */
    /* masked-diffusion models (LLaDA's sampler, tools/diffusion_sampling.h) */
    int gen_length, steps, block_length;
    dlm_remasking remasking;
    int full_logits; /* --difflm-full-logits */
    float threshold, factor; /* Fast-dLLM's parallel unmasking (0: off) */
    dlm_cache cache;        /* --cache; for autoregressive models prefix = the KV cache */
    int bf16;               /* --bf16: the model's GEMMs in bf16, as a --bf16 run's forward */
    /* a flag of one family that was given (for the message when the checkpoint is of the
     * other family), NULL when none was */
    const char *given_ar, *given_dlm;
    int given_temperature;
    int tp_size; /* --tensor-model-parallel-size: the ranks the model is split over */
} generate_args;

static void print_help(FILE *out) {
    fprintf(out,
            "usage: megadlm generate --load DIR [flags]\n\n"
            "  --load DIR            checkpoint directory (its latest iteration)   (required)\n"
            "  --prompt TEXT         text to continue                               (\"\")\n"
            "  --input-file F        prompts, one per line, instead of --prompt; prints one\n"
            "                        JSON line per prompt: {\"context\", \"continuation\"}\n"
            "  --inference-max-batch-size N\n"
            "                        prompts run together (left-padded)             (8)\n"
            "  --cache C             none, prefix or dual (diffusion: Fast-dLLM's caches,\n"
            "                        refreshed at each block; autoregressive: prefix = the\n"
            "                        key/value cache)                               (none)\n"
            "  --seed S              random seed                                    (1234)\n"
            "  --bf16                run the model in bf16 as a --bf16 training run's forward\n"
            "                        does: bf16 weights and GEMM operands, fp32 sums (the\n"
            "                        AMX or AVX512_BF16 units where the CPU has them); off:\n"
            "                        fp32, a 16-bit checkpoint's weights widened exactly (off)\n"
            "  --tensor-model-parallel-size N\n"
            "                        split the model over N ranks as training does (run\n"
            "                        under mpirun -np N; any saved layout loads; every\n"
            "                        rank samples the same tokens, rank 0 prints)   (1)\n"
            "autoregressive checkpoints:\n"
            "  --max-new-tokens N    tokens to sample                               (64)\n"
            "  --temperature T       divide logits by T (> 0)                       (1.0)\n"
            "  --top-k K             sample among the K most likely tokens; 0 = off (0)\n"
            "  --top-p P             nucleus sampling with mass P; 0 = off          (0.0)\n"
            "masked-diffusion checkpoints (difflm-noshift), LLaDA's sampler:\n"
            "  --gen-length N        tokens to generate after the prompt            (128)\n"
            "  --steps N             unmasking rounds, a multiple of the blocks;    (128)\n"
            "                        rounds beyond --gen-length unmask nothing and\n"
            "                        are skipped\n"
            "  --block-length N      tokens per block, generated left to right      (gen-length)\n"
            "  --remasking R         low_confidence, random, topk_margin or entropy\n"
            "                        (the last two Dream's)                         (low_confidence)\n"
            "  --threshold TAU       unmask every position of the block with confidence\n"
            "                        >= TAU (at least one a round) until the block is\n"
            "                        done, instead of --steps' fixed count (Fast-dLLM) (off)\n"
            "  --factor F            Fast-dLLM's factor rule instead                (off)\n"
            "  --temperature T       0 = argmax, > 0 Gumbel noise                   (0)\n"
            "  --top-p P             draw among the most likely tokens holding mass P\n"
            "                        (MegaDLMs' filter; with --temperature > 0)    (0.0)\n"
            "  --difflm-full-logits  logits for every position each round (LLaDA's);\n"
            "                        default: only the block's still-masked positions,\n"
            "                        the same tokens, faster                        (off)\n"
            "  --vocab-file F, --merge-file F, --tokenizer-model F\n"
            "                        tokenizer files instead of the checkpoint's (which are\n"
            "                        stored as absolute paths); they must give the same\n"
            "                        padded vocabulary\n");
}

/* The number flags: each parsed strictly for its own type, each error naming its flag. */
typedef struct {
    int c;           /* the getopt code */
    const char *flag;
    int kind;        /* 'i' an int >= lo, 'f' a finite float, 'u' a 64-bit seed */
    int lo;
    const char *expected; /* what an int below lo is told */
} number_flag;

static const number_flag NUMBER_FLAGS[] = {
    {'n', "--max-new-tokens", 'i', 0, "an integer >= 0"},
    {'k', "--top-k", 'i', 0, "an integer >= 0 (0: off)"},
    {'g', "--gen-length", 'i', 1, "an integer >= 1"},
    {'S', "--steps", 'i', 1, "an integer >= 1"},
    {'b', "--block-length", 'i', 1, "an integer >= 1 (leave the flag out for --gen-length)"},
    {'B', "--inference-max-batch-size", 'i', 1, "an integer >= 1"},
    {'t', "--temperature", 'f', 0, NULL},
    {'P', "--top-p", 'f', 0, NULL},
    {'H', "--threshold", 'f', 0, NULL},
    {'A', "--factor", 'f', 0, NULL},
    {'s', "--seed", 'u', 0, NULL},
    {'T', "--tensor-model-parallel-size", 'i', 1, "an integer >= 1"},
};

/* Stores the value of number flag c in g; -1 after printing the error. */
static int set_number(generate_args *g, int c, const char *word) {
    const number_flag *nf = NULL;
    for (size_t i = 0; i < sizeof NUMBER_FLAGS / sizeof NUMBER_FLAGS[0]; i++)
        if (NUMBER_FLAGS[i].c == c) nf = &NUMBER_FLAGS[i];
    char msg[512];
    int iv = 0;
    float fv = 0.0f;
    parse_status st = PARSE_OK;
    if (nf->kind == 'u') {
        char *end;
        errno = 0;
        unsigned long long u = isdigit((unsigned char)word[0]) ? strtoull(word, &end, 10) : 0;
        if (!isdigit((unsigned char)word[0]) || *end || errno == ERANGE) {
            fprintf(stderr, "error: --seed: expected an integer from 0 to 2^64 - 1, found '%s'\n",
                    word);
            return -1;
        }
        g->seed = u;
        return 0;
    }
    st = nf->kind == 'i' ? parse_int_status(word, nf->lo, &iv) : parse_float_status(word, &fv);
    if (st != PARSE_OK) {
        parse_message(msg, sizeof msg, nf->flag, word, st,
                      nf->kind == 'f' ? "a finite number"
                      : st == PARSE_BELOW ? nf->expected : "an integer",
                      nf->kind == 'f');
        fprintf(stderr, "error: %s\n", msg);
        return -1;
    }
    switch (c) {
    case 'n': g->max_new_tokens = iv, g->given_ar = nf->flag; break;
    case 'k': g->top_k = iv, g->given_ar = nf->flag; break;
    case 'g': g->gen_length = iv, g->given_dlm = nf->flag; break;
    case 'S': g->steps = iv, g->given_dlm = nf->flag; break;
    case 'b': g->block_length = iv, g->given_dlm = nf->flag; break;
    case 'B': g->max_batch = iv; break;
    case 't': g->temperature = fv, g->given_temperature = 1; break;
    case 'P': g->top_p = fv; break;
    case 'H': g->threshold = fv, g->given_dlm = nf->flag; break;
    case 'A': g->factor = fv, g->given_dlm = nf->flag; break;
    case 'T': g->tp_size = iv; break;
    }
    return 0;
}

/* The word flags: a value among fixed names. */
static const char *const REMASKING_NAMES[] = {"low_confidence", "random", "topk_margin",
                                              "entropy"};
static const char *const CACHE_NAMES[] = {"none", "prefix", "dual"};

static int choice_of(const char *flag, const char *word, const char *const *names, int n,
                     const char *expected) {
    for (int i = 0; i < n; i++)
        if (!strcmp(word, names[i])) return i;
    fprintf(stderr, "error: %s '%.60s': expected %s\n", flag, word, expected);
    return -1;
}

/* The rules of single flags; the ones between flags and the checkpoint come later. */
static int check_values(const generate_args *g) {
    const char *bad = NULL;
    char why[200];
    if (g->temperature < 0.0f) {
        bad = "--temperature";
        snprintf(why, sizeof why, "%g: expected a number >= 0", (double)g->temperature);
    } else if (g->top_p < 0.0f || g->top_p > 1.0f) {
        bad = "--top-p";
        snprintf(why, sizeof why, "%g: expected a number from 0 to 1 (0: off)", (double)g->top_p);
    } else if (g->top_k > 0 && g->top_p > 0.0f) {
        bad = "--top-k";
        snprintf(why, sizeof why, "%d and --top-p %g: only one can be set (as in Megatron)",
                 g->top_k, (double)g->top_p);
    } else if (g->threshold < 0.0f || g->threshold > 1.0f) {
        bad = "--threshold";
        snprintf(why, sizeof why, "%g: expected a probability from 0 to 1 (0: off)",
                 (double)g->threshold);
    } else if (g->factor < 0.0f) {
        bad = "--factor";
        snprintf(why, sizeof why, "%g: expected a number > 0 (0: off)", (double)g->factor);
    } else if (g->threshold > 0.0f && g->factor > 0.0f) {
        bad = "--threshold";
        snprintf(why, sizeof why, "and --factor: two rules for how many positions a round "
                                  "unmasks; give one");
    } else if ((g->threshold > 0.0f || g->factor > 0.0f) &&
               g->remasking != DLM_REMASK_LOW_CONFIDENCE) {
        bad = g->threshold > 0.0f ? "--threshold" : "--factor";
        snprintf(why, sizeof why, "compares the predicted token's probability: it needs "
                                  "--remasking low_confidence, not %s",
                 REMASKING_NAMES[g->remasking]);
    } else if (g->input_file && g->prompt) {
        bad = "--input-file";
        snprintf(why, sizeof why, "and --prompt: give the prompts one way");
    }
    if (!bad) return 0;
    fprintf(stderr, "error: %s %s\n", bad, why);
    return -1;
}

/* The flags without a number: 1 when c was one of them, -1 after an error, 0 otherwise. */
static int set_word(generate_args *g, int c, const char *word) {
    int v;
    switch (c) {
    case 'l': g->load = word; return 1;
    case 'p': g->prompt = word; return 1;
    case 'I': g->input_file = word; return 1;
    case 'r':
        v = choice_of("--remasking", word, REMASKING_NAMES, 4,
                      "low_confidence, random, topk_margin or entropy");
        if (v < 0) return -1;
        g->remasking = (dlm_remasking)v, g->given_dlm = "--remasking";
        return 1;
    case 'C':
        v = choice_of("--cache", word, CACHE_NAMES, 3, "none, prefix or dual");
        if (v < 0) return -1;
        g->cache = (dlm_cache)v;
        return 1;
    case 'F': g->full_logits = 1; g->given_dlm = "--difflm-full-logits"; return 1;
    }
    return 0;
}

static int parse(generate_args *g, int argc, char **argv) {
    static const struct option opts[] = {
        {"load", required_argument, 0, 'l'},         {"prompt", required_argument, 0, 'p'},
        {"max-new-tokens", required_argument, 0, 'n'}, {"temperature", required_argument, 0, 't'},
        {"top-k", required_argument, 0, 'k'},        {"top-p", required_argument, 0, 'P'},
        {"seed", required_argument, 0, 's'},         {"help", no_argument, 0, 'h'},
        TOKENIZER_FILE_LONG_OPTIONS,
        {"gen-length", required_argument, 0, 'g'},   {"steps", required_argument, 0, 'S'},
        {"block-length", required_argument, 0, 'b'}, {"remasking", required_argument, 0, 'r'},
        {"difflm-full-logits", no_argument, 0, 'F'}, {"cache", required_argument, 0, 'C'},
        {"threshold", required_argument, 0, 'H'},    {"factor", required_argument, 0, 'A'},
        {"input-file", required_argument, 0, 'I'},
        {"inference-max-batch-size", required_argument, 0, 'B'},
        {"tensor-model-parallel-size", required_argument, 0, 'T'},
        {"bf16", no_argument, 0, 'X'},
        {0, 0, 0, 0}};
    *g = (generate_args){.max_new_tokens = 64, .temperature = 1.0f, .seed = 1234,
                         .gen_length = 128, .steps = 128, .max_batch = 8,
                         .tp_size = 1};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        /* only the file flags are in the table, and they take any string */
        if (tokenizer_option(&g->files, c, optarg, NULL, 0)) continue;
        int w = set_word(g, c, optarg);
        if (w < 0) return -1;
        if (w > 0) continue;
        switch (c) {
        case 'h': print_help(stdout); return 1;
        case 'X': g->bf16 = 1; break;
        case 'n': case 't': case 'k': case 'P': case 's': case 'g': case 'S': case 'b':
        case 'B': case 'H': case 'A': case 'T':
            if (set_number(g, c, optarg) != 0) return -1;
            break;
        case ':': fprintf(stderr, "error: %s: expects a value\n", argv[optind - 1]); return -1;
        default:
            fprintf(stderr, "error: unknown flag '%s' (see megadlm generate --help)\n",
                    argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "error: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!g->load) {
        fprintf(stderr, "error: --load DIR is required\n");
        return -1;
    }
    if (check_values(g) != 0) return -1;
    if (!g->input_file && !g->prompt) g->prompt = "";
    if (g->block_length == 0) g->block_length = g->gen_length; /* not given: one block */
    return 0;
}

/* The flags against the checkpoint's family (autoregressive or masked diffusion); LLaDA's
 * temperature 0 when a diffusion model is sampled without --temperature. 0, or 1 after
 * printing the error. */
static int check_family(generate_args *g, int diffusion) {
    if (diffusion && g->given_ar) {
        fprintf(stderr, "error: %s: --load %s holds a masked-diffusion model; --max-new-tokens "
                        "and --top-k are for autoregressive models (use --gen-length, --steps, "
                        "--block-length, --remasking, --top-p)\n", g->given_ar, g->load);
        return 1;
    }
    if (!diffusion && g->given_dlm) {
        fprintf(stderr, "error: %s: --load %s holds an autoregressive model; --gen-length, "
                        "--steps, --block-length, --remasking, --threshold, --factor and "
                        "--difflm-full-logits are for masked-diffusion models\n",
                g->given_dlm, g->load);
        return 1;
    }
    if (!diffusion && g->cache == DLM_CACHE_DUAL) {
        fprintf(stderr, "error: --cache dual: --load %s holds an autoregressive model, whose "
                        "positions see no later ones: its key/value cache is --cache prefix\n",
                g->load);
        return 1;
    }
    if (!diffusion && g->temperature <= 0.0f) {
        fprintf(stderr, "error: --temperature %g: expected a number > 0 for an autoregressive "
                        "model\n", (double)g->temperature);
        return 1;
    }
    if (diffusion && !g->given_temperature) g->temperature = 0.0f; /* LLaDA's default */
    if (diffusion && g->top_p > 0.0f && g->temperature <= 0.0f) {
        fprintf(stderr, "error: --top-p %g filters a draw: a masked-diffusion model needs "
                        "--temperature > 0 with it (at 0 the argmax is taken)\n",
                (double)g->top_p);
        return 1;
    }
    return 0;
}

/* The prompts: --prompt's one, or --input-file's lines (without their line ends). */
typedef struct {
    char **text;
    int n;
} prompt_list;

static void prompts_free(prompt_list *p) {
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
    memset(p, 0, sizeof *p);
}

static int prompts_read(const generate_args *g, prompt_list *p) {
    memset(p, 0, sizeof *p);
    if (!g->input_file) {
        p->text = xmalloc(sizeof(char *), "the prompts");
        p->text[p->n++] = xstrdup(g->prompt, "the prompt");
        return 0;
    }
    FILE *f = fopen(g->input_file, "r");
    if (!f) {
        fprintf(stderr, "error: --input-file %s: %s\n", g->input_file, strerror(errno));
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        p->text = xrealloc(p->text, (size_t)(p->n + 1) * sizeof(char *), "the prompts");
        p->text[p->n++] = xstrdup(line, "the prompts");
    }
    free(line);
    fclose(f);
    if (p->n == 0) {
        fprintf(stderr, "error: --input-file %s: no prompt (the file is empty)\n",
                g->input_file);
        return 1;
    }
    return 0;
}

/* One JSON string, escaped (RFC 8259). */
static void print_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(out, "\\%c", *c);
        else if (*c == '\n') fputs("\\n", out);
        else if (*c == '\t') fputs("\\t", out);
        else if (*c == '\r') fputs("\\r", out);
        else if (*c < 0x20) fprintf(out, "\\u%04x", *c);
        else fputc(*c, out);
    }
    fputc('"', out);
}

/* What a run prints: the whole text for --prompt (as before), a JSON line per prompt for
 * --input-file. gen: the generated tokens only. */
static void print_sample(const generate_args *g, tokenizer *tok, const char *prompt,
                         const int32_t *all, size_t n_all, const int32_t *gen, size_t n_gen) {
    if (!g->input_file) {
        char *text = tokenizer_decode(tok, all, n_all);
        printf("%s\n", text);
        free(text);
        return;
    }
    /* the continuation is what the generated tokens add to the prompt's text, so that
     * context + continuation is the whole text (the token-id tokenizer puts a space between
     * ids: " 15 16", not "15 16"); the generated tokens' own text where the prompt does not
     * decode back to a prefix */
    char *whole = tokenizer_decode(tok, all, n_all);
    char *head = tokenizer_decode(tok, all, n_all - n_gen);
    size_t h = strlen(head);
    char *text = strncmp(whole, head, h) == 0 ? NULL : tokenizer_decode(tok, gen, n_gen);
    fputs("{\"context\": ", stdout);
    print_json_string(stdout, prompt);
    fputs(", \"continuation\": ", stdout);
    print_json_string(stdout, text ? text : whole + h);
    fputs("}\n", stdout);
    free(text);
    free(head);
    free(whole);
}

/* The run: the checkpoint's model, the tokenizer, the sampler's engine. */
typedef struct {
    const generate_args *g;
    const megadlm_args *a;
    tokenizer *tok;
    inference_engine e;
    int iteration;
    long tokens; /* generated so far (an autoregressive sequence's end of document ends it) */
} generate_run;

/* A batch of prompts (tokenized) through LLaDA's sampler. */
static int diffusion_batch(generate_run *gr, const prompt_list *p, int first, int B,
                           int32_t **ids, const size_t *n, diffusion_stats *stats) {
    const generate_args *g = gr->g;
    size_t P = 0;
    for (int b = 0; b < B; b++) P = n[b] > P ? n[b] : P;
    /* the model saw at most seq_length - 1 tokens (positions 1 .. s-1) in training */
    if ((int)P + g->gen_length > gr->a->seq_length - 1) {
        fprintf(stderr, "error: the prompt (%zu tokens) + --gen-length %d exceed the %d tokens "
                        "the model was trained on (--seq-length - 1)\n",
                P, g->gen_length, gr->a->seq_length - 1);
        return 1;
    }
    const int total = (int)P + g->gen_length;
    int32_t *x = xcalloc((size_t)B * total, sizeof(int32_t), "the prompt and generated tokens");
    int pad[B], id[B];
    for (int b = 0; b < B; b++) {
        pad[b] = (int)(P - n[b]);
        id[b] = first + b;
        for (int i = 0; i < pad[b]; i++) x[(size_t)b * total + i] = tokenizer_eod(gr->tok);
        memcpy(x + (size_t)b * total + pad[b], ids[b], n[b] * sizeof(int32_t));
    }
    diffusion_sampling ds = {.gen_length = g->gen_length, .steps = g->steps,
                             .block_length = g->block_length, .remasking = g->remasking,
                             .temperature = g->temperature, .top_p = g->top_p,
                             .threshold = g->threshold, .factor = g->factor, .cache = g->cache,
                             .seed = g->seed, .mask_token = gr->a->mask_token,
                             .vocab = tokenizer_vocab_size(gr->tok),
                             .full_logits = g->full_logits};
    dlm_batch batch = {.x = x, .B = B, .prompt_len = (int)P, .pad = B > 1 ? pad : NULL,
                       .seq_id = id};
    char err[512];
    long before = stats->full_forwards + stats->row_forwards;
    if (diffusion_generate(&gr->e, &batch, &ds, stats, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        free(x);
        return 1;
    }
    int eos = 0;
    gr->tokens += (long)B * g->gen_length;
    for (int b = 0; b < B; b++) {
        const int32_t *row = x + (size_t)b * total;
        /* the decoded text drops them: counted here (a model fine-tuned on EOS padding fills
         * long generations with them, docs/DATA.md section 6) */
        for (int i = (int)P; i < total; i++) eos += row[i] == tokenizer_eod(gr->tok);
        print_sample(g, gr->tok, p->text[first + b], row + pad[b], total - pad[b], row + P,
                     (size_t)g->gen_length);
    }
    /* the model forwards this batch ran: the steps, past those --steps' schedule skips or a
     * threshold saves */
    long forwards = stats->full_forwards + stats->row_forwards - before;
    char who[64];
    if (B == 1)
        snprintf(who, sizeof who, "a %zu-token prompt", P);
    else
        snprintf(who, sizeof who, "%d prompts of up to %zu tokens", B, P);
    if (parallel_world_rank() == 0) /* every rank ran the same rounds */
        fprintf(stderr, "[diffusion: %d tokens in %d steps (blocks of %d) after %s from %s "
                        "iteration %d; %ld model forwards; %d of them end of document]\n",
                g->gen_length, g->steps, g->block_length, who, g->load, gr->iteration,
                forwards, eos);
    free(x);
    return 0;
}

/* A batch of prompts (tokenized) through Megatron's autoregressive sampler. */
static int autoregressive_batch(generate_run *gr, const prompt_list *p, int first, int B,
                                int32_t **ids, const size_t *n) {
    const generate_args *g = gr->g;
    int32_t *seq[B];
    size_t len[B], plen[B];
    int id[B];
    size_t P = 0;
    for (int b = 0; b < B; b++) {
        seq[b] = xmalloc((n[b] + g->max_new_tokens + 1) * sizeof(int32_t), "the generated tokens");
        len[b] = 0;
        if (n[b] == 0) seq[b][len[b]++] = tokenizer_eod(gr->tok); /* empty: from end-of-document */
        memcpy(seq[b] + len[b], ids[b], n[b] * sizeof(int32_t));
        len[b] += n[b];
        plen[b] = len[b];
        P = len[b] > P ? len[b] : P;
        id[b] = first + b;
    }
    int status = 0;
    if (B > 1 && (int)P + g->max_new_tokens - 1 > gr->a->seq_length) {
        fprintf(stderr, "error: --inference-max-batch-size %d: the longest prompt of a batch "
                        "(%zu tokens) + --max-new-tokens %d exceed the model's %d positions; "
                        "prompts that outgrow the model run one at a time "
                        "(--inference-max-batch-size 1)\n",
                g->max_batch, P, g->max_new_tokens, gr->a->seq_length);
        status = 1;
    }
    ar_sampling s = {.max_new_tokens = g->max_new_tokens, .temperature = g->temperature,
                     .top_k = g->top_k, .top_p = g->top_p, .seed = g->seed,
                     .vocab = tokenizer_vocab_size(gr->tok), .eod = tokenizer_eod(gr->tok),
                     .use_cache = g->cache != DLM_CACHE_NONE};
    ar_batch batch = {.seq = seq, .len = len, .B = B, .seq_id = id};
    char err[512];
    if (status == 0 && ar_generate(&gr->e, &batch, &s, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", g->load, err);
        status = 1;
    }
    for (int b = 0; b < B; b++) {
        if (status == 0) {
            print_sample(g, gr->tok, p->text[first + b], seq[b], len[b], seq[b] + plen[b],
                         len[b] - plen[b]);
            gr->tokens += (long)(len[b] - plen[b]);
            if (parallel_world_rank() == 0)
                fprintf(stderr, "[generated %zu tokens after a %zu-token prompt from %s "
                                "iteration %d]\n",
                        len[b] - plen[b], plen[b], g->load, gr->iteration);
        }
        free(seq[b]);
    }
    return status;
}

/* Every prompt, in batches of --inference-max-batch-size. */
static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int generate_all(generate_run *gr, const prompt_list *p, int diffusion) {
    const generate_args *g = gr->g;
    int status = 0;
    double seconds = 0; /* in the samplers (tokenizing and loading not counted) */
    if (diffusion && g->threshold == 0.0f && g->factor == 0.0f && g->steps > g->gen_length &&
        g->gen_length % g->block_length == 0 && g->steps % (g->gen_length / g->block_length) == 0 &&
        parallel_world_rank() == 0)
        fprintf(stderr, "note: --steps %d is above --gen-length %d: LLaDA's schedule unmasks at "
                        "least one token a step, so %d steps unmask every position and the "
                        "others change nothing (they are skipped)\n",
                g->steps, g->gen_length, g->gen_length);
    diffusion_stats stats = {0};
    for (int first = 0; first < p->n && status == 0; first += g->max_batch) {
        int B = p->n - first < g->max_batch ? p->n - first : g->max_batch;
        int32_t *ids[B];
        size_t n[B];
        char err[512];
        int got = 0;
        for (; got < B; got++)
            if (tokenizer_encode(gr->tok, p->text[first + got], strlen(p->text[first + got]),
                                 &ids[got], &n[got], err, sizeof(err)) != 0) {
                if (g->input_file)
                    fprintf(stderr, "error: --input-file %s: line %d: %s\n", g->input_file,
                            first + got + 1, err);
                else
                    fprintf(stderr, "error: --prompt: %s\n", err);
                status = 1;
                break;
            }
        double t0 = wall_seconds();
        if (status == 0)
            status = diffusion ? diffusion_batch(gr, p, first, B, ids, n, &stats)
                               : autoregressive_batch(gr, p, first, B, ids, n);
        seconds += wall_seconds() - t0;
        for (int b = 0; b < got; b++) free(ids[b]);
    }
    if (diffusion && status == 0 && g->cache != DLM_CACHE_NONE && parallel_world_rank() == 0)
        fprintf(stderr, "[cache %s: %ld full forwards, %ld on the cache, %ld positions run]\n",
                CACHE_NAMES[g->cache], stats.full_forwards, stats.row_forwards, stats.rows);
    if (status == 0 && parallel_world_rank() == 0)
        fprintf(stderr, "[sampled %ld tokens in %.3f s: %.1f tokens/s]\n", gr->tokens, seconds,
                seconds > 0 ? (double)gr->tokens / seconds : 0.0);
    return status;
}

/* The ranks: one tensor-parallel group of --tensor-model-parallel-size, the whole world. 0, or
 * 1 on every rank after rank 0 printed the error. */
static int setup_ranks(const generate_args *g) {
    const int world = parallel_world_size();
    char err[512];
    if (g->tp_size != world) {
        char run[64] = "in one process";
        if (g->tp_size > 1) snprintf(run, sizeof run, "under mpirun -np %d", g->tp_size);
        snprintf(err, sizeof err,
                 "--tensor-model-parallel-size %d: expected the number of ranks, %d (generate "
                 "splits the model over all of its ranks, one tensor-parallel group: give "
                 "--tensor-model-parallel-size %d, or run it %s)",
                 g->tp_size, world, world, run);
    } else if (parallel_setup_groups(g->tp_size, 1, 1, err, sizeof err) == 0 &&
               /* an MoE checkpoint's experts are split over TP: the groups its dispatch uses
                * (one expert-parallel rank) */
               parallel_setup_expert_groups(1, g->tp_size, err, sizeof err) == 0) {
        return 0;
    }
    if (parallel_world_rank() == 0) fprintf(stderr, "error: %s\n", err);
    return 1;
}

/* The checkpoint's model for batches of B prompts, its parameters loaded; the store, and the
 * caches' context and row forwards when --cache is on. 0, or 1 after the error. */
static int build_engine(generate_run *gr, checkpoint_model *cm, int B) {
    const generate_args *g = gr->g;
    const checkpoint_model_layout layout = {.tp_size = g->tp_size, .max_batch = B,
                                            .packed_docs = B > 1 /* left padding */,
                                            .bf16 = g->bf16};
    if (checkpoint_model_build(cm, g->load, &layout) != 0) return 1;
    if (g->bf16 && parallel_world_rank() == 0)
        fprintf(stderr, "> --bf16: %s\n", gemm_bf16_describe());
    gr->e.m = cm->model;
    gr->e.st = cm->store;
    const int T = cm->model->cfg.seq_length;
    if (g->cache != DLM_CACHE_NONE) gr->e.ic = inference_context_create(&cm->model->cfg, B, T);
    /* the row forwards of a cache; under TP also the gather of a full forward's
     * vocab-parallel logits */
    if (g->cache != DLM_CACHE_NONE || g->tp_size > 1)
        gr->e.gi = gpt_inference_create(cm->model, B, T);
    return 0;
}

/* The caches (the model and its store belong to the checkpoint_model). */
static void engine_free(inference_engine *e) {
    gpt_inference_free(e->gi);
    inference_context_free(e->ic);
    memset(e, 0, sizeof *e);
}

int generate_main(int argc, char **argv) {
    /* under mpirun every rank runs the same loop and holds the same text: rank 0's is printed */
    if (parallel_world_rank() > 0 && !freopen("/dev/null", "w", stdout)) return 1;
    generate_args g;
    int rc = parse(&g, argc, argv);
    if (rc != 0) return rc > 0 ? 0 : 2;
    if (setup_ranks(&g) != 0) return 1;
    checkpoint_model cm;
    if (checkpoint_model_open(&cm, "generate", g.load, &g.files) != 0) return 1;
    generate_run gr = {.g = &g, .a = &cm.a, .tok = cm.tok, .iteration = cm.iteration};
    prompt_list p = {0};
    int status = check_family(&g, cm.diffusion) || prompts_read(&g, &p);
    if (status == 0) status = build_engine(&gr, &cm, p.n < g.max_batch ? p.n : g.max_batch);
    if (status == 0) status = generate_all(&gr, &p, cm.diffusion);
    prompts_free(&p);
    engine_free(&gr.e);
    checkpoint_model_free(&cm);
    return status;
}
