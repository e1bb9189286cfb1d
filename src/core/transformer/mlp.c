#include "core/transformer/mlp.h"

#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/linear.h"

void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s, const float *in,
                 float *out) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, F = tc_ffn_local(c), FC1 = tc_fc1_width_local(c);
    linear_forward(s->fc1, in, w->fc1_w, w->fc1_b, N, C, FC1);
    if (c->swiglu)
        swiglu_forward(s->act, s->fc1, N, F);
    else
        gelu_forward(s->act, s->fc1, (size_t)N * F, c->gelu);
    linear_forward(out, s->act, w->fc2_w, NULL, N, F, C);
}

void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *in, const float *dout,
                  float *din) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, F = tc_ffn_local(c), FC1 = tc_fc1_width_local(c);
    memset(ws->dact, 0, (size_t)N * F * sizeof(float));
    linear_backward(ws->dact, g->fc2_w, NULL, dout, s->act, w->fc2_w, N, F, C);
    memset(ws->dfc1, 0, (size_t)N * FC1 * sizeof(float));
    if (c->swiglu)
        swiglu_backward(ws->dfc1, ws->dact, s->fc1, N, F);
    else
        gelu_backward(ws->dfc1, ws->dact, s->fc1, (size_t)N * F, c->gelu);
    linear_backward(din, g->fc1_w, g->fc1_b, ws->dfc1, in, w->fc1_w, N, C, FC1);
}
