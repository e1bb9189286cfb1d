#include "core/distributed/fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

fsdp_grads *fsdp_grads_create(param_set *ps, ddp *d, void (*set_grad)(void *, float *),
                              void *user) {
    if (!d->cfg.use_distributed_optimizer)
        die(1, "internal error: sharded gradients without a reduce-scatter");
    fsdp_grads *f = xcalloc(1, sizeof(fsdp_grads), "sharded gradients");
    f->ddp = d;
    f->ps = ps;
    f->set_grad = set_grad;
    f->set_grad_user = user;
    f->shard_numel = (ps->numel + (size_t)d->dp_size - 1) / (size_t)d->dp_size;
    f->piece_at = xcalloc((size_t)d->num_buckets, sizeof(size_t), "gradient shard offsets");
    size_t at = 0;
    for (int b = 0; b < d->num_buckets; b++) {
        f->piece_at[b] = at;
        at += ddp_piece_numel(d, b);
    }
    if (at > f->shard_numel)
        die(1, "internal error: gradient shard of %zu > %zu elements", at, f->shard_numel);
    mem_free(ps->grad); /* the whole-size buffer lives only during a backward */
    ps->grad = NULL;
    set_grad(user, NULL);
    f->grad_shard = mem_alloc_floats(MEM_GRADS, f->shard_numel, "gradients (shard)");
    fsdp_grads_zero(f);
    return f;
}

void fsdp_grads_free(fsdp_grads *f) {
    if (!f) return;
    mem_free(f->grad_shard);
    free(f->piece_at);
    free(f);
}

void fsdp_grads_zero(fsdp_grads *f) {
    memset(f->grad_shard, 0, f->shard_numel * sizeof(float));
}

void fsdp_backward_begin(fsdp_grads *f) {
    param_set *ps = f->ps;
    if (ps->grad) die(1, "internal error: a backward began with gradients in place");
    ps->grad = mem_alloc_floats(MEM_GRADS, ps->numel, "gradients (one backward)");
    memset(ps->grad, 0, ps->numel * sizeof(float));
    f->set_grad(f->set_grad_user, ps->grad);
    /* every micro-batch's buckets reduce as they complete (Megatron's no_sync is off) */
    ddp_set_last_microbatch(f->ddp, 1);
}

void fsdp_backward_end(fsdp_grads *f) {
    param_set *ps = f->ps;
    ddp *d = f->ddp;
    ddp_finish_grad_sync(d); /* this rank's pieces: the DP-averaged micro-batch gradients */
    tp_allreduce_partial_grads(ps);
    for (int b = 0; b < d->num_buckets; b++) {
        const float *src = ps->grad + ddp_piece_begin(d, b);
        float *dst = f->grad_shard + f->piece_at[b];
        size_t n = ddp_piece_numel(d, b);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
    }
    mem_free(ps->grad);
    ps->grad = NULL;
    f->set_grad(f->set_grad_user, NULL);
    f->microbatches++;
}
