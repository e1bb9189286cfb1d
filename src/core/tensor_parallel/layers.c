#include "core/tensor_parallel/layers.h"

#include <math.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/kernels/embedding.h"
#include "core/tensor_parallel/mappings.h"

/* Rows of the whole tensor (1-D tensors are columns of one). */
static int64_t whole_rows(const param_tensor *t) { return t->full_shape[0]; }
static size_t row_len_local(const param_tensor *t) {
    return t->ndim == 1 ? 1 : (size_t)t->shape[1];
}
static size_t row_len_whole(const param_tensor *t) {
    return t->ndim == 1 ? 1 : (size_t)t->full_shape[1];
}

size_t tp_shard_row_start(const param_tensor *t, int rank, int tp, int64_t i) {
    int64_t local_rows = t->shape[0];
    switch (t->tp_split) {
    case TP_SPLIT_ROWS: return (size_t)(rank * local_rows + i) * row_len_whole(t);
    case TP_SPLIT_COLS: return (size_t)i * row_len_whole(t) + (size_t)rank * row_len_local(t);
    case TP_SPLIT_ROWS_SWIGLU: {
        int64_t half = local_rows / 2, F = whole_rows(t) / 2;
        int64_t row = i < half ? rank * half + i : F + rank * half + (i - half);
        return (size_t)row * row_len_whole(t);
    }
    default: (void)tp; return (size_t)i * row_len_whole(t);
    }
}

void tp_shard_copy(float *local, float *whole, const param_tensor *t, int rank, int tp,
                   int to_local) {
    size_t len = row_len_local(t);
    for (int64_t i = 0; i < t->shape[0]; i++) {
        float *l = local + (size_t)i * len, *w = whole + tp_shard_row_start(t, rank, tp, i);
        if (to_local)
            memcpy(l, w, len * sizeof(float));
        else
            memcpy(w, l, len * sizeof(float));
    }
}

/* out[n, :] = wte_local[tokens[n] - vocab_start, :] for tokens this rank owns, else 0.
 * tokens[N], wte_local[Vl, C] (e->wte, or e->wte16 widened), out[N, C]. */
static void vocab_lookup(const vocab_parallel_embedding *e, float *out, const int *tokens,
                         int vocab_start, int Vl, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        int v = tokens[n] - vocab_start;
        float *o = out + (size_t)n * C;
        if (v >= 0 && v < Vl && e->wte16)
            half_to_f32(e->kind, o, e->wte16 + (size_t)v * C, (size_t)C);
        else if (v >= 0 && v < Vl)
            memcpy(o, e->wte + (size_t)v * C, C * sizeof(float));
        else
            memset(o, 0, C * sizeof(float));
    }
}

#define COL_BLOCK 64
/* dwte_local[tokens[n] - vocab_start, :] += dout[n, :] for owned tokens. Parallel over column
 * blocks so that repeated tokens never race and the order is fixed. */
static void vocab_lookup_backward(float *dwte_local, const float *dout, const int *tokens,
                                  int vocab_start, int Vl, int N, int C) {
    int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * COL_BLOCK, w = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
        for (int n = 0; n < N; n++) {
            int v = tokens[n] - vocab_start;
            if (v < 0 || v >= Vl) continue;
            const float *d = dout + (size_t)n * C + c0;
            float *e = dwte_local + (size_t)v * C + c0;
            for (int i = 0; i < w; i++) e[i] += d[i];
        }
    }
}

/* The learned positions of a sequence whose rank holds T rows (T x CP in the whole sequence):
 * all of them, or the real ones before the padding: the padded sequence's real length, the
 * same rule its dropout masks are keyed by (cp_layout.h). */
static int real_positions(const vocab_parallel_embedding *e, int T) {
    return cp_key_length(e->cfg, T, e->positions);
}

/* out[n, :] += wpe[position of token first_token + n, :] for n < Ns (a shard of the [B*T]
 * tokens; the position within the whole sequence under context parallelism: cp_layout.h);
 * rows at positions >= P (padding) add none. */
/* The learned-position row of local token n (of first_token + n): its position in the whole
 * sequence + position_offset, or with packed position ids that token's id; -1 for padding
 * (positions >= P). */
static inline int position_row(const vocab_parallel_embedding *e, int64_t token, int T, int P) {
    const transformer_config *c = e->cfg;
    int pos = cp_position(c, T, (int)(token % T));
    if (pos >= P) return -1;
    if (!e->position_ids) return c->position_offset + pos;
    return e->position_ids[(token / T) * (int64_t)T * tc_cp(c) + pos];
}

static void position_embedding_add(const vocab_parallel_embedding *e, float *out,
                                   int64_t first_token, int Ns, int T, int P, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < Ns; n++) {
        int row = position_row(e, first_token + n, T, P);
        if (row < 0) continue;
        const float *p = e->wpe + (size_t)row * C;
        float *o = out + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] += p[i];
    }
}

