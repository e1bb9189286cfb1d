#include "core/transformer/mlp.h"

#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/bf16.h"
#include "core/kernels/linear.h"
#include "core/tensor_parallel/parallel_linear.h"

void mlp_forward_rows(const transformer_config *c, const layer_weights *w, const mlp_buffers *b,
                      const float *in_local, float *out_local, int N) {
    const int C = c->hidden_size, F = tc_ffn_local(c), FC1 = tc_fc1_width_local(c);
    tp_linear fc1 = tp_linear_make(c, TP_LINEAR_FC1, b->gathered, NULL, NULL);
    column_parallel_linear_forward(&fc1, b->fc1, in_local, LAYER_LINEAR_W(w, fc1), w->fc1_b, N, C,
                                   FC1);
    /* --bf16 (--fp16): linear_fc1's output is a 16-bit tensor (Megatron's), rounded here, read as
     * rounded by the activation's forward and backward */
    half_round_f32(tc_half(c), b->fc1, (size_t)N * FC1);
    if (c->swiglu)
        swiglu_forward(b->act, b->fc1, N, F);
    else
        gelu_forward(b->act, b->fc1, (size_t)N * F, c->gelu);
    tp_linear fc2 = tp_linear_make(c, TP_LINEAR_FC2, NULL, b->branch_full, b->recv);
    row_parallel_linear_forward(&fc2, out_local, b->act, LAYER_LINEAR_W(w, fc2), w->fc2_b, N, F, C);
}

void mlp_forward(const layer_ctx *ctx, const layer_weights *w, layer_saved *s,
                 layer_workspace *ws, const float *in_local, float *out_local) {
    const mlp_buffers b = {.fc1 = s->fc1, .act = s->act, .gathered = ws->gathered,
                           .branch_full = ws->branch_full, .recv = ws->recv};
    mlp_forward_rows(ctx->cfg, w, &b, in_local, out_local, ctx->B * ctx->T);
}

void mlp_backward(const layer_ctx *ctx, const layer_weights *w, const layer_weights *g,
                  const layer_saved *s, layer_workspace *ws, const float *in_local,
                  const float *dout_local, float *din_local) {
    const transformer_config *c = ctx->cfg;
    int N = ctx->B * ctx->T, C = c->hidden_size, F = tc_ffn_local(c), FC1 = tc_fc1_width_local(c);
    memset(ws->dact, 0, (size_t)N * F * sizeof(float));
    tp_linear fc2 = tp_linear_make(c, TP_LINEAR_FC2, ws->branch_full, NULL, NULL);
    row_parallel_linear_backward(&fc2, ws->dact, g->fc2_w, g->fc2_b, dout_local, s->act,
                                 LAYER_LINEAR_W(w, fc2), N, F, C);
    memset(ws->dfc1, 0, (size_t)N * FC1 * sizeof(float));
    if (c->swiglu)
        swiglu_backward(ws->dfc1, ws->dact, s->fc1, N, F);
    else
        gelu_backward(ws->dfc1, ws->dact, s->fc1, (size_t)N * F, c->gelu);
    tp_linear fc1 = tp_linear_make(c, TP_LINEAR_FC1, ws->gathered, ws->dln_full, ws->recv);
    column_parallel_linear_backward(&fc1, din_local, g->fc1_w, g->fc1_b, ws->dfc1, in_local,
                                    LAYER_LINEAR_W(w, fc1), N, C, FC1);
}
