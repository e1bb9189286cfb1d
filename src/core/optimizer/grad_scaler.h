/* Loss scaling for half-precision training (Megatron-core's optimizer/grad_scaler.py).
 *
 * The loss is multiplied by `scale` before backward, so that small fp16 gradients do not flush
 * to zero; the optimizer divides the gradients by it again and skips the step when any of them
 * is inf or NaN. The constant scaler (--loss-scale S) never changes; the dynamic one
 * (--fp16 without --loss-scale) starts at --initial-loss-scale and:
 *   - a step with a non-finite gradient resets the growth count and takes one from the
 *     hysteresis count; once that is used up (<= 0), every such step multiplies the scale by
 *     the backoff factor (0.5), never below --min-loss-scale;
 *   - growth_interval (--loss-scale-window) finite steps in a row multiply it by the growth
 *     factor (2) and restore the hysteresis count.
 * The scale is a float32 value, as Megatron's tensor. */
#ifndef MEGADLM_CORE_OPTIMIZER_GRAD_SCALER_H
#define MEGADLM_CORE_OPTIMIZER_GRAD_SCALER_H

#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct {
    int dynamic;              /* 0: constant scale */
    float scale;              /* the current loss scale */
    float min_scale;          /* --min-loss-scale (dynamic) */
    float growth_factor;      /* 2.0 in Megatron */
    float backoff_factor;     /* 0.5 in Megatron */
    int growth_interval;      /* --loss-scale-window */
    int hysteresis;           /* --hysteresis */
    int growth_tracker;       /* finite steps since the last growth or overflow */
    int hysteresis_tracker;   /* overflows left before the scale backs off */
} grad_scaler;

/* A constant scaler: scale > 0. */
grad_scaler grad_scaler_constant(float scale);
/* Megatron's DynamicGradScaler(initial_scale, min_scale, growth_factor 2.0, backoff_factor
 * 0.5, growth_interval, hysteresis): 0 < min_scale <= initial_scale, growth_interval > 0,
 * hysteresis > 0 (the flags are validated before this is called). */
grad_scaler grad_scaler_dynamic(float initial_scale, float min_scale, int growth_interval,
                                int hysteresis);
/* After a step's gradients were checked: found_inf = any of them non-finite on any rank. */
void grad_scaler_update(grad_scaler *s, int found_inf);

/* 1 / scale as Megatron's inv_scale: the reciprocal in double, rounded to float. */
float grad_scaler_inv_scale(const grad_scaler *s);
/* PyTorch's _amp_foreach_non_finite_check_and_unscale_ over one flat buffer: grad[i] *=
 * inv_scale (left as is when inv_scale is 1); returns 1 if any grad[i] was inf or NaN before
 * (found_inf), else 0. Each element on its own, so the split over threads changes nothing. */
int grad_scaler_unscale(float *grad, size_t n, float inv_scale);

/* Megatron's DynamicGradScaler.state_dict / load_state_dict (what a checkpoint keeps):
 * {"scale", "growth_tracker", "hysteresis_tracker"}. The constant scaler has no state (NULL).
 * from_json: 0, or -1 with a message naming the key (a scale must be a positive finite
 * float, the trackers integers; the growth tracker not negative). */
cJSON *grad_scaler_to_json(const grad_scaler *s);
int grad_scaler_from_json(grad_scaler *s, const cJSON *o, char *err, size_t errlen);

#endif
