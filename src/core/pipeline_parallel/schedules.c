#include "core/pipeline_parallel/schedules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/models/gpt_model.h" /* activation_store_create */
#include "core/parallel_state.h"
#include "core/pipeline_parallel/p2p_communication.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* Most activation stores held at once (micro-batches, or model chunks, whose forward ran and
 * backward has not), over every forward_backward so far. */
static int g_peak_held;
static int g_held;
static void held_add(int d) {
    g_held += d;
    if (g_held > g_peak_held) g_peak_held = g_held;
}
int schedule_peak_in_flight(void) { return g_peak_held; }

int schedule_num_stores(int pp_size, int pp_rank, int num_microbatches) {
    if (pp_size <= 1) return 1;
    int in_flight = pp_size - pp_rank;
    return in_flight < num_microbatches ? in_flight : num_microbatches;
}

pipeline_stores *pipeline_stores_create(const struct gpt_model *m, int num_stores,
                                        int num_unchecked) {
    pipeline_stores *p = xcalloc(1, sizeof(pipeline_stores), "pipeline stores");
    p->num_stores = num_stores;
    p->stores = xcalloc((size_t)num_stores, sizeof(activation_store *), "activation stores");
    for (int i = 0; i < num_stores; i++)
        p->stores[i] = activation_store_create(m, !(i < num_unchecked));
    const activation_store *s0 = p->stores[0];
    p->grad[0] = s0->grad;
    if (s0->num_chunks > 1 && s0->grad) {
        /* the interleaved schedule receives the next backward's output gradient while the
         * last one's input gradient is still being sent: a second buffer */
        p->grad[1] = mem_alloc_floats(MEM_WORKSPACE, s0->stage_floats, "residual gradient (2)");
        /* ... and takes a chunk's input before it has a store for it */
        p->recv = mem_alloc_floats(MEM_WORKSPACE, s0->stage_floats, "received stage input");
    }
    return p;
}

void pipeline_stores_free(pipeline_stores *p) {
    if (!p) return;
    for (int i = 0; i < p->num_stores; i++) activation_store_free(p->stores[i]);
    free(p->stores);
    mem_free(p->grad[1]);
    mem_free(p->recv);
    free(p);
}

static double no_pipelining(activation_store **stores, int M, const pipeline_steps *s) {
    double loss = 0.0;
    for (int k = 0; k < M; k++) {
        loss += s->forward_step(s->user, k, stores[0]);
        held_add(1);
        s->backward_step(s->user, k, stores[0]);
        held_add(-1);
    }
    return loss;
}

/* Megatron's forward_backward_pipelining_without_interleaving. */
static double one_f_one_b(activation_store **stores, int num_stores, int M,
                          const pipeline_steps *s) {
    const parallel_state *ps = parallel_get();
    int warmup = ps->pp_size - ps->pp_rank - 1;
    if (warmup > M) warmup = M;
    int remaining = M - warmup;
    size_t n = stores[0]->stage_floats;
    double loss = 0.0;
#define STORE(k) stores[(k) % num_stores]

    for (int k = 0; k < warmup; k++) {
        p2p_recv_forward(STORE(k)->input, n);
        loss += s->forward_step(s->user, k, STORE(k));
        held_add(1);
        p2p_send_forward(STORE(k)->output, n);
    }
    if (remaining > 0) p2p_recv_forward(STORE(warmup)->input, n);
    for (int i = 0; i < remaining; i++) {
        int f = warmup + i, b = i; /* forward of micro-batch f, backward of the oldest, b */
        loss += s->forward_step(s->user, f, STORE(f));
        held_add(1);
        p2p_send_forward_recv_backward(STORE(f)->output, STORE(b)->grad, n);
        s->backward_step(s->user, b, STORE(b));
        held_add(-1);
        if (i == remaining - 1)
            p2p_send_backward(STORE(b)->grad, n);
        else
            p2p_send_backward_recv_forward(STORE(b)->grad, STORE(f + 1)->input, n);
    }
    for (int b = remaining; b < M; b++) { /* cool-down */
        p2p_recv_backward(STORE(b)->grad, n);
        s->backward_step(s->user, b, STORE(b));
        held_add(-1);
        p2p_send_backward(STORE(b)->grad, n);
    }
#undef STORE
    return loss;
}

