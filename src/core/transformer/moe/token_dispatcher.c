#include "core/transformer/moe/token_dispatcher.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"
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
    return (n % r->T) * r->B + n / r->T;
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

void moe_unpermute(const moe_assignment *a, const moe_routing *r, const float *rows, int C,
                   float *out) {
    /* serial over rows: a token's contributions are added in row (expert) order */
    for (int i = 0; i < a->R; i++) {
        if (a->slot[i] < 0) continue; /* padding: gate 0 */
        const float g = r->gate[a->slot[i]];
        const float *y = rows + (size_t)i * C;
        float *o = out + (size_t)a->token[i] * C;
        for (int j = 0; j < C; j++) o[j] += g * y[j];
    }
}

void moe_unpermute_backward(const moe_assignment *a, const moe_routing *r, const float *rows,
                            const float *dout, int C, float *drows, float *dgate) {
    memset(dgate, 0, (size_t)r->N * r->k * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int i = 0; i < a->R; i++) {
        float *dr = drows + (size_t)i * C;
        if (a->slot[i] < 0) {
            memset(dr, 0, (size_t)C * sizeof(float));
            continue;
        }
        const float g = r->gate[a->slot[i]];
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
