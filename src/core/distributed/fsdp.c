#include "core/distributed/fsdp.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/tensor/memory.h"
#include "core/tensor_parallel/layers.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* Where each bucket's piece starts in a shard (the distributed optimizer's state layout). */
static size_t *piece_offsets(const ddp *d, size_t shard_numel) {
    size_t *at = xcalloc((size_t)d->num_buckets, sizeof(size_t), "shard offsets");
    size_t n = 0;
    for (int b = 0; b < d->num_buckets; b++) {
        at[b] = n;
        n += ddp_piece_numel(d, b);
    }
    if (n > shard_numel) die(1, "internal error: a shard of %zu > %zu elements", n, shard_numel);
    return at;
}

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
    f->piece_at = piece_offsets(d, f->shard_numel);
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

/* ---- optim_grads_params ---- */

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The parts of [lo, hi) (landing at buf_at of the unit's buffer): one per bucket it meets. */
static void add_parts(fsdp_params *f, fsdp_unit *u, size_t lo, size_t hi, size_t buf_at) {
    const ddp *d = f->ddp;
    for (int b = 0; b < d->num_buckets; b++) {
        const ddp_bucket *bk = &d->buckets[b];
        size_t ilo = lo > bk->begin ? lo : bk->begin, ihi = hi < bk->end ? hi : bk->end;
        if (ilo >= ihi) continue;
        u->parts = xrealloc(u->parts, (size_t)(u->num_parts + 1) * sizeof(fsdp_part), "FSDP parts");
        fsdp_part *p = &u->parts[u->num_parts++];
        memset(p, 0, sizeof(*p)); /* send_at 0 where this rank has none of it */
        p->lo = ilo;
        p->hi = ihi;
        p->buf_at = buf_at + (ilo - lo);
        p->counts = xcalloc((size_t)d->dp_size, sizeof(int), "FSDP counts");
        p->displs = xcalloc((size_t)d->dp_size, sizeof(int), "FSDP displacements");
        for (int r = 0; r < d->dp_size; r++) {
            size_t pb = bk->begin + (size_t)bk->displs[r], pe = pb + (size_t)bk->counts[r];
            size_t a = pb > ilo ? pb : ilo, e = pe < ihi ? pe : ihi;
            if (a >= e) continue;
            p->counts[r] = (int)(e - a);
            p->displs[r] = (int)(a - ilo);
            if (r == d->dp_rank) p->send_at = f->piece_at[b] + (a - pb);
        }
    }
}

static void add_unit(fsdp_params *f, size_t lo, size_t hi, size_t lo2, size_t hi2) {
    f->units = xrealloc(f->units, (size_t)(f->num_units + 1) * sizeof(fsdp_unit), "FSDP units");
    fsdp_unit *u = &f->units[f->num_units++];
    memset(u, 0, sizeof(*u));
    u->num_ranges = hi2 > lo2 ? 2 : 1;
    u->lo[0] = lo, u->hi[0] = hi, u->lo[1] = lo2, u->hi[1] = hi2;
    add_parts(f, u, lo, hi, 0);
    u->numel = hi - lo;
    if (u->num_ranges == 2) {
        add_parts(f, u, lo2, hi2, u->numel);
        u->numel += hi2 - lo2;
    }
    size_t np = (size_t)(u->num_parts ? u->num_parts : 1);
    u->reqs = xcalloc(np, sizeof(MPI_Request), "FSDP requests");
    u->greqs = xcalloc(np, sizeof(MPI_Request), "FSDP requests");
    u->grecv = xcalloc(np, sizeof(float *), "FSDP reduce-scatter buffers");
    for (int k = 0; k < u->num_parts; k++) u->reqs[k] = u->greqs[k] = MPI_REQUEST_NULL;
}

fsdp_params *fsdp_params_create(param_set *ps, ddp *d, const size_t *bounds, int num_layers,
                                int tied, int prefetch,
                                void (*set_data)(void *, size_t, size_t, void *), void *user) {
    if (!ps->data_bf16 && !ps->data) die(1, "internal error: FSDP without parameters");
    fsdp_params *f = xcalloc(1, sizeof(fsdp_params), "sharded parameters");
    f->half = ps->data_bf16 != NULL;
    f->es = f->half ? sizeof(uint16_t) : sizeof(float);
    f->ddp = d;
    f->ps = ps;
    f->prefetch = prefetch;
    f->set_data = set_data;
    f->set_data_user = user;
    f->last = -1;
    f->dir = 1;
    f->shard_numel = (ps->numel + (size_t)d->dp_size - 1) / (size_t)d->dp_size;
    f->piece_at = piece_offsets(d, f->shard_numel);
    f->shard = mem_alloc(MEM_PARAMS, f->shard_numel * f->es,
                         f->half ? "16-bit parameters (shard)" : "parameters (shard)");
    if (bounds[0] > 0) add_unit(f, 0, bounds[0], 0, 0);
    for (int l = 0; l < num_layers; l++) add_unit(f, bounds[l], bounds[l + 1], 0, 0);
    f->head_unit = -1;
    if (ps->numel > bounds[num_layers] || tied) {
        add_unit(f, bounds[num_layers], ps->numel, 0, tied ? bounds[0] : 0);
        f->head_unit = f->num_units - 1;
    }
    fsdp_params_dematerialize(f, 1);
    return f;
}

void fsdp_params_free(fsdp_params *f) {
    if (!f) return;
    for (int u = 0; u < f->num_units; u++) {
        fsdp_unit *un = &f->units[u];
        if (un->in_flight) MPI_Waitall(un->num_parts, un->reqs, MPI_STATUSES_IGNORE);
        if (un->g_in_flight) MPI_Waitall(un->num_parts, un->greqs, MPI_STATUSES_IGNORE);
        mem_free(un->buf);
        mem_free(un->gbuf);
        for (int k = 0; k < un->num_parts; k++) {
            free(un->parts[k].counts);
            free(un->parts[k].displs);
            mem_free(un->grecv[k]);
        }
        free_all(un->parts, un->reqs, un->greqs, un->grecv);
    }
    mem_free(f->shard);
    free_all(f->units, f->piece_at, f);
}

static int single(const fsdp_params *f) {
    return f->ddp->dp_size == 1 || f->ddp->comm == MPI_COMM_NULL;
}

/* Element k of a parameter buffer (fp32, or 16-bit under --bf16). */
static void *at_elem(const fsdp_params *f, const void *base, size_t k) {
    return (char *)base + k * f->es;
}
static MPI_Datatype elem_type(const fsdp_params *f) {
    return f->half ? MPI_UINT16_T : MPI_FLOAT;
}

/* Starts (or, blocking, runs) unit u's gathers into a new buffer. */
static void gather_unit(fsdp_params *f, fsdp_unit *u, int nonblocking) {
    u->buf = mem_alloc(MEM_PARAMS, u->numel * f->es, "gathered parameters");
    f->gathered_bytes += u->numel * f->es;
    if (f->gathered_bytes > f->stats.peak_gathered_bytes)
        f->stats.peak_gathered_bytes = f->gathered_bytes;
    f->stats.bytes += (double)(u->numel * f->es);
    int me = f->ddp->dp_rank;
    MPI_Datatype t = elem_type(f);
    for (int k = 0; k < u->num_parts; k++) {
        const fsdp_part *p = &u->parts[k];
        const void *send = at_elem(f, f->shard, p->send_at);
        void *recv = at_elem(f, u->buf, p->buf_at);
        if (single(f))
            memcpy(recv, send, (p->hi - p->lo) * f->es);
        else if (nonblocking)
            MPI_Iallgatherv(send, p->counts[me], t, recv, p->counts, p->displs, t,
                            f->ddp->comm, &u->reqs[k]);
        else
            MPI_Allgatherv(send, p->counts[me], t, recv, p->counts, p->displs, t, f->ddp->comm);
    }
    u->in_flight = nonblocking && !single(f);
}

static void point_unit(fsdp_params *f, const fsdp_unit *u, void *buf) {
    size_t at = 0;
    for (int r = 0; r < u->num_ranges; r++) {
        f->set_data(f->set_data_user, u->lo[r], u->hi[r], buf ? at_elem(f, buf, at) : NULL);
        at += u->hi[r] - u->lo[r];
    }
}

static void wait_unit(fsdp_unit *u) {
    if (!u->in_flight) return;
    MPI_Waitall(u->num_parts, u->reqs, MPI_STATUSES_IGNORE);
    u->in_flight = 0;
}

static void release_unit(fsdp_params *f, fsdp_unit *u) {
    wait_unit(u);
    point_unit(f, u, NULL);
    mem_free(u->buf);
    u->buf = NULL;
    u->in_use = 0;
    f->gathered_bytes -= u->numel * f->es;
}

/* ---- per-unit gradients ---- */

static int unit_of(const fsdp_params *f, size_t begin, size_t end);

static void point_grads(fsdp_params *f, const fsdp_unit *u, float *buf) {
    size_t at = 0;
    for (int r = 0; r < u->num_ranges; r++) {
        f->set_grad(f->set_data_user, u->lo[r], u->hi[r], buf ? buf + at : NULL);
        at += u->hi[r] - u->lo[r];
    }
}

static void grad_buffer(fsdp_params *f, fsdp_unit *u) {
    u->gbuf = mem_alloc_floats(MEM_GRADS, u->numel, "gradients (one unit)");
    memset(u->gbuf, 0, u->numel * sizeof(float));
    f->grad_bytes += u->numel * sizeof(float);
    if (f->grad_bytes > f->stats.peak_grad_bytes) f->stats.peak_grad_bytes = f->grad_bytes;
    point_grads(f, u, u->gbuf);
}

/* Unit u's reduce-scatters are complete: this rank's elements into the shard (summed across
 * distributed optimizer instances first), the buffers freed. */
static void finish_grads(fsdp_params *f, fsdp_unit *u) {
    const ddp *d = f->ddp;
    if (u->g_in_flight) MPI_Waitall(u->num_parts, u->greqs, MPI_STATUSES_IGNORE);
    u->g_in_flight = 0;
    for (int k = 0; k < u->num_parts; k++) {
        const fsdp_part *p = &u->parts[k];
        size_t n = (size_t)p->counts[d->dp_rank];
        if (d->inter != MPI_COMM_NULL && n > 0)
            MPI_Allreduce(MPI_IN_PLACE, u->grecv[k], (int)n, MPI_FLOAT, MPI_SUM, d->inter);
        float *dst = f->grads->grad_shard + p->send_at;
        const float *src = u->grecv[k];
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) dst[i] += src[i];
        mem_free(u->grecv[k]);
        u->grecv[k] = NULL;
    }
    mem_free(u->gbuf);
    u->gbuf = NULL;
    f->grad_bytes -= u->numel * sizeof(float);
}

