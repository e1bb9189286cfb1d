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

#endif
