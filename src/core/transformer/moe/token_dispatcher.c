#include "core/transformer/moe/token_dispatcher.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

int moe_capacity(const transformer_config *c, int N) {
    if (c->moe.capacity_factor < 0.0f) return -1;
    /* Megatron: ceil((num_tokens * topk / num_experts) * capacity_factor) */
    double cap = ceil((double)N * c->moe.topk / c->moe.num_experts * c->moe.capacity_factor);
    return cap > N ? N : (int)cap;
}

/* One candidate token of an expert: its rank key (larger first), its token, its slot. */
typedef struct {
    float key;
    int32_t order, token, slot;
} candidate;

static int by_key(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->key != b->key) return a->key > b->key ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int by_token(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    return (a->token > b->token) - (a->token < b->token);
}

/* Megatron's token order of row n = b T + t: [s, b] flattened. */
static int32_t megatron_order(const moe_routing *r, int n) {
    const int g = r->row0 + n; /* the row in the micro-batch */
    return (g % r->T) * r->B + g / r->T;
}

/* Expert e's kept rows into out (token order); returns how many. cand [N] scratch; slot_of
 * [N]: token n's slot for e, or -1. */
static int expert_rows(const transformer_config *c, const moe_routing *r, const int32_t *slot_of,
                       int cap, candidate *cand, candidate *out) {
    const int N = r->N, position = c->moe.drop_policy == MOE_DROP_POSITION;
    int m = 0;
    for (int n = 0; n < N; n++) {
        if (slot_of[n] < 0) continue;
        cand[m++] = (candidate){position ? 1.0f : r->gate[slot_of[n]], megatron_order(r, n), n,
                                slot_of[n]};
    }
    int take = m;
    if (cap >= 0) {
        qsort(cand, (size_t)m, sizeof(candidate), by_key);
        take = m < cap ? m : cap;
    }
    memcpy(out, cand, (size_t)take * sizeof(candidate));
    if (c->moe.pad_to_capacity && cap > take) /* padding: the lowest tokens not routed here */
        for (int n = 0; n < N && take < cap; n++)
            if (slot_of[n] < 0) out[take++] = (candidate){0.0f, n, n, -1};
    qsort(out, (size_t)take, sizeof(candidate), by_token);
    return take;
}

void moe_assign(const transformer_config *c, const moe_routing *r, moe_assignment *a) {
    const int N = r->N, E = r->E, k = r->k;
    memset(a, 0, sizeof(*a));
    a->E = E;
    a->capacity = moe_capacity(c, N);
    size_t max_rows = (size_t)N * k;
    if (c->moe.pad_to_capacity && a->capacity > 0 && (size_t)a->capacity * E > max_rows)
        max_rows = (size_t)a->capacity * E;
    a->expert_begin = mem_alloc(MEM_ACTIVATIONS, (size_t)(E + 1) * sizeof(int32_t), "moe rows");
    a->token = mem_alloc(MEM_ACTIVATIONS, (max_rows ? max_rows : 1) * sizeof(int32_t),
                         "moe row tokens");
    a->slot = mem_alloc(MEM_ACTIVATIONS, (max_rows ? max_rows : 1) * sizeof(int32_t),
                        "moe row gates");
    a->kept = mem_alloc(MEM_ACTIVATIONS, (size_t)N * E, "moe kept assignments");
    int32_t *slot_of = malloc((size_t)N * E * sizeof(int32_t));
    candidate *cand = malloc((size_t)N * 2 * sizeof(candidate));
    if (!slot_of || !cand) die(1, "out of memory: moe dispatch of %d tokens", N);
    for (size_t i = 0; i < (size_t)N * E; i++) slot_of[i] = -1;
    for (int n = 0; n < N; n++) /* expert-major: slot_of[e N + n] */
        for (int j = 0; j < k; j++) slot_of[(size_t)r->idx[(size_t)n * k + j] * N + n] = n * k + j;
    int R = 0;
    for (int e = 0; e < E; e++) {
        a->expert_begin[e] = R;
        int m = expert_rows(c, r, slot_of + (size_t)e * N, a->capacity, cand, cand + N);
        for (int i = 0; i < m; i++) {
            a->token[R + i] = cand[N + i].token;
            a->slot[R + i] = cand[N + i].slot;
            if (cand[N + i].slot >= 0) a->kept[(size_t)cand[N + i].token * E + e] = 1;
        }
        int routed = r->tokens_per_expert[e], kept = 0;
        for (int i = 0; i < m; i++) kept += cand[N + i].slot >= 0;
        a->dropped += routed - kept;
        R += m;
    }
    a->expert_begin[E] = R;
    a->R = R;
    free(slot_of);
    free(cand);
}

