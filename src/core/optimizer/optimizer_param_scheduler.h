/* Megatron's learning-rate schedule (OptimizerParamScheduler.get_lr): linear warmup from an
 * initial lr, then constant, linear, cosine, inverse-square-root or WSD (warmup, stable,
 * decay) down to a floor.
 *
 * Every length is in samples, as Megatron counts them: an iteration-based run's lengths are
 * iterations x global batch size, a sample-based run's are given in samples. The warmup is a
 * double because Megatron keeps `--lr-warmup-fraction` x decay samples unrounded (0.07 x 240
 * samples = 16.8): rounding it to whole iterations changes every iteration's lr. */
#ifndef MEGADLM_CORE_OPTIMIZER_PARAM_SCHEDULER_H
#define MEGADLM_CORE_OPTIMIZER_PARAM_SCHEDULER_H

#include <stdint.h>

typedef enum { LR_CONSTANT, LR_LINEAR, LR_COSINE, LR_INVERSE_SQRT, LR_WSD } lr_decay_style;
typedef enum { WSD_LINEAR, WSD_COSINE, WSD_EXPONENTIAL, WSD_MINUS_SQRT } lr_wsd_style;

typedef struct {
    double max_lr, min_lr, init_lr; /* init_lr: where the warmup starts (--lr-warmup-init) */
    double warmup_steps;            /* samples, possibly fractional */
    int64_t decay_steps;            /* samples; > warmup_steps */
    int64_t wsd_decay_steps;        /* samples of WSD's annealing, at the end of the decay */
    lr_decay_style style;
    lr_wsd_style wsd_style;
} lr_scheduler;

/* The lr after num_steps samples of steps taken (Megatron's get_lr at num_steps). */
double lr_scheduler_get(const lr_scheduler *s, int64_t num_steps);

#endif
