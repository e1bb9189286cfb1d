#include "core/tensor_parallel/parallel_linear.h"

#include <string.h>

#include "core/kernels/linear.h"
#include "core/tensor_parallel/comm_overlap.h"
#include "core/tensor_parallel/mappings.h"

tp_linear tp_linear_make(const transformer_config *c, tp_linear_name name, float *gathered,
                         float *partial, float *recv) {
    tp_linear l = {.cfg = c, .gathered = gathered, .partial = partial, .recv = recv,
                   .pieces = c->tp_comm_overlap_num_splits};
    int on = c->tp_comm_overlap && tc_sp(c) && tp_overlap_ready();
    if (!on) return l;
    if (name == TP_LINEAR_QKV || name == TP_LINEAR_FC1 || name == TP_LINEAR_OUTPUT) {
        /* Megatron: tp_comm_overlap_disable_qkv / _fc1 turn off this layer's all-gather overlap
         * and rs-dgrad overlap; the bulk overlaps stay */
        int off = name == TP_LINEAR_QKV   ? c->tp_comm_overlap_disable_qkv
                  : name == TP_LINEAR_FC1 ? c->tp_comm_overlap_disable_fc1
                                          : 0;
        l.overlap_ag = c->tp_comm_overlap_ag && !off;
        l.rs_dgrad = c->tp_comm_overlap_rs_dgrad && !off;
        /* Transformer Engine: the rs-dgrad overlap replaces both bulk overlaps */
        l.bulk_dgrad = c->tp_comm_bulk_dgrad && !l.rs_dgrad;
        l.bulk_wgrad = c->tp_comm_bulk_wgrad && !l.rs_dgrad;
    } else {
        l.overlap_rs = c->tp_comm_overlap_rs;
        l.overlap_ag = c->tp_comm_overlap_ag;
    }
    return l;
}

/* ---- GEMMs on the row plan's pieces (comm_overlap.h), tiled only where test-mode progress
 * runs between tiles ---- */

typedef struct {
    float *out;       /* forward: out[N, OC]; dgrad: din[N, K] */
    const float *in;  /* forward: in[N, C]; dgrad: dout[N, OC] */
    linear_weight w;
    const float *b;
    int in_w, out_w;  /* row widths of in and out */
    int zero_first;   /* dgrad rows start from zero (the plain form's memset) */
    int under_comm;   /* transfers are in flight: tile for test-mode progress */
} rows_job;

/* out rows = in rows @ w^T + b */
static void forward_rows(void *user, int row0, int rows) {
    const rows_job *j = user;
    int tile = j->under_comm ? tp_overlap_tile_rows(rows) : rows;
    for (int r = row0; r < row0 + rows; r += tile) {
        int n = row0 + rows - r < tile ? row0 + rows - r : tile;
        linear_forward(j->out + (size_t)r * j->out_w, j->in + (size_t)r * j->in_w, j->w, j->b, n,
                       j->in_w, j->out_w);
        tp_overlap_poll();
    }
}

/* out rows (+)= in rows @ w: the input gradient of a linear layer */
static void dgrad_rows(void *user, int row0, int rows) {
    const rows_job *j = user;
    int tile = j->under_comm ? tp_overlap_tile_rows(rows) : rows;
    for (int r = row0; r < row0 + rows; r += tile) {
        int n = row0 + rows - r < tile ? row0 + rows - r : tile;
        float *o = j->out + (size_t)r * j->out_w;
        if (j->zero_first) memset(o, 0, (size_t)n * j->out_w * sizeof(float));
        linear_backward(o, NULL, NULL, j->in + (size_t)r * j->in_w, NULL, j->w, n, j->out_w,
                        j->in_w);
        tp_overlap_poll();
    }
}

