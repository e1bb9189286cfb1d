#include "core/transformer/transformer_layer.h"

#include <stdlib.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/context_parallel/cp_ring.h"
#include "core/kernels/attention.h"
#include "core/kernels/bf16.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/tensor/memory.h"
#include "core/transformer/attention.h"
#include "core/transformer/mlp.h"
#include "core/transformer/moe/moe_layer.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* ---- allocation ---- */

static float *saved(layer_saved *s, mem_category cat, size_t count, const char *what) {
    s->bytes += count * sizeof(float);
    return mem_alloc_floats(cat, count, what);
}

static uint16_t *saved_b16(layer_saved *s, mem_category cat, size_t count, const char *what) {
    s->bytes += count * sizeof(uint16_t);
    return mem_alloc(cat, count * sizeof(uint16_t), what);
}

/* Every tensor of the table (layer_saved.h) that this configuration keeps, in table order; a
 * SAVED_B16_VIEW one as bf16 storage behind the workspace's shared fp32 view, a
 * SAVED_B16_KERNEL one as bf16 storage only. */
void layer_saved_alloc(layer_saved *s, const transformer_config *c, int B, int T,
                       mem_category cat, const layer_workspace *ws, int layer) {
    memset(s, 0, sizeof(*s));
    const layer_dims d = layer_dims_of_layer(c, B, T, layer);
    if (tc_moe(c)) s->moe = xcalloc(1, sizeof(moe_saved), "moe layer state");
#define ALLOC_SAVED(field, what, kept, floats, b16)                                         \
    if ((kept) && (b16) == SAVED_B16_KERNEL) {                                              \
        s->field##_b16 = saved_b16(s, cat, floats, what " (bf16)");                         \
    } else if ((kept) && (b16)) {                                                           \
        if (!ws->views.field) die(1, "internal error: no bf16 view for saved " what);      \
        s->field##_b16 = saved_b16(s, cat, floats, what " (bf16)");                         \
        s->field = ws->views.field;                                                         \
    } else if (kept)                                                                        \
        s->field = saved(s, cat, floats, what);
    LAYER_SAVED_TENSORS(ALLOC_SAVED)
#undef ALLOC_SAVED
}

