/* --use-on-the-fly-eval: MegaDLMs' unwired flag, completed. At every --eval-interval the
 * training model is scored on --on-the-fly-eval-task as `megadlm eval` scores a checkpoint
 * (training/eval_tasks.h, training/loglikelihood.h): the requests split over the
 * data-parallel ranks, the scores on a log line (" on-the-fly eval at iteration N | ...") and
 * in TensorBoard ("on-the-fly eval <metric>" at the iteration and vs samples). The task is read
 * and tokenized once, before training; its forwards run on a store of their own, so the
 * training step's stores are left as they are. */
#ifndef MEGADLM_TRAINING_ON_THE_FLY_EVAL_H
#define MEGADLM_TRAINING_ON_THE_FLY_EVAL_H

#include <stddef.h>

#include "training/trainer.h"

typedef struct on_the_fly_eval on_the_fly_eval;

/* NULL without --use-on-the-fly-eval (*failed 0); else the task loaded for tr's model, or NULL
 * with *failed 1 and a message naming the flag and the file in err. */
on_the_fly_eval *on_the_fly_eval_create(trainer *tr, int *failed, char *err, size_t errlen);
/* Scores the model now (every rank of the data-parallel group calls it) and reports on the log
 * rank. */
void on_the_fly_eval_run(on_the_fly_eval *e, trainer *tr);
void on_the_fly_eval_free(on_the_fly_eval *e);

#endif
