/* Point-to-point transfers between neighbouring pipeline stages (Megatron's
 * p2p_communication.py): activations forward to the next stage, their gradients back to the
 * previous one. Each operation posts nonblocking sends/receives and completes them together, so
 * a send and a receive in opposite directions never wait on each other. On the first or last
 * stage the transfers past the end are no-ops. */
#ifndef MEGADLM_CORE_PIPELINE_PARALLEL_P2P_H
#define MEGADLM_CORE_PIPELINE_PARALLEL_P2P_H

#include <stddef.h>

void p2p_recv_forward(float *input, size_t n);
void p2p_send_forward(const float *output, size_t n);
void p2p_recv_backward(float *output_grad, size_t n);
void p2p_send_backward(const float *input_grad, size_t n);
/* send the output forward and receive its gradient back, together */
void p2p_send_forward_recv_backward(const float *output, float *output_grad, size_t n);
/* send the input gradient back and receive the next input, together */
void p2p_send_backward_recv_forward(const float *input_grad, float *input, size_t n);

/* Seconds this rank has spent waiting for its transfers to complete (its share of the pipeline
 * bubble plus transfer time), since the start. */
double p2p_wait_seconds(void);

#endif
