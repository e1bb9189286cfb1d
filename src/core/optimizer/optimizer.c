#include "core/optimizer/optimizer.h"

#include <math.h>

#include "core/kernels/adamw.h"
#include "core/parallel_state.h"
#include "core/tensor_parallel/mappings.h"

static double sumsq(const float *g, size_t n) {
    double sum = 0.0;
#pragma omp parallel for reduction(+ : sum) schedule(static)
    for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
    return sum;
}

double optimizer_grad_sumsq(const param_set *ps, size_t begin, size_t end) {
    return optimizer_grad_sumsq_at(ps, ps->grad + begin, begin, end);
}

double optimizer_grad_sumsq_at(const param_set *ps, const float *g, size_t begin, size_t end) {
    int tp_rank = parallel_get()->tp_rank;
    double total = 0.0;
    size_t run = begin; /* start of the current run of counted tensors */
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t lo = t->offset > begin ? t->offset : begin;
        size_t hi = t->offset + t->numel < end ? t->offset + t->numel : end;
        if (lo >= hi) continue;
        if ((t->tp_duplicate && tp_rank != 0) || t->pp_shared_copy) {
            if (lo > run) total += sumsq(g + (run - begin), lo - run);
            run = hi;
        }
    }
    if (end > run) total += sumsq(g + (run - begin), end - run);
    return total;
}

float optimizer_grad_norm(const param_set *ps) {
    /* Model parallel: each rank sums its own tensors and slices (optimizer_grad_sumsq counts
     * TP duplicates and the shared embedding copy once); the sums are added over the TP and PP
     * groups. */
    double local = tp_all_reduce_sum_double(optimizer_grad_sumsq(ps, 0, ps->numel));
    return (float)sqrt(parallel_sum_double(PARALLEL_GROUP_PP, local));
}

void optimizer_clip_grads(param_set *ps, float grad_norm, float clip_grad) {
    if (clip_grad <= 0.0f) return;
    float coeff = clip_grad / (grad_norm + 1.0e-6f);
    if (coeff >= 1.0f) return;
    float *g = ps->grad;
    size_t n = ps->numel;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] *= coeff;
}

void optimizer_step(param_set *ps, const optimizer_config *oc, float lr, int step) {
    for (int i = 0; i < ps->count; i++) {
        const param_tensor *t = &ps->tensors[i];
        size_t o = t->offset;
        adamw_hparams h = {lr, oc->beta1, oc->beta2, oc->eps,
                           t->weight_decay ? oc->weight_decay : 0.0f, step};
        adamw_update(param_set_fp32(ps) + o, ps->grad + o, ps->exp_avg + o, ps->exp_avg_sq + o, t->numel, h);
    }
}
