#include "core/transformer/moe/moe_layer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"
#include "core/transformer/mlp.h"
#include "core/transformer/moe/experts.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

const char *moe_log_name(moe_log_value v) {
    static const char *names[MOE_LOG_COUNT] = {
        "z_loss",
        "topk_expert_capacity_utilization_ratio_mean",
        "topk_expert_capacity_utilization_ratio_min",
        "topk_expert_capacity_utilization_ratio_max",
        "topk_expert_capacity_utilization_ratio_std",
        "topk_token_drop_ratio",
        "load_balancing_loss"};
    return names[v];
}

void moe_tracker_init(moe_tracker *t, int num_layers) {
    memset(t, 0, sizeof(*t));
    t->num_layers = num_layers;
    t->values = xcalloc((size_t)MOE_LOG_COUNT * num_layers, sizeof(double), "moe tracker");
    t->saved_bytes = xcalloc((size_t)num_layers, sizeof(size_t), "moe tracker");
}

void moe_tracker_free(moe_tracker *t) {
    free(t->values);
    free(t->saved_bytes);
    memset(t, 0, sizeof(*t));
}

void moe_tracker_clear(moe_tracker *t) {
    memset(t->values, 0, (size_t)MOE_LOG_COUNT * t->num_layers * sizeof(double));
    memset(t->recorded, 0, sizeof(t->recorded));
}

static void track(const layer_ctx *ctx, moe_log_value v, int layer, double x) {
    moe_tracker *t = ctx->moe_tracker;
    if (!t || layer < 0 || layer >= t->num_layers) return;
    t->values[(size_t)v * t->num_layers + layer] += x;
    t->recorded[v] = 1;
}

/* MegaDLMs' capacity statistics (topk_softmax_with_capacity's log_tracker): tokens per expert
 * over ceil(N k / E), and the share of the capacity's places left unfilled by kept tokens. */
static void track_capacity(const layer_ctx *ctx, int layer, const moe_routing *r,
                           const moe_assignment *a) {
    const transformer_config *c = ctx->cfg;
    const double cap1 = ceil((double)r->N * r->k / r->E);
    double sum = 0.0, mn = INFINITY, mx = -INFINITY, sq = 0.0;
    for (int e = 0; e < r->E; e++) {
        double x = r->tokens_per_expert[e] / cap1;
        sum += x;
        mn = x < mn ? x : mn;
        mx = x > mx ? x : mx;
    }
    const double mean = sum / r->E;
    for (int e = 0; e < r->E; e++) {
        double d = r->tokens_per_expert[e] / cap1 - mean;
        sq += d * d;
    }
    track(ctx, MOE_LOG_CAPACITY_MEAN, layer, mean);
    track(ctx, MOE_LOG_CAPACITY_MIN, layer, mn);
    track(ctx, MOE_LOG_CAPACITY_MAX, layer, mx);
    track(ctx, MOE_LOG_CAPACITY_STD, layer, r->E > 1 ? sqrt(sq / (r->E - 1)) : NAN);
    if (c->moe.capacity_factor >= 0.0f) {
        const double places = (double)r->N * r->k * c->moe.capacity_factor;
        const double kept = (double)r->N * r->k - (double)a->dropped;
        track(ctx, MOE_LOG_DROP_RATIO, layer, (places - kept) / places);
    }
}

void moe_saved_release(moe_saved *m) {
    if (!m || !m->live) return;
    moe_routing_free(&m->routing);
    moe_assignment_free(&m->assign);
    if (m->a2a.ep) moe_a2a_plan_free(&m->a2a);
    if (m->ag.ep) moe_ag_plan_free(&m->ag);
    mem_free_all(m->rows, m->fc1, m->act, m->out, m->shared_fc1, m->shared_act);
    memset(m, 0, sizeof(*m));
}

