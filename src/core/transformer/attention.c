#include "core/transformer/attention.h"

#include "core/kernels/bf16.h"

#include <string.h>

#include "core/context_parallel/cp_a2a.h"
#include "core/context_parallel/cp_attention.h"
#include "core/context_parallel/cp_layout.h"
#include "core/context_parallel/cp_ring.h"
#include "core/kernels/attention.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "core/inference/static_context.h"
#include "core/tensor_parallel/parallel_linear.h"

/* Mask, dropout key and head range of this rank's core attention. */
static attention_opts core_attention_opts(const layer_ctx *ctx, int layer_index) {
    const transformer_config *c = ctx->cfg;
    attention_opts o = {.causal = c->causal,
                        .kv_len = ctx->T_valid,
                        .dropout_p = ctx->training ? c->attention_dropout : 0.0f,
                        .key = ctx->key,
                        .heads = {c->tp_rank * tc_heads_local(c), c->num_attention_heads}};
    o.key.layer = (uint32_t)layer_index;
    o.key.site = DROPOUT_SITE_ATTENTION_PROBS;
    o.half = tc_half(c);
    if (ctx->doc_start)
        o.docs = (attention_docs){ctx->doc_start, ctx->doc_end, ctx->T * tc_cp(c)};
    return o;
}

/* The kept probabilities: fp32, bf16 (--bf16) or none (selective recompute). */
static attention_probs saved_probs(const layer_saved *s) {
    return (attention_probs){s->probs, s->probs_b16};
}

static qk_norm_weights qk_weights(const layer_weights *w) {
    return (qk_norm_weights){w->q_ln_w, w->q_ln_b, w->k_ln_w, w->k_ln_b};
}

/* This micro-batch's packed QKV buffer, and the RoPE tables. */
static qkv_batch qkv_shape(const layer_ctx *ctx) {
    return (qkv_batch){ctx->B, ctx->T, tc_qkv_layout_local(ctx->cfg)};
}
static rope_table rope_of(const layer_ctx *ctx) {
    return (rope_table){ctx->rope_cos, ctx->rope_sin, ctx->cfg->rot_dim};
}

void self_attention_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                            layer_saved *s, layer_workspace *ws, const float *in_local,
                            float *out_local) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    int NH = tc_heads_local(c), HS = c->kv_channels;

    /* With --qk-layernorm the projection output is kept separately (the norm's backward needs
     * it); otherwise RoPE rotates it in place and only the rotated copy is kept. */
    float *proj_out = c->qk_layernorm ? s->qkv_raw : s->qkv;
    tp_linear qkv = tp_linear_make(c, TP_LINEAR_QKV, ws->gathered, NULL, NULL);
    column_parallel_linear_forward(&qkv, proj_out, in_local, LAYER_LINEAR_W(w, qkv), w->qkv_b,
                                   N, C, QKV);
    /* --bf16 (--fp16): linear_qkv's output, the q/k norm's and RoPE's are bf16 (fp16) tensors
     * (Megatron's), rounded where they are made and read as rounded by forward and backward */
    size_t nqkv = (size_t)N * QKV;
    half_round_f32(tc_half(c), proj_out, nqkv);
    if (c->qk_layernorm) {
        qk_norm_forward(s->qkv, (qk_norm_stats){s->qk_mean, s->qk_rstd}, s->qkv_raw,
                        qk_weights(w), N, tc_qkv_layout_local(c), c->normalization,
                        c->norm_epsilon);
        half_round_f32(tc_half(c), s->qkv, nqkv);
    }
    if (c->rope) {
        cp_rope_forward(c, s->qkv, qkv_shape(ctx), rope_of(ctx));
        half_round_f32(tc_half(c), s->qkv, nqkv);
    }
    if (ctx->inference) /* the rows as attention reads them: later steps attend to them */
        inference_context_store(ctx->inference, layer_index, s->qkv, ctx->B, 0, ctx->T);

    /* context parallelism: the local queries against the whole sequence's keys */
    if (tc_cp(c) > 1 && c->cp_ring)
        cp_ring_forward(c, s->ctx, s->cp_lse, s->qkv, qkv_shape(ctx),
                        core_attention_opts(ctx, layer_index), ws->attn);
    else if (tc_cp(c) > 1 && c->cp_a2a)
        cp_a2a_forward(c, s->ctx, saved_probs(s), s->qkv, qkv_shape(ctx),
                       core_attention_opts(ctx, layer_index), ws->attn);
    else if (tc_cp(c) > 1)
        cp_attention_forward(c, s->ctx, saved_probs(s), s->qkv, qkv_shape(ctx),
                             core_attention_opts(ctx, layer_index), ws->attn);
    else
        attention_forward(s->ctx, saved_probs(s), s->qkv, qkv_shape(ctx),
                          core_attention_opts(ctx, layer_index), ws->attn);
    tp_linear proj = tp_linear_make(c, TP_LINEAR_PROJ, NULL, ws->branch_full, ws->recv);
    row_parallel_linear_forward(&proj, out_local, s->ctx, LAYER_LINEAR_W(w, proj), w->proj_b, N,
                                NH * HS, C);
}

