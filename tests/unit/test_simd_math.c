/* The kernels' vectorized expf and sigmoid (core/kernels/simd_math.h) against the C library
 * over their whole range, and with NaN and infinities: NaN propagates, infinities saturate,
 * and nothing reaches undefined behaviour (tests/CMakeLists.txt builds this test with UBSan
 * where the compiler has it, so a left shift of a negative value or a NaN converted to an
 * integer ends the test). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/simd_math.h"
#include "test_util.h"

int main(void) {
    /* finite arguments: within 2e-7 relative of libm where the result is normal */
    for (float x = -87.0f; x <= 88.0f; x += 0.0137f) CHECK_CLOSE(simd_expf(x), expf(x), 2e-7, 0.0);
    /* the documented saturation and flush to zero */
    CHECK(simd_expf(1000.0f) == simd_expf(88.0f));
    CHECK(simd_expf(-1000.0f) == 0.0f);
    /* infinities saturate like large values, NaN propagates */
    volatile float inf = INFINITY, nan = NAN;
    CHECK(simd_expf(inf) == simd_expf(88.0f));
    CHECK(simd_expf(-inf) == 0.0f);
    CHECK(isnan(simd_expf(nan)));
    CHECK(isnan(simd_expf(-nan)));
    CHECK(isnan(simd_sigmoidf(nan)));
    CHECK(simd_sigmoidf(inf) == 1.0f);
    CHECK(simd_sigmoidf(-inf) == simd_sigmoidf(-100.0f) && simd_sigmoidf(-inf) < 1e-37f); /* 1/(1+e^88) */
    for (float x = -20.0f; x <= 20.0f; x += 0.031f)
        CHECK_CLOSE(simd_sigmoidf(x), 1.0 / (1.0 + exp(-(double)x)), 4e-7, 0.0);
    TEST_DONE();
}
