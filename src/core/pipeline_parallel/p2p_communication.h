/* Point-to-point transfers between neighbouring pipeline stages (Megatron's
 * p2p_communication.py): activations forward to the next stage, their gradients back to the
 * previous one. Each operation posts nonblocking sends/receives and completes them together, so
 * a send and a receive in opposite directions never wait on each other. On the first or last
 * stage the transfers past the end are no-ops. */
#ifndef MEGADLM_CORE_PIPELINE_PARALLEL_P2P_H
#define MEGADLM_CORE_PIPELINE_PARALLEL_P2P_H

#include <stddef.h>

#include "core/kernels/bf16.h"

#include "core/parallel_state.h"

void p2p_recv_forward(float *input, size_t n);
void p2p_send_forward(const float *output, size_t n);
void p2p_recv_backward(float *output_grad, size_t n);
void p2p_send_backward(const float *input_grad, size_t n);
/* send the output forward and receive its gradient back, together */
void p2p_send_forward_recv_backward(const float *output, float *output_grad, size_t n);
/* send the input gradient back and receive the next input, together */
void p2p_send_backward_recv_forward(const float *input_grad, float *input, size_t n);

/* The interleaved schedule's transfers (Megatron's send_forward_backward_recv_forward_backward
 * and its parts): the neighbours are ring neighbours, so the last stage sends a model chunk's
 * output forward to the first stage (the next chunk's input) and the first stage sends that
 * chunk's input gradient back to the last. Any of the four may be NULL; all are posted, then
 * completed together. */
void p2p_exchange_ring(const float *send_next, float *recv_prev, const float *send_prev,
                       float *recv_next, size_t n);
/* The same, posted now and completed later (Megatron's overlap_p2p_comm): the buffers must
 * stay untouched until p2p_ring_wait. */
typedef struct {
    MPI_Request req[4];
    int n;
    float *widen;   /* --bf16 / --fp16: the activation received in 16 bits, widened by
                       p2p_ring_wait */
    size_t widen_n;
    int sent_half;  /* --bf16 / --fp16: an activation sent from the 16-bit copy */
} p2p_pending;
void p2p_ring_start(const float *send_next, float *recv_prev, const float *send_prev,
                    float *recv_next, size_t n, p2p_pending *h);
/* Completes what p2p_ring_start posted (nothing if nothing is pending). */
void p2p_ring_wait(p2p_pending *h);

/* --bf16 / --fp16 (kind): the activations sent forward move in that format, half the bytes (the
 * receiver widens them in place). Exact because they are values of that format: the residual
 * stream, rounded after every residual add (a stage's output is its last layer's). Gradients
 * stay fp32. HALF_NONE: fp32 transfers, and the 16-bit send copy is freed. */
void p2p_set_half_activations(half_kind kind);

/* Seconds this rank has spent waiting for its transfers to complete (its share of the pipeline
 * bubble plus transfer time), since the start. */
double p2p_wait_seconds(void);
/* Bytes this rank has sent forward (activations) and back (gradients), since the start. */
void p2p_sent_bytes(double *forward, double *backward);

#endif