/* Completes the reduce-scatters in flight that are done. */
static void progress_grads(fsdp_params *f) {
    for (int v = 0; v < f->num_units; v++) {
        fsdp_unit *u = &f->units[v];
        if (!u->g_in_flight) continue;
        int flag = 0;
        MPI_Testall(u->num_parts, u->greqs, &flag, MPI_STATUSES_IGNORE);
        if (flag) {
            u->g_in_flight = 0;
            finish_grads(f, u);
        }
    }
}

/* The partial gradients of the unit's tensors summed across TP (finalize_model_grads' step 2,
 * per unit). */
static void tp_partial_sums(fsdp_params *f, fsdp_unit *u) {
    const param_set *ps = f->ps;
    size_t at = 0;
    for (int r = 0; r < u->num_ranges; r++) {
        for (int i = 0; i < ps->count; i++) {
            const param_tensor *t = &ps->tensors[i];
            if (t->tp_allreduce_grad && t->offset >= u->lo[r] && t->offset < u->hi[r])
                tp_all_reduce_sum(u->gbuf + at + (t->offset - u->lo[r]), t->numel);
        }
        at += u->hi[r] - u->lo[r];
    }
}

static void reduce_unit(fsdp_params *f, fsdp_unit *u) {
    const ddp *d = f->ddp;
    const float inv = 1.0f / (float)d->total_dp; /* Megatron's gradient_scaling_factor */
    float *g = u->gbuf;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < u->numel; i++) g[i] *= inv;
    tp_partial_sums(f, u);
    point_grads(f, u, NULL); /* the model is done with them */
    int me = d->dp_rank;
    for (int k = 0; k < u->num_parts; k++) {
        const fsdp_part *p = &u->parts[k];
        size_t n = (size_t)p->counts[me];
        u->grecv[k] = mem_alloc_floats(MEM_GRADS, n ? n : 1, "gradients (reduce-scattered)");
        if (single(f))
            memcpy(u->grecv[k], g + p->buf_at, n * sizeof(float));
        else if (f->reduce_nonblocking)
            MPI_Ireduce_scatter(g + p->buf_at, u->grecv[k], p->counts, MPI_FLOAT, MPI_SUM,
                                d->comm, &u->greqs[k]);
        else
            MPI_Reduce_scatter(g + p->buf_at, u->grecv[k], p->counts, MPI_FLOAT, MPI_SUM,
                               d->comm);
    }
    f->stats.reduced++;
    u->g_in_flight = f->reduce_nonblocking && !single(f);
    if (!u->g_in_flight) finish_grads(f, u);
}

