#include "core/transformer/moe/experts.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"

/* The 16-bit linears' operand workspace of the thread running an expert: NULL outside the
 * grouped region (linear_forward's shared one), else one of the region's (linear.h). */
static void expert_linear(uint16_t *ws, float *out, const float *inp, linear_weight w, int N,
                          int C, int OC) {
    if (ws)
        linear_forward_in(ws, out, inp, w, N, C, OC);
    else
        linear_forward(out, inp, w, NULL, N, C, OC);
}

static void expert_linear_backward(uint16_t *ws, float *dinp, float *dweight, const float *dout,
                                   const float *inp, linear_weight w, int N, int C, int OC) {
    if (ws)
        linear_backward_in(ws, dinp, dweight, dout, inp, w, N, C, OC);
    else
        linear_backward(dinp, dweight, NULL, dout, inp, w, N, C, OC);
}

/* Expert e's slice of a [E_local, rows, cols] weight. */
static linear_weight expert_slice(linear_weight w, int e, size_t rows, size_t cols) {
    size_t o = (size_t)e * rows * cols;
    return (linear_weight){w.f32 ? w.f32 + o : NULL, w.h16 ? w.h16 + o : NULL};
}

static void expert_forward(const transformer_config *c, moe_expert_weights w, int e, int r0,
                           int n, const float *rows, float *fc1, float *act, float *out,
                           uint16_t *ws) {
    const int C = c->hidden_size, F = tc_expert_ffn_local(c), FC1 = tc_expert_fc1_width_local(c);
    if (n == 0) return;
    float *h = fc1 + (size_t)r0 * FC1, *a = act + (size_t)r0 * F;
    expert_linear(ws, h, rows + (size_t)r0 * C, expert_slice(w.fc1, e, FC1, C), n, C, FC1);
    half_round_f32(tc_half(c), h, (size_t)n * FC1); /* as the dense MLP (mlp.c) */
    if (c->swiglu)
        swiglu_forward(a, h, n, F);
    else
        gelu_forward(a, h, (size_t)n * F, c->gelu);
    expert_linear(ws, out + (size_t)r0 * C, a, expert_slice(w.fc2, e, C, F), n, F, C);
}

static void expert_backward(const transformer_config *c, moe_expert_weights w,
                            moe_expert_weights dw, int e, int r0, int n, const float *rows,
                            const float *fc1, const float *act, const float *dout, float *dact,
                            float *dfc1, float *drows, uint16_t *ws) {
    const int C = c->hidden_size, F = tc_expert_ffn_local(c), FC1 = tc_expert_fc1_width_local(c);
    if (n == 0) return;
    float *da = dact + (size_t)r0 * F, *dh = dfc1 + (size_t)r0 * FC1;
    float *dr = drows + (size_t)r0 * C;
    memset(da, 0, (size_t)n * F * sizeof(float));
    expert_linear_backward(ws, da, (float *)expert_slice(dw.fc2, e, C, F).f32,
                           dout + (size_t)r0 * C, act + (size_t)r0 * F,
                           expert_slice(w.fc2, e, C, F), n, F, C);
    memset(dh, 0, (size_t)n * FC1 * sizeof(float));
    if (c->swiglu)
        swiglu_backward(dh, da, fc1 + (size_t)r0 * FC1, n, F);
    else
        gelu_backward(dh, da, fc1 + (size_t)r0 * FC1, (size_t)n * F, c->gelu);
    memset(dr, 0, (size_t)n * C * sizeof(float));
    expert_linear_backward(ws, dr, (float *)expert_slice(dw.fc1, e, FC1, C).f32, dh,
                           rows + (size_t)r0 * C, expert_slice(w.fc1, e, FC1, C), n, C, FC1);
}

/* --moe-grouped-gemm runs the experts side by side on the threads, each GEMM single-threaded;
 * the 16-bit linears with an operand workspace per thread (thread_ws). The team is
 * OpenMP's thread count as it was before gemm_serial_begin: OpenBLAS's OpenMP build sets
 * OpenMP's default team size with its own thread count (openblas_set_num_threads calls
 * omp_set_num_threads), so a region opened after gemm_serial_begin without num_threads runs
 * on one thread. */
static int grouped(const transformer_config *c) { return c->moe.grouped_gemm; }

/* --bf16 / --fp16: the region's operand workspaces, team x linear_half_ws_elems() (grown
 * once, kept: category workspace); NULL in fp32. Thread t's is at t x that. */
static uint16_t *thread_ws(const transformer_config *c, int team) {
    static uint16_t *ws;
    static size_t have;
    if (!tc_half(c)) return NULL;
    const size_t need = (size_t)team * linear_half_ws_elems();
    if (need > have) {
        mem_free(ws);
        ws = mem_alloc(MEM_WORKSPACE, need * sizeof(uint16_t), "moe grouped experts' operands");
        have = need;
    }
    return ws;
}

static uint16_t *ws_of(uint16_t *all) {
    return all ? all + (size_t)omp_get_thread_num() * linear_half_ws_elems() : NULL;
}

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
            expert_forward(c, w, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act, out,
                           NULL);
        return;
    }
    int *order = largest_first(g);
    const int team = omp_get_max_threads(); /* before gemm_serial_begin: see above */
    uint16_t *ws = thread_ws(c, team);
    int saved = gemm_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int i = 0; i < g.num_experts; i++) {
        const int e = order[i];
        expert_forward(c, w, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act, out,
                       ws_of(ws));
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
                            dout, dact, dfc1, drows, NULL);
        return;
    }
    int *order = largest_first(g);
    const int team = omp_get_max_threads();
    uint16_t *ws = thread_ws(c, team);
    int saved = gemm_serial_begin();
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int i = 0; i < g.num_experts; i++) {
        const int e = order[i];
        expert_backward(c, w, dw, e, g.begin[e], g.begin[e + 1] - g.begin[e], rows, fc1, act,
                        dout, dact, dfc1, drows, ws_of(ws));
    }
    gemm_serial_end(saved);
    free(order);
}
