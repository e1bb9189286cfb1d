#include "core/context_parallel/cp_attention.h"

#include <mpi.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"

/* Three buffers of the whole sequence's QKV rows [B, T, QKV], grown on demand and reused by
 * every layer (one attention call runs at a time): the gathered rows, the per-rank staging of
 * the exchange, and in backward the key/value gradients of the whole sequence. */
static float *g_full, *g_stage, *g_grad;
static size_t g_cap;

static void buffers_fit(size_t n) {
    if (n <= g_cap) return;
    mem_free(g_full);
    mem_free(g_stage);
    mem_free(g_grad);
    g_full = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel gathered QKV");
    g_stage = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel exchange");
    g_grad = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel key/value gradients");
    g_cap = n;
}

/* Rows of rank rho's chunk k of sequence b: in rank order (the exchange's layout) and in
 * sequence order (the whole sequence). */
static size_t rank_row(int T_local, int rho, int b, int k, int B) {
    return ((size_t)rho * B + b) * T_local + (size_t)k * (T_local / 2);
}
static size_t seq_row(int T_local, int cp, int rho, int b, int k) {
    const int L = T_local / 2, chunk = k == 0 ? rho : 2 * cp - 1 - rho;
    return (size_t)b * T_local * cp + (size_t)chunk * L;
}

/* Every rank's chunks in rank order <-> the whole sequences in order. */
static void reorder(float *dst, const float *src, int B, int T_local, int cp, size_t W,
                    int to_sequence) {
    const size_t bytes = (size_t)(T_local / 2) * W * sizeof(float);
    for (int rho = 0; rho < cp; rho++)
        for (int b = 0; b < B; b++)
            for (int k = 0; k < 2; k++) {
                size_t r = rank_row(T_local, rho, b, k, B) * W;
                size_t s = seq_row(T_local, cp, rho, b, k) * W;
                if (to_sequence)
                    memcpy(dst + s, src + r, bytes);
                else
                    memcpy(dst + r, src + s, bytes);
            }
}

/* g_full = the whole sequences' QKV rows, gathered from every context-parallel rank. */
static void gather_sequence(const transformer_config *c, const float *qkv, qkv_batch x) {
    const int cp = tc_cp(c);
    const size_t W = qkv_row_width(x.layout), n = (size_t)x.B * x.T * W;
    buffers_fit(n * cp);
    MPI_Allgather(qkv, (int)n, MPI_FLOAT, g_stage, (int)n, MPI_FLOAT, parallel_get()->cp);
    reorder(g_full, g_stage, x.B, x.T, cp, W, 1);
}

/* The rows of local chunk k against the whole sequences in g_full. */
static attention_rows chunk_rows(const transformer_config *c, const float *qkv, qkv_batch x,
                                 attention_opts o, int k) {
    const int L = x.T / 2, T = x.T * tc_cp(c);
    const size_t W = qkv_row_width(x.layout);
    return (attention_rows){qkv + (size_t)k * L * W, g_full, L, T, cp_chunk(c, k) * L, x.T, T,
                            x.T, o.kv_len > 0 && o.kv_len < T ? o.kv_len : T};
}

/* Chunk k's part of the kept probabilities ([2][B, NH, L, T]). */
static attention_probs chunk_probs(attention_probs p, qkv_batch x, int cp, int k) {
    const size_t n = (size_t)k * x.B * x.layout.NH * (size_t)(x.T / 2) * (size_t)x.T * cp;
    return (attention_probs){p.f32 ? p.f32 + n : NULL, p.b16 ? p.b16 + n : NULL};
}

void cp_attention_forward(const transformer_config *c, float *out, attention_probs probs,
                          const float *qkv, qkv_batch x, attention_opts o,
                          attention_workspace ws) {
    const int cp = tc_cp(c), L = x.T / 2, OC = x.layout.NH * x.layout.HS;
    gather_sequence(c, qkv, x);
    for (int k = 0; k < 2; k++)
        attention_forward_rows(out + (size_t)k * L * OC, chunk_probs(probs, x, cp, k),
                               chunk_rows(c, qkv, x, o, k), x.B, x.layout, o, ws);
}

void cp_attention_backward(const transformer_config *c, float *dqkv, const float *dout,
                           const float *qkv, attention_probs probs, qkv_batch x,
                           attention_opts o, attention_workspace ws) {
    const int cp = tc_cp(c), L = x.T / 2, OC = x.layout.NH * x.layout.HS;
    const size_t W = qkv_row_width(x.layout), n = (size_t)x.B * x.T * W;
    gather_sequence(c, qkv, x);
    /* the key/value gradients of the whole sequences, from this rank's queries */
    float *dfull = g_grad;
    memset(dfull, 0, n * cp * sizeof(float));
    for (int k = 0; k < 2; k++)
        attention_backward_rows(dqkv + (size_t)k * L * W, dfull, dout + (size_t)k * L * OC,
                                chunk_rows(c, qkv, x, o, k), chunk_probs(probs, x, cp, k), x.B,
                                x.layout, o, ws);
    /* back to the rows' owners, summed over the ranks' queries (the query columns are 0) */
    reorder(g_stage, dfull, x.B, x.T, cp, W, 0);
    MPI_Reduce_scatter_block(g_stage, dfull, (int)n, MPI_FLOAT, MPI_SUM, parallel_get()->cp);
    for (size_t i = 0; i < n; i++) dqkv[i] += dfull[i];
}
