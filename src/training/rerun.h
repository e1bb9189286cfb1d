/* --rerun-mode: Megatron's rerun state machine (megatron/core/rerun_state_machine.py) for one
 * CPU job.
 *
 * validate_results: when an iteration's result is rejected (with --check-for-nan-in-loss-and-grad:
 * its loss, or a gradient norm that is not the loss scaler's overflow signal, is NaN or
 * infinite, Megatron's "found NaN in local forward loss calculation"; with
 * --check-for-spiky-loss: its loss is 20% or more off the previous iteration's, MegaDLMs'
 * SPIKY_LOSS_PERC), the iteration's forward and backward are run again on the same
 * micro-batches with the same random state (megadlm's dropout and masking streams are keyed by
 * seed, iteration and sample, so the re-run draws the same numbers). The same bits again: the
 * result is reproducible, a persistent error; Megatron would re-run on another GPU, a CPU job
 * has no other device, so the job stops with Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION
 * (17); a reproducible spiky loss is no error (Megatron's fatal=False): the run goes on. Other
 * bits: a transient fault; logged, and the iteration goes on with the re-run's result.
 *
 * report_stats (MegaDLMs' choice; Megatron's enum names it report_determinism_stats): every
 * iteration is run twice and the log reports how many re-runs gave other bits.
 *
 * Test hook: MEGADLM_RERUN_FAULT=ITER corrupts the gradient norm of iteration ITER (1-based)
 * to NaN on every rank, in its first computation only (a transient fault); ITER:spike
 * multiplies its loss by 10 instead; a final :persistent does it in every computation of that
 * iteration (ITER:persistent, ITER:spike:persistent). */
#ifndef MEGADLM_TRAINING_RERUN_H
#define MEGADLM_TRAINING_RERUN_H

#include <stddef.h>

#define RERUN_EXIT_FAILED_VALIDATION 17 /* Megatron's EXIT_CODE_FAILED_ON_RESULT_VALIDATION */
#define RERUN_SPIKY_LOSS_PERC 0.2       /* MegaDLMs' pretrain_difflm.py */

/* why a result was rejected (bits) */
enum { RERUN_REJECT_NAN = 1, RERUN_REJECT_SPIKY = 2 };

typedef enum { RERUN_DISABLED, RERUN_VALIDATE_RESULTS, RERUN_REPORT_STATS } rerun_mode;

/* What an iteration's forward/backward produced, as every rank sees it. */
typedef struct {
    float loss;   /* the loss averaged over micro-batches and data-parallel ranks */
    float norm;   /* the reduced gradient norm */
    int overflow; /* the loss scaler's found_inf: a non-finite norm that is no error */
} rerun_result;

typedef struct {
    rerun_mode mode;
    int fault_iteration; /* the test hook (0: none) */
    int fault_persistent;
    int fault_spike;       /* the hook multiplies the loss instead */
    int check_nan, check_spiky; /* --check-for-nan-in-loss-and-grad, --check-for-spiky-loss */
    float last_loss;       /* the previous iteration's loss (NaN: none yet) */
    long reruns, differed; /* report_stats since the last report */
    double max_rel_diff;
} rerun_state;

/* Sets the mode (the caller maps --rerun-mode's choice: report_stats and
 * report_determinism_stats are one mode) and reads the test hook. 0, or -1 with a message
 * naming MEGADLM_RERUN_FAULT. */
int rerun_setup(rerun_state *rs, rerun_mode mode, int check_nan, int check_spiky, char *err,
                size_t errlen);

/* The test hook: corrupts r when it applies to computation `run` (0: the first) of
 * `iteration`. */
void rerun_inject(const rerun_state *rs, int iteration, int run, rerun_result *r);

/* validate_results: why any rank rejects its result (RERUN_REJECT_* bits, 0: accepted;
 * collective over the world, as Megatron's all-reduce of will_rerun). */
int rerun_rejected(const rerun_state *rs, const rerun_result *r);

/* After the re-run: logs Megatron's messages. Returns 1 when the job must stop: the result is
 * reproducible (the same bits on every rank) and was rejected as NaN/inf; 0 when it was not
 * reproducible (transient) or only spiky. Collective. */
int rerun_judge(int iteration, int why, const rerun_result *first, const rerun_result *again);

/* The iteration's accepted loss: the next spiky-loss check compares with it. */
void rerun_accept(rerun_state *rs, const rerun_result *r);

/* report_stats: counts a pair of runs; rerun_report logs and resets the counts. */
void rerun_count(rerun_state *rs, const rerun_result *first, const rerun_result *again);
void rerun_report(rerun_state *rs, int iteration);

#endif