void moe_assignment_free(moe_assignment *a) {
    mem_free_all(a->expert_begin, a->token, a->slot, a->kept);
    memset(a, 0, sizeof(*a));
}

void moe_permute(const moe_assignment *a, const float *x, int C, float *rows) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < a->R; i++)
        memcpy(rows + (size_t)i * C, x + (size_t)a->token[i] * C, (size_t)C * sizeof(float));
}

void moe_unpermute(const moe_assignment *a, const float *gate, const float *rows, int C,
                   float *out) {
    /* serial over rows: a token's contributions are added in row (expert) order */
    for (int i = 0; i < a->R; i++) {
        if (a->slot[i] < 0) continue; /* padding: gate 0 */
        const float g = gate[a->slot[i]];
        const float *y = rows + (size_t)i * C;
        float *o = out + (size_t)a->token[i] * C;
        for (int j = 0; j < C; j++) o[j] += g * y[j];
    }
}

void moe_unpermute_backward(const moe_assignment *a, const float *gate, int N, int k,
                            const float *rows, const float *dout, int C, float *drows,
                            float *dgate) {
    memset(dgate, 0, (size_t)N * k * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < a->R; i++) {
        float *dr = drows + (size_t)i * C;
        if (a->slot[i] < 0) {
            memset(dr, 0, (size_t)C * sizeof(float));
            continue;
        }
        const float g = gate[a->slot[i]];
        const float *d = dout + (size_t)a->token[i] * C, *y = rows + (size_t)i * C;
        double dot = 0.0; /* first: drows may be rows (in place) */
        for (int j = 0; j < C; j++) dot += (double)d[j] * y[j];
        for (int j = 0; j < C; j++) dr[j] = g * d[j];
        dgate[a->slot[i]] = (float)dot; /* each slot has one row */
    }
}

void moe_permute_backward(const moe_assignment *a, const float *drows, int C, float *dx) {
    for (int i = 0; i < a->R; i++) {
        const float *d = drows + (size_t)i * C;
        float *o = dx + (size_t)a->token[i] * C;
        for (int j = 0; j < C; j++) o[j] += d[j];
    }
}

/* ---- expert parallelism ---- */

/* One row of C floats as an MPI type, so that counts are rows (they fit an int). */
static MPI_Datatype row_type(int C) {
    MPI_Datatype t;
    MPI_Type_contiguous(C, MPI_FLOAT, &t);
    MPI_Type_commit(&t);
    return t;
}