/* dw[OC, C] += dout[N, OC]^T @ in[N, C]; with communication under it, in test progress only,
 * tiled over the rows of dw (another decomposition: a BLAS may then give other last bits).
 * Through linear.c, so that under --bf16 the tiles take w's bf16 path like every other GEMM
 * of a linear (bf16-rounded dout and in, fp32 sums into the fp32 gradient). */
static void wgrad_tiled(float *dw, const float *dout, const float *in, linear_weight w, int N,
                        int C, int OC, int under_comm) {
    int tile = under_comm ? tp_overlap_tile_rows(OC) : OC;
    for (int o = 0; o < OC; o += tile) {
        int n = OC - o < tile ? OC - o : tile;
        linear_backward_wgrad_rows(dw, dout, in, w, N, C, OC, o, n);
        if (under_comm) tp_overlap_poll();
    }
}

/* The plain path's GEMMs over all t * Ns gathered rows: one call, or (when
 * --tp-comm-overlap-num-splits was given, or overlap is on) one per piece of the row plan, the
 * calls an overlapped linear makes, so that the two give the same bits on any BLAS. */
static void plain_rows(const tp_linear *l, int Ns, tp_rows_fn fn, rows_job *j) {
    j->under_comm = 0;
    if (l->pieces > 0)
        tp_for_each_piece(tc_tp(l->cfg), Ns, l->pieces, fn, j);
    else
        fn(j, 0, tc_tp(l->cfg) * Ns);
}

/* The gathered operand of a GEMM (the column-parallel input, the row-parallel output
 * gradient): under --bf16 / --fp16 every reader of it rounds it to the run's format (forward,
 * dgrad and wgrad of a 16-bit linear: the model passes its 16-bit weights whenever tc_half),
 * so it moves in that format, half the bytes, with the same bits in the result. */
static void gather_operand(const tp_linear *l, float *full, const float *shard, size_t shard_n) {
    if (tc_half(l->cfg) != HALF_NONE)
        tp_all_gather_half(tc_half(l->cfg), full, shard, shard_n);
    else
        tp_all_gather(full, shard, shard_n);
}

/* The same with the overlap's ring, fn computing on each piece as it arrives. */
static void ring_gather_operand(const tp_linear *l, const float *shard, int Ns, int C,
                                tp_rows_fn fn, rows_job *j) {
    if (tc_half(l->cfg) != HALF_NONE)
        tp_ring_allgather_compute_half(tc_half(l->cfg), l->gathered, shard, Ns, C, l->pieces, fn,
                                       j);
    else
        tp_ring_allgather_compute(l->gathered, shard, Ns, C, l->pieces, fn, j);
}

/* ---- column-parallel ---- */

void column_parallel_linear_forward(const tp_linear *l, float *out, const float *in_local,
                                    linear_weight w, const float *b, int N, int C, int OC) {
    const transformer_config *c = l->cfg;
    if (!tc_sp(c)) { /* copy_to_tp: identity forward */
        linear_forward(out, in_local, w, b, N, C, OC);
        return;
    }
    int Ns = tc_tokens_local(c, N);
    rows_job j = {out, l->gathered, w, b, C, OC, 0, 1};
    if (l->overlap_ag) {
        ring_gather_operand(l, in_local, Ns, C, forward_rows, &j);
        return;
    }
    gather_operand(l, l->gathered, in_local, (size_t)Ns * C); /* gather_from_sp */
    plain_rows(l, Ns, forward_rows, &j);
}

