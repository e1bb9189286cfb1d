/* The loss scaler against Megatron-core's DynamicGradScaler / ConstantGradScaler rules
 * (optimizer/grad_scaler.py), on sequences worked out by hand from those rules:
 * an overflow resets the growth count and uses one unit of hysteresis; with none left (<= 0)
 * the scale halves on every overflow, never below min_scale; growth_interval clean steps in a
 * row double it and restore the hysteresis. */
#include "core/optimizer/grad_scaler.h"
#include "test_util.h"

/* Feeds found_inf[i] and checks the scale after each update. */
static void run(grad_scaler *s, const int *found_inf, const float *want, int n) {
    for (int i = 0; i < n; i++) {
        grad_scaler_update(s, found_inf[i]);
        if (s->scale != want[i])
            fprintf(stderr, "step %d (found_inf %d): scale %g, expected %g\n", i, found_inf[i],
                    (double)s->scale, (double)want[i]);
        CHECK(s->scale == want[i]);
    }
}

int main(void) {
    /* Megatron's defaults: initial 2^32, min 1, window 1000, hysteresis 2: the first overflow
     * only uses hysteresis, the second halves. */
    grad_scaler d = grad_scaler_dynamic(4294967296.0f, 1.0f, 1000, 2);
    {
        const int inf[] = {1, 1, 1, 0};
        const float want[] = {4294967296.0f, 2147483648.0f, 1073741824.0f, 1073741824.0f};
        run(&d, inf, want, 4);
        CHECK(d.growth_tracker == 1 && d.hysteresis_tracker == -1);
    }
    /* window 3, hysteresis 2, from 1024: growth after 3 clean steps restores the hysteresis,
     * so the next single overflow does not back off; an overflow in the middle of a clean run
     * restarts the count. */
    grad_scaler g = grad_scaler_dynamic(1024.0f, 1.0f, 3, 2);
    {
        const int inf[] = {0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};
        const float want[] = {1024, 1024, 2048, 2048, 2048, 2048, 1024, 512,
                              512,  512,  1024, 1024, 1024, 2048};
        run(&g, inf, want, 14);
    }
    /* the floor: min_scale 4 from 16, hysteresis 1: 8, 4, 4, 4 */
    grad_scaler m = grad_scaler_dynamic(16.0f, 4.0f, 100, 1);
    {
        const int inf[] = {1, 1, 1, 1};
        const float want[] = {8, 4, 4, 4};
        run(&m, inf, want, 4);
    }
    /* constant: never moves */
    grad_scaler c = grad_scaler_constant(128.0f);
    {
        const int inf[] = {1, 1, 1, 0, 0, 0};
        const float want[] = {128, 128, 128, 128, 128, 128};
        run(&c, inf, want, 6);
    }
    TEST_DONE();
}
