#include "training/dist_checkpointing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"

/* A param_set with the same tensors at their whole shapes (buffers allocated as asked). */
static void whole_set(param_set *whole, const param_set *local, int with_optimizer) {
    memset(whole, 0, sizeof(*whole));
    whole->count = local->count;
    whole->tensors = malloc(local->count * sizeof(param_tensor));
    for (int i = 0; i < local->count; i++) {
        param_tensor *t = &whole->tensors[i];
        *t = local->tensors[i];
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = t->full_shape[d];
            t->numel *= (size_t)t->shape[d];
        }
        t->tp_split = TP_SPLIT_NONE;
        t->offset = whole->numel;
        whole->numel += t->numel;
    }
    whole->data = mem_alloc_floats(MEM_OTHER, whole->numel, "checkpoint (whole tensors)");
    if (with_optimizer) {
        whole->exp_avg = mem_alloc_floats(MEM_OTHER, whole->numel, "checkpoint exp_avg");
        whole->exp_avg_sq = mem_alloc_floats(MEM_OTHER, whole->numel, "checkpoint exp_avg_sq");
    }
}

static void free_whole(param_set *whole) {
    mem_free(whole->data);
    mem_free(whole->exp_avg);
    mem_free(whole->exp_avg_sq);
    free(whole->tensors);
}

/* Gathers one buffer kind (data, exp_avg or exp_avg_sq) of every tensor to TP rank 0. */
static void gather_buffer(float *whole_buf, const float *local_buf, const param_set *whole,
                          const param_set *local, float *scratch) {
    const parallel_state *ps = parallel_get();
    for (int i = 0; i < local->count; i++) {
        const param_tensor *lt = &local->tensors[i], *wt = &whole->tensors[i];
        const float *src = local_buf + lt->offset;
        if (lt->tp_split == TP_SPLIT_NONE) { /* identical on every rank: rank 0's copy */
            if (ps->tp_rank == 0) memcpy(whole_buf + wt->offset, src, lt->numel * sizeof(float));
            continue;
        }
        MPI_Gather(src, (int)lt->numel, MPI_FLOAT, scratch, (int)lt->numel, MPI_FLOAT, 0, ps->tp);
        if (ps->tp_rank == 0)
            for (int r = 0; r < ps->tp_size; r++)
                tp_shard_copy(scratch + (size_t)r * lt->numel, whole_buf + wt->offset, lt, r,
                              ps->tp_size, 0);
    }
}

/* The tensor-parallel group of data-parallel replica 0 writes; every replica holds the same
 * parameters, so the others only wait for its status. */
static int save_tp_group(const char *dir, const param_set *local, const ckpt_state *st,
                         int with_optimizer, char *err, size_t errlen);

int dist_ckpt_save(const char *dir, const param_set *local, const ckpt_state *st,
                   int with_optimizer, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    int rc = 0;
    if (ps->dp_rank == 0) rc = save_tp_group(dir, local, st, with_optimizer, err, errlen);
    if (ps->mpi && ps->dp_size > 1) {
        MPI_Bcast(&rc, 1, MPI_INT, 0, ps->dp);
        if (rc != 0 && ps->dp_rank != 0)
            snprintf(err, errlen, "saving failed on data-parallel rank 0");
    }
    return rc;
}

static int save_tp_group(const char *dir, const param_set *local, const ckpt_state *st,
                         int with_optimizer, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    if (ps->tp_size == 1) return ckpt_save(dir, local, st, with_optimizer, err, errlen);
    param_set whole;
    whole_set(&whole, local, with_optimizer);
    size_t max_numel = 0;
    for (int i = 0; i < local->count; i++)
        if (local->tensors[i].numel > max_numel) max_numel = local->tensors[i].numel;
    float *scratch = mem_alloc_floats(MEM_OTHER, max_numel * ps->tp_size, "checkpoint gather");
    gather_buffer(whole.data, local->data, &whole, local, scratch);
    if (with_optimizer) {
        gather_buffer(whole.exp_avg, local->exp_avg, &whole, local, scratch);
        gather_buffer(whole.exp_avg_sq, local->exp_avg_sq, &whole, local, scratch);
    }
    mem_free(scratch);
    int rc = 0;
    if (ps->tp_rank == 0) rc = ckpt_save(dir, &whole, st, with_optimizer, err, errlen);
    free_whole(&whole);
    MPI_Bcast(&rc, 1, MPI_INT, 0, ps->tp);
    if (rc != 0 && ps->tp_rank != 0) snprintf(err, errlen, "saving failed on tensor-parallel rank 0");
    return rc;
}

int dist_ckpt_load_tensors(const char *dir, int iteration, param_set *local, int with_optimizer,
                           char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    if (ps->tp_size == 1) return ckpt_load_tensors(dir, iteration, local, with_optimizer, err, errlen);
    param_set whole;
    whole_set(&whole, local, with_optimizer);
    int rc = ckpt_load_tensors(dir, iteration, &whole, with_optimizer, err, errlen);
    if (rc == 0) {
        for (int i = 0; i < local->count; i++) {
            param_tensor *lt = &local->tensors[i];
            const param_tensor *wt = &whole.tensors[i];
            float *bufs[3][2] = {{local->data, whole.data},
                                 {local->exp_avg, whole.exp_avg},
                                 {local->exp_avg_sq, whole.exp_avg_sq}};
            for (int k = 0; k < (with_optimizer ? 3 : 1); k++)
                tp_shard_copy(bufs[k][0] + lt->offset, bufs[k][1] + wt->offset, lt, ps->tp_rank,
                              ps->tp_size, 1);
        }
    }
    free_whole(&whole);
    return rc;
}