void self_attention_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                             const layer_weights *g, const layer_saved *s, layer_workspace *ws,
                             const float *in_local, const float *dout_local, float *din_local) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    int NH = tc_heads_local(c), HS = c->kv_channels;

    memset(ws->dctx, 0, (size_t)N * NH * HS * sizeof(float));
    tp_linear proj = tp_linear_make(c, TP_LINEAR_PROJ, ws->branch_full, NULL, NULL);
    row_parallel_linear_backward(&proj, ws->dctx, g->proj_w, g->proj_b, dout_local, s->ctx,
                                 LAYER_LINEAR_W(w, proj), N, NH * HS, C);

    memset(ws->dqkv, 0, (size_t)N * QKV * sizeof(float));
    if (tc_cp(c) > 1 && c->cp_ring)
        cp_ring_backward(c, ws->dqkv, ws->dctx, s->ctx, s->cp_lse, s->qkv, qkv_shape(ctx),
                         core_attention_opts(ctx, layer_index), ws->attn);
    else if (tc_cp(c) > 1 && c->cp_a2a)
        cp_a2a_backward(c, ws->dqkv, ws->dctx, s->qkv, saved_probs(s), qkv_shape(ctx),
                        core_attention_opts(ctx, layer_index), ws->attn);
    else if (tc_cp(c) > 1)
        cp_attention_backward(c, ws->dqkv, ws->dctx, s->qkv, saved_probs(s), qkv_shape(ctx),
                              core_attention_opts(ctx, layer_index), ws->attn);
    else
        attention_backward(ws->dqkv, ws->dctx, s->qkv, saved_probs(s), qkv_shape(ctx),
                           core_attention_opts(ctx, layer_index), ws->attn);
    if (c->rope) cp_rope_backward(c, ws->dqkv, qkv_shape(ctx), rope_of(ctx));

    const float *dproj = ws->dqkv; /* grad w.r.t. linear_qkv's output */
    if (c->qk_layernorm) {
        memset(ws->dqkv_raw, 0, (size_t)N * QKV * sizeof(float));
        qk_norm_grads dw = {g->q_ln_w, g->q_ln_b, g->k_ln_w, g->k_ln_b};
        qk_norm_backward(ws->dqkv_raw, dw, ws->dqkv, s->qkv_raw, qk_weights(w),
                         (qk_norm_stats){s->qk_mean, s->qk_rstd}, N, tc_qkv_layout_local(c),
                         c->normalization);
        dproj = ws->dqkv_raw;
    }
    tp_linear qkv = tp_linear_make(c, TP_LINEAR_QKV, ws->gathered, ws->dln_full, ws->recv);
    column_parallel_linear_backward(&qkv, din_local, g->qkv_w, g->qkv_b, dproj, in_local,
                                    LAYER_LINEAR_W(w, qkv), N, C, QKV);
}
