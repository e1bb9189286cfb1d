/* AdamW with decoupled weight decay, as torch.optim.AdamW / apex FusedAdam(adam_w_mode):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p )
 * step counts from 1. */
#ifndef MEGADLM_CORE_KERNELS_ADAMW_H
#define MEGADLM_CORE_KERNELS_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels/bf16.h"

/* One step's hyperparameters (weight_decay 0 for tensors without decay). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
} adamw_hparams;

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, adamw_hparams h);
/* The same, and each updated parameter rounded into param16 in the run's 16-bit format
 * (--bf16 / --fp16: the model's copy) in the same pass: the bits of adamw_update followed by
 * half_from_f32, without reading the parameters a second time. HALF_NONE: adamw_update alone
 * (param16 not touched). */
void adamw_update_half(float *param, uint16_t *param16, half_kind kind, const float *grad,
                       float *m, float *v, size_t n, adamw_hparams h);

#endif
