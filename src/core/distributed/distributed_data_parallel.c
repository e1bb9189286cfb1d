#include "core/distributed/distributed_data_parallel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel_state.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* MPI counts and displacements are ints. */
#define DDP_MAX_BUCKET ((size_t)1 << 30)

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Megatron's _does_param_require_new_bucket: with the distributed optimizer, the word embedding
 * shared by the first and last pipeline stage gets a bucket of its own. The tensor is known by
 * its mark in the parameter table (gpt_param_table sets it on the embedding and on the last stage's
 * copy), not by its name. */
static int own_bucket(const ddp *d, const param_tensor *t) {
    return d->cfg.use_distributed_optimizer && d->pp_size > 1 && t->word_embedding;
}

static void add_bucket(ddp *d, size_t begin, size_t end, int *cap, int expert) {
    if (d->num_buckets == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        d->buckets = xrealloc(d->buckets, (size_t)*cap * sizeof(ddp_bucket), "gradient buckets");
    }
    ddp_bucket *b = &d->buckets[d->num_buckets++];
    memset(b, 0, sizeof(*b));
    b->begin = begin;
    b->end = end;
    b->remaining = end - begin;
    b->expert = expert;
    b->gsize = expert ? d->cfg.edp_size : d->dp_size;
    b->grank = expert ? d->cfg.edp_rank : d->dp_rank;
    b->comm = MPI_COMM_NULL;
    b->counts = xcalloc((size_t)b->gsize, sizeof(int), "bucket shard counts");
    b->displs = xcalloc((size_t)b->gsize, sizeof(int), "bucket shard offsets");
}

/* Pieces of bucket b: n / G each (G its group's ranks), the n % G extra elements to the ranks
 * after rot[kind] (the experts' buckets rotate on their own). */
static void split_bucket(ddp *d, ddp_bucket *b, int *rot) {
    (void)d;
    const int G = b->gsize;
    int *r0 = &rot[b->expert];
    size_t n = b->end - b->begin, q = n / (size_t)G, r = n % (size_t)G;
    for (int k = 0; k < G; k++) b->counts[k] = (int)q;
    for (size_t k = 0; k < r; k++) b->counts[(*r0 + (int)k) % G]++;
    *r0 = (int)((*r0 + r) % (size_t)G);
    for (int k = 1; k < G; k++) b->displs[k] = b->displs[k - 1] + b->counts[k - 1];
}

/* The gradients are reduced over DP x CP (Megatron's data-parallel group with context
 * parallelism): context-parallel ranks hold the same weights and gradients of different tokens;
 * without CP that group is DP itself. */
ddp *ddp_create(param_set *ps, const ddp_config *cfg) {
    const parallel_state *st = parallel_get();
    int n = cfg->num_instances > 1 ? cfg->num_instances : 1;
    if (st->dp_cp_size % n != 0)
        die(1, "internal error: %d distributed optimizer instances over %d DP ranks", n,
            st->dp_cp_size);
    int intra = st->dp_cp_size / n;
    ddp_config c = *cfg;
    /* Megatron's default bucket size counts the whole DP group */
    if (c.overlap_grad_reduce && c.bucket_size <= 0) {
        c.bucket_size = (int64_t)1000000 * st->dp_cp_size;
        if (c.bucket_size < 40000000) c.bucket_size = 40000000;
    }
    if (st->ep_size > 1) { /* the experts' buckets: over the expert-data-parallel group */
        c.edp_size = st->edp_size;
        c.edp_rank = st->edp_rank;
    }
    ddp *d = ddp_create_layout(ps, &c, intra, st->dp_cp_rank % intra, st->pp_size, st->pp_rank);
    d->cfg.bucket_size = cfg->bucket_size;
    d->total_dp = st->dp_cp_size;
    d->instance = st->dp_cp_rank / intra;
    if (!st->mpi) return d;
    if (n == 1) {
        d->comm = st->dp_cp;
    } else {
        MPI_Comm_split(st->dp_cp, d->instance, st->dp_cp_rank, &d->comm);
        MPI_Comm_split(st->dp_cp, st->dp_cp_rank % intra, st->dp_cp_rank, &d->inter);
    }
    for (int b = 0; b < d->num_buckets; b++)
        d->buckets[b].comm = d->buckets[b].expert ? st->edp : d->comm;
    return d;
}