/* The tracked bytes of what m keeps (category activations). */
static size_t moe_saved_bytes(const moe_saved *m) {
    const moe_routing *r = &m->routing;
    const moe_assignment *a = &m->assign, *f = &m->ag.full;
    const void *blocks[] = {r->logits, r->scores, r->lse, r->idx, r->q, r->gate,
                            r->tokens_per_expert, r->tokens_global, r->jitter, r->xj,
                            a->expert_begin, a->token, a->slot, a->kept,
                            m->ag.gate, m->ag.idx, f->expert_begin, f->token, f->slot, f->kept,
                            m->rows, m->fc1, m->act, m->out, m->shared_fc1, m->shared_act};
    size_t bytes = 0;
    for (size_t i = 0; i < sizeof blocks / sizeof blocks[0]; i++) bytes += mem_block_bytes(blocks[i]);
    return bytes;
}

/* How this layer's tokens reach the experts. */
typedef enum { DISPATCH_LOCAL, DISPATCH_ALLTOALL, DISPATCH_ALLGATHER } dispatch_kind;
static dispatch_kind dispatch_of(const transformer_config *c) {
    if (tc_ep(c) == 1 && tc_tp(c) == 1) return DISPATCH_LOCAL;
    return c->moe.dispatcher == MOE_DISPATCHER_ALLTOALL ? DISPATCH_ALLTOALL : DISPATCH_ALLGATHER;
}

static float *rows_alloc(size_t rows, size_t width, mem_category cat, const char *what) {
    return mem_alloc_floats(cat, (rows ? rows : 1) * width, what);
}

/* The experts' rows (m->rows, m->R_exp, m->exp_begin) from this rank's tokens x [N, C];
 * `overlap` runs during the exchange (alltoall). */
static void dispatch_forward(const transformer_config *c, moe_saved *m, const float *x, int N,
                             moe_overlap overlap) {
    const int C = c->hidden_size;
    switch (dispatch_of(c)) {
    case DISPATCH_LOCAL:
        m->R_exp = m->assign.R;
        m->exp_begin = m->assign.expert_begin;
        m->rows = rows_alloc((size_t)m->R_exp, C, MEM_ACTIVATIONS, "moe permuted input");
        moe_permute(&m->assign, x, C, m->rows);
        return;
    case DISPATCH_ALLTOALL: {
        float *send = rows_alloc((size_t)m->assign.R, C, MEM_WORKSPACE, "moe all-to-all send");
        moe_permute(&m->assign, x, C, send);
        moe_a2a_plan_make(c, &m->assign, &m->a2a);
        m->R_exp = m->a2a.R_exp;
        m->exp_begin = m->a2a.local_begin;
        m->rows = rows_alloc((size_t)m->R_exp, C, MEM_ACTIVATIONS, "moe permuted input");
        moe_a2a_dispatch(&m->a2a, send, m->rows, C, overlap);
        mem_free(send);
        return;
    }
    case DISPATCH_ALLGATHER: {
        moe_ag_plan_make(c, &m->routing, &m->ag);
        float *all = rows_alloc((size_t)m->ag.ep * N, C, MEM_WORKSPACE, "moe all-gathered tokens");
        moe_ag_gather(&m->ag, x, all, C);
        m->R_exp = m->ag.local.R;
        m->exp_begin = m->ag.local.expert_begin;
        m->rows = rows_alloc((size_t)m->R_exp, C, MEM_ACTIVATIONS, "moe permuted input");
        moe_permute(&m->ag.local, all, C, m->rows);
        mem_free(all);
        return;
    }
    }
}

/* out [N, C] = the gate-weighted sum of each token's expert outputs y [R_exp, C]; keeps in
 * m->out the outputs the gates weigh. */
