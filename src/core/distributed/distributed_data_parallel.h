/* Megatron-core's DistributedDataParallel over megadlm's flat gradient buffer: gradients are
 * reduced across the data-parallel group in contiguous buckets of whole parameters.
 *
 * Buckets are built in backward order, from the end of the flat buffer towards its start
 * (Megatron iterates its parameters in reverse): a bucket is closed once it holds at least
 * bucket_size elements, so buckets[0] holds the head and the last layers, the last bucket the
 * embedding. bucket_size is --ddp-bucket-size, or Megatron's default max(40M, 1M x DP); without
 * --overlap-grad-reduce Megatron does not bucket at all (bucket_size = None: one bucket), nor
 * on pipeline stages after the first, and neither does megadlm. With the distributed optimizer and pipeline parallelism the word
 * embedding has a bucket of its own (Megatron's shared_embedding rule), so the first and last
 * stage shard it alike. A bucket never exceeds 2^30 elements (MPI counts are ints).
 *
 * Reduction: each bucket is scaled by 1/DP (Megatron's gradient_scaling_factor) and summed
 * across DP: all-reduce, or reduce-scatter with the distributed optimizer, after which this
 * rank's piece of each bucket holds the averaged gradients and the rest of the buffer is stale.
 *
 *  - without --overlap-grad-reduce: ddp_finish_grad_sync reduces every bucket (blocking), in
 *    backward order, after the last micro-batch's backward;
 *  - with it: the model's grads_done hook (ddp_grads_done) is armed for the last micro-batch
 *    only (ddp_set_last_microbatch); as soon as every element of a bucket has received that
 *    micro-batch's contribution, its nonblocking reduction starts (MPI_Iallreduce /
 *    MPI_Ireduce_scatter) while backward goes on; ddp_finish_grad_sync waits for all of them.
 *
 * Progress: Open MPI moves the bytes of a nonblocking collective only inside MPI calls (its
 * shared-memory and TCP transports have no progress thread). Every call of the hook (after
 * the head, after each layer, after the embedding) therefore runs MPI_Testsome over the
 * reductions in flight, which advances them by as much as is ready; what is left is completed
 * in ddp_finish_grad_sync. A progress thread of its own would have to share MPI with the TP
 * overlap's thread (MPI is initialised SERIALIZED: one thread in MPI at a time) and would take
 * a core from the OpenMP pool.
 *
 * Distributed optimizer shards (Megatron shards each bucket across DP): rank r owns a
 * contiguous piece of every bucket, the pieces in rank order. A bucket of n elements gives each
 * rank n / DP elements and n % DP ranks one more; which ranks get the extra ones rotates
 * continuously from bucket to bucket, so every rank owns floor(N/DP) or ceil(N/DP) elements of
 * the N in all (Megatron pads each bucket to a multiple of DP instead; the flat buffer here has
 * no padding). The optimizer allocates ceil(N/DP) elements of state on every rank.
 *
 * Instances (--num-distributed-optimizer-instances N, Megatron's intra/inter partial data-
 * parallel groups): the DP group's ranks form N instances of DP/N consecutive ranks each, and
 * each instance holds a full copy of the optimizer state, sharded over its own ranks as above.
 * A bucket is scaled by 1/DP, reduce-scattered within the instance, then each piece is
 * all-reduced across the instances (between the ranks that hold the same piece), so every
 * instance's pieces hold the average over all DP ranks; parameters are all-gathered within the
 * instance. With N = 1 the instance is the DP group and nothing changes.
 *
 * Parameter all-gather (Megatron's start_param_sync / finish_param_sync of its buckets): with
 * the distributed optimizer each rank updates only its pieces, and ddp_start_param_sync
 * all-gathers every bucket's pieces of the parameters in place (the 16-bit copy under --bf16),
 * in forward order (the last bucket, the embedding's, first). Blocking, or with
 * --overlap-param-gather started nonblocking after the step: the model's params_needed hook (ddp_params_needed) waits, before
 * the embedding, each layer and the head run forward, for the buckets holding their
 * parameters and makes progress on the others, so the gathers of later layers run under the
 * forward of earlier ones. Anything else that reads the parameters (checkpoints) calls
 * ddp_finish_param_sync first. */
#ifndef MEGADLM_CORE_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H
#define MEGADLM_CORE_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor/tensor.h"

typedef struct {
    int overlap_grad_reduce;       /* --overlap-grad-reduce */
    int use_distributed_optimizer; /* --use-distributed-optimizer: reduce-scatter, and the
                                      parameters all-gathered after the step */
    int overlap_param_gather;      /* --overlap-param-gather: that all-gather under forward */
    int64_t bucket_size;           /* --ddp-bucket-size (elements); <= 0: Megatron's default */
    int num_instances;             /* --num-distributed-optimizer-instances (<= 1: one) */
    /* expert parallelism: the routed experts' tensors (param_tensor.expert_parallel) have
     * buckets of their own, reduced and sharded over the expert-data-parallel group (Megatron's
     * expert buffers) of edp_size ranks, this one edp_rank; 0: no such tensors */
    int edp_size, edp_rank;
} ddp_config;