void moe_a2a_plan_make(const transformer_config *c, const moe_assignment *a, moe_a2a_plan *p) {
    const int ep = tc_ep(c), el = tc_experts_local(c), tp = tc_tp(c);
    memset(p, 0, sizeof(*p));
    p->ep = ep;
    p->el = el;
    p->tp = tp;
    int *counts = xcalloc((size_t)ep * 4, sizeof(int), "moe all-to-all counts");
    p->send_counts = counts;
    p->send_displs = counts + ep;
    p->recv_counts = counts + 2 * ep;
    p->recv_displs = counts + 3 * ep;
    int32_t *mine = xcalloc((size_t)ep * el, sizeof(int32_t), "moe all-to-all counts");
    p->from = xcalloc((size_t)ep * el, sizeof(int32_t), "moe all-to-all counts");
    p->tp_rows = xcalloc((size_t)tp * el, sizeof(int32_t), "moe tensor-parallel counts");
    p->local_begin = xcalloc((size_t)el + 1, sizeof(int32_t), "moe local rows");
    for (int r = 0; r < ep; r++) {
        for (int e = 0; e < el; e++)
            mine[r * el + e] = a->expert_begin[r * el + e + 1] - a->expert_begin[r * el + e];
        p->send_counts[r] = a->expert_begin[(r + 1) * el] - a->expert_begin[r * el];
        p->send_displs[r] = a->expert_begin[r * el];
    }
    if (ep > 1)
        MPI_Alltoall(mine, el, MPI_INT32_T, p->from, el, MPI_INT32_T, parallel_get()->ep);
    else
        memcpy(p->from, mine, (size_t)el * sizeof(int32_t));
    int at = 0;
    for (int s = 0; s < ep; s++) {
        p->recv_counts[s] = 0;
        for (int e = 0; e < el; e++) p->recv_counts[s] += p->from[s * el + e];
        p->recv_displs[s] = at;
        at += p->recv_counts[s];
    }
    p->R_recv = at;
    int32_t *per_expert = xcalloc((size_t)el, sizeof(int32_t), "moe local rows");
    for (int e = 0; e < el; e++)
        for (int s = 0; s < ep; s++) per_expert[e] += p->from[s * el + e];
    if (tp > 1)
        MPI_Allgather(per_expert, el, MPI_INT32_T, p->tp_rows, el, MPI_INT32_T, parallel_get()->tp);
    else
        memcpy(p->tp_rows, per_expert, (size_t)el * sizeof(int32_t));
    for (int e = 0; e < el; e++) {
        p->local_begin[e + 1] = p->local_begin[e];
        for (int t = 0; t < tp; t++) p->local_begin[e + 1] += p->tp_rows[t * el + e];
    }
    p->R_exp = p->local_begin[el];
    free(per_expert);
    free(mine);
}

void moe_a2a_plan_free(moe_a2a_plan *p) {
    free(p->send_counts);
    free(p->from);
    free(p->tp_rows);
    free(p->local_begin);
    memset(p, 0, sizeof(*p));
}

/* Moves blocks of rows between a-major order (for a: for b: cnt[a nb + b] rows) and b-major
 * order (for b: for a); to_b_major: the first into the second. */
static void transpose_blocks(const int32_t *cnt, int na, int nb, const float *in, float *out,
                             int C, int to_b_major) {
    int32_t *a_at = xcalloc((size_t)na * nb, sizeof(int32_t), "moe regroup");
    for (int a = 0, at = 0; a < na; a++)
        for (int b = 0; b < nb; b++) {
            a_at[a * nb + b] = at;
            at += cnt[a * nb + b];
        }
    for (int b = 0, at = 0; b < nb; b++)
        for (int a = 0; a < na; a++) {
            const size_t n = (size_t)cnt[a * nb + b] * C;
            const size_t sa = (size_t)a_at[a * nb + b] * C, ba = (size_t)at * C;
            if (to_b_major)
                memcpy(out + ba, in + sa, n * sizeof(float));
            else
                memcpy(out + sa, in + ba, n * sizeof(float));
            at += cnt[a * nb + b];
        }
    free(a_at);
}

/* Element counts and offsets of each TP rank's rows (MPI counts are ints). */
static void tp_counts(const moe_a2a_plan *p, int C, int *cnt, int *displs) {
    size_t at = 0;
    for (int t = 0; t < p->tp; t++) {
        size_t rows = 0;
        for (int e = 0; e < p->el; e++) rows += (size_t)p->tp_rows[t * p->el + e];
        if ((rows + at) * (size_t)C > INT_MAX)
            die(1, "moe: %zu rows of %d too many for one tensor-parallel exchange", rows + at, C);
        cnt[t] = (int)(rows * C);
        displs[t] = (int)(at * C);
        at += rows;
    }
}