static void combine_forward(const transformer_config *c, moe_saved *m, float *y, float *out,
                            int N) {
    const int C = c->hidden_size;
    memset(out, 0, (size_t)N * C * sizeof(float));
    switch (dispatch_of(c)) {
    case DISPATCH_LOCAL:
        m->out = y;
        moe_unpermute(&m->assign, m->routing.gate, y, C, out);
        return;
    case DISPATCH_ALLTOALL:
        m->out = rows_alloc((size_t)m->assign.R, C, MEM_ACTIVATIONS, "moe expert output");
        moe_a2a_combine(&m->a2a, y, m->out, C);
        mem_free(y);
        moe_unpermute(&m->assign, m->routing.gate, m->out, C, out);
        return;
    case DISPATCH_ALLGATHER: {
        m->out = y;
        float *part = rows_alloc((size_t)m->ag.ep * N, C, MEM_WORKSPACE, "moe partial outputs");
        moe_unpermute(&m->ag.local, m->ag.gate, y, C, part);
        moe_ag_reduce_scatter(&m->ag, part, out, C);
        mem_free(part);
        return;
    }
    }
}

/* Backward of combine_forward: dy [R_exp, C] (allocated here) and dgate [N, k]; `overlap`
 * runs during the exchange (alltoall). */
static float *combine_backward(const transformer_config *c, moe_saved *m, const float *dout,
                               float *dgate, int N, moe_overlap overlap) {
    const int C = c->hidden_size, k = c->moe.topk;
    float *dy = rows_alloc((size_t)m->R_exp, C, MEM_WORKSPACE, "moe dy");
    switch (dispatch_of(c)) {
    case DISPATCH_LOCAL:
        moe_unpermute_backward(&m->assign, m->routing.gate, N, k, m->out, dout, C, dy, dgate);
        break;
    case DISPATCH_ALLTOALL:
        moe_unpermute_backward(&m->assign, m->routing.gate, N, k, m->out, dout, C, m->out, dgate);
        moe_a2a_dispatch(&m->a2a, m->out, dy, C, overlap);
        break;
    case DISPATCH_ALLGATHER: {
        const int NA = m->ag.ep * N;
        float *all = rows_alloc((size_t)NA, C, MEM_WORKSPACE, "moe all-gathered dout");
        float *dgate_all = rows_alloc((size_t)NA, k, MEM_WORKSPACE, "moe gathered dgate");
        moe_ag_gather(&m->ag, dout, all, C);
        moe_unpermute_backward(&m->ag.local, m->ag.gate, NA, k, m->out, all, C, dy, dgate_all);
        moe_ag_reduce_scatter_gates(&m->ag, dgate_all, dgate);
        mem_free_all(all, dgate_all);
        break;
    }
    }
    return dy;
}

/* Backward of dispatch_forward: din [N, C] += the gradient w.r.t. x from drows [R_exp, C]. */
static void dispatch_backward(const transformer_config *c, moe_saved *m, const float *drows,
                              float *din, int N) {
    const int C = c->hidden_size;
    switch (dispatch_of(c)) {
    case DISPATCH_LOCAL:
        moe_permute_backward(&m->assign, drows, C, din);
        return;
    case DISPATCH_ALLTOALL: {
        float *back = rows_alloc((size_t)m->assign.R, C, MEM_WORKSPACE, "moe dinput rows");
        moe_a2a_combine(&m->a2a, drows, back, C);
        moe_permute_backward(&m->assign, back, C, din);
        mem_free(back);
        return;
    }
    case DISPATCH_ALLGATHER: {
        float *part = rows_alloc((size_t)m->ag.ep * N, C, MEM_WORKSPACE, "moe partial dinput");
        moe_permute_backward(&m->ag.local, drows, C, part);
        moe_ag_reduce_scatter(&m->ag, part, din, C);
        mem_free(part);
        return;
    }
    }
}

static moe_expert_weights routed_weights(const layer_weights *w) {
    return (moe_expert_weights){{w->experts_fc1_w, w->experts_fc1_w16},
                                {w->experts_fc2_w, w->experts_fc2_w16}};
}