/* dwpe[position of token first_token + n, :] += dout[n, :] (positions < P) */
static void position_embedding_add_backward(const vocab_parallel_embedding *e,
                                            const float *dout, int64_t first_token, int Ns,
                                            int T, int P, int C) {
    int nblocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int c0 = blk * COL_BLOCK, w = C - c0 < COL_BLOCK ? C - c0 : COL_BLOCK;
        for (int n = 0; n < Ns; n++) {
            int row = position_row(e, first_token + n, T, P);
            if (row < 0) continue;
            const float *d = dout + (size_t)n * C + c0;
            float *p = e->dwpe + (size_t)row * C + c0;
            for (int i = 0; i < w; i++) p[i] += d[i];
        }
    }
}

/* Index of this rank's first token row: its shard's under sequence parallelism, else 0. */
static int64_t shard_first_token(const transformer_config *c, int Ns) {
    return tc_sp(c) ? (int64_t)c->tp_rank * Ns : 0;
}

void vocab_parallel_embedding_forward(const vocab_parallel_embedding *e, float *out,
                                      const int *tokens, int B, int T) {
    const transformer_config *c = e->cfg;
    int N = B * T, Ns = tc_tokens_local(c, N), C = c->hidden_size, P = real_positions(e, T);
    /* context parallelism or padding: the positions are added below, from the global ones */
    const float *wpe = tc_cp(c) == 1 && P == T && !e->position_ids ? e->wpe : NULL;
    if (tc_tp(c) == 1 && e->wte16)
        embedding_forward_half(out, tokens, e->kind, e->wte16, wpe, B, T, C, c->position_offset);
    else if (tc_tp(c) == 1)
        embedding_forward(out, tokens, e->wte, wpe, B, T, C, c->position_offset);
    if (tc_tp(c) == 1) {
        if (e->wpe && !wpe)
            position_embedding_add(e, out, 0, N, T, P, C);
        return;
    }
    int Vl = tc_vocab_local(c);
    vocab_lookup(e, e->partial, tokens, c->tp_rank * Vl, Vl, N, C);
    if (tc_sp(c)) {
        tp_reduce_scatter(out, e->partial, (size_t)Ns * C);
    } else {
        tp_all_reduce_sum(e->partial, (size_t)N * C);
        memcpy(out, e->partial, (size_t)N * C * sizeof(float));
    }
    if (e->wpe)
        position_embedding_add(e, out, shard_first_token(c, Ns), Ns, T, P, C);
}

void vocab_parallel_embedding_backward(const vocab_parallel_embedding *e, const float *dout,
                                       const int *tokens, int B, int T) {
    const transformer_config *c = e->cfg;
    int N = B * T, Ns = tc_tokens_local(c, N), C = c->hidden_size, P = real_positions(e, T);
    if (tc_tp(c) == 1) {
        /* the kernel's positions: 0 .. T-1, in order */
        int whole = tc_cp(c) == 1 && P == T && !e->position_ids;
        embedding_backward(e->dwte, whole ? e->dwpe : NULL, dout, tokens, B, T, C,
                           c->position_offset);
        if (e->dwpe && !whole)
            position_embedding_add_backward(e, dout, 0, N, T, P, C);
        return;
    }
    int Vl = tc_vocab_local(c);
    if (e->wpe)
        position_embedding_add_backward(e, dout, shard_first_token(c, Ns), Ns, T, P, C);
    const float *full = dout;
    if (tc_sp(c)) {
        tp_all_gather(e->partial, dout, (size_t)Ns * C);
        full = e->partial;
    }
    vocab_lookup_backward(e->dwte, full, tokens, c->tp_rank * Vl, Vl, N, C);
}

void vocab_parallel_cross_entropy_forward(float *losses, float *lse, float *sumexp,
                                          const float *logits_local, const int *targets,
                                          int vocab_start, int Vl, int N) {
    /* lse doubles as the row max, losses as the target logit, until the reductions are done */
    float *rowmax = lse, *target_logit = losses;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits_local + (size_t)n * Vl;
        float m = -INFINITY;
        for (int v = 0; v < Vl; v++) m = x[v] > m ? x[v] : m;
        rowmax[n] = m;
        int t = targets[n] - vocab_start;
        target_logit[n] = (t >= 0 && t < Vl) ? x[t] : 0.0f;
    }
    tp_all_reduce_max(rowmax, N);
    tp_all_reduce_sum(target_logit, N);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits_local + (size_t)n * Vl;
        double s = 0.0;
        for (int v = 0; v < Vl; v++) s += expf(x[v] - rowmax[n]);
        sumexp[n] = (float)s;
    }
    tp_all_reduce_sum(sumexp, N);
    for (int n = 0; n < N; n++) {
        float l = rowmax[n] + logf(sumexp[n]);
        losses[n] = l - target_logit[n];
        lse[n] = l;
    }
}

void vocab_parallel_cross_entropy_backward(float *dlogits_local, const float *logits_local,
                                           const float *lse, const int *targets, int vocab_start,
                                           const float *dlosses, int Vl, int N) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits_local + (size_t)n * Vl;
        float *d = dlogits_local + (size_t)n * Vl;
        for (int v = 0; v < Vl; v++) d[v] = expf(x[v] - lse[n]) * dlosses[n];
        int t = targets[n] - vocab_start;
        if (t >= 0 && t < Vl) d[t] -= dlosses[n];
    }
}

void tp_allreduce_partial_grads(param_set *ps) {
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        if (t->tp_allreduce_grad) tp_all_reduce_sum(ps->grad + t->offset, t->numel);
    }
}
