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

/* Tensors in the whole model's order (their init stream is their index in it). */
static int by_init_stream(const void *x, const void *y) {
    uint64_t a = ((const param_tensor *)x)->init_stream, b = ((const param_tensor *)y)->init_stream;
    return a < b ? -1 : a > b;
}

/* Pipeline: the stages' whole tensors (each stage's, on its TP rank 0 of replica 0) are sent
 * to the first stage, which writes one checkpoint of the whole model, its tensors in the whole
 * model's order (with interleaving a stage holds several runs of layers). The last stage's
 * copy of a tied embedding is not sent: the first stage's is the one saved. */
static int save_pipeline(const char *dir, const param_set *stage, const ckpt_state *st,
                         int with_optimizer, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    if (ps->pp_size == 1) return ckpt_save(dir, stage, st, with_optimizer, err, errlen);
    int nbuf = with_optimizer ? 3 : 1;
    if (ps->pp_rank != 0) {
        /* this stage's tensors (without a shared copy) and their buffers, in order */
        int count = 0;
        param_tensor *t = malloc(stage->count * sizeof(param_tensor));
        for (int i = 0; i < stage->count; i++)
            if (!stage->tensors[i].pp_shared_copy) t[count++] = stage->tensors[i];
        MPI_Send(&count, 1, MPI_INT, 0, 0, ps->pp);
        MPI_Send(t, count * (int)sizeof(param_tensor), MPI_BYTE, 0, 1, ps->pp);
        const float *bufs[3] = {stage->data, stage->exp_avg, stage->exp_avg_sq};
        for (int k = 0; k < nbuf; k++)
            for (int i = 0; i < count; i++)
                MPI_Send(bufs[k] + t[i].offset, (int)t[i].numel, MPI_FLOAT, 0, 2 + k, ps->pp);
        free(t);
        int rc;
        MPI_Bcast(&rc, 1, MPI_INT, 0, ps->pp);
        if (rc != 0) snprintf(err, errlen, "saving failed on the first pipeline stage");
        return rc;
    }
    /* first stage: the whole model = its own tensors, then every other stage's */
    param_set all = {0};
    int cap = stage->count;
    all.tensors = malloc(cap * sizeof(param_tensor));
    for (int i = 0; i < stage->count; i++) all.tensors[all.count++] = stage->tensors[i];
    int first_of[ps->pp_size + 1];
    first_of[0] = 0;
    for (int r = 1; r < ps->pp_size; r++) {
        int count;
        MPI_Recv(&count, 1, MPI_INT, r, 0, ps->pp, MPI_STATUS_IGNORE);
        first_of[r] = all.count;
        all.tensors = realloc(all.tensors, (all.count + count) * sizeof(param_tensor));
        MPI_Recv(all.tensors + all.count, count * (int)sizeof(param_tensor), MPI_BYTE, r, 1,
                 ps->pp, MPI_STATUS_IGNORE);
        all.count += count;
    }
    first_of[ps->pp_size] = all.count;
    for (int i = 0; i < all.count; i++) {
        all.tensors[i].offset = all.numel;
        all.numel += all.tensors[i].numel;
    }
    float **bufs[3] = {&all.data, &all.exp_avg, &all.exp_avg_sq};
    const float *mine[3] = {stage->data, stage->exp_avg, stage->exp_avg_sq};
    for (int k = 0; k < nbuf; k++) {
        *bufs[k] = mem_alloc_floats(MEM_OTHER, all.numel, "checkpoint (whole model)");
        for (int i = 0; i < stage->count; i++)
            memcpy(*bufs[k] + all.tensors[i].offset, mine[k] + stage->tensors[i].offset,
                   stage->tensors[i].numel * sizeof(float));
        for (int r = 1; r < ps->pp_size; r++)
            for (int i = first_of[r]; i < first_of[r + 1]; i++)
                MPI_Recv(*bufs[k] + all.tensors[i].offset, (int)all.tensors[i].numel, MPI_FLOAT,
                         r, 2 + k, ps->pp, MPI_STATUS_IGNORE);
    }
    qsort(all.tensors, (size_t)all.count, sizeof(param_tensor), by_init_stream);
    int rc = ckpt_save(dir, &all, st, with_optimizer, err, errlen);
    MPI_Bcast(&rc, 1, MPI_INT, 0, ps->pp);
    for (int k = 0; k < 3; k++) mem_free(*bufs[k]);
    free(all.tensors);
    return rc;
}

/* The tensor-parallel group of one stage: slices gathered to its TP rank 0, which passes the
 * stage's whole tensors on. */
static int save_stage(const char *dir, const param_set *local, const ckpt_state *st,
                      int with_optimizer, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    if (ps->tp_size == 1) return save_pipeline(dir, local, st, with_optimizer, err, errlen);
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
    if (ps->tp_rank == 0) rc = save_pipeline(dir, &whole, st, with_optimizer, err, errlen);
    free_whole(&whole);
    MPI_Bcast(&rc, 1, MPI_INT, 0, ps->tp);
    if (rc != 0 && ps->tp_rank != 0) snprintf(err, errlen, "saving failed on tensor-parallel rank 0");
    return rc;
}

/* Data-parallel replica 0 writes; every replica holds the same parameters, so the others only
 * wait for its status. */
int dist_ckpt_save(const char *dir, const param_set *local, const ckpt_state *st,
                   int with_optimizer, char *err, size_t errlen) {
    const parallel_state *ps = parallel_get();
    int rc = 0;
    if (ps->dp_rank == 0) rc = save_stage(dir, local, st, with_optimizer, err, errlen);
    if (ps->mpi && ps->dp_size > 1) {
        MPI_Bcast(&rc, 1, MPI_INT, 0, ps->dp);
        if (rc != 0 && ps->dp_rank != 0)
            snprintf(err, errlen, "saving failed on data-parallel rank 0");
    }
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
