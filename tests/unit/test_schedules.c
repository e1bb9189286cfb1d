/* The pipeline schedules' bookkeeping (core/pipeline_parallel/schedules.h), without MPI:
 *  - warm-up forwards: 1F1B min(p - r - 1, M); interleaved Megatron's (p - r - 1) 2 + (v - 1) p,
 *    capped at the M v virtual micro-batches;
 *  - activation stores: 1F1B min(p - r, M); interleaved min(W + 1, M v) model chunks, which on
 *    the first stage is the paper's p (1 + (p - 1)/(p v)) micro-batches' worth (Korthikanti et
 *    al. 2022, section 4.2.3) once M v > W;
 *  - per-micro-batch partial recompute K: 1F1B keeps min(K, stores) stores whole; the
 *    interleaved pools hold every store the schedule needs of each kind (none kept whole at
 *    K = 0, all at K >= W + 1). */
#include "core/pipeline_parallel/schedules.h"
#include "test_util.h"

static int imin(int a, int b) { return a < b ? a : b; }

int main(void) {
    int u;
    /* no pipelining, 1F1B */
    CHECK(schedule_stores(1, 0, 0, 8, -1, &u) == 1 && u == 0);
    CHECK(schedule_stores(4, 0, 0, 8, -1, &u) == 4 && u == 0);
    CHECK(schedule_stores(4, 3, 0, 8, -1, &u) == 1 && u == 0);
    CHECK(schedule_stores(4, 0, 0, 2, -1, &u) == 2 && u == 0);
    CHECK(schedule_stores(4, 1, 1, 8, 2, &u) == 3 && u == 2);
    CHECK(schedule_stores(4, 2, 0, 8, 5, &u) == 2 && u == 2);
    CHECK(schedule_num_warmup(4, 0, 0, 8) == 3 && schedule_num_warmup(4, 0, 0, 2) == 2);
    CHECK(schedule_num_warmup(1, 0, 0, 8) == 0);

    /* interleaved */
    for (int p = 2; p <= 4; p++)
        for (int v = 2; v <= 4; v++)
            for (int g = 1; g <= 4; g++) {
                int M = g * p, total = M * v;
                for (int r = 0; r < p; r++) {
                    int W = imin((p - r - 1) * 2 + (v - 1) * p, total);
                    CHECK(schedule_num_warmup(p, r, v, M) == W);
                    int n = schedule_stores(p, r, v, M, -1, &u);
                    CHECK(n == imin(W + 1, total) && u == 0);
                    CHECK(schedule_stores(p, r, v, M, 0, &u) == n && u == 0);
                    /* K covering the whole window: every store keeps everything */
                    CHECK(schedule_stores(p, r, v, M, W + 1, &u) == n && u == n);
                    /* in between: virtual micro-batch 0 keeps everything; the two pools hold
                     * at least what one pool would, at most one window of each */
                    for (int K = 1; K <= W; K++) {
                        int m = schedule_stores(p, r, v, M, K, &u);
                        CHECK(u >= 1 && u <= imin(K * ((total + W) / (W + 1)), n));
                        CHECK(m >= n && m <= 2 * n);
                    }
                    if (r == 0 && W + 1 < total) /* the paper's first-stage factor */
                        CHECK_CLOSE((double)n / v, p * (1.0 + (p - 1.0) / (p * v)), 1e-12, 0);
                }
            }
    /* p = 4, v = 2, M = 8: the first stage runs 10 warm-up forwards and holds 11 chunks, 5.5
     * micro-batches' worth (1F1B: 4); the last runs 4 and holds 5 */
    CHECK(schedule_num_warmup(4, 0, 2, 8) == 10 && schedule_stores(4, 0, 2, 8, -1, &u) == 11);
    CHECK(schedule_num_warmup(4, 3, 2, 8) == 4 && schedule_stores(4, 3, 2, 8, -1, &u) == 5);
    /* M = p: the first stage's warm-up reaches every virtual micro-batch */
    CHECK(schedule_num_warmup(2, 0, 2, 2) == 4 && schedule_stores(2, 0, 2, 2, -1, &u) == 4);
    TEST_DONE();
}
