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

#include "core/models/gpt_model.h"
#include "core/random/philox.h"
#include "core/util/alloc.h"
#include "core/util/parse.h"
#include "tools/diffusion_sampling.h"
#include "tools/tools.h"
#include "training/arguments.h"
#include "training/checkpoint_files.h"
#include "training/model_provider.h"
#include "training/theoretical_memory.h"
#include "training/tokenizer/tokenizer.h"

typedef struct {
    const char *load;
    const char *prompt;
    int max_new_tokens;
    float temperature;
    int top_k;
    float top_p;
    uint64_t seed;
    tokenizer_options files; /* the file flags only: override the checkpoint's */
    /* masked-diffusion models (LLaDA's sampler, tools/diffusion_sampling.h) */
    int gen_length, steps, block_length;
    const char *remasking;
    int low_confidence; /* --remasking low_confidence (set where the flag is parsed) */
    int full_logits; /* --difflm-full-logits */
    /* a flag of one family that was given (for the message when the checkpoint is of the
     * other family), NULL when none was */
    const char *given_ar, *given_dlm;
    int given_temperature;
} generate_args;

static void print_help(FILE *out) {
    fprintf(out,
            "usage: megadlm generate --load DIR [flags]\n\n"
            "  --load DIR            checkpoint directory (its latest iteration)   (required)\n"
            "  --prompt TEXT         text to continue                               (\"\")\n"
            "  --max-new-tokens N    tokens to sample                               (64)\n"
            "  --temperature T       divide logits by T (> 0)                       (1.0)\n"
            "  --top-k K             sample among the K most likely tokens; 0 = off (0)\n"
            "  --top-p P             nucleus sampling with mass P; 0 = off          (0.0)\n"
            "  --seed S              random seed                                    (1234)\n"
            "masked-diffusion checkpoints (difflm-noshift), LLaDA's sampler:\n"
            "  --gen-length N        tokens to generate after the prompt            (128)\n"
            "  --steps N             unmasking rounds, a multiple of the blocks;    (128)\n"
            "                        rounds beyond --gen-length unmask nothing and\n"
            "                        are skipped\n"
            "  --block-length N      tokens per block, generated left to right      (gen-length)\n"
            "  --remasking R         low_confidence or random                       (low_confidence)\n"
            "  --temperature T       0 = argmax, > 0 Gumbel noise                   (0)\n"
            "  --top-p P             draw among the most likely tokens holding mass P\n"
            "                        (MegaDLMs' filter; with --temperature > 0)    (0.0)\n"
            "  --difflm-full-logits  logits for every position each round (LLaDA's);\n"
            "                        default: only the block's still-masked positions,\n"
            "                        the same tokens, faster                        (off)\n"
            "  (--max-new-tokens and --top-k are for autoregressive checkpoints)\n"
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
    {'t', "--temperature", 'f', 0, NULL},
    {'P', "--top-p", 'f', 0, NULL},
    {'s', "--seed", 'u', 0, NULL},
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
    case 't': g->temperature = fv, g->given_temperature = 1; break;
    case 'P': g->top_p = fv; break;
    }
    return 0;
}

/* The rules of single flags; the ones between flags and the checkpoint come later. */
static int check_values(const generate_args *g) {
    const char *bad = NULL;
    char why[160];
    if (g->temperature < 0.0f) {
        bad = "--temperature";
        snprintf(why, sizeof why, "%g: expected a number >= 0", (double)g->temperature);
    } else if (g->top_p < 0.0f || g->top_p > 1.0f) {
        bad = "--top-p";
        snprintf(why, sizeof why, "%g: expected a number from 0 to 1 (0: off)", (double)g->top_p);
    } else if (!g->low_confidence && strcmp(g->remasking, "random") != 0) {
        bad = "--remasking";
        snprintf(why, sizeof why, "'%.60s': expected low_confidence or random", g->remasking);
    } else if (g->top_k > 0 && g->top_p > 0.0f) {
        bad = "--top-k";
        snprintf(why, sizeof why, "%d and --top-p %g: only one can be set (as in Megatron)",
                 g->top_k, (double)g->top_p);
    }
    if (!bad) return 0;
    fprintf(stderr, "error: %s %s\n", bad, why);
    return -1;
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
        {"difflm-full-logits", no_argument, 0, 'F'},
        {0, 0, 0, 0}};
    *g = (generate_args){.prompt = "", .max_new_tokens = 64, .temperature = 1.0f, .seed = 1234,
                         .gen_length = 128, .steps = 128, .remasking = "low_confidence",
                         .low_confidence = 1};
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        /* only the file flags are in the table, and they take any string */
        if (tokenizer_option(&g->files, c, optarg, NULL, 0)) continue;
        switch (c) {
        case 'l': g->load = optarg; break;
        case 'p': g->prompt = optarg; break;
        case 'h': print_help(stdout); return 1;
        case 'r':
            g->remasking = optarg, g->low_confidence = !strcmp(optarg, "low_confidence");
            g->given_dlm = "--remasking";
            break;
        case 'F': g->full_logits = 1; g->given_dlm = "--difflm-full-logits"; break;
        case 'n': case 't': case 'k': case 'P': case 's': case 'g': case 'S': case 'b':
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
    if (g->block_length == 0) g->block_length = g->gen_length; /* not given: one block */
    return 0;
}