/* The shared expert is the dense MLP (mlp.c: its tensor and sequence parallelism, its 16-bit
 * rounding) of width --moe-shared-expert-intermediate-size, without biases. */
static transformer_config shared_config(const transformer_config *c) {
    transformer_config s = *c;
    s.ffn_hidden_size = c->moe.shared_expert_size;
    return s;
}

static layer_weights shared_weights(const layer_weights *w) {
    return (layer_weights){.fc1_w = w->shared_fc1_w, .fc1_w16 = w->shared_fc1_w16,
                           .fc2_w = w->shared_fc2_w, .fc2_w16 = w->shared_fc2_w16};
}

/* The shared expert's rows [r0, r0 + n) of the N (sequence parallelism: all of them at once,
 * the dense MLP's gather and reduce-scatter inside): y [Ns, C] from in [Ns, C], its fc1 output
 * and activation kept in m. */
static void shared_forward_rows(const layer_ctx *ctx, const layer_weights *w,
                                layer_workspace *ws, moe_saved *m, const float *in, float *y,
                                size_t r0, size_t n) {
    const transformer_config *c = ctx->cfg, sc = shared_config(c);
    const size_t C = (size_t)c->hidden_size, F1 = (size_t)tc_fc1_width_local(&sc);
    const size_t F = (size_t)tc_ffn_local(&sc);
    const layer_weights sw = shared_weights(w);
    const mlp_buffers b = {.fc1 = m->shared_fc1 + r0 * F1, .act = m->shared_act + r0 * F,
                           .gathered = ws->gathered,
                           .branch_full = tc_sp(c) ? ws->branch_full : y + r0 * C,
                           .recv = ws->recv};
    mlp_forward_rows(&sc, &sw, &b, in + r0 * C, y + r0 * C, (int)n);
}

/* din's rows [r0, r0 + n) = the shared expert's input gradient (overwritten) from dout's. */
static void shared_backward_rows(const layer_ctx *ctx, const layer_weights *w,
                                 const layer_weights *g, layer_workspace *ws, const moe_saved *m,
                                 const float *in, const float *dout, float *din, size_t r0,
                                 size_t n) {
    const transformer_config *c = ctx->cfg, sc = shared_config(c);
    const size_t C = (size_t)c->hidden_size, F1 = (size_t)tc_fc1_width_local(&sc);
    const size_t F = (size_t)tc_ffn_local(&sc);
    layer_ctx sctx = *ctx;
    sctx.cfg = &sc;
    sctx.B = 1; /* the MLP reads the rows' count only */
    sctx.T = (int)n;
    const layer_weights sw = shared_weights(w), sg = shared_weights(g);
    layer_saved saved = {.fc1 = m->shared_fc1 + r0 * F1, .act = m->shared_act + r0 * F};
    layer_workspace sws = *ws;
    sws.dact = mem_alloc_floats(MEM_WORKSPACE, n * F, "moe shared dact");
    sws.dfc1 = mem_alloc_floats(MEM_WORKSPACE, n * F1, "moe shared dfc1");
    sws.dln = din + r0 * C;
    if (!tc_sp(c)) { /* the unsharded aliases mlp_backward expects */
        sws.dln_full = din + r0 * C;
        sws.branch_full = (float *)dout + r0 * C;
    }
    mlp_backward(&sctx, &sw, &sg, &saved, &sws, in + r0 * C, dout + r0 * C, din + r0 * C);
    mem_free_all(sws.dact, sws.dfc1);
}

/* The shared expert as a sequence of steps (moe_overlap): a chunk of rows each, or under
 * sequence parallelism all of them in one step. */
#define SHARED_STEPS 8
typedef struct {
    const layer_ctx *ctx;
    const layer_weights *w, *g;
    layer_workspace *ws;
    moe_saved *m;
    const float *in, *dout;
    float *out; /* forward: y; backward: din */
    int backward;
} shared_job;