void layer_saved_free(layer_saved *s) {
    /* bf16 tensors: free the storage, not the shared view */
#define FREE_SAVED(field, what, kept, floats, b16) \
    if (s->field##_b16)                            \
        mem_free(s->field##_b16);                  \
    else                                           \
        mem_free(s->field);
    LAYER_SAVED_TENSORS(FREE_SAVED)
#undef FREE_SAVED
    moe_saved_release(s->moe);
    free(s->moe);
    memset(s, 0, sizeof(*s));
}

void layer_saved_pack(const layer_saved *s, const transformer_config *c, int B, int T) {
    if (!tc_half(c)) return;
    const layer_dims d = layer_dims_of(c, B, T);
#define PACK_SAVED(field, what, kept, floats, b16) \
    if ((b16) == SAVED_B16_VIEW && s->field##_b16) half_from_f32(d.half, s->field##_b16, s->field, floats);
    LAYER_SAVED_TENSORS(PACK_SAVED)
#undef PACK_SAVED
    (void)d;
}

void layer_saved_unpack(const layer_saved *s, const transformer_config *c, int B, int T) {
    if (!tc_half(c)) return;
    const layer_dims d = layer_dims_of(c, B, T);
#define UNPACK_SAVED(field, what, kept, floats, b16) \
    if ((b16) == SAVED_B16_VIEW && s->field##_b16) half_to_f32(d.half, s->field, s->field##_b16, floats);
    LAYER_SAVED_TENSORS(UNPACK_SAVED)
#undef UNPACK_SAVED
    (void)d;
}

/* The fp32 views of the b16 tensors, one layer's worth shared by all (workspace). */
static void views_alloc(layer_saved *v, const transformer_config *c, int B, int T) {
    memset(v, 0, sizeof(*v));
    if (!tc_half(c)) return;
    layer_dims d = layer_dims_of(c, B, T);
    d.probs = 1; /* any store's layers may keep them */
#define ALLOC_VIEW(field, what, kept, floats, b16) \
    if ((kept) && (b16) == SAVED_B16_VIEW)         \
        v->field = mem_alloc_floats(MEM_WORKSPACE, floats, what " (fp32 view)");
    LAYER_SAVED_TENSORS(ALLOC_VIEW)
#undef ALLOC_VIEW
}

static void views_free(layer_saved *v) {
#define FREE_VIEW(field, what, kept, floats, b16) mem_free(v->field);
    LAYER_SAVED_TENSORS(FREE_VIEW)
#undef FREE_VIEW
    memset(v, 0, sizeof(*v));
}

void layer_workspace_alloc(layer_workspace *ws, const transformer_config *c, int B, int T,
                           int with_backward, int threads) {
    memset(ws, 0, sizeof(*ws));
    views_alloc(&ws->views, c, B, T);
    size_t N = (size_t)B * T, Ns = tc_tokens_local(c, (int)N), C = c->hidden_size;
    size_t QKV = tc_qkv_width_local(c), CTX = (size_t)tc_heads_local(c) * c->kv_channels;
    int sp = tc_sp(c);
    ws->branch = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "branch output");
    ws->branch_full =
        sp ? mem_alloc_floats(MEM_WORKSPACE, N * C, "branch partial output") : ws->branch;
    if (sp) ws->gathered = mem_alloc_floats(MEM_WORKSPACE, N * C, "gathered norm output");
    ws->attn.threads = threads;
    /* context parallelism: a chunk of T/2 queries against the whole sequence's T x CP keys */
    /* a2a: the whole sequence of 1/CP of the heads */
    size_t attn = tc_cp(c) > 1 && c->cp_ring ? cp_ring_workspace_floats(c, T, threads)
                  : tc_cp(c) > 1 && c->cp_a2a ? attention_workspace_floats(T * tc_cp(c), threads)
                  : tc_cp(c) > 1 ? attention_workspace_floats_rows(T / 2, T * tc_cp(c), threads)
                                 : attention_workspace_floats(T, threads);
    ws->attn.data = mem_alloc_floats(MEM_WORKSPACE, attn, "attention");
    /* the ring reduce-scatter's receive buffers (--tp-comm-overlap) */
    if (sp && c->tp_comm_overlap)
        ws->recv = mem_alloc_floats(MEM_WORKSPACE, (N - Ns) * C, "overlap receive buffers");
    if (!with_backward) return;
    ws->dln = mem_alloc_floats(MEM_WORKSPACE, Ns * C, "dln");
    ws->dln_full = sp ? mem_alloc_floats(MEM_WORKSPACE, N * C, "dln partial") : ws->dln;
    ws->dctx = mem_alloc_floats(MEM_WORKSPACE, N * CTX, "dctx");
    ws->dqkv = mem_alloc_floats(MEM_WORKSPACE, N * QKV, "dqkv");
    if (c->qk_layernorm) ws->dqkv_raw = mem_alloc_floats(MEM_WORKSPACE, N * QKV, "dqkv_raw");
    ws->dfc1 = mem_alloc_floats(MEM_WORKSPACE, N * tc_fc1_width_local(c), "dfc1");
    ws->dact = mem_alloc_floats(MEM_WORKSPACE, N * tc_ffn_local(c), "dact");
}

void layer_workspace_free(layer_workspace *ws) {
    if (ws->branch_full != ws->branch) mem_free(ws->branch_full);
    if (ws->dln_full != ws->dln) mem_free(ws->dln_full);
    float *bufs[] = {ws->branch,   ws->dln,  ws->gathered,   ws->dctx, ws->dqkv,
                     ws->dqkv_raw, ws->dfc1, ws->dact, ws->attn.data, ws->recv};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) mem_free(bufs[i]);
    views_free(&ws->views);
    memset(ws, 0, sizeof(*ws));
}

/* ---- norms by kind ---- */

void norm_forward(const transformer_config *c, float *out, float *mean, float *rstd,
                  const float *inp, const float *w, const float *b, int N) {
    if (c->normalization == NORM_LAYERNORM)
        layernorm_forward(out, mean, rstd, inp, w, b, N, c->hidden_size, c->norm_epsilon);
    else
        rmsnorm_forward(out, rstd, inp, w, N, c->hidden_size, c->norm_epsilon);
}

void norm_backward(const transformer_config *c, float *dinp, float *dw, float *db,
                   const float *dout, const float *inp, const float *w, const float *mean,
                   const float *rstd, int N) {
    if (c->normalization == NORM_LAYERNORM)
        layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, c->hidden_size);
    else
        rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, c->hidden_size);
}

/* ---- the layer ---- */

static dropout_key site_key(const layer_ctx *ctx, int layer_index, uint32_t site) {
    dropout_key k = ctx->key;
    k.layer = (uint32_t)layer_index;
    k.site = site;
    return k;
}

/* This rank's rows of an [N, C] activation: its shard's under sequence parallelism, all N
 * otherwise; dropout masks are keyed by global element (of the global token under context
 * parallelism: cp_layout.h). */
static cp_rows shard_rows(const layer_ctx *ctx, int N) {
    const transformer_config *c = ctx->cfg;
    const int Ns = tc_tokens_local(c, N);
    return (cp_rows){c, ctx->T, cp_key_length(c, ctx->T, ctx->T_valid),
                     tc_sp(c) ? (int64_t)c->tp_rank * Ns : 0, Ns, c->hidden_size};
}