void fsdp_params_shard_grads(fsdp_params *f, fsdp_grads *g, int nonblocking,
                             void (*set_grad)(void *, size_t, size_t, float *)) {
    f->grads = g;
    f->reduce_nonblocking = nonblocking;
    f->set_grad = set_grad;
}

void fsdp_params_training(fsdp_params *f, int on) { f->training = on; }

void fsdp_params_backward(fsdp_params *f, int on) {
    f->backward = on;
    if (on) return;
    for (int v = 0; v < f->num_units; v++) {
        fsdp_unit *u = &f->units[v];
        if (u->g_in_flight) finish_grads(f, u);
        if (u->gbuf) die(1, "internal error: unit %d's gradients were not reduced", v);
    }
}

void fsdp_params_grads_done(void *user, size_t begin, size_t end) {
    fsdp_params *f = user;
    if (begin == end) return;
    fsdp_unit *u = &f->units[unit_of(f, begin, end)];
    if (!u->gbuf) die(1, "internal error: gradients of [%zu, %zu) without a buffer", begin, end);
    reduce_unit(f, u);
    progress_grads(f);
}

static int unit_of(const fsdp_params *f, size_t begin, size_t end) {
    for (int u = 0; u < f->num_units; u++)
        if (f->units[u].lo[0] == begin && f->units[u].hi[0] == end) return u;
    die(1, "internal error: no FSDP unit holds parameters [%zu, %zu)", begin, end);
    return -1;
}