static int cmp_desc(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return (a < b) - (a > b);
}

/* Draws a token from logits[V] (only ids < vocab are eligible). probs is scratch [V]. */
static int sample_token(const float *logits, int V, int vocab, const generate_args *g,
                        float *probs, float *sorted, float u) {
    float maxl = -FLT_MAX;
    for (int i = 0; i < vocab; i++) maxl = fmaxf(maxl, logits[i] / g->temperature);
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        probs[i] = i < vocab ? expf(logits[i] / g->temperature - maxl) : 0.0f;
        sum += probs[i];
    }
    for (int i = 0; i < V; i++) probs[i] = (float)(probs[i] / sum);
    float threshold = 0.0f; /* keep tokens with prob >= threshold */
    if (g->top_k > 0 || g->top_p > 0.0f) {
        memcpy(sorted, probs, V * sizeof(float));
        qsort(sorted, V, sizeof(float), cmp_desc);
        if (g->top_k > 0) {
            threshold = sorted[(g->top_k < vocab ? g->top_k : vocab) - 1];
        } else {
            /* smallest set whose mass reaches top_p (the token crossing it is kept) */
            double mass = 0.0;
            for (int i = 0; i < V; i++) {
                mass += sorted[i];
                threshold = sorted[i];
                if (mass >= g->top_p) break;
            }
        }
    }
    double kept = 0.0;
    for (int i = 0; i < V; i++)
        if (probs[i] >= threshold) kept += probs[i];
    double target = u * kept, acc = 0.0;
    int last = 0;
    for (int i = 0; i < vocab; i++) {
        if (probs[i] < threshold || probs[i] == 0.0f) continue;
        acc += probs[i];
        last = i;
        if (acc > target) return i;
    }
    return last;
}

