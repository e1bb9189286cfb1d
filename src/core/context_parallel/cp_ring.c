#include "core/context_parallel/cp_ring.h"

#include <math.h>
#include <mpi.h>
#include <string.h>

#include "core/context_parallel/cp_layout.h"
#include "core/kernels/attention_block.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"

enum { TAG_KV = 71, TAG_DKV = 72 };

static cp_ring_stats g_stats;
static int g_blocking;

const cp_ring_stats *cp_ring_get_stats(void) { return &g_stats; }
void cp_ring_set_blocking(int blocking) { g_blocking = blocking; }

/* Ring buffers, grown on demand and shared by every layer (one attention call at a time): two
 * of a rank's QKV rows (the keys and values in hand and the ones arriving), three key/value
 * gradient accumulators (this step's, the one sent at the previous step, the one arriving). */
static float *g_kv[2], *g_acc[3];
static size_t g_cap;

static void buffers_fit(size_t n) {
    if (n <= g_cap) return;
    for (int i = 0; i < 3; i++) {
        if (i < 2) mem_free(g_kv[i]);
        mem_free(g_acc[i]);
        if (i < 2) g_kv[i] = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel ring keys/values");
        g_acc[i] = mem_alloc_floats(MEM_WORKSPACE, n, "context-parallel ring gradients");
    }
    g_cap = n;
}

size_t cp_ring_workspace_floats(const transformer_config *c, int T_local, int threads) {
    const int L = T_local / 2;
    return attention_block_workspace_floats(L, L, c->kv_channels) * (size_t)(threads < 1 ? 1 : threads);
}

/* The ring's neighbours in the context-parallel group. */
typedef struct {
    MPI_Comm comm;
    int rank, size, next, prev;
} ring;

static ring ring_of(const transformer_config *c) {
    ring r = {parallel_get()->cp, c->cp_rank, tc_cp(c), 0, 0};
    r.next = (r.rank + 1) % r.size;
    r.prev = (r.rank + r.size - 1) % r.size;
    return r;
}

/* Transfers of one step: posted, progressed between blocks, finished. */
typedef struct {
    MPI_Request req[4];
    int n;
} transfers;

static void post(transfers *t, const ring *r, const float *send, float *recv, size_t n, int tag) {
    MPI_Irecv(recv, (int)n, MPI_FLOAT, r->prev, tag, r->comm, &t->req[t->n++]);
    MPI_Isend(send, (int)n, MPI_FLOAT, r->next, tag, r->comm, &t->req[t->n++]);
    g_stats.bytes += (double)n * sizeof(float);
}

static void progress(transfers *t) {
    int done;
    if (t->n) MPI_Testall(t->n, t->req, &done, MPI_STATUSES_IGNORE);
}

static void finish(transfers *t, double *seconds) {
    double t0 = MPI_Wtime();
    if (t->n) MPI_Waitall(t->n, t->req, MPI_STATUSES_IGNORE);
    t->n = 0;
    *seconds += MPI_Wtime() - t0;
}

/* Block (local query chunk k, chunk m of rank rho's rows in kv). */
static attention_block block_of(const transformer_config *c, const float *qkv, const float *kv,
                                qkv_batch x, attention_opts o, int rho, int k, int m) {
    const int L = x.T / 2, cp = tc_cp(c);
    const size_t W = qkv_row_width(x.layout);
    const int T = x.T * cp, kv_len = o.kv_len > 0 && o.kv_len < T ? o.kv_len : T;
    const int kc = m == 0 ? rho : 2 * cp - 1 - rho;
    return (attention_block){qkv + (size_t)k * L * W, kv + (size_t)m * L * W, x.T, x.T, L, L,
                             cp_chunk(c, k) * L, kc * L, kv_len, kv_len};
}

void cp_ring_forward(const transformer_config *c, float *out, float *lse, const float *qkv,
                     qkv_batch x, attention_opts o, attention_workspace ws) {
    const ring r = ring_of(c);
    const int L = x.T / 2, OC = x.layout.NH * x.layout.HS;
    const size_t n = (size_t)x.B * x.T * qkv_row_width(x.layout);
    const size_t nl = (size_t)x.B * x.layout.NH * x.T;
    buffers_fit(n);
    memset(out, 0, (size_t)x.B * x.T * OC * sizeof(float));
    for (size_t i = 0; i < nl; i++) lse[i] = -INFINITY;
    memcpy(g_kv[0], qkv, n * sizeof(float));
    for (int s = 0; s < r.size; s++) {
        const float *kv = g_kv[s % 2];
        const int rho = (r.rank - s + r.size) % r.size;
        transfers t = {.n = 0};
        if (s + 1 < r.size) post(&t, &r, kv, g_kv[(s + 1) % 2], n, TAG_KV);
        if (g_blocking) finish(&t, &g_stats.blocking_s);
        double t0 = MPI_Wtime();
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < 2; m++) {
                attention_block_forward(out + (size_t)k * L * OC, x.T, lse + (size_t)k * L, x.T,
                                        block_of(c, qkv, kv, x, o, rho, k, m), x.B, x.layout, o,
                                        ws);
                progress(&t);
            }
        g_stats.compute_s += MPI_Wtime() - t0;
        finish(&t, &g_stats.wait_s);
        g_stats.steps++;
    }
}