ddp *ddp_create_layout(param_set *ps, const ddp_config *cfg, int dp_size, int dp_rank,
                       int pp_size, int pp_rank) {
    ddp *d = xcalloc(1, sizeof(ddp), "data-parallel state");
    d->cfg = *cfg;
    d->ps = ps;
    d->dp_size = dp_size;
    d->dp_rank = dp_rank;
    d->total_dp = dp_size;
    d->pp_size = pp_size;
    d->comm = MPI_COMM_NULL;
    d->inter = MPI_COMM_NULL;
    /* Megatron: max(40000000, 1000000 * DP) unless given; no bucketing without overlap, nor on
     * pipeline stages after the first (their reduction is not on the critical path) */
    size_t deflt = (size_t)1000000 * (size_t)d->dp_size;
    if (deflt < 40000000) deflt = 40000000;
    d->bucket_size = !cfg->overlap_grad_reduce || pp_rank > 0 ? SIZE_MAX
                     : cfg->bucket_size > 0                   ? (size_t)cfg->bucket_size
                                                              : deflt;

    int cap = 0, kind = 0; /* kind: the open bucket holds experts' tensors */
    size_t end = ps->numel, count = 0; /* the open bucket: [end - count, end) */
    for (int i = ps->count - 1; i >= 0; i--) {
        const param_tensor *t = &ps->tensors[i];
        int own = own_bucket(d, t), expert = t->expert_parallel && d->cfg.edp_size > 0;
        if (t->numel > DDP_MAX_BUCKET)
            die(1, "%s: %zu elements, more than a data-parallel bucket can hold",
                           t->name, t->numel);
        if (count > 0 && (own || count + t->numel > DDP_MAX_BUCKET || expert != kind)) {
            add_bucket(d, end - count, end, &cap, kind);
            end -= count;
            count = 0;
        }
        kind = expert;
        count += t->numel;
        if (count >= d->bucket_size || own) {
            add_bucket(d, end - count, end, &cap, kind);
            end -= count;
            count = 0;
        }
    }
    if (count > 0) add_bucket(d, end - count, end, &cap, kind);

    /* the rotation starts at the shared embedding's bucket, so every stage shards it alike */
    int rot[2] = {0, 0};
    for (int b = 0; b < d->num_buckets; b++)
        for (int i = 0; i < ps->count; i++)
            if (ps->tensors[i].offset == d->buckets[b].begin && own_bucket(d, &ps->tensors[i]))
                split_bucket(d, &d->buckets[b], rot);
    for (int b = 0; b < d->num_buckets; b++) {
        int shared = 0;
        for (int i = 0; i < ps->count; i++)
            if (ps->tensors[i].offset == d->buckets[b].begin && own_bucket(d, &ps->tensors[i]))
                shared = 1;
        if (!shared) split_bucket(d, &d->buckets[b], rot);
    }

    d->reqs = xcalloc((size_t)d->num_buckets + 1, sizeof(MPI_Request), "bucket requests");
    d->param_reqs =
        xcalloc((size_t)d->num_buckets + 1, sizeof(MPI_Request), "parameter gather requests");
    for (int b = 0; b < d->num_buckets; b++) d->reqs[b] = d->param_reqs[b] = MPI_REQUEST_NULL;
    d->stats.num_buckets = d->num_buckets;
    return d;
}