void transformer_layer_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                               layer_saved *s, layer_workspace *ws, const float *inp,
                               float *out) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, Ns = tc_tokens_local(c, N);
    size_t NC = (size_t)Ns * c->hidden_size;
    cp_rows rows = shard_rows(ctx, N);
    float p = ctx->training ? c->hidden_dropout : 0.0f;

    norm_forward(c, s->ln1, s->ln1_mean, s->ln1_rstd, inp, w->ln1_w, w->ln1_b, Ns);
    self_attention_forward(ctx, layer_index, w, s, ws, s->ln1, ws->branch);
    cp_residual_dropout_forward(rows, s->res1, inp, ws->branch, p,
                                site_key(ctx, layer_index, DROPOUT_SITE_ATTENTION_OUT));
    /* --bf16 (--fp16): the residual stream is bf16 (fp16, Megatron's): rounded after each add */
    half_round_f32(tc_half(c), s->res1, NC);

    norm_forward(c, s->ln2, s->ln2_mean, s->ln2_rstd, s->res1, w->ln2_w, w->ln2_b, Ns);
    if (tc_moe_layer(c, layer_index)) {
        moe_layer_forward(ctx, layer_index, w, ws, s->moe, s->ln2, ws->branch);
        /* --moe-layer-recompute: keep nothing (the norm output is kept); backward re-runs it */
        if (c->moe.layer_recompute) moe_saved_release(s->moe);
    } else
        mlp_forward(ctx, w, s, ws, s->ln2, ws->branch);
    cp_residual_dropout_forward(rows, out, s->res1, ws->branch, p,
                                site_key(ctx, layer_index, DROPOUT_SITE_MLP_OUT));
    half_round_f32(tc_half(c), out, NC);
    layer_saved_pack(s, c, ctx->B, ctx->T); /* --bf16/--fp16: b16 tensors to storage */
}

/* --moe-layer-recompute: the MoE layer's forward again from its kept input (Megatron's
 * tensor_parallel.checkpoint of MoELayer.forward), the routers' losses not recorded twice. */
static void moe_recompute(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                          layer_workspace *ws, const layer_saved *s, int Ns) {
    layer_ctx again = *ctx;
    again.moe_tracker = NULL;
    float *out = mem_alloc_floats(MEM_WORKSPACE, (size_t)Ns * ctx->cfg->hidden_size,
                                  "moe recomputed output");
    moe_layer_forward(&again, layer_index, w, ws, s->moe, s->ln2, out);
    mem_free(out);
}

void transformer_layer_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                                const layer_weights *g, const layer_saved *s,
                                layer_workspace *ws, const float *inp, float *dres) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, Ns = tc_tokens_local(c, N);
    size_t NC = (size_t)Ns * c->hidden_size;
    cp_rows rows = shard_rows(ctx, N);
    float p = ctx->training ? c->hidden_dropout : 0.0f;
    layer_saved_unpack(s, c, ctx->B, ctx->T); /* --bf16/--fp16: b16 tensors to views */

    /* MLP branch: out = res1 + dropout(mlp(norm2(res1))). dres already holds the identity
     * path's gradient w.r.t. res1, so only the branch's contribution is added to it. */
    memset(ws->branch, 0, NC * sizeof(float));
    cp_residual_dropout_backward(rows, NULL, ws->branch, dres, p,
                                 site_key(ctx, layer_index, DROPOUT_SITE_MLP_OUT));
    if (tc_moe_layer(c, layer_index)) {
        if (c->moe.layer_recompute) moe_recompute(ctx, layer_index, w, ws, s, Ns);
        moe_layer_backward(ctx, layer_index, w, g, ws, s->moe, s->ln2, ws->branch, ws->dln);
    } else
        mlp_backward(ctx, w, g, s, ws, s->ln2, ws->branch, ws->dln);
    norm_backward(c, dres, g->ln2_w, g->ln2_b, ws->dln, s->res1, w->ln2_w, s->ln2_mean,
                  s->ln2_rstd, Ns);

    /* Attention branch: res1 = inp + dropout(attention(norm1(inp))). */
    memset(ws->branch, 0, NC * sizeof(float));
    cp_residual_dropout_backward(rows, NULL, ws->branch, dres, p,
                                 site_key(ctx, layer_index, DROPOUT_SITE_ATTENTION_OUT));
    self_attention_backward(ctx, layer_index, w, g, s, ws, s->ln1, ws->branch, ws->dln);
    norm_backward(c, dres, g->ln1_w, g->ln1_b, ws->dln, inp, w->ln1_w, s->ln1_mean, s->ln1_rstd,
                  Ns);
}
