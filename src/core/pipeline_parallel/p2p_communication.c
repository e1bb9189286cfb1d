#include "core/pipeline_parallel/p2p_communication.h"

#include "core/parallel_state.h"

enum { TAG_FORWARD = 1, TAG_BACKWARD = 2 };

static double g_wait_seconds; /* time spent blocked in transfers: the pipeline bubble */

double p2p_wait_seconds(void) { return g_wait_seconds; }

/* Posts up to one send and one receive on the pipeline group and waits for both. */
static void exchange(const float *send, int to, int send_tag, float *recv, int from, int recv_tag,
                     size_t n) {
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->pp_size == 1) return;
    MPI_Request req[2];
    int k = 0;
    if (recv && from >= 0 && from < ps->pp_size)
        MPI_Irecv(recv, (int)n, MPI_FLOAT, from, recv_tag, ps->pp, &req[k++]);
    if (send && to >= 0 && to < ps->pp_size)
        MPI_Isend(send, (int)n, MPI_FLOAT, to, send_tag, ps->pp, &req[k++]);
    double t0 = MPI_Wtime();
    MPI_Waitall(k, req, MPI_STATUSES_IGNORE);
    g_wait_seconds += MPI_Wtime() - t0;
}

void p2p_ring_start(const float *send_next, float *recv_prev, const float *send_prev,
                    float *recv_next, size_t n, p2p_pending *h) {
    h->n = 0;
    const parallel_state *ps = parallel_get();
    if (!ps->mpi || ps->pp_size == 1) return;
    int p = ps->pp_size, next = (ps->pp_rank + 1) % p, prev = (ps->pp_rank + p - 1) % p;
    MPI_Request *r = h->req;
    if (recv_prev) MPI_Irecv(recv_prev, (int)n, MPI_FLOAT, prev, TAG_FORWARD, ps->pp, &r[h->n++]);
    if (recv_next) MPI_Irecv(recv_next, (int)n, MPI_FLOAT, next, TAG_BACKWARD, ps->pp, &r[h->n++]);
    if (send_next) MPI_Isend(send_next, (int)n, MPI_FLOAT, next, TAG_FORWARD, ps->pp, &r[h->n++]);
    if (send_prev) MPI_Isend(send_prev, (int)n, MPI_FLOAT, prev, TAG_BACKWARD, ps->pp, &r[h->n++]);
}

void p2p_ring_wait(p2p_pending *h) {
    if (h->n == 0) return;
    double t0 = MPI_Wtime();
    MPI_Waitall(h->n, h->req, MPI_STATUSES_IGNORE);
    g_wait_seconds += MPI_Wtime() - t0;
    h->n = 0;
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
