/* Megatron's DistributedOptimizer (ZeRO stage 1) over the flat buffers: AdamW's state is
 * sharded across the data-parallel group. Rank r owns its piece of every DDP bucket
 * (core/distributed/distributed_data_parallel.h: about 1/DP of the parameters, in total at most
 * ceil(N/DP) elements, for which exp_avg and exp_avg_sq are allocated; no rank holds state for
 * the rest). One step:
 *
 *   ddp_finish_grad_sync    reduce-scatter: this rank's pieces hold the DP-averaged gradients
 *   dist_opt_grad_norm      sum of squares over the pieces (TP duplicates counted once),
 *                           all-reduced over DP, TP and PP
 *   dist_opt_clip_grads     clipping of the pieces
 *   dist_opt_step           AdamW on the pieces only
 *   ddp_start_param_sync    all-gather of every piece to every rank (in place; the bucket
 *                           code's, as Megatron's param_and_grad_buffer)
 *
 * In fp32 the parameters themselves are the "main" parameters: there is no separate fp32 copy
 * to shard (4 + 4 + 8/DP bytes per parameter: parameters, gradients, the two moments). Under
 * --bf16 the optimizer also keeps the fp32 main parameters of its pieces (`main`, beside the
 * moments: Megatron's 6 + 12/DP bytes: bf16 parameters, fp32 gradients, sharded fp32 main
 * parameters and moments); the step updates them, rounds them into the model's bf16 copy at
 * their offsets, and the all-gather moves the bf16 copy (2-byte elements).
 *
 * --overlap-param-gather: the all-gathers start nonblocking after the step and complete under
 * the next forward (core/distributed/distributed_data_parallel.h).
 *
 * Checkpoints stay unsharded without gathering: training/dist_checkpointing writes each rank's
 * pieces (segs, exp_avg, exp_avg_sq, and under --bf16 main) at their places in the whole
 * tensors and reads back only those. */
#ifndef MEGADLM_CORE_OPTIMIZER_DISTRIB_OPTIMIZER_H
#define MEGADLM_CORE_OPTIMIZER_DISTRIB_OPTIMIZER_H

#include <stddef.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/kernels/bf16.h"
#include "core/optimizer/optimizer.h"
#include "core/tensor/tensor.h"

typedef struct {
    size_t begin, numel; /* flat offset and length: inside one tensor and one owned piece */
    size_t state;        /* offset into exp_avg / exp_avg_sq */
    int tensor;          /* index in ps->tensors */
} dist_opt_segment;

typedef struct {
    param_set *ps;
    ddp *ddp;                  /* the buckets and pieces */
    size_t shard_numel;        /* ceil(N / DP): state elements allocated on every rank */
    float *exp_avg, *exp_avg_sq; /* [shard_numel] MEM_OPTIMIZER */
    float *main;               /* [shard_numel] MEM_OPTIMIZER under --bf16: the fp32 main
                                * parameters of the pieces; NULL in fp32 (ps->data is main) */
    half_kind kind;            /* the 16-bit format of ps->data_bf16, HALF_NONE in fp32 */
    int num_segments;
    dist_opt_segment *segs;    /* this rank's pieces, split at tensor boundaries */
    float *param_shard;        /* FSDP optim_grads_params (fp32): the parameters of the
                                * pieces, laid out as the state (core/distributed/fsdp.h); the
                                * step updates them in place of ps->data. NULL otherwise */
    uint16_t *copy_shard;      /* FSDP optim_grads_params under --bf16: the pieces of the
                                * 16-bit copy, laid out as the state; dist_opt_main_to_copy
                                * rounds into it instead of ps->data_bf16. NULL otherwise */
    float *grad_shard;         /* FSDP's sharded gradients (core/distributed/fsdp.h), laid out
                                * as the state: segment s's at grad_shard + state; NULL: the
                                * pieces of ps->grad */
} dist_opt;

/* Segment s's gradients. */
static inline float *dist_opt_seg_grad(const dist_opt *o, int s) {
    return o->grad_shard ? o->grad_shard + o->segs[s].state : o->ps->grad + o->segs[s].begin;
}

/* ps must have been created without optimizer state (the model's sharded-state kind); the
 * moments start at zero. d must use the distributed optimizer (reduce-scatter). kind: the
 * format of ps->data_bf16 (--bf16), whose values widened are the main parameters' start (call
 * after the copy is initialised), or HALF_NONE (fp32). */
dist_opt *dist_opt_create(param_set *ps, ddp *d, half_kind kind);
/* Under --bf16: rounds the main parameters of the pieces into the 16-bit copy at their
 * offsets (after a load wrote them); ddp_start_param_sync then gives every rank the others'.
 * No-op in fp32. */
void dist_opt_main_to_copy(dist_opt *o);
void dist_opt_free(dist_opt *o);

float dist_opt_grad_norm(dist_opt *o);
void dist_opt_clip_grads(dist_opt *o, float grad_norm, float clip_grad);
/* AdamW on this rank's pieces (under --bf16 on their main parameters, then rounded into the
 * copy); ddp_start_param_sync then gives every rank the others'. */
void dist_opt_step(dist_opt *o, const optimizer_config *oc, float lr, int step);

#endif