/* ---- the interleaved schedule (Megatron's forward_backward_pipelining_with_interleaving with
 * its defaults: microbatch_group_size_per_vp_stage = p, overlap_p2p_comm) ---- */

typedef struct {
    int p, r, v, M;
    int total;      /* M v virtual micro-batches */
    int warmup;     /* W */
    int remaining;  /* total - W (1F1B steps) */
    int all_warmup; /* W reached total: all forwards, then all backwards */
    int window;     /* W + 1: Megatron's max_outstanding_backprops */
} vplan;

static vplan vplan_make(int p, int r, int v, int M, int forward_only) {
    vplan x = {.p = p, .r = r, .v = v, .M = M, .total = M * v};
    x.warmup = forward_only ? x.total : (p - r - 1) * 2 + (v - 1) * p;
    if (x.warmup >= x.total) {
        x.warmup = x.total;
        x.all_warmup = 1;
    }
    x.remaining = x.total - x.warmup;
    x.window = x.warmup + 1;
    return x;
}

/* Virtual micro-batch k: its micro-batch and (forward or backward) model chunk. */
static int vp_microbatch(const vplan *x, int k) { return (k / (x->p * x->v)) * x->p + k % x->p; }
static int vp_chunk(const vplan *x, int k, int forward) {
    int c = (k % (x->p * x->v)) / x->p;
    return forward ? c : x->v - 1 - c;
}
/* The forward index of backward k (the same micro-batch and chunk). */
static int vp_forward_of_backward(const vplan *x, int b) {
    int mb = vp_microbatch(x, b), c = vp_chunk(x, b, 0);
    return (mb / x->p) * x->p * x->v + c * x->p + mb % x->p;
}
/* Transfers: every chunk's input comes from the previous stage but the first rank's chunk 0;
 * every output goes on but the last rank's chunk v - 1 (the loss); gradients the reverse. */
static int vp_recv_input(const vplan *x, int f) {
    return !(x->r == 0 && vp_chunk(x, f, 1) == 0);
}
static int vp_send_output(const vplan *x, int f) {
    return !(x->r == x->p - 1 && vp_chunk(x, f, 1) == x->v - 1);
}
static int vp_recv_grad(const vplan *x, int b) {
    return !(x->r == x->p - 1 && vp_chunk(x, b, 0) == x->v - 1);
}
static int vp_send_grad(const vplan *x, int b) { return !(x->r == 0 && vp_chunk(x, b, 0) == 0); }
/* Store kind of forward k under partial recompute K: 1 keeps everything. */
static int vp_unchecked(const vplan *x, int k, int K) { return K > 0 && k % x->window < K; }

int schedule_num_warmup(int pp_size, int pp_rank, int vp_size, int num_microbatches) {
    if (pp_size <= 1) return 0;
    if (vp_size <= 1) {
        int w = pp_size - pp_rank - 1;
        return w < num_microbatches ? w : num_microbatches;
    }
    return vplan_make(pp_size, pp_rank, vp_size, num_microbatches, 0).warmup;
}

/* The stores of both kinds the interleaved order holds at once, at most: a store is taken by
 * forward k and given back after its backward; a 1F1B step takes its forward's before its
 * backward gives one back. */
static void vp_pool_sizes(const vplan *x, int K, int peak[2]) {
    int held[2] = {0, 0};
    peak[0] = peak[1] = 0;
#define TAKE(k)                                                    \
    do {                                                           \
        int kind_ = vp_unchecked(x, (k), K);                       \
        if (++held[kind_] > peak[kind_]) peak[kind_] = held[kind_]; \
    } while (0)
    for (int k = 0; k < x->warmup; k++) TAKE(k);
    for (int i = 0; i < x->remaining; i++) {
        TAKE(x->warmup + i);
        held[vp_unchecked(x, vp_forward_of_backward(x, i), K)]--;
    }
#undef TAKE
}

int schedule_stores(int pp_size, int pp_rank, int vp_size, int num_microbatches, int K,
                    int *num_unchecked) {
    if (pp_size <= 1 || vp_size <= 1) {
        int n = schedule_num_stores(pp_size, pp_rank, num_microbatches);
        *num_unchecked = K > 0 ? (K < n ? K : n) : 0;
        return n;
    }
    vplan x = vplan_make(pp_size, pp_rank, vp_size, num_microbatches, 0);
    int peak[2];
    vp_pool_sizes(&x, K, peak);
    *num_unchecked = peak[1];
    return peak[0] + peak[1];
}