static moe_a2a_stats g_stats;
const moe_a2a_stats *moe_a2a_get_stats(void) { return &g_stats; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The rows' exchange over EP: blocking, or started and advanced under `overlap`'s steps. */
static void exchange(const float *send, const int *scounts, const int *sdispls, float *recv,
                     const int *rcounts, const int *rdispls, int C, moe_overlap overlap) {
    MPI_Datatype row = row_type(C);
    double t0 = now_s();
    g_stats.exchanges++;
    if (!overlap.step) {
        MPI_Alltoallv(send, scounts, sdispls, row, recv, rcounts, rdispls, row, parallel_get()->ep);
        g_stats.blocking_s += now_s() - t0;
    } else {
        MPI_Request req;
        MPI_Ialltoallv(send, scounts, sdispls, row, recv, rcounts, rdispls, row,
                       parallel_get()->ep, &req);
        int done = 0;
        for (int k = 0; overlap.step(overlap.user, k); k++)
            if (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        double t1 = now_s();
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        g_stats.overlapped_s += t1 - t0;
        g_stats.wait_s += now_s() - t1;
    }
    MPI_Type_free(&row);
}

void moe_a2a_dispatch(const moe_a2a_plan *p, const float *send, float *recv, int C,
                      moe_overlap overlap) {
    const size_t R = (size_t)(p->R_exp ? p->R_exp : 1);
    float *tmp = mem_alloc_floats(MEM_WORKSPACE, R * C, "moe all-to-all receive");
    float *mine = p->tp > 1 ? mem_alloc_floats(MEM_WORKSPACE, R * C, "moe rows by expert") : recv;
    if (p->ep > 1) {
        exchange(send, p->send_counts, p->send_displs, tmp, p->recv_counts, p->recv_displs, C,
                 overlap);
    } else {
        memcpy(tmp, send, (size_t)p->R_recv * C * sizeof(float));
        for (int k = 0; overlap.step && overlap.step(overlap.user, k); k++) continue;
    }
    transpose_blocks(p->from, p->ep, p->el, tmp, mine, C, 1); /* [source][e] -> [e][source] */
    if (p->tp > 1) { /* every TP rank's rows of the local experts, then [t][e] -> [e][t] */
        int cnt[p->tp], displs[p->tp];
        tp_counts(p, C, cnt, displs);
        MPI_Allgatherv(mine, cnt[parallel_get()->tp_rank], MPI_FLOAT, tmp, cnt, displs,
                       MPI_FLOAT, parallel_get()->tp);
        transpose_blocks(p->tp_rows, p->tp, p->el, tmp, recv, C, 1);
        mem_free(mine);
    }
    mem_free(tmp);
}

void moe_a2a_combine(const moe_a2a_plan *p, const float *recv, float *send, int C) {
    const size_t R = (size_t)(p->R_exp ? p->R_exp : 1);
    float *tmp = mem_alloc_floats(MEM_WORKSPACE, R * C, "moe all-to-all send back");
    const float *mine = recv;
    float *own = NULL;
    if (p->tp > 1) { /* [e][t] -> [t][e], each TP rank's rows summed over the TP ranks */
        int cnt[p->tp], displs[p->tp];
        tp_counts(p, C, cnt, displs);
        transpose_blocks(p->tp_rows, p->tp, p->el, recv, tmp, C, 0);
        own = mem_alloc_floats(MEM_WORKSPACE, R * C, "moe rows by expert");
        MPI_Reduce_scatter(tmp, own, cnt, MPI_FLOAT, MPI_SUM, parallel_get()->tp);
        mine = own;
    }
    float *back = mem_alloc_floats(MEM_WORKSPACE, R * C, "moe all-to-all send back");
    transpose_blocks(p->from, p->ep, p->el, mine, back, C, 0); /* [e][source] -> [source][e] */
    if (p->ep > 1)
        exchange(back, p->recv_counts, p->recv_displs, send, p->send_counts, p->send_displs, C,
                 (moe_overlap){0});
    else
        memcpy(send, back, (size_t)p->R_recv * C * sizeof(float));
    mem_free_all(tmp, own, back);
}

/* The allgather dispatcher's group: EP, or TP x EP under tensor parallelism. */
static MPI_Comm ag_comm(const moe_ag_plan *p) {
    return p->tp > 1 ? parallel_get()->tp_ep : parallel_get()->ep;
}

void moe_ag_plan_make(const transformer_config *c, const moe_routing *r, moe_ag_plan *p) {
    const int ep = tc_ep(c) * tc_tp(c), k = r->k, N = r->N, E = r->E;
    memset(p, 0, sizeof(*p));
    p->ep = ep;
    p->tp = tc_tp(c);
    p->N = N;
    p->k = k;
    p->gate = mem_alloc_floats(MEM_ACTIVATIONS, (size_t)ep * N * k, "moe gathered gates");
    p->idx = mem_alloc(MEM_ACTIVATIONS, (size_t)ep * N * k * sizeof(int32_t), "moe gathered choices");
    MPI_Comm comm = ag_comm(p);
    MPI_Allgather(r->gate, N * k, MPI_FLOAT, p->gate, N * k, MPI_FLOAT, comm);
    MPI_Allgather(r->idx, N * k, MPI_INT32_T, p->idx, N * k, MPI_INT32_T, comm);
    /* the gathered tokens as one routing: every routed assignment kept (no capacity) */
    moe_routing all = {.N = ep * N, .B = ep * r->B, .T = r->T, .E = E, .k = k, .idx = p->idx,
                       .gate = p->gate};
    all.tokens_per_expert = xcalloc((size_t)E, sizeof(int32_t), "moe gathered counts");
    for (size_t i = 0; i < (size_t)ep * N * k; i++) all.tokens_per_expert[p->idx[i]]++;
    moe_assign(c, &all, &p->full);
    free(all.tokens_per_expert);
    const int first = tc_expert_first(c), el = tc_experts_local(c);
    const int32_t off = p->full.expert_begin[first];
    p->local = (moe_assignment){.R = p->full.expert_begin[first + el] - off, .E = el,
                                .token = p->full.token + off, .slot = p->full.slot + off,
                                .capacity = -1};
    p->local.expert_begin = xcalloc((size_t)el + 1, sizeof(int32_t), "moe local rows");
    for (int e = 0; e <= el; e++) p->local.expert_begin[e] = p->full.expert_begin[first + e] - off;
}

void moe_ag_plan_free(moe_ag_plan *p) {
    moe_assignment_free(&p->full);
    free(p->local.expert_begin);
    mem_free_all(p->gate, p->idx);
    memset(p, 0, sizeof(*p));
}

void moe_ag_gather(const moe_ag_plan *p, const float *x, float *all, int C) {
    MPI_Datatype row = row_type(C);
    MPI_Allgather(x, p->N, row, all, p->N, row, ag_comm(p));
    MPI_Type_free(&row);
}

void moe_ag_reduce_scatter(const moe_ag_plan *p, const float *part, float *out, int C) {
    float *mine = mem_alloc_floats(MEM_WORKSPACE, (size_t)p->N * C, "moe reduce-scatter");
    MPI_Reduce_scatter_block(part, mine, p->N * C, MPI_FLOAT, MPI_SUM, ag_comm(p));
    for (size_t i = 0; i < (size_t)p->N * C; i++) out[i] += mine[i];
    mem_free(mine);
}

void moe_ag_reduce_scatter_gates(const moe_ag_plan *p, const float *part, float *dgate) {
    MPI_Reduce_scatter_block(part, dgate, p->N * p->k, MPI_FLOAT, MPI_SUM, ag_comm(p));
}
