/* Fully sharded data parallelism's gradient shard (Megatron-FSDP's optim_grads and
 * optim_grads_params; --data-parallel-sharding-strategy): each data-parallel rank keeps only its
 * pieces of the gradient buckets (core/distributed/distributed_data_parallel.h: the distributed
 * optimizer's pieces) across the iteration, not the whole gradient.
 *
 * Per micro-batch:
 *   fsdp_backward_begin  a whole-size gradient buffer (category gradients) is allocated,
 *                        zeroed, and the model's gradient pointers are set into it;
 *   (backward)           as the plain path; with --overlap-grad-reduce each bucket's
 *                        reduce-scatter starts as soon as the bucket is complete (the hook is
 *                        armed on every micro-batch, not only on the last);
 *   fsdp_backward_end    the remaining reduce-scatters (scaled by 1/DP, as Megatron), the
 *                        tensor-parallel sums of partial gradients (finalize_model_grads' step
 *                        2), then this rank's pieces are added into the shard and the buffer
 *                        is freed.
 * The shard therefore holds the sum over micro-batches of the DP-averaged gradients, which is
 * plain DP's gradient up to the order of the sums (losses within 1e-5, not bitwise). The shard
 * is laid out as the distributed optimizer's state (bucket order, piece by piece), so segment s
 * of the optimizer finds its gradients at grad_shard + segs[s].state. Its size is
 * ceil(N / DP) elements, as the optimizer state's, whatever this rank's pieces add up to.
 *
 * Between micro-batches and iterations the model holds no gradient buffer (params.grad is
 * NULL). Pipeline parallelism is refused by the arguments (its tied-embedding sum would need
 * the whole gradient of the embedding). */
#ifndef MEGADLM_CORE_DISTRIBUTED_FSDP_H
#define MEGADLM_CORE_DISTRIBUTED_FSDP_H

#include <stddef.h>

#include "core/distributed/distributed_data_parallel.h"
#include "core/tensor/tensor.h"

typedef struct {
    ddp *ddp;
    param_set *ps;
    size_t shard_numel;   /* ceil(N / DP) */
    float *grad_shard;    /* [shard_numel] MEM_GRADS: this rank's pieces, bucket order */
    size_t *piece_at;     /* [num_buckets] where bucket b's piece starts in grad_shard */
    /* re-points the model's gradient pointers at a buffer (NULL: none) */
    void (*set_grad)(void *user, float *grad);
    void *set_grad_user;
    unsigned long microbatches; /* backward passes reduced */
} fsdp_grads;

/* Takes over ps's gradients: frees ps->grad (set_grad(user, NULL) is called) and allocates the
 * shard. d must reduce-scatter (use_distributed_optimizer). */
fsdp_grads *fsdp_grads_create(param_set *ps, ddp *d, void (*set_grad)(void *, float *),
                              void *user);
void fsdp_grads_free(fsdp_grads *f);

/* Start of an iteration: the shard zeroed. */
void fsdp_grads_zero(fsdp_grads *f);
void fsdp_backward_begin(fsdp_grads *f);
void fsdp_backward_end(fsdp_grads *f);

#endif