void cp_ring_backward(const transformer_config *c, float *dqkv, const float *dout,
                      const float *out, const float *lse, const float *qkv, qkv_batch x,
                      attention_opts o, attention_workspace ws) {
    const ring r = ring_of(c);
    const int L = x.T / 2, OC = x.layout.NH * x.layout.HS;
    const size_t W = qkv_row_width(x.layout), n = (size_t)x.B * x.T * W;
    const size_t nl = (size_t)x.B * x.layout.NH * x.T;
    buffers_fit(n);
    float *D = mem_alloc_floats(MEM_WORKSPACE, nl, "context-parallel ring D");
    attention_block_delta(D, dout, out, x.T, x.T, x.B, x.layout, x.T);
    memcpy(g_kv[0], qkv, n * sizeof(float));
    float *in = g_acc[2];
    transfers sent = {.n = 0}; /* the accumulator sent at the previous step */
    for (int s = 0; s < r.size; s++) {
        const float *kv = g_kv[s % 2];
        float *step = g_acc[s % 2]; /* free: its send (step s - 2) finished at step s - 1 */
        const int rho = (r.rank - s + r.size) % r.size;
        transfers t = {.n = 0};
        if (s + 1 < r.size) post(&t, &r, kv, g_kv[(s + 1) % 2], n, TAG_KV);
        /* rho's accumulator comes from rank r - 1, which held rho's rows at step s - 1 */
        MPI_Request acc_in = MPI_REQUEST_NULL;
        if (s > 0) MPI_Irecv(in, (int)n, MPI_FLOAT, r.prev, TAG_DKV, r.comm, &acc_in);
        if (g_blocking) {
            finish(&t, &g_stats.blocking_s);
            double t0 = MPI_Wtime();
            MPI_Wait(&acc_in, MPI_STATUS_IGNORE);
            g_stats.blocking_s += MPI_Wtime() - t0;
        }
        memset(step, 0, n * sizeof(float));
        double t0 = MPI_Wtime();
        for (int k = 0; k < 2; k++)
            for (int m = 0; m < 2; m++) {
                attention_block_backward(dqkv + (size_t)k * L * W, step + (size_t)m * L * W,
                                         dout + (size_t)k * L * OC,
                                         x.T, lse + (size_t)k * L, D + (size_t)k * L, x.T,
                                         block_of(c, qkv, kv, x, o, rho, k, m), x.B, x.layout, o,
                                         ws);
                progress(&t);
                if (s > 0) {
                    int done;
                    MPI_Test(&acc_in, &done, MPI_STATUS_IGNORE);
                }
            }
        g_stats.compute_s += MPI_Wtime() - t0;
        double t1 = MPI_Wtime();
        MPI_Wait(&acc_in, MPI_STATUS_IGNORE);
        g_stats.wait_s += MPI_Wtime() - t1;
        if (s > 0)
            for (size_t i = 0; i < n; i++) step[i] += in[i];
        /* on to rank r + 1: after the last step that is rho = r + 1, the owner */
        finish(&sent, &g_stats.wait_s);
        MPI_Isend(step, (int)n, MPI_FLOAT, r.next, TAG_DKV, r.comm, &sent.req[sent.n++]);
        g_stats.bytes += (double)n * sizeof(float);
        finish(&t, &g_stats.wait_s);
        g_stats.steps++;
    }
    /* this rank's own accumulator, after its CP hops */
    double t1 = MPI_Wtime();
    MPI_Recv(in, (int)n, MPI_FLOAT, r.prev, TAG_DKV, r.comm, MPI_STATUS_IGNORE);
    finish(&sent, &g_stats.wait_s);
    g_stats.wait_s += MPI_Wtime() - t1;
    for (size_t i = 0; i < n; i++) dqkv[i] += in[i];
    mem_free(D);
}
