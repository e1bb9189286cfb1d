/* Megatron's training_log and the reports around it (training_log.c). */
#ifndef MEGADLM_TRAINING_TRAINING_LOG_H
#define MEGADLM_TRAINING_TRAINING_LOG_H

#include "core/transformer/moe/moe_layer.h"
#include "training/trainer.h"

/* Megatron's print_rank_last: the training log is printed on the last rank; the others stay
 * quiet except for what is per rank (parameter counts, memory). print_rank_last_set chooses
 * (every rank prints until then); print_rank_last_on says whether this rank does. */
void print_rank_last(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void print_rank_last_set(int on);
int print_rank_last_on(void);

/* Megatron's total_loss_dict and the timer of the log interval: what training_log accumulates
 * between two log lines. */
typedef struct {
    double t_log;       /* when the interval started (evaluation and saves restart it) */
    double loss;        /* sum of the advanced iterations' losses */
    int iters, advanced, skipped, nan; /* iterations; advanced, skipped, not finite */
    int memory_reported; /* --log-memory: reported after the first iteration */
    /* MoE (Megatron's track_moe_metrics): each iteration's mean over the layers of the routers'
     * values, summed over the interval; seen: recorded at least once (a key of Megatron's
     * total_loss_dict, whose line shows them in the order they first appeared) */
    double moe[MOE_LOG_COUNT];
    unsigned char moe_seen[MOE_LOG_COUNT];
} log_totals;

/* Megatron's training_log, after iteration tr->iteration (counted): accumulates the loss,
 * reports memory after the first iteration (--log-memory), writes TensorBoard at its interval
 * and prints the log line at --log-interval. stepped: the step was taken. */
void training_log(trainer *tr, log_totals *t, float loss, float grad_norm, int stepped);

/* Megatron's evaluate_and_print_results: the framed line, and TensorBoard. */
void print_eval(trainer *tr, const char *what, int iteration, float loss);
/* --check-for-nan-in-loss-and-grad: every rank says why the job stops. */
void report_nonfinite(int iteration, float loss, float norm, int first_rank);
/* Threads per rank, BLAS kernels and denormals for the whole job (collective). */
void log_threads(void);
/* Pipeline: the share of training time this stage waited for transfers. */
void log_pipeline_bubble(const trainer *tr);
/* --log-memory: the data-parallel reductions so far (per rank). */
void log_dp_communication(const trainer *tr);
/* Expert parallelism: the all-to-all's time, and how much the shared expert's compute hid
 * (--moe-shared-expert-overlap). */
void log_moe_a2a(const trainer *tr);
/* Context parallelism's ring: transfers and how much of them compute hid. */
void log_cp_ring(const trainer *tr);

#endif
