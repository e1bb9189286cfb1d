#include "core/transformer/mlp.h"

#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/linear.h"

void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s, const float *ln2,
                 float *out) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, F = c->ffn_hidden_size, FC1 = tc_fc1_width(c);
    linear_forward(s->fc1, ln2, w->fc1_w, w->fc1_b, N, C, FC1);
    if (c->swiglu)
        swiglu_forward(s->act, s->fc1, N, F);
    else
        gelu_forward(s->act, s->fc1, (size_t)N * F, c->gelu);
    linear_forward(out, s->act, w->fc2_w, w->fc2_b, N, F, C);
}

void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *ln2, const float *dout,
                  float *dln2) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, F = c->ffn_hidden_size, FC1 = tc_fc1_width(c);
    memset(ws->dact, 0, (size_t)N * F * sizeof(float));
    linear_backward(ws->dact, g->fc2_w, g->fc2_b, dout, s->act, w->fc2_w, N, F, C);
    memset(ws->dfc1, 0, (size_t)N * FC1 * sizeof(float));
    if (c->swiglu)
        swiglu_backward(ws->dfc1, ws->dact, s->fc1, N, F);
    else
        gelu_backward(ws->dfc1, ws->dact, s->fc1, (size_t)N * F, c->gelu);
    linear_backward(dln2, g->fc1_w, g->fc1_b, ws->dfc1, ln2, w->fc1_w, N, C, FC1);
}
