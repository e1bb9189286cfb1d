/* AdamW with decoupled weight decay, as torch.optim.AdamW / apex FusedAdam(adam_w_mode):
 *   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
 *   p -= lr * ( (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + weight_decay * p )
 * step counts from 1. */
#ifndef MEGADLM_CORE_KERNELS_ADAMW_H
#define MEGADLM_CORE_KERNELS_ADAMW_H

#include <stddef.h>

/* One step's hyperparameters (weight_decay 0 for tensors without decay). */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;
} adamw_hparams;

void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, adamw_hparams h);

#endif
