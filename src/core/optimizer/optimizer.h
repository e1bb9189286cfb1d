/* AdamW over a param_set's flat buffers; global-norm gradient clipping is clip_grads.h (included
 * here for the optimizer's users), the learning-rate schedule optimizer_param_scheduler.h. */
#ifndef MEGADLM_CORE_OPTIMIZER_H
#define MEGADLM_CORE_OPTIMIZER_H

#include <stdint.h>

#include "core/kernels/bf16.h"
#include "core/optimizer/clip_grads.h"
#include "core/tensor/tensor.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    float clip_grad; /* 0 disables clipping */
} optimizer_config;

/* One AdamW step (step counts from 1): decay only on tensors with weight_decay set. half: the
 * run's 16-bit format (--bf16 / --fp16: the updated fp32 main parameters rounded into
 * ps->data_bf16 in the same pass), HALF_NONE for fp32 training. */
void optimizer_step(param_set *ps, const optimizer_config *oc, float lr, int step, half_kind half);

#endif
