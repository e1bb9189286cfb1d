#include "training/on_the_fly_eval.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/alloc.h"
#include "core/util/die.h"
#include "training/eval_tasks.h"
#include "training/training_log.h"

struct on_the_fly_eval {
    activation_store *store;
    ll_scorer scorer;
    eval_task task;
};

on_the_fly_eval *on_the_fly_eval_create(trainer *tr, int *failed, char *err, size_t errlen) {
    const megadlm_args *a = tr->a;
    *failed = 0;
    if (!a->use_on_the_fly_eval) return NULL;
    on_the_fly_eval *e = xcalloc(1, sizeof *e, "the on-the-fly evaluation");
    e->store = activation_store_create(tr->model, 1);
    char why[768];
    int diffusion = ARGS_CHOICE(a, model_running_mode) == ARGS_MODE_DIFFLM_NOSHIFT;
    if (ll_scorer_init(&e->scorer, tr->model, e->store, diffusion, a->mask_token,
                       a->on_the_fly_eval_mc_num, tr->rng_seed, why, sizeof why) != 0 ||
        eval_task_load(&e->task, a->on_the_fly_eval_task, EVAL_TASK_INFER,
                       a->on_the_fly_eval_limit, tr->tok, diffusion, e->scorer.max_tokens, why,
                       sizeof why) != 0) {
        snprintf(err, errlen, "--on-the-fly-eval-task %s", why);
        on_the_fly_eval_free(e);
        *failed = 1;
        return NULL;
    }
    return e;
}

/* One "<name>: value [± se] |" field of the line, and its TensorBoard scalar. */
static void report(trainer *tr, char *line, size_t cap, int *n, const char *name, double v,
                   double se, int with_se) {
    if (with_se)
        *n += snprintf(line + *n, cap - *n, " %s: %.6E ± %.6E |", name, v, se);
    else
        *n += snprintf(line + *n, cap - *n, " %s: %.6E |", name, v);
    char tag[96];
    snprintf(tag, sizeof tag, "on-the-fly eval %s", name);
    monitor_scalar_pair(&tr->mon, tag, v, tr->iteration, (int64_t)tr->consumed_train_samples);
}

void on_the_fly_eval_run(on_the_fly_eval *e, trainer *tr) {
    eval_scores s;
    char err[768];
    if (eval_task_run(&e->task, &e->scorer, tokenizer_eod(tr->tok), PARALLEL_GROUP_DP, &s, NULL,
                      err, sizeof err) != 0)
        die(1, "--on-the-fly-eval-task %s: %s", tr->a->on_the_fly_eval_task, err);
    char line[1024];
    int n = snprintf(line, sizeof line, " on-the-fly eval at iteration %d | %s (%s, %d examples%s) |",
                     tr->iteration, tr->a->on_the_fly_eval_task, eval_task_type_name(s.type),
                     s.examples, s.diffusion ? ", Monte Carlo ELBO: bounds" : "");
    if (s.type == EVAL_TASK_MULTIPLE_CHOICE) {
        report(tr, line, sizeof line, &n, "acc", s.acc, s.acc_se, 1);
        report(tr, line, sizeof line, &n, "acc_norm", s.acc_norm, s.acc_norm_se, 1);
    } else if (s.type == EVAL_TASK_PERPLEXITY) {
        report(tr, line, sizeof line, &n, "bits_per_byte", s.bits_per_byte, 0, 0);
        report(tr, line, sizeof line, &n, "word_perplexity", s.word_perplexity, 0, 0);
    }
    report(tr, line, sizeof line, &n, "loglikelihood per token", s.loglik_per_token,
           s.loglik_se / (double)(s.tokens ? s.tokens : 1), s.diffusion);
    print_rank_last("%s\n", line);
    monitor_flush(&tr->mon);
    fflush(stdout);
}

void on_the_fly_eval_free(on_the_fly_eval *e) {
    if (!e) return;
    ll_scorer_free(&e->scorer);
    eval_task_free(&e->task);
    if (e->store) activation_store_free(e->store);
    free(e);
}
