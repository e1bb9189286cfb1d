/* `megadlm eval`: a checkpoint scored on a task file by log-likelihood, lm-evaluation-harness's
 * request types and metrics (training/eval_tasks.h: multiple_choice, loglikelihood,
 * perplexity), exact for autoregressive models and LLaDA's Monte Carlo estimate for
 * masked-diffusion ones (training/loglikelihood.h). Under mpirun the ranks share the requests
 * and print (rank 0) the numbers of one process. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel_state.h"
#include "core/util/alloc.h"
#include "core/util/parse.h"
#include "tools/checkpoint_model.h"
#include "tools/json_fields.h"
#include "tools/tools.h"
#include "training/eval_tasks.h"

/* LLaDA's batch of draws per forward (get_log_likelihood's batch_size) */
#define EVAL_DRAW_BATCH 16

typedef struct {
    const char *load, *task_file;
    eval_task_type type;
    int mc_num, limit, json, log_samples, bf16;
    uint64_t seed;
    tokenizer_options files;
} eval_args;

static void print_help(FILE *out) {
    fprintf(out,
            "usage: megadlm eval --load DIR --task-file FILE [flags]\n\n"
            "  --load DIR            checkpoint directory (its latest iteration)   (required)\n"
            "  --task-file FILE      the task (.jsonl records, or a text)           (required)\n"
            "  --task-type T         multiple_choice, loglikelihood or perplexity   (inferred:\n"
            "                        a .jsonl file by its first record: \"endings\" multiple_choice,\n"
            "                        \"continuation\" loglikelihood, else perplexity of each\n"
            "                        \"text\"; any other file: perplexity of its text)\n"
            "  --limit N             the first N examples (documents); 0 = all      (0)\n"
            "  --mc-num N            masked diffusion: Monte Carlo draws per        (128)\n"
            "                        request (LLaDA's default)\n"
            "  --seed S              masked diffusion: the draws' seed              (1234)\n"
            "  --json                the scores as one JSON object\n"
            "  --log-samples         then every request's result, one JSON line each\n"
            "  --bf16                score with the model in bf16, as a --bf16 training run's\n"
            "                        forward (default: fp32)\n"
            "  --vocab-file F, --merge-file F, --tokenizer-model F\n"
            "                        tokenizer files instead of the checkpoint's\n"
            "Under mpirun -np N, request i is scored on rank i %% N; the results are those of\n"
            "one process.\n");
}

static int parse_type(const char *v, eval_task_type *t) {
    static const char *names[] = {"multiple_choice", "loglikelihood", "perplexity"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) {
            *t = (eval_task_type)(EVAL_TASK_MULTIPLE_CHOICE + i);
            return 0;
        }
    fprintf(stderr, "error: --task-type '%s': expected multiple_choice, loglikelihood or "
                    "perplexity\n", v);
    return -1;
}

static int int_flag(const char *flag, const char *word, int lo, int *out) {
    char msg[256];
    if (parse_int_flag(flag, word, lo, out, msg, sizeof msg) == 0) return 0;
    fprintf(stderr, "error: %s\n", msg);
    return -1;
}

static int parse_seed(const char *word, uint64_t *seed) {
    char *end;
    errno = 0;
    unsigned long long u = strtoull(word, &end, 10);
    if (word[0] < '0' || word[0] > '9' || *end || errno == ERANGE) {
        fprintf(stderr, "error: --seed: expected an integer from 0 to 2^64 - 1, found '%s'\n",
                word);
        return -1;
    }
    *seed = u;
    return 0;
}