typedef struct {
    activation_store **free_[2]; /* free stores of each kind (1: keeps everything) */
    int nfree[2];
} store_pool;

static activation_store *pool_take(store_pool *pl, int kind) {
    if (pl->nfree[kind] == 0)
        die(1, "internal error: the interleaved schedule ran out of activation stores");
    held_add(1);
    return pl->free_[kind][--pl->nfree[kind]];
}

static void pool_give(store_pool *pl, activation_store *st) {
    int kind = st->cfg.recompute_store_unchecked != 0;
    pl->free_[kind][pl->nfree[kind]++] = st;
    held_add(-1);
}

/* Megatron's default overlap_p2p_comm: warm-up and cool-down transfers complete in place
 * (each step's sends and the next step's receives posted together); in the 1F1B steps the
 * forward's transfers are posted right after the forward and the backward's after the
 * backward, each completed only when its data is needed (a receive before the next forward /
 * backward, a send before its buffer is written again), so a stage does not wait for its
 * neighbours to reach the same point of their step. */
static double interleaved(pipeline_stores *p, int M, const pipeline_steps *s) {
    const parallel_state *ps = parallel_get();
    activation_store **stores = p->stores;
    int num_stores = p->num_stores;
    vplan x = vplan_make(ps->pp_size, ps->pp_rank, stores[0]->num_chunks, M, 0);
    size_t n = stores[0]->stage_floats;
    int K = s->partial_checkpoints;
    activation_store *kind0[num_stores], *kind1[num_stores];
    store_pool pl = {.free_ = {kind0, kind1}};
    for (int i = num_stores - 1; i >= 0; i--) {
        int kind = stores[i]->cfg.recompute_store_unchecked != 0;
        pl.free_[kind][pl.nfree[kind]++] = stores[i];
    }
    activation_store *of[x.total]; /* the store of each virtual micro-batch (forward index) */
    float *recv = p->recv;
    double loss = 0.0;
    int slot = 0; /* gradient buffer of the next backward */
    p2p_pending fin = {0}, fout = {0}, bin = {0}, bout = {0}; /* 1F1B steps' transfers */
    activation_store *fout_store = NULL; /* whose output fout sends */

    /* forward k: a store of its kind, the received input copied in */
#define FORWARD(k)                                                                   \
    do {                                                                             \
        of[k] = pool_take(&pl, vp_unchecked(&x, (k), K));                            \
        activation_store_set_chunk(of[k], vp_chunk(&x, (k), 1));                     \
        if (vp_recv_input(&x, (k))) memcpy(of[k]->input, recv, n * sizeof(float));   \
        loss += s->forward_step(s->user, vp_microbatch(&x, (k)), of[k]);             \
    } while (0)
    /* backward b on its forward's store, its output gradient in buffer `slot` */
#define BACKWARD(b)                                                                  \
    do {                                                                             \
        activation_store *st_ = of[vp_forward_of_backward(&x, (b))];                 \
        activation_store_set_chunk(st_, vp_chunk(&x, (b), 0));                       \
        st_->grad = p->grad[slot];                                                   \
        s->backward_step(s->user, vp_microbatch(&x, (b)), st_);                      \
        if (st_ == fout_store) p2p_ring_wait(&fout); /* its output may be reused */  \
        pool_give(&pl, st_);                                                         \
    } while (0)
#define OUTPUT(k) (vp_send_output(&x, (k)) ? of[k]->output : NULL)

    if (vp_recv_input(&x, 0)) p2p_exchange_ring(NULL, recv, NULL, NULL, n);
    for (int k = 0; k < x.warmup; k++) {
        FORWARD(k);
        float *in = k + 1 < x.total && vp_recv_input(&x, k + 1) ? recv : NULL;
        p2p_exchange_ring(OUTPUT(k), in, NULL, NULL, n);
    }
    /* the first backward's output gradient, received under the first 1F1B step */
    if (!x.all_warmup && vp_recv_grad(&x, 0))
        p2p_ring_start(NULL, NULL, NULL, p->grad[slot], n, &bin);
    for (int i = 0; i < x.remaining; i++) { /* 1F1B: forward f, backward i */
        int f = x.warmup + i;
        p2p_ring_wait(&fin);
        FORWARD(f);
        p2p_ring_wait(&fout);
        float *in = i < x.remaining - 1 && vp_recv_input(&x, f + 1) ? recv : NULL;
        p2p_ring_start(OUTPUT(f), NULL, NULL, NULL, n, &fout);
        fout_store = of[f];
        p2p_ring_start(NULL, in, NULL, NULL, n, &fin);
        p2p_ring_wait(&bin);
        BACKWARD(i);
        p2p_ring_wait(&bout); /* the other gradient buffer is free again */
        const float *dinput = vp_send_grad(&x, i) ? p->grad[slot] : NULL;
        slot ^= 1;
        float *grad = i + 1 < x.total && vp_recv_grad(&x, i + 1) ? p->grad[slot] : NULL;
        p2p_ring_start(NULL, NULL, dinput, NULL, n, &bout);
        p2p_ring_start(NULL, NULL, NULL, grad, n, &bin);
    }
    p2p_ring_wait(&fin);
    p2p_ring_wait(&fout);
    p2p_ring_wait(&bin);
    p2p_ring_wait(&bout);
    if (x.all_warmup && vp_recv_grad(&x, 0))
        p2p_exchange_ring(NULL, NULL, NULL, p->grad[slot], n);
    for (int b = x.remaining; b < x.total; b++) { /* cool-down */
        BACKWARD(b);
        const float *dinput = vp_send_grad(&x, b) ? p->grad[slot] : NULL;
        slot ^= 1;
        float *grad = b + 1 < x.total && vp_recv_grad(&x, b + 1) ? p->grad[slot] : NULL;
        p2p_exchange_ring(NULL, NULL, dinput, grad, n);
    }
#undef FORWARD
#undef BACKWARD
#undef OUTPUT
    for (int i = 0; i < num_stores; i++) { /* back to their defaults */
        activation_store_set_chunk(stores[i], 0);
        stores[i]->grad = p->grad[0];
    }
    return loss;
}

