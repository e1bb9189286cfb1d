/* Pipeline schedules (Megatron's pipeline_parallel/schedules.py). A schedule drives the
 * training loop's forward_step / backward_step for each micro-batch and the transfers between
 * stages; the model knows nothing of pipelines and the schedules nothing of the model. Each
 * micro-batch in flight has its own activation store (core/models/activation_store.h): store
 * k % num_stores holds micro-batch k.
 *
 *   no pipelining (p = 1): forward, backward for each micro-batch in turn.
 *   1F1B (p > 1): stage r runs min(p - r - 1, M) warm-up forwards, then alternates one forward
 *   and one backward, then the remaining backwards (cool-down); it holds at most
 *   min(p - r, M) micro-batches.
 *   interleaved 1F1B (p > 1, v > 1 model chunks per rank, M a multiple of p): Megatron's
 *   forward_backward_pipelining_with_interleaving. The M v virtual micro-batches run in groups
 *   of p micro-batches per chunk: virtual micro-batch k is micro-batch (k / pv) p + k % p of
 *   chunk (k % pv) / p in forward, of chunk v - 1 - (k % pv) / p in backward. Rank r runs
 *   W = min((p - r - 1) 2 + (v - 1) p, M v) warm-up forwards (all of them when W reaches
 *   M v), then one forward and one backward at a time, then the remaining backwards; it holds
 *   at most min(W + 1, M v) chunk activations. Transfers wrap around: the last rank's chunk j
 *   feeds the first rank's chunk j + 1; in the 1F1B steps they are posted after the forward
 *   and after the backward and completed where their data is needed (Megatron's default
 *   overlap_p2p_comm). A store holds one chunk's activations and runs any chunk
 *   (activation_store_set_chunk); stores are taken from a free list when a virtual
 *   micro-batch's forward starts and returned after its backward. A chunk's input is received
 *   into a buffer of the schedule's before it has a store, and the gradients w.r.t. chunk
 *   outputs / inputs into two buffers used in turn, so the next backward's output gradient can
 *   arrive while the last one's input gradient is sent. */
#ifndef MEGADLM_CORE_PIPELINE_PARALLEL_SCHEDULES_H
#define MEGADLM_CORE_PIPELINE_PARALLEL_SCHEDULES_H

#include "core/models/activation_store.h"

struct gpt_model; /* the schedules never look inside the model */

typedef struct {
    void *user;
    /* runs micro-batch k's forward on its store; returns its loss (last stage) or 0 */
    float (*forward_step)(void *user, int k, activation_store *store);
    /* runs micro-batch k's backward on its store */
    void (*backward_step)(void *user, int k, activation_store *store);
    /* --num-microbatches-with-partial-activation-checkpoints K (<= 0: none). The 1F1B
     * schedule gives micro-batch k store k mod (stores), so stores below K keep everything;
     * the interleaved one gives virtual micro-batch k a store that keeps everything iff
     * k mod (W + 1) < K, as Megatron decides checkpoint_activations_microbatch. */
    int partial_checkpoints;
} pipeline_steps;

/* Activation stores a stage needs for M micro-batches (1F1B). */
int schedule_num_stores(int pp_size, int pp_rank, int num_microbatches);
/* The same for any schedule (vp_size model chunks per rank, 0 or 1: none), and how many of
 * them keep everything under per-micro-batch partial recompute K (<= 0: none); the interleaved
 * schedule's two kinds come from two pools, each as large as it gets in this rank's order. */
int schedule_stores(int pp_size, int pp_rank, int vp_size, int num_microbatches, int K,
                    int *num_unchecked);
/* Warm-up forwards of pipeline rank pp_rank (virtual micro-batches with interleaving). */
int schedule_num_warmup(int pp_size, int pp_rank, int vp_size, int num_microbatches);

/* Most activation stores a forward_backward held at once so far on this rank (micro-batches
 * in flight; model chunks of micro-batches with interleaving), as the schedule ran. */
int schedule_peak_in_flight(void);

/* What the schedules run on, built once for a training run (a step allocates nothing): the
 * activation stores of the micro-batches in flight and, with interleaving and backward, the
 * transfer buffers that belong to no store. */
typedef struct {
    activation_store **stores;
    int num_stores;
    float *grad[2]; /* gradient buffers used in turn: [0] the stores' own (the model's), [1] the
                     * schedule's (interleaved only) */
    float *recv;    /* interleaved: the next chunk's input, received before it has a store */
} pipeline_stores;

/* num_stores stores for m's micro-batches (schedule_stores), the first num_unchecked of which
 * keep everything (partial recompute). */
pipeline_stores *pipeline_stores_create(const struct gpt_model *m, int num_stores,
                                        int num_unchecked);
void pipeline_stores_free(pipeline_stores *p);

/* Forward and backward of num_microbatches micro-batches (the schedule by the pipeline size
 * and the stores' model chunks). Returns the sum of their losses on the last stage, 0
 * elsewhere. */
double forward_backward(pipeline_stores *p, int num_microbatches, const pipeline_steps *steps);
/* Forward only (evaluation), on the first store. Same return. */
double forward_only(pipeline_stores *p, int num_microbatches, const pipeline_steps *steps);

#endif
