/* How many positions a round of the diffusion sampler unmasks under Fast-dLLM's rules
 * (tools/diffusion_sampling.h), on confidences chosen by hand:
 *   threshold tau: every confidence >= tau, and always the most confident;
 *   factor f: the first n sorted confidences c1 >= c2 >= ... with c_k >= 1 - f / (k + 1) for
 *   every k <= n (Fast-dLLM's get_transfer_index_dynamic: thresholds 1 - f/(i+2) for i from 0,
 *   the first one always passed). */
#include "test_util.h"
#include "tools/diffusion_sampling.h"

int main(void) {
    const float c[4] = {0.95f, 0.9f, 0.5f, 0.1f};
    CHECK(dlm_unmask_count(c, 4, 0.9f, 0) == 2);  /* 0.95, 0.9 (>=) */
    CHECK(dlm_unmask_count(c, 4, 0.91f, 0) == 1); /* 0.95 */
    CHECK(dlm_unmask_count(c, 4, 0.99f, 0) == 1); /* none passes: the most confident anyway */
    CHECK(dlm_unmask_count(c, 4, 0.05f, 0) == 4);
    CHECK(dlm_unmask_count(c, 0, 0.5f, 0) == 0);  /* nothing masked */
    /* factor 1: thresholds 1/2 (k = 1, passed anyway), 2/3, 3/4, 4/5 */
    const float d[4] = {0.99f, 0.8f, 0.7f, 0.9f};
    CHECK(dlm_unmask_count(d, 4, 0, 1.0f) == 2);  /* 0.8 >= 2/3; 0.7 < 3/4 stops it */
    const float e[3] = {0.3f, 0.2f, 0.1f};
    CHECK(dlm_unmask_count(e, 3, 0, 1.0f) == 1);  /* 0.2 < 2/3 */
    CHECK(dlm_unmask_count(e, 3, 0, 2.0f) == 1);  /* factor 2: 0.2 < 1 - 2/3 */
    const float f[3] = {0.5f, 0.4f, 0.3f};
    CHECK(dlm_unmask_count(f, 3, 0, 2.0f) == 2);  /* 0.4 >= 1/3; 0.3 < 1 - 2/4 */
    CHECK(dlm_unmask_count(f, 3, 0, 3.0f) == 3);  /* 0.4 >= 0; 0.3 >= 1 - 3/4 */
    TEST_DONE();
}