/* Forward only (evaluation): every virtual micro-batch in order on one store. */
static double interleaved_forward_only(activation_store *st, int M, const pipeline_steps *s) {
    const parallel_state *ps = parallel_get();
    vplan x = vplan_make(ps->pp_size, ps->pp_rank, st->num_chunks, M, 1);
    size_t n = st->stage_floats;
    double loss = 0.0;
    activation_store_set_chunk(st, 0);
    if (vp_recv_input(&x, 0)) p2p_exchange_ring(NULL, st->input, NULL, NULL, n);
    for (int k = 0; k < x.total; k++) {
        activation_store_set_chunk(st, vp_chunk(&x, k, 1));
        loss += s->forward_step(s->user, vp_microbatch(&x, k), st);
        const float *out = vp_send_output(&x, k) ? st->output : NULL;
        float *in = k + 1 < x.total && vp_recv_input(&x, k + 1) ? st->input : NULL;
        p2p_exchange_ring(out, in, NULL, NULL, n);
    }
    activation_store_set_chunk(st, 0);
    return loss;
}

double forward_backward(pipeline_stores *p, int num_microbatches, const pipeline_steps *steps) {
    if (parallel_get()->pp_size <= 1) return no_pipelining(p->stores, num_microbatches, steps);
    if (p->stores[0]->num_chunks > 1) return interleaved(p, num_microbatches, steps);
    return one_f_one_b(p->stores, p->num_stores, num_microbatches, steps);
}

double forward_only(pipeline_stores *p, int num_microbatches, const pipeline_steps *s) {
    activation_store *st = p->stores[0];
    if (parallel_get()->pp_size > 1 && st->num_chunks > 1)
        return interleaved_forward_only(st, num_microbatches, s);
    size_t n = st->stage_floats;
    double loss = 0.0;
    for (int k = 0; k < num_microbatches; k++) {
        p2p_recv_forward(st->input, n);
        loss += s->forward_step(s->user, k, st);
        p2p_send_forward(st->output, n);
    }
    return loss;
}
