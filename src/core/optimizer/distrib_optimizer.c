#include "core/optimizer/distrib_optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/adamw.h"
#include "core/optimizer/clip_grads.h"
#include "core/parallel_state.h"
#include "core/tensor/memory.h"
#include "core/tensor_parallel/mappings.h"
#include "core/util/alloc.h"
#include "core/util/die.h"

/* --bf16: the main parameters of the pieces, from the model's 16-bit copy widened (Megatron:
 * `shard_model_param.clone().float()`), as gpt_model_init_params makes whole main parameters */
static void main_create(dist_opt *o, half_kind kind) {
    if (!o->ps->data_bf16) die(1, "internal error: a 16-bit distributed optimizer without a copy");
    o->kind = kind;
    o->main = mem_alloc_floats(MEM_OPTIMIZER, o->shard_numel, "fp32 main parameters (shard)");
    for (int s = 0; s < o->num_segments; s++) {
        const dist_opt_segment *sg = &o->segs[s];
        half_to_f32(kind, o->main + sg->state, o->ps->data_bf16 + sg->begin, sg->numel);
    }
}

void dist_opt_main_to_copy(dist_opt *o) {
    for (int s = 0; o->main && s < o->num_segments; s++) {
        const dist_opt_segment *sg = &o->segs[s];
        uint16_t *dst = o->copy_shard ? o->copy_shard + sg->state : o->ps->data_bf16 + sg->begin;
        half_from_f32(o->kind, dst, o->main + sg->state, sg->numel);
    }
}

dist_opt *dist_opt_create(param_set *ps, ddp *d, half_kind kind) {
    dist_opt *o = xcalloc(1, sizeof(dist_opt), "distributed optimizer");
    o->ps = ps;
    o->ddp = d;
    /* ceil(N / DP) (the pieces rotate); with expert parallelism the experts' buckets are
     * sharded over fewer ranks: the pieces' sum */
    o->shard_numel = (ps->numel + (size_t)d->dp_size - 1) / (size_t)d->dp_size;
    size_t pieces = 0;
    for (int b = 0; b < d->num_buckets; b++) pieces += ddp_piece_numel(d, b);
    if (pieces > o->shard_numel) o->shard_numel = pieces;
    o->exp_avg = mem_alloc_floats(MEM_OPTIMIZER, o->shard_numel, "adam exp_avg (shard)");
    o->exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, o->shard_numel, "adam exp_avg_sq (shard)");
    /* segments: each owned piece cut at tensor boundaries (tensors are in offset order) */
    int cap = 16;
    o->segs = xcalloc((size_t)cap, sizeof(dist_opt_segment), "optimizer segments");
    size_t state = 0;
    for (int b = 0; b < d->num_buckets; b++) {
        size_t pb = ddp_piece_begin(d, b), pe = pb + ddp_piece_numel(d, b);
        for (int i = 0; i < ps->count && pb < pe; i++) {
            const param_tensor *t = &ps->tensors[i];
            size_t lo = t->offset > pb ? t->offset : pb;
            size_t hi = t->offset + t->numel < pe ? t->offset + t->numel : pe;
            if (lo >= hi) continue;
            if (o->num_segments == cap) {
                cap *= 2;
                o->segs = xrealloc(o->segs, (size_t)cap * sizeof(dist_opt_segment), "optimizer segments");
            }
            o->segs[o->num_segments++] =
                (dist_opt_segment){.begin = lo, .numel = hi - lo, .state = state, .tensor = i};
            state += hi - lo;
        }
    }
    if (state > o->shard_numel)
        die(1, "internal error: distributed optimizer shard of %zu > %zu elements",
                       state, o->shard_numel);
    if (kind != HALF_NONE) main_create(o, kind);
    return o;
}

void dist_opt_free(dist_opt *o) {
    if (!o) return;
    mem_free(o->exp_avg);
    mem_free(o->exp_avg_sq);
    mem_free(o->main);
    free(o->segs);
    free(o);
}

float dist_opt_grad_norm(dist_opt *o) {
    double local = 0.0;
    for (int s = 0; s < o->num_segments; s++)
        local += optimizer_grad_sumsq_at(o->ps, dist_opt_seg_grad(o, s), o->segs[s].begin,
                                         o->segs[s].begin + o->segs[s].numel);
    /* the pieces of every rank of the instance (the DP group unless there are several
     * instances, each holding all pieces), then every TP rank's and stage's tensors */
    local = ddp_sum_over_shards(o->ddp, local);
    local = tp_all_reduce_sum_double(local);
    return (float)sqrt(parallel_sum_double(PARALLEL_GROUP_PP, local));
}

void dist_opt_clip_grads(dist_opt *o, float grad_norm, float clip_grad) {
    if (clip_grad <= 0.0f) return;
    float coeff = clip_grad / (grad_norm + 1.0e-6f); /* Megatron's clip_grad_norm_fp32 */
    if (coeff >= 1.0f) return;
    for (int s = 0; s < o->num_segments; s++) {
        float *g = dist_opt_seg_grad(o, s);
        size_t n = o->segs[s].numel;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] *= coeff;
    }
}

void dist_opt_step(dist_opt *o, const optimizer_config *oc, float lr, int step) {
    param_set *ps = o->ps;
    for (int s = 0; s < o->num_segments; s++) {
        const dist_opt_segment *sg = &o->segs[s];
        const param_tensor *t = &ps->tensors[sg->tensor];
        adamw_hparams h = {lr, oc->beta1, oc->beta2, oc->eps,
                           t->weight_decay ? oc->weight_decay : 0.0f, step};
        float *p = o->main          ? o->main + sg->state
                   : o->param_shard ? o->param_shard + sg->state
                                    : ps->data + sg->begin;
        adamw_update(p, dist_opt_seg_grad(o, s), o->exp_avg + sg->state, o->exp_avg_sq + sg->state,
                     sg->numel, h);
    }
    dist_opt_main_to_copy(o);
}