/* 0, 1 after --help, -1 after an error. */
static int parse(eval_args *e, int argc, char **argv) {
    static const struct option opts[] = {
        {"load", required_argument, 0, 'l'},     {"task-file", required_argument, 0, 'f'},
        {"task-type", required_argument, 0, 't'}, {"mc-num", required_argument, 0, 'm'},
        {"limit", required_argument, 0, 'n'},    {"seed", required_argument, 0, 's'},
        {"json", no_argument, 0, 'j'},           {"help", no_argument, 0, 'h'},
        {"log-samples", no_argument, 0, 'L'},   {"bf16", no_argument, 0, 'X'},
        TOKENIZER_FILE_LONG_OPTIONS,             {0, 0, 0, 0}};
    *e = (eval_args){.type = EVAL_TASK_INFER, .mc_num = 128, .seed = 1234};
    opterr = 0;
    optind = 1;
    int c, rc = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        if (tokenizer_option(&e->files, c, optarg, NULL, 0)) continue;
        switch (c) {
        case 'l': e->load = optarg; break;
        case 'f': e->task_file = optarg; break;
        case 't': rc = parse_type(optarg, &e->type); break;
        case 'm': rc = int_flag("--mc-num", optarg, 1, &e->mc_num); break;
        case 'n': rc = int_flag("--limit", optarg, 0, &e->limit); break;
        case 's': rc = parse_seed(optarg, &e->seed); break;
        case 'j': e->json = 1; break;
        case 'L': e->log_samples = 1; break;
        case 'X': e->bf16 = 1; break;
        case 'h': print_help(stdout); return 1;
        case ':': fprintf(stderr, "error: %s: expects a value\n", argv[optind - 1]); return -1;
        default:
            fprintf(stderr, "error: unknown flag '%s' (see megadlm eval --help)\n",
                    argv[optind - 1]);
            return -1;
        }
    }
    if (rc != 0) return -1;
    if (optind < argc) {
        fprintf(stderr, "error: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!e->load || !e->task_file) {
        fprintf(stderr, "error: %s is required\n", !e->load ? "--load DIR" : "--task-file FILE");
        return -1;
    }
    return 0;
}

/* lm-eval's table rows: value and standard error. */
static void print_text(const eval_args *e, const checkpoint_model *cm, const eval_scores *s) {
    printf("task: %s (%s, %d examples, %d requests)\n", e->task_file,
           eval_task_type_name(s->type), s->examples, s->requests);
    if (cm->diffusion)
        printf("model: %s iteration %d, masked diffusion: Monte Carlo estimate, mc-num %d, "
               "seed %llu (log-likelihoods are ELBO estimates: lower bounds)\n",
               e->load, cm->iteration, e->mc_num, (unsigned long long)e->seed);
    else
        printf("model: %s iteration %d, autoregressive: exact log-likelihoods\n", e->load,
               cm->iteration);
    const char *bound = cm->diffusion ? " (bound)" : "";
    if (s->type == EVAL_TASK_MULTIPLE_CHOICE) {
        printf("acc       %.4f ± %.4f\n", s->acc, s->acc_se);
        printf("acc_norm  %.4f ± %.4f\n", s->acc_norm, s->acc_norm_se);
    } else if (s->type == EVAL_TASK_LOGLIKELIHOOD && !cm->diffusion) {
        printf("acc (is_greedy)  %.4f ± %.4f\n", s->acc, s->acc_se);
    }
    if (s->type == EVAL_TASK_PERPLEXITY) {
        printf("word_perplexity%s  %.4f\n", bound, s->word_perplexity);
        printf("byte_perplexity%s  %.4f\n", bound, s->byte_perplexity);
        printf("bits_per_byte%s    %.4f\n", bound, s->bits_per_byte);
        printf("token_perplexity%s %.4f (%ld tokens, %.0f words, %.0f bytes)\n", bound,
               s->perplexity, s->tokens, s->words, s->bytes);
    } else if (s->type == EVAL_TASK_LOGLIKELIHOOD) {
        printf("perplexity%s  %.4f\n", bound, s->perplexity);
    }
    printf("loglikelihood%s  %.6f", bound, s->loglik);
    if (cm->diffusion) printf(" ± %.6f", s->loglik_se);
    printf(" over %ld tokens, %.6f per token\n", s->tokens, s->loglik_per_token);
    if (s->cut) printf("(%d requests had their context cut on the left to fit the model)\n",
                       s->cut);
}

