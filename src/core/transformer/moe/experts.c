#include "core/transformer/moe/experts.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/util/alloc.h"

/* Expert e's slice of a [E_local, rows, cols] weight. */
static linear_weight expert_slice(linear_weight w, int e, size_t rows, size_t cols) {
    size_t o = (size_t)e * rows * cols;
    return (linear_weight){w.f32 ? w.f32 + o : NULL, w.h16 ? w.h16 + o : NULL};
}

static void expert_forward(const transformer_config *c, moe_expert_weights w, int e, int r0,
                           int n, const float *rows, float *fc1, float *act, float *out) {
    const int C = c->hidden_size, F = tc_expert_ffn_local(c), FC1 = tc_expert_fc1_width_local(c);
    if (n == 0) return;
    float *h = fc1 + (size_t)r0 * FC1, *a = act + (size_t)r0 * F;
    linear_forward(h, rows + (size_t)r0 * C, expert_slice(w.fc1, e, FC1, C), NULL, n, C, FC1);
    half_round_f32(tc_half(c), h, (size_t)n * FC1); /* as the dense MLP (mlp.c) */
    if (c->swiglu)
        swiglu_forward(a, h, n, F);
    else
        gelu_forward(a, h, (size_t)n * F, c->gelu);
    linear_forward(out + (size_t)r0 * C, a, expert_slice(w.fc2, e, C, F), NULL, n, F, C);
}

static void expert_backward(const transformer_config *c, moe_expert_weights w,
                            moe_expert_weights dw, int e, int r0, int n, const float *rows,
                            const float *fc1, const float *act, const float *dout, float *dact,
                            float *dfc1, float *drows) {
    const int C = c->hidden_size, F = tc_expert_ffn_local(c), FC1 = tc_expert_fc1_width_local(c);
    if (n == 0) return;
    float *da = dact + (size_t)r0 * F, *dh = dfc1 + (size_t)r0 * FC1;
    float *dr = drows + (size_t)r0 * C;
    memset(da, 0, (size_t)n * F * sizeof(float));
    linear_backward(da, (float *)expert_slice(dw.fc2, e, C, F).f32, NULL, dout + (size_t)r0 * C,
                    act + (size_t)r0 * F, expert_slice(w.fc2, e, C, F), n, F, C);
    memset(dh, 0, (size_t)n * FC1 * sizeof(float));
    if (c->swiglu)
        swiglu_backward(dh, da, fc1 + (size_t)r0 * FC1, n, F);
    else
        gelu_backward(dh, da, fc1 + (size_t)r0 * FC1, (size_t)n * F, c->gelu);
    memset(dr, 0, (size_t)n * C * sizeof(float));
    linear_backward(dr, (float *)expert_slice(dw.fc1, e, FC1, C).f32, NULL, dh,
                    rows + (size_t)r0 * C, expert_slice(w.fc1, e, FC1, C), n, C, FC1);
}

/* --moe-grouped-gemm runs the experts side by side on the threads, each GEMM single-threaded;
 * the 16-bit linears share one operand workspace (linear.h), so they keep the loop. The team is
 * OpenMP's thread count as it was before gemm_serial_begin: OpenBLAS's OpenMP build sets
 * OpenMP's default team size with its own thread count (openblas_set_num_threads calls
 * omp_set_num_threads), so a region opened after gemm_serial_begin without num_threads runs
 * on one thread. */
static int grouped(const transformer_config *c) { return c->moe.grouped_gemm && !tc_half(c); }

/* The order the grouped region takes the experts in: most rows first (ties: lower index), so
 * that the dynamic schedule does not leave a large expert to the end while the other threads
 * wait (longest processing time first). Which thread runs an expert changes none of its bits. */
static int *largest_first(moe_expert_rows g) {
    const int n = g.num_experts;
    int *order = xmalloc(sizeof(int) * (size_t)(n > 0 ? n : 1), "moe expert order");
    for (int i = 0; i < n; i++) { /* insertion sort: a rank has tens of experts */
        const int e = i, rows = g.begin[e + 1] - g.begin[e];
        int j = i;
        for (; j > 0 && g.begin[order[j - 1] + 1] - g.begin[order[j - 1]] < rows; j--)
            order[j] = order[j - 1];
        order[j] = e;
    }
    return order;
}

void moe_experts_forward(const transformer_config *c, moe_expert_weights w, moe_expert_rows g,
                         const float *rows, float *fc1, float *act, float *out) {
    if (!grouped(c)) {
        for (int e = 0; e < g.num_experts; e++)
            expert_forward(c, w, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act, out);
        return;
    }
    int *order = largest_first(g);
    const int team = omp_get_max_threads(); /* before gemm_serial_begin: see above */
    int saved = gemm_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int i = 0; i < g.num_experts; i++) {
        const int e = order[i];
        expert_forward(c, w, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act, out);
    }
    gemm_serial_end(saved);
    free(order);
}

void moe_experts_backward(const transformer_config *c, moe_expert_weights w,
                          moe_expert_weights dw, moe_expert_rows g, const float *rows,
                          const float *fc1, const float *act, const float *dout, float *dact,
                          float *dfc1, float *drows) {
    if (!grouped(c)) {
        for (int e = 0; e < g.num_experts; e++)
            expert_backward(c, w, dw, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act,
                            dout, dact, dfc1, drows);
        return;
    }
    int *order = largest_first(g);
    const int team = omp_get_max_threads();
    int saved = gemm_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int i = 0; i < g.num_experts; i++) {
        const int e = order[i];
        expert_backward(c, w, dw, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act,
                        dout, dact, dfc1, drows);
    }
    gemm_serial_end(saved);
    free(order);
}
