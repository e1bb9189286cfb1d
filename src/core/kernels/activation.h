/* MLP activations. Backward accumulates (+=) into dinp. */
#ifndef MEGADLM_CORE_KERNELS_ACTIVATION_H
#define MEGADLM_CORE_KERNELS_ACTIVATION_H

#include <stddef.h>

typedef enum {
    GELU_TANH = 0, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): Megatron's bias_gelu
                      fusion and --openai-gelu */
    GELU_ERF = 1,  /* 0.5 x (1 + erf(x / sqrt 2)): torch.nn.functional.gelu */
} gelu_kind;

void gelu_forward(float *out, const float *inp, size_t n, gelu_kind kind);
void gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, gelu_kind kind);

/* SwiGLU as Megatron computes it: inp[N, 2F] is FC1's output, its first F columns the gate g,
 * the last F the up projection u;  out[N,F] = silu(g) * u,  silu(g) = g * sigmoid(g). */
void swiglu_forward(float *out, const float *inp, int N, int F);
void swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F);

#endif