typedef struct {
    size_t begin, end;  /* [begin, end) of the flat buffers: whole tensors */
    int expert;         /* routed experts' tensors (expert parallelism): the group below is
                           the expert-data-parallel one */
    int gsize, grank;   /* the group the bucket is reduced and sharded over, this rank in it */
    MPI_Comm comm;      /* that group (MPI_COMM_NULL without MPI) */
    size_t remaining;   /* elements whose last contribution is not reported yet (overlap) */
    int *counts;        /* [gsize] distributed optimizer: rank r's piece is */
    int *displs;        /* [gsize] [begin + displs[r], begin + displs[r] + counts[r]) */
    int started;        /* reduction started this iteration */
} ddp_bucket;

typedef struct {
    int num_buckets;
    unsigned long started_in_backward;   /* reductions started from the hook, all iterations */
    unsigned long started_at_finish;     /* reductions started in ddp_finish_grad_sync */
    unsigned long completed_in_backward; /* reductions the hook's progress calls completed */
    unsigned long iterations;            /* ddp_finish_grad_sync calls */
    double hook_seconds;                 /* time in the hook (scaling + MPI start/progress) */
    double finish_seconds;               /* time in ddp_finish_grad_sync: the exposed part */
    /* parameter all-gathers (distributed optimizer, --overlap-param-gather) */
    unsigned long gathers_started;       /* started nonblocking */
    unsigned long gathers_completed_in_forward; /* completed by the params_needed hook */
    unsigned long gathers_completed_at_finish;  /* completed by ddp_finish_param_sync */
    double forward_seconds;              /* time the params_needed hook spent in MPI */
} ddp_stats;

typedef struct ddp {
    ddp_config cfg;
    param_set *ps;
    int dp_size, dp_rank;   /* the group the buckets are sharded over: the DP group, or with
                               instances the rank's instance (DP / instances ranks) */
    int total_dp;           /* the whole DP group's size (gradients are averaged over it) */
    int instance;           /* which distributed optimizer instance the rank is in (0: first) */
    int pp_size;
    MPI_Comm comm;          /* the DP group, or the instance (MPI_COMM_NULL without MPI) */
    MPI_Comm inter;         /* with instances: the ranks holding the same pieces in every
                               instance (MPI_COMM_NULL: one instance) */
    size_t bucket_size;     /* effective, in elements (SIZE_MAX: one bucket) */
    int num_buckets;
    ddp_bucket *buckets;    /* backward order: buckets[0] ends at ps->numel */
    MPI_Request *reqs;      /* [num_buckets] gradient reductions in flight */
    MPI_Request *param_reqs; /* [num_buckets] parameter all-gathers in flight */
    int armed;              /* the hook starts reductions (last micro-batch, overlap) */
    ddp_stats stats;
} ddp;

/* Buckets over ps (whose buffers must outlive the ddp) in the DP group of parallel_state. */
ddp *ddp_create(param_set *ps, const ddp_config *cfg);
/* The same layout for any DP rank of any DP and PP size, without a communicator (tests). */
ddp *ddp_create_layout(param_set *ps, const ddp_config *cfg, int dp_size, int dp_rank,
                       int pp_size, int pp_rank);
void ddp_free(ddp *d);

/* Megatron's no_sync: 1 before the last micro-batch of an iteration (its backward finalises
 * the gradients), 0 otherwise. Arms the hook with --overlap-grad-reduce. */
void ddp_set_last_microbatch(ddp *d, int last);
/* The gpt_model grads_done hook (user = the ddp): [begin, end) has received the micro-batch's
 * last contribution. Starts every bucket that became complete, then makes progress. */
void ddp_grads_done(void *user, size_t begin, size_t end);
/* After the last backward: reduces (or waits for) every bucket. Afterwards grad holds the DP
 * average (all-reduce) or, with the distributed optimizer, this rank's pieces do. */
void ddp_finish_grad_sync(ddp *d);

/* Distributed optimizer, after the step updated this rank's pieces of ps->data: all-gathers
 * every bucket's pieces (blocking, or started nonblocking with overlap_param_gather). */
void ddp_start_param_sync(ddp *d);
/* The gpt_model params_needed hook (user = the ddp): waits for the gathers of the buckets that
 * overlap [begin, end), then makes progress on the others. */
void ddp_params_needed(void *user, size_t begin, size_t end);
/* Waits for every parameter gather in flight. */
void ddp_finish_param_sync(ddp *d);

/* This rank's piece of bucket b (the distributed optimizer's shard of it). */
static inline size_t ddp_piece_begin(const ddp *d, int b) {
    return d->buckets[b].begin + (size_t)d->buckets[b].displs[d->buckets[b].grank];
}
static inline size_t ddp_piece_numel(const ddp *d, int b) {
    return (size_t)d->buckets[b].counts[d->buckets[b].grank];
}

/* x summed over the ranks the buckets are sharded over (the DP group, or the rank's
 * distributed optimizer instance): the distributed optimizer's norm of its pieces. */
double ddp_sum_over_shards(const ddp *d, double x);

const ddp_stats *ddp_get_stats(const ddp *d);

#endif