static void print_json(const eval_args *e, const checkpoint_model *cm, const eval_scores *s) {
    cJSON *o = cJSON_CreateObject();
    JSON_ADD(o, JSTR("task_file", e->task_file), JSTR("task_type", eval_task_type_name(s->type)),
             JNUM("examples", s->examples), JNUM("requests", s->requests),
             JSTR("load", e->load), JNUM("iteration", cm->iteration),
             JBOOL("diffusion", cm->diffusion), JBOOL("bound", cm->diffusion));
    if (cm->diffusion) JSON_ADD(o, JNUM("mc_num", e->mc_num), JNUM("seed", (double)e->seed));
    if (s->type == EVAL_TASK_MULTIPLE_CHOICE)
        JSON_ADD(o, JNUM("acc", s->acc), JNUM("acc_stderr", s->acc_se),
                 JNUM("acc_norm", s->acc_norm), JNUM("acc_norm_stderr", s->acc_norm_se));
    if (s->type == EVAL_TASK_LOGLIKELIHOOD && !cm->diffusion)
        JSON_ADD(o, JNUM("acc", s->acc), JNUM("acc_stderr", s->acc_se));
    if (s->type == EVAL_TASK_PERPLEXITY)
        JSON_ADD(o, JNUM("word_perplexity", s->word_perplexity),
                 JNUM("byte_perplexity", s->byte_perplexity),
                 JNUM("bits_per_byte", s->bits_per_byte), JNUM("words", s->words),
                 JNUM("bytes", s->bytes));
    if (s->type != EVAL_TASK_MULTIPLE_CHOICE) JSON_ADD(o, JNUM("perplexity", s->perplexity));
    JSON_ADD(o, JNUM("loglikelihood", s->loglik), JNUM("loglikelihood_stderr", s->loglik_se),
             JNUM("tokens", (double)s->tokens),
             JNUM("loglikelihood_per_token", s->loglik_per_token),
             JNUM("context_cut", s->cut));
    char *text = cJSON_PrintUnformatted(o);
    printf("%s\n", text);
    cJSON_free(text);
    cJSON_Delete(o);
}

/* lm-eval's --log_samples: each request's numbers, in request order. */
static void print_samples(const eval_task *t, const ll_result *r) {
    for (int i = 0; i < t->num_requests; i++) {
        cJSON *o = cJSON_CreateObject();
        JSON_ADD(o, JNUM("request", i), JNUM("example", t->req[i].example),
                 JNUM("choice", t->req[i].choice), JNUM("loglikelihood", r[i].loglik),
                 JNUM("stderr", r[i].sem), JNUM("tokens", r[i].tokens),
                 JBOOL("is_greedy", r[i].is_greedy), JNUM("context_cut", r[i].cut));
        char *text = cJSON_PrintUnformatted(o);
        printf("%s\n", text);
        cJSON_free(text);
        cJSON_Delete(o);
    }
}

int eval_main(int argc, char **argv) {
    eval_args e;
    int rc = parse(&e, argc, argv);
    if (rc != 0) return rc > 0 ? 0 : 2;
    char err[1024];
    if (parallel_setup_groups(1, 1, 1, err, sizeof err) != 0) { /* every rank a replica */
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    int rank = parallel_get()->world_rank;
    checkpoint_model cm;
    /* the batch of draws only for masked diffusion; an autoregressive request is one row */
    if (checkpoint_model_open(&cm, "eval", e.load, &e.files) != 0) return 1;
    const checkpoint_model_layout layout = {.tp_size = 1,
                                            .max_batch = cm.diffusion ? EVAL_DRAW_BATCH : 1,
                                            .bf16 = e.bf16};
    if (checkpoint_model_build(&cm, e.load, &layout) != 0) return 1;
    ll_scorer s;
    eval_task t;
    int status = 1;
    if (ll_scorer_init(&s, cm.model, cm.store, cm.diffusion, cm.a.mask_token, e.mc_num, e.seed,
                       err, sizeof err) != 0) {
        fprintf(stderr, "error: --mc-num: %s\n", err);
        checkpoint_model_free(&cm);
        return 1;
    }
    if (eval_task_load(&t, e.task_file, e.type, e.limit, cm.tok, cm.diffusion, s.max_tokens, err,
                       sizeof err) != 0) {
        fprintf(stderr, "error: --task-file %s\n", err);
        goto done;
    }
    eval_scores sc;
    ll_result *res = xcalloc((size_t)t.num_requests, sizeof(ll_result), "the requests' results");
    if (eval_task_run(&t, &s, tokenizer_eod(cm.tok), PARALLEL_GROUP_DP, &sc, res, err,
                      sizeof err) != 0) {
        fprintf(stderr, "error: --task-file %s: %s\n", e.task_file, err);
        free(res);
        eval_task_free(&t);
        goto done;
    }
    if (rank == 0) {
        if (e.json) print_json(&e, &cm, &sc);
        else print_text(&e, &cm, &sc);
        if (e.log_samples) print_samples(&t, res);
        fflush(stdout);
    }
    free(res);
    eval_task_free(&t);
    status = 0;
done:
    ll_scorer_free(&s);
    checkpoint_model_free(&cm);
    return status;
}