/* A masked-diffusion checkpoint: LLaDA's sampler over prompt + gen_length positions. */
static int generate_diffusion(gpt_model *m, activation_store *st, tokenizer *tok, const int32_t *ids, size_t n,
                              const generate_args *g, const megadlm_args *a, const char *dir,
                              int iteration) {
    /* the model saw at most seq_length - 1 tokens (positions 1 .. s-1) in training */
    int total = (int)n + g->gen_length;
    if (total > a->seq_length - 1) {
        fprintf(stderr, "error: the prompt (%zu tokens) + --gen-length %d exceed the %d tokens "
                        "the model was trained on (--seq-length - 1)\n",
                n, g->gen_length, a->seq_length - 1);
        return 1;
    }
    int32_t *x = xcalloc((size_t)total, sizeof(int32_t), "the prompt and generated tokens");
    for (size_t i = 0; i < n; i++) x[i] = ids[i];
    int vocab = tokenizer_vocab_size(tok);
    diffusion_sampling ds = {.gen_length = g->gen_length, .steps = g->steps,
                             .block_length = g->block_length,
                             .low_confidence = g->low_confidence,
                             .temperature = g->temperature, .top_p = g->top_p,
                             .seed = g->seed,
                             .mask_token = a->mask_token,
                             .vocab = vocab, .full_logits = g->full_logits};
    char err[512];
    if (g->steps > g->gen_length && g->gen_length % g->block_length == 0 &&
        g->steps % (g->gen_length / g->block_length) == 0)
        fprintf(stderr, "note: --steps %d is above --gen-length %d: LLaDA's schedule unmasks at "
                        "least one token a step, so %d steps unmask every position and the "
                        "others change nothing (they are skipped)\n",
                g->steps, g->gen_length, g->gen_length);
    if (diffusion_generate(m, st, x, (int)n, &ds, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: %s\n", err);
        free(x);
        return 1;
    }
    char *text = tokenizer_decode(tok, x, total);
    printf("%s\n", text);
    /* the decoded text drops them: counted here (a model fine-tuned on EOS padding fills
     * long generations with them, docs/DATA.md section 6) */
    int eos = 0;
    for (int i = (int)n; i < total; i++) eos += x[i] == tokenizer_eod(tok);
    fprintf(stderr, "[diffusion: %d tokens in %d steps (blocks of %d) after a %zu-token prompt "
                    "from %s iteration %d; %d of them end of document]\n",
            g->gen_length, g->steps, g->block_length, n, dir, iteration, eos);
    free(text);
    free(x);
    return 0;
}

/* Samples up to --max-new-tokens after the prompt ids[n] (which it frees) and prints the text.
 * 0, or 1 when the logits stop being finite. */
static int generate_autoregressive(gpt_model *m, activation_store *st, tokenizer *tok,
                                   int32_t *ids, size_t n, const generate_args *g,
                                   int iteration) {
    int T = m->cfg.seq_length, V = m->cfg.padded_vocab_size, vocab = tokenizer_vocab_size(tok);
    int32_t *seq = xmalloc((n + g->max_new_tokens + 1) * sizeof(int32_t), "the generated tokens");
    size_t len = 0;
    if (n == 0) seq[len++] = tokenizer_eod(tok); /* empty prompt: start from end-of-document */
    for (size_t i = 0; i < n; i++) seq[len++] = ids[i];
    free(ids);
    float *probs = xmalloc(V * sizeof(float), "sampling probabilities"),
          *sorted = xmalloc(V * sizeof(float), "sampling probabilities");
    size_t prompt_len = len;
    int status = 0;
    for (int step = 0; step < g->max_new_tokens; step++) {
        size_t start = len > (size_t)T ? len - T : 0; /* the last seq_length tokens */
        int t = (int)(len - start);
        gpt_step gs = {.seed = g->seed, .training = 0};
        gpt_batch b = {.tokens = seq + start, .B = 1, .T = t};
        gpt_model_forward(m, st, &b, gs);
        uint32_t ctr[4] = {(uint32_t)step, 0, 0, 0}, key[2] = {(uint32_t)g->seed, 0x67656e21u},
                 r[4];
        philox4x32_10(ctr, key, r);
        const float *row = st->logits + (size_t)(t - 1) * V;
        if (ckpt_first_nonfinite(row, (size_t)vocab) < (size_t)vocab) {
            fprintf(stderr, "error: --load %s: the logits of new token %d are not finite (the "
                            "model's activations overflow)\n", g->load, step + 1);
            status = 1;
            break;
        }
        int next = sample_token(row, V, vocab, g, probs, sorted, philox_to_uniform(r[0]));
        if (next == tokenizer_eod(tok)) break;
        seq[len++] = next;
    }
    if (status == 0) {
        char *text = tokenizer_decode(tok, seq, len);
        printf("%s\n", text);
        fprintf(stderr, "[generated %zu tokens after a %zu-token prompt from %s iteration %d]\n",
                len - prompt_len, prompt_len, g->load, iteration);
        free(text);
    }
    free(seq);
    free(probs);
    free(sorted);
    return status;
}

/* The checkpoint's arguments, validated as train would (one process, fp32), with the tokenizer
 * file flags applied: 0, or 1 after printing the error. */
static int checkpoint_args(const generate_args *g, megadlm_args *a, int *iteration) {
    char err[1024];
    int rc = ckpt_read_latest(g->load, iteration, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "error: --load %s: %s\n", g->load,
                rc == 1 ? "no latest_checkpointed_iteration.txt (not a checkpoint directory)" : err);
        return 1;
    }
    ckpt_state st = {0};
    args_defaults(a);
    if (ckpt_load_state(g->load, *iteration, &st, err, sizeof(err)) != 0 ||
        args_from_json(a, st.args, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", g->load, err);
        ckpt_state_free(&st);
        return 1;
    }
    ckpt_state_free(&st);
    /* the sizes as saved, before validation (which would call a 0 a missing flag) */
    if (args_check_sizes(a, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: state.json of iteration %d: %s\n", g->load,
                *iteration, err);
        args_free(a);
        return 1;
    }
    /* fp32 inference: a --bf16 or --fp16 run's model.safetensors holds its 16-bit parameters,
     * widened exactly when loaded */
    args_fp32(a);
    const struct {
        const char *value;
        char *field;
        size_t size;
    } overrides[3] = {{g->files.vocab_file, a->vocab_file, sizeof a->vocab_file},
                      {g->files.merge_file, a->merge_file, sizeof a->merge_file},
                      {g->files.tokenizer_model, a->tokenizer_model, sizeof a->tokenizer_model}};
    for (int i = 0; i < 3; i++)
        if (overrides[i].value)
            snprintf(overrides[i].field, overrides[i].size, "%s", overrides[i].value);
    int saved_padded = a->padded_vocab_size;
    args_validity valid = args_validate_kind(a, err, sizeof(err));
    args_free(a); /* the saved data paths: only validation reads them */
    if (valid != ARGS_VALID) {
        fprintf(stderr, "error: --load %s: %s%s\n", g->load, err,
                valid == ARGS_INVALID_TOKENIZER_FILE
                    ? " (the checkpoint's tokenizer file: give generate --vocab-file, "
                      "--merge-file or --tokenizer-model to use another copy)"
                    : "");
        return 1;
    }
    if (saved_padded && a->padded_vocab_size != saved_padded) {
        fprintf(stderr,
                "error: --load %s: the tokenizer gives a padded vocabulary of %d, the checkpoint "
                "was trained with %d\n",
                g->load, a->padded_vocab_size, saved_padded);
        return 1;
    }
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
                        "--steps, --block-length, --remasking and --difflm-full-logits are for "
                        "masked-diffusion models\n", g->given_dlm, g->load);
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

int generate_main(int argc, char **argv) {
    generate_args g;
    int rc = parse(&g, argc, argv);
    if (rc != 0) return rc > 0 ? 0 : 2;

    char err[1024];
    int iteration;
    megadlm_args a;
    if (checkpoint_args(&g, &a, &iteration) != 0) return 1;
    tokenizer_options topts = {.type = a.tokenizer_type,
                               .vocab_size = a.vocab_size,
                               .vocab_file = a.vocab_file,
                               .merge_file = a.merge_file,
                               .tokenizer_model = a.tokenizer_model};
    tokenizer *tok = tokenizer_create_opts(&topts, err, sizeof(err));
    if (!tok) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int diffusion = ARGS_CHOICE(&a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    if (check_family(&g, diffusion) != 0) {
        tokenizer_free(tok);
        return 1;
    }
    /* one process: whatever layout the checkpoint was trained with, its tensors are whole */
    a.tensor_model_parallel_size = 1;
    a.pipeline_model_parallel_size = 1;
    a.context_parallel_size = 1;
    a.sequence_parallel = 0;
    a.distribute_saved_activations = 0;
    char model_path[PATH_MAX + 64];
    snprintf(model_path, sizeof model_path, "%s/iter_%07d/model.safetensors", g.load, iteration);
    if (ckpt_check_file_holds(model_path, theoretical_megadlm_parameter_count(&a), err,
                              sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", g.load, err);
        tokenizer_free(tok);
        args_free(&a);
        return 1;
    }
    transformer_config cfg = model_config_from_args(&a);
    gpt_model *m = gpt_model_create(&cfg, 1, GPT_MODEL_FORWARD_ONLY);
    activation_store *store = activation_store_create(m, 1);
    if (ckpt_load_tensors(g.load, iteration, &m->params, 0, err, sizeof(err)) != 0 ||
        ckpt_check_finite(&m->params, 0, err, sizeof err) != 0) {
        fprintf(stderr, "error: --load %s: %s\n", g.load, err);
        activation_store_free(store);
        gpt_model_free(m);
        tokenizer_free(tok);
        return 1;
    }

    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, g.prompt, strlen(g.prompt), &ids, &n, err, sizeof(err)) != 0) {
        fprintf(stderr, "error: --prompt: %s\n", err);
        activation_store_free(store);
        gpt_model_free(m);
        tokenizer_free(tok);
        return 1;
    }
    if (diffusion) {
        int status = generate_diffusion(m, store, tok, ids, n, &g, &a, g.load, iteration);
        free(ids);
        activation_store_free(store);
        gpt_model_free(m);
        tokenizer_free(tok);
        return status;
    }
    int status = generate_autoregressive(m, store, tok, ids, n, &g, iteration);
    activation_store_free(store);
    gpt_model_free(m);
    tokenizer_free(tok);
    return status;
}
