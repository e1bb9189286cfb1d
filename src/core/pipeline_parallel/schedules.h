/* Pipeline schedules (Megatron's pipeline_parallel/schedules.py). A schedule drives the
 * training loop's forward_step / backward_step for each micro-batch and the transfers between
 * stages; the model knows nothing of pipelines. Each micro-batch in flight has its own
 * activation store (a gpt_model replica): store k % num_stores holds micro-batch k.
 *
 *   no pipelining (p = 1): forward, backward for each micro-batch in turn.
 *   1F1B (p > 1): stage r runs min(p - r - 1, M) warm-up forwards, then alternates one forward
 *   and one backward, then the remaining backwards (cool-down); it holds at most
 *   min(p - r, M) micro-batches. */
#ifndef MEGADLM_CORE_PIPELINE_PARALLEL_SCHEDULES_H
#define MEGADLM_CORE_PIPELINE_PARALLEL_SCHEDULES_H

#include "core/models/gpt_model.h"

typedef struct {
    void *user;
    /* runs micro-batch k's forward on its store; returns its loss (last stage) or 0 */
    float (*forward_step)(void *user, int k, gpt_model *store);
    /* runs micro-batch k's backward on its store */
    void (*backward_step)(void *user, int k, gpt_model *store);
} pipeline_steps;

/* Activation stores a stage needs for M micro-batches. */
int schedule_num_stores(int pp_size, int pp_rank, int num_microbatches);

/* Forward and backward of num_microbatches micro-batches. Returns the sum of their losses on
 * the last stage, 0 elsewhere. */
double forward_backward(gpt_model **stores, int num_stores, int num_microbatches,
                        const pipeline_steps *steps);
/* Forward only (evaluation). Same return. */
double forward_only(gpt_model **stores, int num_microbatches, const pipeline_steps *steps);

#endif
