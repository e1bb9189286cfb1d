#include "core/optimizer/optimizer.h"

#include "core/kernels/adamw.h"

void optimizer_step(param_set *ps, const optimizer_config *oc, float lr, int step, half_kind half) {
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t o = t->offset;
        adamw_hparams h = {lr, oc->beta1, oc->beta2, oc->eps,
                           t->weight_decay ? oc->weight_decay : 0.0f, step};
        uint16_t *copy = ps->data_bf16 ? ps->data_bf16 + o : NULL;
        adamw_update_half(param_set_fp32(ps) + o, copy, copy ? half : HALF_NONE, ps->grad + o,
                          ps->exp_avg + o, ps->exp_avg_sq + o, t->numel, h);
    }
}