static int shared_step(void *user, int k) {
    shared_job *j = user;
    const size_t N = (size_t)j->ctx->B * j->ctx->T;
    const int steps = tc_sp(j->ctx->cfg) ? 1 : SHARED_STEPS;
    const size_t chunk = steps == 1 ? N : (N + steps - 1) / steps, r0 = (size_t)k * chunk;
    if (k >= steps || r0 >= N) return 0;
    const size_t n = N - r0 < chunk ? N - r0 : chunk;
    if (j->backward)
        shared_backward_rows(j->ctx, j->w, j->g, j->ws, j->m, j->in, j->dout, j->out, r0, n);
    else
        shared_forward_rows(j->ctx, j->w, j->ws, j->m, j->in, j->out, r0, n);
    return 1;
}

static void shared_run(shared_job *j) {
    for (int k = 0; shared_step(j, k); k++) continue;
}

/* --moe-shared-expert-overlap (with the alltoall dispatcher and expert parallelism): the
 * shared expert runs while the dispatch's all-to-all is in flight (Megatron overlaps it with
 * the dispatcher's communication). */
static int shared_overlaps(const transformer_config *c) {
    return c->moe.shared_expert_size > 0 && c->moe.shared_expert_overlap && tc_ep(c) > 1 &&
           c->moe.dispatcher == MOE_DISPATCHER_ALLTOALL;
}

void moe_layer_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                       layer_workspace *ws, moe_saved *m, const float *in, float *out) {
    const transformer_config *c = ctx->cfg;
    const int N = tc_tokens_local(c, ctx->B * ctx->T);
    moe_saved_release(m);
    m->live = 1;
    dropout_key key = ctx->key;
    key.layer = (uint32_t)layer_index;
    moe_routing_alloc(&m->routing, c, ctx->B, ctx->T);
    moe_router_forward(c, w->router_w, in, ctx->training, key, &m->routing);
    moe_assign(c, &m->routing, &m->assign);
    if (ctx->training && c->moe.load_balancing == MOE_LB_SEQ_AUX_LOSS)
        moe_router_seq_aux_loss(c, &m->routing, m->assign.kept);
    const size_t NC = (size_t)N * c->hidden_size;
    float *shared_y = NULL; /* the shared expert's output, added after the routed experts' */
    shared_job job = {.ctx = ctx, .w = w, .ws = ws, .m = m, .in = in};
    if (c->moe.shared_expert_size > 0) {
        const transformer_config sc = shared_config(c);
        const size_t Nf = (size_t)ctx->B * ctx->T;
        m->shared_fc1 = mem_alloc_floats(MEM_ACTIVATIONS, Nf * tc_fc1_width_local(&sc),
                                         "moe shared expert fc1 output");
        m->shared_act = mem_alloc_floats(MEM_ACTIVATIONS, Nf * tc_ffn_local(&sc),
                                         "moe shared expert activation");
        shared_y = mem_alloc_floats(MEM_WORKSPACE, NC, "moe shared expert output");
        job.out = shared_y;
    }
    const int overlapped = shared_overlaps(c);
    dispatch_forward(c, m, in, N, overlapped ? (moe_overlap){shared_step, &job} : (moe_overlap){0});
    const size_t R = (size_t)m->R_exp;
    m->fc1 = rows_alloc(R, tc_expert_fc1_width_local(c), MEM_ACTIVATIONS, "moe expert fc1 output");
    m->act = rows_alloc(R, tc_expert_ffn_local(c), MEM_ACTIVATIONS, "moe expert activation");
    float *y = rows_alloc(R, c->hidden_size, MEM_ACTIVATIONS, "moe expert output");
    moe_experts_forward(c, routed_weights(w), (moe_expert_rows){tc_experts_local(c), m->exp_begin},
                        m->rows, m->fc1, m->act, y);
    combine_forward(c, m, y, out, N);
    if (shared_y) {
        if (!overlapped) shared_run(&job);
        for (size_t i = 0; i < NC; i++) out[i] += shared_y[i];
        mem_free(shared_y);
    }
    if (!ctx->training) return;
    if (ctx->moe_tracker && layer_index < ctx->moe_tracker->num_layers) {
        size_t kept = moe_saved_bytes(m), *at = &ctx->moe_tracker->saved_bytes[layer_index];
        if (kept > *at) *at = kept;
    }
    const moe_routing *r = &m->routing;
    if (r->has_z) track(ctx, MOE_LOG_Z_LOSS, layer_index, r->z_value);
    if (c->moe.load_balancing == MOE_LB_AUX_LOSS) track_capacity(ctx, layer_index, r, &m->assign);
    if (r->has_aux) track(ctx, MOE_LOG_LOAD_BALANCING, layer_index, r->aux_value);
}

