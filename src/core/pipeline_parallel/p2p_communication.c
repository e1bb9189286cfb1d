#include "core/pipeline_parallel/p2p_communication.h"

#include "core/kernels/bf16.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/util/die.h"

enum { TAG_FORWARD = 1, TAG_BACKWARD = 2 };

/* --bf16 / --fp16: activations (tag TAG_FORWARD) move in the run's 16-bit format. A receive
 * lands in the upper half of its fp32 buffer and is widened in place when complete; a send goes
 * from one 16-bit copy, which the schedules never need twice at once (one forward send in
 * flight at most). */
static struct {
    half_kind on; /* HALF_NONE: fp32 transfers */
    uint16_t *send;
    size_t n;
    int busy;
} g_b16;

void p2p_set_half_activations(half_kind kind) {
    g_b16.on = kind;
    if (kind != HALF_NONE || g_b16.busy) return;
    mem_free(g_b16.send); /* off: the send copy goes */
    g_b16.send = NULL;
    g_b16.n = 0;
}

/* The 16-bit copy of a forward send (or the send itself, as fp32). */
static const void *send_buffer(const float *send, int tag, size_t n, MPI_Datatype *type) {
    *type = MPI_FLOAT;
    if (!g_b16.on || tag != TAG_FORWARD) return send;
    if (g_b16.busy) die(1, "internal error: two 16-bit pipeline sends in flight");
    if (n > g_b16.n) {
        mem_free(g_b16.send);
        g_b16.send = mem_alloc(MEM_WORKSPACE, n * sizeof(uint16_t), "16-bit pipeline send");
        g_b16.n = n;
    }
    half_from_f32(g_b16.on, g_b16.send, send, n);
    g_b16.busy = 1;
    *type = MPI_UINT16_T;
    return g_b16.send;
}

/* Where a receive lands: the upper half of recv for a 16-bit one. */
static void *recv_buffer(float *recv, int tag, size_t n, MPI_Datatype *type) {
    *type = MPI_FLOAT;
    if (!g_b16.on || tag != TAG_FORWARD) return recv;
    *type = MPI_UINT16_T;
    return (uint16_t *)recv + n;
}

static double g_wait_seconds; /* time spent blocked in transfers: the pipeline bubble */
static double g_sent[2];      /* bytes sent forward (activations) and back (gradients) */

double p2p_wait_seconds(void) { return g_wait_seconds; }
void p2p_sent_bytes(double *forward, double *backward) {
    *forward = g_sent[0];
    *backward = g_sent[1];
}

static void count_send(int tag, size_t n, MPI_Datatype type) {
    g_sent[tag == TAG_FORWARD ? 0 : 1] += (double)n * (type == MPI_UINT16_T ? 2 : 4);
}

/* Posts up to one send and one receive on the pipeline group and waits for both. */
static void exchange(const float *send, int to, int send_tag, float *recv, int from, int recv_tag,
                     size_t n) {
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->pp_size == 1) return;
    MPI_Request req[2];
    MPI_Datatype type;
    int k = 0, got = 0, sent = 0;
    if (recv && from >= 0 && from < ps->pp_size) {
        void *buf = recv_buffer(recv, recv_tag, n, &type);
        MPI_Irecv(buf, (int)n, type, from, recv_tag, ps->pp, &req[k++]);
        got = type == MPI_UINT16_T;
    }
    if (send && to >= 0 && to < ps->pp_size) {
        const void *buf = send_buffer(send, send_tag, n, &type);
        MPI_Isend(buf, (int)n, type, to, send_tag, ps->pp, &req[k++]);
        sent = type == MPI_UINT16_T;
        count_send(send_tag, n, type);
    }
    double t0 = MPI_Wtime();
    MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    g_wait_seconds += MPI_Wtime() - t0;
    if (got) half_widen_staged(g_b16.on, recv, n);
    if (sent) g_b16.busy = 0;
}

void p2p_ring_start(const float *send_next, float *recv_prev, const float *send_prev,
                    float *recv_next, size_t n, p2p_pending *h) {
    h->n = 0;
    h->widen = NULL;
    h->widen_n = 0;
    h->sent_half = 0;
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->pp_size == 1) return;
    int p = ps->pp_size, next = (ps->pp_rank + 1) % p, prev = (ps->pp_rank + p - 1) % p;
    MPI_Request *r = h->req;
    MPI_Datatype type;
    if (recv_prev) {
        void *buf = recv_buffer(recv_prev, TAG_FORWARD, n, &type);
        MPI_Irecv(buf, (int)n, type, prev, TAG_FORWARD, ps->pp, &r[h->n++]);
        if (type == MPI_UINT16_T) h->widen = recv_prev, h->widen_n = n;
    }
    if (recv_next) MPI_Irecv(recv_next, (int)n, MPI_FLOAT, next, TAG_BACKWARD, ps->pp, &r[h->n++]);
    if (send_next) {
        const void *buf = send_buffer(send_next, TAG_FORWARD, n, &type);
        MPI_Isend(buf, (int)n, type, next, TAG_FORWARD, ps->pp, &r[h->n++]);
        h->sent_half = type == MPI_UINT16_T;
        count_send(TAG_FORWARD, n, type);
    }
    if (send_prev) {
        MPI_Isend(send_prev, (int)n, MPI_FLOAT, prev, TAG_BACKWARD, ps->pp, &r[h->n++]);
        count_send(TAG_BACKWARD, n, MPI_FLOAT);
    }
}

void p2p_ring_wait(p2p_pending *h) {
    if (h->n == 0) return;
    double t0 = MPI_Wtime();
    MPI_Waitall(h->n, h->req, MPI_STATUSES_IGNORE);
    g_wait_seconds += MPI_Wtime() - t0;
    h->n = 0;
    if (h->widen) half_widen_staged(g_b16.on, h->widen, h->widen_n);
    if (h->sent_half) g_b16.busy = 0;
    h->widen = NULL;
    h->sent_half = 0;
}

void p2p_exchange_ring(const float *send_next, float *recv_prev, const float *send_prev,
                       float *recv_next, size_t n) {
    p2p_pending h;
    p2p_ring_start(send_next, recv_prev, send_prev, recv_next, n, &h);
    p2p_ring_wait(&h);
}

static int prev(void) { return parallel_get()->pp_rank - 1; }
static int next(void) { return parallel_get()->pp_rank + 1; }

void p2p_recv_forward(float *input, size_t n) {
    exchange(NULL, -1, 0, input, prev(), TAG_FORWARD, n);
}
void p2p_send_forward(const float *output, size_t n) {
    exchange(output, next(), TAG_FORWARD, NULL, -1, 0, n);
}
void p2p_recv_backward(float *output_grad, size_t n) {
    exchange(NULL, -1, 0, output_grad, next(), TAG_BACKWARD, n);
}
void p2p_send_backward(const float *input_grad, size_t n) {
    exchange(input_grad, prev(), TAG_BACKWARD, NULL, -1, 0, n);
}
void p2p_send_forward_recv_backward(const float *output, float *output_grad, size_t n) {
    exchange(output, next(), TAG_FORWARD, output_grad, next(), TAG_BACKWARD, n);
}
void p2p_send_backward_recv_forward(const float *input_grad, float *input, size_t n) {
    exchange(input_grad, prev(), TAG_BACKWARD, input, prev(), TAG_FORWARD, n);
}