void column_parallel_linear_backward(const tp_linear *l, float *din_local, float *dw, float *db,
                                     const float *dout, const float *in_local, linear_weight w,
                                     int N, int C, int OC) {
    const transformer_config *c = l->cfg;
    if (!tc_sp(c)) { /* copy_to_tp backward: all-reduce of the input gradient */
        memset(din_local, 0, (size_t)N * C * sizeof(float));
        linear_backward(din_local, dw, db, dout, in_local, w, N, C, OC);
        tp_all_reduce_sum(din_local, (size_t)N * C);
        return;
    }
    int Ns = tc_tokens_local(c, N);
    size_t shard = (size_t)Ns * C;
    /* the gathered input, for wgrad: under the dgrad GEMM when overlapping */
    int ag = -1;
    if (l->bulk_dgrad || l->rs_dgrad)
        ag = tc_half(c) != HALF_NONE
                 ? tp_bulk_allgather_start_half(tc_half(c), l->gathered, in_local, shard)
                 : tp_bulk_allgather_start(l->gathered, in_local, shard);
    else
        gather_operand(l, l->gathered, in_local, shard);

    /* dgrad into partial[N, C] piece by piece, reduce-scattered into din_local */
    rows_job j = {l->partial, dout, w, NULL, OC, C, 1, 1};
    int rs = -1;
    if (l->rs_dgrad)
        tp_compute_ring_reduce_scatter(din_local, l->partial, l->recv, Ns, C, l->pieces,
                                       dgrad_rows, &j);
    else if (ag >= 0) /* the bulk all-gather is in flight */
        tp_for_each_piece(tc_tp(c), Ns, l->pieces, dgrad_rows, &j);
    else
        plain_rows(l, Ns, dgrad_rows, &j);
    if (ag >= 0) tp_bulk_wait(ag);
    if (!l->rs_dgrad) {
        if (l->bulk_wgrad)
            rs = tp_bulk_reduce_scatter_start(din_local, l->partial, l->recv, shard);
        else
            tp_reduce_scatter(din_local, l->partial, shard);
    }
    if (dw) wgrad_tiled(dw, dout, l->gathered, w, N, C, OC, rs >= 0);
    if (db) linear_backward(NULL, NULL, db, dout, NULL, (linear_weight){0}, N, 0, OC);
    if (rs >= 0) tp_bulk_wait(rs);
}

/* ---- row-parallel ---- */

void row_parallel_linear_forward(const tp_linear *l, float *out_local, const float *in,
                                 linear_weight w, const float *b, int N, int K, int C) {
    const transformer_config *c = l->cfg;
    int Ns = tc_tokens_local(c, N);
    if (!tc_sp(c)) { /* reduce_from_tp: all-reduce */
        linear_forward(out_local, in, w, NULL, N, K, C);
        tp_all_reduce_sum(out_local, (size_t)N * C);
    } else {
        rows_job j = {l->partial, in, w, NULL, K, C, 0, 1};
        if (l->overlap_rs) {
            tp_compute_ring_reduce_scatter(out_local, l->partial, l->recv, Ns, C, l->pieces,
                                           forward_rows, &j);
        } else { /* reduce_scatter_to_sp */
            plain_rows(l, Ns, forward_rows, &j);
            tp_reduce_scatter(out_local, l->partial, (size_t)Ns * C);
        }
    }
    if (b) bias_add_forward(out_local, b, Ns, C); /* the bias once, after the reduction */
}

void row_parallel_linear_backward(const tp_linear *l, float *din, float *dw, float *db,
                                  const float *dout_local, const float *in, linear_weight w, int N,
                                  int K, int C) {
    const transformer_config *c = l->cfg;
    int Ns = tc_tokens_local(c, N);
    if (db) linear_backward(NULL, NULL, db, dout_local, NULL, (linear_weight){0}, Ns, 0, C);
    if (!tc_sp(c)) {
        linear_backward(din, dw, NULL, dout_local, in, w, N, K, C);
        return;
    }
    /* dgrad per piece of the output gradient (as it arrives, when overlapping) */
    rows_job j = {din, l->gathered, w, NULL, C, K, 0, 1};
    if (l->overlap_ag) {
        ring_gather_operand(l, dout_local, Ns, C, dgrad_rows, &j);
    } else {
        gather_operand(l, l->gathered, dout_local, (size_t)Ns * C);
        plain_rows(l, Ns, dgrad_rows, &j);
    }
    linear_backward(NULL, dw, NULL, l->gathered, in, w, N, K, C);
}