void moe_layer_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                        const layer_weights *g, layer_workspace *ws, moe_saved *m,
                        const float *in, const float *dout, float *din) {
    const transformer_config *c = ctx->cfg;
    const int N = tc_tokens_local(c, ctx->B * ctx->T), C = c->hidden_size;
    if (!m->live) die(1, "internal error: MoE layer %d backward without its forward", layer_index);
    const size_t R = (size_t)m->R_exp;
    shared_job job = {.ctx = ctx, .w = w, .g = g, .ws = ws, .m = m, .in = in, .dout = dout,
                      .out = din, .backward = 1};
    const int overlapped = shared_overlaps(c);
    if (c->moe.shared_expert_size > 0 && !overlapped)
        shared_run(&job);
    else if (c->moe.shared_expert_size <= 0)
        memset(din, 0, (size_t)N * C * sizeof(float));
    float *dact = rows_alloc(R, tc_expert_ffn_local(c), MEM_WORKSPACE, "moe dact");
    float *dfc1 = rows_alloc(R, tc_expert_fc1_width_local(c), MEM_WORKSPACE, "moe dfc1");
    float *dgate = rows_alloc((size_t)N, c->moe.topk, MEM_WORKSPACE, "moe dgate");
    float *dy = combine_backward(c, m, dout, dgate, N,
                                 overlapped ? (moe_overlap){shared_step, &job} : (moe_overlap){0});
    float *drows = rows_alloc(R, C, MEM_WORKSPACE, "moe drows");
    moe_expert_weights gw = {{g->experts_fc1_w, NULL}, {g->experts_fc2_w, NULL}};
    moe_experts_backward(c, routed_weights(w), gw,
                         (moe_expert_rows){tc_experts_local(c), m->exp_begin}, m->rows, m->fc1,
                         m->act, dy, dact, dfc1, drows);
    dispatch_backward(c, m, drows, din, N);
    moe_router_backward(c, w->router_w, in, &m->routing, dgate, m->assign.kept,
                        ctx->moe_grad_scale, din, g->router_w);
    mem_free_all(dact, dfc1, drows, dgate, dy);
    moe_saved_release(m);
}

/* ---- the analytic count (mirrors the allocations above, router.c and token_dispatcher.c) ---- */

static size_t at_least_1(size_t n) { return n ? n : 1; }

/* moe_assign's arrays for N tokens (pad: every expert its capacity). */
static size_t assignment_bytes(const transformer_config *c, size_t N) {
    const size_t E = (size_t)c->moe.num_experts, k = (size_t)c->moe.topk;
    const int cap = moe_capacity(c, (int)N);
    size_t rows = N * k;
    if (c->moe.pad_to_capacity && cap > 0 && (size_t)cap * E > rows) rows = (size_t)cap * E;
    return 4 * (E + 1) + 2 * 4 * at_least_1(rows) + N * E;
}

