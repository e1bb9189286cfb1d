#include "core/transformer/attention.h"

#include <string.h>

#include "core/kernels/attention.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "core/tensor_parallel/parallel_linear.h"

/* Dropout key and head range of this rank's core attention. */
static dropout_key probs_key(const layer_ctx *ctx, int layer_index) {
    dropout_key key = ctx->key;
    key.layer = (uint32_t)layer_index;
    key.site = DROPOUT_SITE_ATTENTION_PROBS;
    return key;
}

void self_attention_forward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                            layer_saved *s, layer_workspace *ws, const float *in_local,
                            float *out_local) {
    const transformer_config *c = ctx->cfg;
    int B = ctx->B, T = ctx->T, N = B * T, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    int NH = tc_heads_local(c), NG = tc_groups_local(c), HS = c->kv_channels;

    /* With --qk-layernorm the projection output is kept separately (the norm's backward needs
     * it); otherwise RoPE rotates it in place and only the rotated copy is kept. */
    float *proj_out = c->qk_layernorm ? s->qkv_raw : s->qkv;
    tp_linear qkv = tp_linear_make(c, TP_LINEAR_QKV, ws->gathered, NULL, NULL);
    column_parallel_linear_forward(&qkv, proj_out, in_local, w->qkv_w, w->qkv_b, N, C, QKV);
    if (c->qk_layernorm)
        qk_norm_forward(s->qkv, s->qk_mean, s->qk_rstd, s->qkv_raw, w->q_ln_w, w->q_ln_b,
                        w->k_ln_w, w->k_ln_b, N, NH, NG, HS, c->normalization, c->norm_epsilon);
    if (c->rope) rope_forward(s->qkv, ctx->rope_cos, ctx->rope_sin, B, T, NH, NG, HS, c->rot_dim);

    float p = ctx->training ? c->attention_dropout : 0.0f;
    attention_forward(s->ctx, s->probs, s->qkv, B, T, NH, NG, HS, c->causal, p,
                      probs_key(ctx, layer_index), c->tp_rank * NH, c->num_attention_heads,
                      ws->attn);
    tp_linear proj = tp_linear_make(c, TP_LINEAR_PROJ, NULL, ws->branch_full, ws->recv);
    row_parallel_linear_forward(&proj, out_local, s->ctx, w->proj_w, w->proj_b, N, NH * HS, C);
}

void self_attention_backward(const layer_ctx *ctx, int layer_index, const layer_weights *w,
                             const layer_weights *g, const layer_saved *s, layer_workspace *ws,
                             const float *in_local, const float *dout_local, float *din_local) {
    const transformer_config *c = ctx->cfg;
    int B = ctx->B, T = ctx->T, N = B * T, C = c->hidden_size, QKV = tc_qkv_width_local(c);
    int NH = tc_heads_local(c), NG = tc_groups_local(c), HS = c->kv_channels;

    memset(ws->dctx, 0, (size_t)N * NH * HS * sizeof(float));
    tp_linear proj = tp_linear_make(c, TP_LINEAR_PROJ, ws->branch_full, NULL, NULL);
    row_parallel_linear_backward(&proj, ws->dctx, g->proj_w, g->proj_b, dout_local, s->ctx,
                                 w->proj_w, N, NH * HS, C);

    float p = ctx->training ? c->attention_dropout : 0.0f;
    memset(ws->dqkv, 0, (size_t)N * QKV * sizeof(float));
    attention_backward(ws->dqkv, ws->dctx, s->qkv, s->probs, B, T, NH, NG, HS, c->causal, p,
                       probs_key(ctx, layer_index), c->tp_rank * NH, c->num_attention_heads,
                       ws->attn);
    if (c->rope)
        rope_backward(ws->dqkv, ctx->rope_cos, ctx->rope_sin, B, T, NH, NG, HS, c->rot_dim);

    const float *dproj = ws->dqkv; /* grad w.r.t. linear_qkv's output */
    if (c->qk_layernorm) {
        memset(ws->dqkv_raw, 0, (size_t)N * QKV * sizeof(float));
        qk_norm_backward(ws->dqkv_raw, g->q_ln_w, g->q_ln_b, g->k_ln_w, g->k_ln_b, ws->dqkv,
                         s->qkv_raw, w->q_ln_w, w->k_ln_w, s->qk_mean, s->qk_rstd, N, NH, NG, HS,
                         c->normalization);
        dproj = ws->dqkv_raw;
    }
    tp_linear qkv = tp_linear_make(c, TP_LINEAR_QKV, ws->gathered, ws->dln_full, ws->recv);
    column_parallel_linear_backward(&qkv, din_local, g->qkv_w, g->qkv_b, dproj, in_local,
                                    w->qkv_w, N, C, QKV);
}