void fsdp_params_needed(void *user, size_t begin, size_t end) {
    fsdp_params *f = user;
    if (begin == end) return;
    int k = unit_of(f, begin, end);
    fsdp_unit *u = &f->units[k];
    double t0 = now_seconds();
    f->stats.needed++;
    /* the direction of travel: forward from the embedding, backward from the head, else as
     * the last step went (a recomputed layer asked for again keeps it) */
    if (k == 0)
        f->dir = 1;
    else if (k == f->num_units - 1)
        f->dir = -1;
    else if (f->last >= 0 && k != f->last)
        f->dir = k > f->last ? 1 : -1;
    f->last = k;
    int next = k + f->dir;
    for (int v = 0; v < f->num_units; v++) /* a prefetch that is neither this unit nor next */
        if (v != k && v != next && f->units[v].buf && !f->units[v].in_use)
            release_unit(f, &f->units[v]);
    if (!u->buf) {
        gather_unit(f, u, 0);
        f->stats.blocking++;
    } else if (!u->in_use) {
        wait_unit(u);
        f->stats.prefetch_used++;
    }
    u->in_use = 1;
    f->stats.exposed_seconds += now_seconds() - t0;
    point_unit(f, u, u->buf);
    if (f->grads && !u->gbuf && (f->backward || (f->training && k == f->head_unit)))
        grad_buffer(f, u);
    progress_grads(f);
    if (f->prefetch && next >= 0 && next < f->num_units && !f->units[next].buf) {
        gather_unit(f, &f->units[next], 1);
        f->stats.prefetched++;
    }
}

void fsdp_params_drop(fsdp_params *f) {
    for (int v = 0; v < f->num_units; v++)
        if (f->units[v].buf && !f->units[v].in_use) release_unit(f, &f->units[v]);
}

void fsdp_params_done(void *user, size_t begin, size_t end) {
    fsdp_params *f = user;
    if (begin == end) return;
    release_unit(f, &f->units[unit_of(f, begin, end)]);
    for (int v = 0; v < f->num_units; v++) /* progress on a prefetch in flight */
        if (f->units[v].in_flight) {
            int flag = 0;
            MPI_Testall(f->units[v].num_parts, f->units[v].reqs, &flag, MPI_STATUSES_IGNORE);
            if (flag) f->units[v].in_flight = 0;
        }
}

/* The model's whole parameter buffer: params.data, or under --bf16 its 16-bit copy. */
static void **whole(const fsdp_params *f) {
    return f->half ? (void **)&f->ps->data_bf16 : (void **)&f->ps->data;
}

void fsdp_params_materialize(fsdp_params *f) {
    param_set *ps = f->ps;
    const ddp *d = f->ddp;
    void **w = whole(f);
    if (*w) die(1, "internal error: FSDP parameters materialized twice");
    *w = mem_alloc(MEM_PARAMS, ps->numel * f->es, "parameters (whole, checkpoint)");
    for (int b = 0; b < d->num_buckets; b++) {
        const ddp_bucket *bk = &d->buckets[b];
        const void *send = at_elem(f, f->shard, f->piece_at[b]);
        if (single(f))
            memcpy(at_elem(f, *w, bk->begin), send, (bk->end - bk->begin) * f->es);
        else
            MPI_Allgatherv(send, bk->counts[d->dp_rank], elem_type(f), at_elem(f, *w, bk->begin),
                           bk->counts, bk->displs, elem_type(f), d->comm);
    }
}

void fsdp_params_dematerialize(fsdp_params *f, int keep) {
    param_set *ps = f->ps;
    const ddp *d = f->ddp;
    void **w = whole(f);
    for (int b = 0; keep && b < d->num_buckets; b++)
        memcpy(at_elem(f, f->shard, f->piece_at[b]), at_elem(f, *w, ddp_piece_begin(d, b)),
               ddp_piece_numel(d, b) * f->es);
    mem_free(*w);
    *w = NULL;
    f->set_data(f->set_data_user, 0, ps->numel, NULL);
}