size_t moe_layer_saved_bytes(const transformer_config *c, int B, int T, moe_rows r) {
    const size_t N = (size_t)tc_tokens_local(c, B * T), E = (size_t)c->moe.num_experts;
    const size_t k = (size_t)c->moe.topk, C = (size_t)c->hidden_size;
    size_t bytes = 4 * (2 * N * E + N + 3 * N * k + E) + 4 * E; /* the router's */
    if (c->moe.input_jitter_eps > 0.0f) bytes += 2 * 4 * N * C;
    bytes += assignment_bytes(c, N);
    const dispatch_kind kind = dispatch_of(c);
    if (kind == DISPATCH_ALLGATHER) { /* the gathered routing and its assignment */
        const size_t G = (size_t)tc_ep(c) * tc_tp(c);
        bytes += 2 * 4 * G * N * k;
        bytes += 4 * (E + 1) + 2 * 4 * at_least_1(G * N * k) + G * N * E;
    }
    const size_t R = at_least_1(r.rows_exp);
    bytes += 4 * R * (C + (size_t)tc_expert_fc1_width_local(c) + (size_t)tc_expert_ffn_local(c));
    bytes += 4 * C * (kind == DISPATCH_ALLTOALL ? at_least_1(r.rows_src) : R);
    if (c->moe.shared_expert_size > 0) {
        const transformer_config sc = shared_config(c);
        bytes += 4 * (size_t)B * T * (size_t)(tc_fc1_width_local(&sc) + tc_ffn_local(&sc));
    }
    return bytes;
}

size_t moe_layer_forward_extra_bytes(const transformer_config *c, moe_rows r) {
    if (dispatch_of(c) != DISPATCH_ALLTOALL) return 0;
    return 4 * at_least_1(r.rows_exp) * (size_t)c->hidden_size; /* combine_forward's y */
}

/* Rows of the routed experts when each expert gets `per_expert` of a rank's tokens. */
static moe_rows rows_of(const transformer_config *c, size_t per_expert) {
    const size_t E = (size_t)c->moe.num_experts, tp = (size_t)tc_tp(c);
    moe_rows r = {.rows_src = E * per_expert};
    r.rows_exp = dispatch_of(c) == DISPATCH_LOCAL ? r.rows_src : tp * r.rows_src;
    return r;
}

moe_rows moe_rows_balanced(const transformer_config *c, int B, int T) {
    const size_t N = (size_t)tc_tokens_local(c, B * T), E = (size_t)c->moe.num_experts;
    size_t share = N * (size_t)c->moe.topk / E; /* the hook's round robin: N k divisible by E */
    const int cap = moe_capacity(c, (int)N);
    if (cap >= 0) share = c->moe.pad_to_capacity ? (size_t)cap : share < (size_t)cap ? share : (size_t)cap;
    return rows_of(c, share);
}

moe_rows moe_rows_bound(const transformer_config *c, int B, int T) {
    const size_t N = (size_t)tc_tokens_local(c, B * T), E = (size_t)c->moe.num_experts;
    const size_t k = (size_t)c->moe.topk, El = (size_t)tc_experts_local(c);
    const size_t tp = (size_t)tc_tp(c), ep = (size_t)tc_ep(c);
    const int cap = moe_capacity(c, (int)N);
    moe_rows r;
    /* this rank's assignments: all N k of them, at most every expert's capacity */
    r.rows_src = N * k;
    if (cap >= 0 && (c->moe.pad_to_capacity || (size_t)cap * E < r.rows_src))
        r.rows_src = (size_t)cap * E;
    if (dispatch_of(c) == DISPATCH_LOCAL) {
        r.rows_exp = r.rows_src;
        return r;
    }
    /* every source's tokens to this rank's experts: min(k, E_local) each, or their capacity */
    size_t per_source = N * (k < El ? k : El);
    if (cap >= 0 && (c->moe.pad_to_capacity || (size_t)cap * El < per_source))
        per_source = (size_t)cap * El;
    r.rows_exp = tp * ep * per_source;
    return r;
}