void ddp_free(ddp *d) {
    if (!d) return;
    ddp_finish_param_sync(d);
    for (int b = 0; b < d->num_buckets; b++) {
        if (d->reqs[b] != MPI_REQUEST_NULL) MPI_Wait(&d->reqs[b], MPI_STATUS_IGNORE);
        free(d->buckets[b].counts);
        free(d->buckets[b].displs);
    }
    free(d->buckets);
    free(d->reqs);
    free(d->param_reqs);
    if (d->inter != MPI_COMM_NULL) { /* the instance's communicators are the ddp's own */
        MPI_Comm_free(&d->inter);
        MPI_Comm_free(&d->comm);
    }
    free(d);
}

void ddp_set_last_microbatch(ddp *d, int last) {
    d->armed = last && d->cfg.overlap_grad_reduce && d->total_dp > 1;
}

/* Scales bucket b by 1/DP and starts (overlap) or runs its reduction (within the instance). */
static void start_bucket(ddp *d, int b, int nonblocking) {
    ddp_bucket *bk = &d->buckets[b];
    float *g = d->ps->grad + bk->begin;
    size_t n = bk->end - bk->begin;
    const float inv = 1.0f / (float)d->total_dp;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= inv;
    if (d->cfg.use_distributed_optimizer) {
        if (nonblocking)
            MPI_Ireduce_scatter(MPI_IN_PLACE, g, bk->counts, MPI_FLOAT, MPI_SUM, bk->comm,
                                &d->reqs[b]);
        else
            MPI_Reduce_scatter(MPI_IN_PLACE, g, bk->counts, MPI_FLOAT, MPI_SUM, bk->comm);
    } else {
        if (nonblocking)
            MPI_Iallreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, bk->comm, &d->reqs[b]);
        else
            MPI_Allreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, bk->comm);
    }
    bk->started = 1;
}

/* Advances every reduction in flight as far as it can go now. */
static void progress(ddp *d) {
    int in_flight = 0;
    for (int b = 0; b < d->num_buckets; b++) in_flight |= d->reqs[b] != MPI_REQUEST_NULL;
    if (!in_flight) return;
    int outcount = 0;
    int idx[d->num_buckets];
    MPI_Testsome(d->num_buckets, d->reqs, &outcount, idx, MPI_STATUSES_IGNORE);
    if (outcount != MPI_UNDEFINED) d->stats.completed_in_backward += (unsigned long)outcount;
}

void ddp_grads_done(void *user, size_t begin, size_t end) {
    ddp *d = user;
    if (!d->armed) return;
    double t0 = now_seconds();
    for (int b = 0; b < d->num_buckets; b++) {
        ddp_bucket *bk = &d->buckets[b];
        size_t lo = begin > bk->begin ? begin : bk->begin, hi = end < bk->end ? end : bk->end;
        if (bk->started || lo >= hi) continue;
        if (hi - lo > bk->remaining)
            die(1, "internal error: gradients [%zu, %zu) reported twice", lo, hi);
        bk->remaining -= hi - lo;
        if (bk->remaining == 0) {
            start_bucket(d, b, 1);
            d->stats.started_in_backward++;
        }
    }
    progress(d);
    d->stats.hook_seconds += now_seconds() - t0;
}

