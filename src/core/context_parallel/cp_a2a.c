#include "core/context_parallel/cp_a2a.h"

#include <mpi.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"

/* Staging for the exchanges and the whole sequence's slices, grown on demand and shared by
 * every layer (one attention call at a time): send, receive, the QKV slice, the output or
 * output-gradient slice, the QKV-gradient slice. */
static float *g_send, *g_recv, *g_qkv, *g_out, *g_dqkv;
static size_t g_cap;

static void buffers_fit(size_t n) {
    if (n <= g_cap) return;
    float **bufs[] = {&g_send, &g_recv, &g_qkv, &g_out, &g_dqkv};
    for (int i = 0; i < 5; i++) {
        mem_free(*bufs[i]);
        *bufs[i] = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel all-to-all");
    }
    g_cap = n;
}

/* src [B, T_local, width] (this rank's rows, every rank's slice of `slice` columns from column
 * 0) -> dst [B, T, slice] (every rank's rows, this rank's slice, in sequence order). */
static void seq_to_heads(const transformer_config *c, float *dst, const float *src, int B,
                         int T_local, int width, int slice) {
    const int cp = tc_cp(c), L = T_local / 2, T = T_local * cp;
    const size_t rows = (size_t)B * T_local, n = rows * slice;
    for (int rho = 0; rho < cp; rho++)
        for (size_t r = 0; r < rows; r++)
            memcpy(g_send + rho * n + r * slice, src + r * width + (size_t)rho * slice,
                   (size_t)slice * sizeof(float));
    MPI_Alltoall(g_send, (int)n, MPI_FLOAT, g_recv, (int)n, MPI_FLOAT, parallel_get()->cp);
    for (int rho = 0; rho < cp; rho++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++) {
                const int chunk = k == 0 ? rho : 2 * cp - 1 - rho;
                memcpy(dst + ((size_t)b * T + (size_t)chunk * L) * slice,
                       g_recv + rho * n + ((size_t)b * T_local + (size_t)k * L) * slice,
                       (size_t)L * slice * sizeof(float));
            }
}

/* The inverse: src [B, T, slice] (this rank's slice of every rank's rows) -> dst [B, T_local,
 * width] (this rank's rows, every rank's slice), added to dst when add. */
static void heads_to_seq(const transformer_config *c, float *dst, const float *src, int B,
                         int T_local, int width, int slice, int add) {
    const int cp = tc_cp(c), L = T_local / 2, T = T_local * cp;
    const size_t rows = (size_t)B * T_local, n = rows * slice;
    for (int rho = 0; rho < cp; rho++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++) {
                const int chunk = k == 0 ? rho : 2 * cp - 1 - rho;
                memcpy(g_send + rho * n + ((size_t)b * T_local + (size_t)k * L) * slice,
                       src + ((size_t)b * T + (size_t)chunk * L) * slice,
                       (size_t)L * slice * sizeof(float));
            }
    MPI_Alltoall(g_send, (int)n, MPI_FLOAT, g_recv, (int)n, MPI_FLOAT, parallel_get()->cp);
    for (int rho = 0; rho < cp; rho++)
        for (size_t r = 0; r < rows; r++) {
            float *d = dst + r * width + (size_t)rho * slice;
            const float *s = g_recv + rho * n + r * slice;
            if (add)
                for (int i = 0; i < slice; i++) d[i] += s[i];
            else
                memcpy(d, s, (size_t)slice * sizeof(float));
        }
}

/* This rank's heads of the whole sequence: the layout, the rows and the dropout head range. */
typedef struct {
    qkv_layout lay;
    attention_rows rows;
    attention_opts o;
    int W, Ws, OC, OCs;
} a2a_shape;

static a2a_shape shape_of(const transformer_config *c, qkv_batch x, attention_opts o) {
    const int cp = tc_cp(c), T = x.T * cp;
    a2a_shape s;
    s.lay = (qkv_layout){x.layout.NH / cp, x.layout.NG / cp, x.layout.HS};
    s.W = (int)qkv_row_width(x.layout);
    s.Ws = (int)qkv_row_width(s.lay);
    s.OC = x.layout.NH * x.layout.HS;
    s.OCs = s.lay.NH * s.lay.HS;
    const int kv = o.kv_len > 0 && o.kv_len < T ? o.kv_len : T;
    s.rows = (attention_rows){g_qkv, g_qkv, T, T, 0, T, T, T, kv};
    s.o = o;
    s.o.heads.first = o.heads.first + c->cp_rank * s.lay.NH;
    return s;
}

void cp_a2a_forward(const transformer_config *c, float *out, attention_probs probs,
                    const float *qkv, qkv_batch x, attention_opts o, attention_workspace ws) {
    buffers_fit((size_t)x.B * x.T * qkv_row_width(x.layout));
    a2a_shape s = shape_of(c, x, o);
    seq_to_heads(c, g_qkv, qkv, x.B, x.T, s.W, s.Ws);
    attention_forward_rows(g_out, probs, s.rows, x.B, s.lay, s.o, ws);
    heads_to_seq(c, out, g_out, x.B, x.T, s.OC, s.OCs, 0);
}

void cp_a2a_backward(const transformer_config *c, float *dqkv, const float *dout,
                     const float *qkv, attention_probs probs, qkv_batch x, attention_opts o,
                     attention_workspace ws) {
    const size_t n = (size_t)x.B * x.T * qkv_row_width(x.layout);
    buffers_fit(n);
    a2a_shape s = shape_of(c, x, o);
    seq_to_heads(c, g_qkv, qkv, x.B, x.T, s.W, s.Ws);
    seq_to_heads(c, g_out, dout, x.B, x.T, s.OC, s.OCs);
    memset(g_dqkv, 0, n * sizeof(float));
    attention_backward_rows(g_dqkv, g_dqkv, g_out, s.rows, probs, x.B, s.lay, s.o, ws);
    heads_to_seq(c, dqkv, g_dqkv, x.B, x.T, s.W, s.Ws, 1);
}