void ddp_finish_grad_sync(ddp *d) {
    double t0 = now_seconds();
    d->armed = 0;
    d->stats.iterations++;
    if (d->total_dp > 1) {
        /* without overlap: every bucket here, blocking, in backward order; with it: the ones
         * the hook did not start (none when every range was reported), then wait for all */
        for (int b = 0; b < d->num_buckets; b++)
            if (!d->buckets[b].started) {
                start_bucket(d, b, d->cfg.overlap_grad_reduce);
                d->stats.started_at_finish++;
            }
        MPI_Waitall(d->num_buckets, d->reqs, MPI_STATUSES_IGNORE);
        if (d->cfg.use_distributed_optimizer) /* in-place reduce-scatter: result at the start */
            for (int b = 0; b < d->num_buckets; b++) {
                float *g = d->ps->grad;
                if (d->buckets[b].displs[d->buckets[b].grank] > 0)
                    memmove(g + ddp_piece_begin(d, b), g + d->buckets[b].begin,
                            ddp_piece_numel(d, b) * sizeof(float));
            }
        if (d->inter != MPI_COMM_NULL) /* instances: each piece summed across them */
            for (int b = 0; b < d->num_buckets; b++)
                MPI_Allreduce(MPI_IN_PLACE, d->ps->grad + ddp_piece_begin(d, b),
                              (int)ddp_piece_numel(d, b), MPI_FLOAT, MPI_SUM, d->inter);
    }
    for (int b = 0; b < d->num_buckets; b++) {
        d->buckets[b].started = 0;
        d->buckets[b].remaining = d->buckets[b].end - d->buckets[b].begin;
    }
    d->stats.finish_seconds += now_seconds() - t0;
}

/* ---- the parameter all-gather (distributed optimizer) ---- */

/* In place on the parameters the model reads: params.data (fp32, MPI_FLOAT) or, under
 * --bf16, the 16-bit copy (2-byte elements: the optimizer rounded its pieces into it), with
 * the same element counts and displacements. */
static void gather_bucket(ddp *d, int b, int nonblocking) {
    const ddp_bucket *bk = &d->buckets[b];
    int half = d->ps->data_bf16 != NULL;
    void *at = half ? (void *)(d->ps->data_bf16 + bk->begin) : (void *)(d->ps->data + bk->begin);
    MPI_Datatype type = half ? MPI_UINT16_T : MPI_FLOAT;
    if (nonblocking)
        MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at, bk->counts, bk->displs, type,
                        bk->comm, &d->param_reqs[b]);
    else
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, at, bk->counts, bk->displs, type,
                       bk->comm);
}

void ddp_start_param_sync(ddp *d) {
    if (!d->cfg.use_distributed_optimizer || d->dp_size == 1) return;
    /* forward order: the last bucket holds the embedding */
    for (int b = d->num_buckets - 1; b >= 0; b--) {
        gather_bucket(d, b, d->cfg.overlap_param_gather);
        if (d->cfg.overlap_param_gather) d->stats.gathers_started++;
    }
}

void ddp_params_needed(void *user, size_t begin, size_t end) {
    ddp *d = user;
    if (d->dp_size == 1) return;
    double t0 = now_seconds();
    int any = 0;
    for (int b = 0; b < d->num_buckets; b++) {
        if (d->param_reqs[b] == MPI_REQUEST_NULL) continue;
        any = 1;
        if (d->buckets[b].begin < end && begin < d->buckets[b].end) {
            MPI_Wait(&d->param_reqs[b], MPI_STATUS_IGNORE);
            d->stats.gathers_completed_in_forward++;
        }
    }
    if (any) { /* progress on the gathers of later layers */
        int outcount, idx[d->num_buckets];
        MPI_Testsome(d->num_buckets, d->param_reqs, &outcount, idx, MPI_STATUSES_IGNORE);
        if (outcount != MPI_UNDEFINED)
            d->stats.gathers_completed_in_forward += (unsigned long)outcount;
        d->stats.forward_seconds += now_seconds() - t0;
    }
}

void ddp_finish_param_sync(ddp *d) {
    for (int b = 0; b < d->num_buckets; b++)
        if (d->param_reqs[b] != MPI_REQUEST_NULL) {
            MPI_Wait(&d->param_reqs[b], MPI_STATUS_IGNORE);
            d->stats.gathers_completed_at_finish++;
        }
}

double ddp_sum_over_shards(const ddp *d, double x) {
    if (d->comm != MPI_COMM_NULL && d->dp_size > 1)
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, MPI_SUM, d->comm);
    return x;
}

const ddp_stats *ddp_get_stats(const ddp *d) { return &d->stats; }
