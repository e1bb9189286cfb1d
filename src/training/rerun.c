#include "training/rerun.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/parallel_state.h"

/* 1 when any rank of the world passes a non-zero flag */
static int world_any(int local) {
    const parallel_state *ps = parallel_get();
    int any = local != 0;
    if (ps->mpi && ps->world_size > 1)
        MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return any;
}

/* the bits any rank of the world set */
static int world_or(int bits) {
    const parallel_state *ps = parallel_get();
    if (ps->mpi && ps->world_size > 1)
        MPI_Allreduce(MPI_IN_PLACE, &bits, 1, MPI_INT, MPI_BOR, MPI_COMM_WORLD);
    return bits;
}

/* the rank that writes the training log (Megatron's print_rank_last) */
static int is_log_rank(void) {
    const parallel_state *ps = parallel_get();
    return ps->world_rank == ps->world_size - 1;
}

int rerun_setup(rerun_state *rs, rerun_mode mode, int check_nan, int check_spiky, char *err,
                size_t errlen) {
    memset(rs, 0, sizeof *rs);
    rs->check_nan = check_nan;
    rs->check_spiky = check_spiky;
    rs->last_loss = NAN;
    rs->mode = mode;
    const char *f = getenv("MEGADLM_RERUN_FAULT");
    if (f && *f) {
        char *end;
        long it = strtol(f, &end, 10);
        rs->fault_spike = !strncmp(end, ":spike", 6);
        if (rs->fault_spike) end += 6;
        rs->fault_persistent = !strcmp(end, ":persistent");
        if (it <= 0 || it > 1000000000L || (*end && !rs->fault_persistent)) {
            snprintf(err, errlen, "MEGADLM_RERUN_FAULT='%s': expected ITER, ITER:spike, "
                     "ITER:persistent or ITER:spike:persistent (ITER >= 1)", f);
            return -1;
        }
        rs->fault_iteration = (int)it;
    }
    if (rs->mode == RERUN_VALIDATE_RESULTS && is_log_rank()) printf("Result validation enabled\n");
    if (rs->mode == RERUN_REPORT_STATS && is_log_rank())
        printf("RerunStateMachine initialized in mode report_determinism_stats: every iteration "
               "runs twice\n");
    return 0;
}

void rerun_inject(const rerun_state *rs, int iteration, int run, rerun_result *r) {
    if (rs->fault_iteration != iteration || (run > 0 && !rs->fault_persistent)) return;
    if (rs->fault_spike) {
        r->loss *= 10.0f;
        return;
    }
    r->norm = NAN;
    r->overflow = 0;
}

/* Megatron's rejection: a NaN or infinite loss; here also a non-finite gradient norm that the
 * loss scaler did not ask for (megadlm checks the reduced norm where Megatron's DDP checks the
 * gradients themselves) */
static int rejected_locally(const rerun_state *rs, const rerun_result *r) {
    int why = 0;
    if (rs->check_nan && (!isfinite(r->loss) || (!isfinite(r->norm) && !r->overflow)))
        why |= RERUN_REJECT_NAN;
    /* Megatron's is_spiky_loss: NaNs ignored, an infinity spiky, else the relative change */
    if (rs->check_spiky && !isnan(r->loss) && !isnan(rs->last_loss)) {
        if (isinf(r->loss) || isinf(rs->last_loss) ||
            fabs((double)r->loss - rs->last_loss) / rs->last_loss >= RERUN_SPIKY_LOSS_PERC)
            why |= RERUN_REJECT_SPIKY;
    }
    return why;
}

int rerun_rejected(const rerun_state *rs, const rerun_result *r) {
    if (rs->mode != RERUN_VALIDATE_RESULTS) return 0;
    return world_or(rejected_locally(rs, r));
}

void rerun_accept(rerun_state *rs, const rerun_result *r) { rs->last_loss = r->loss; }

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

static int same_result(const rerun_result *a, const rerun_result *b) {
    return same_bits(a->loss, b->loss) && same_bits(a->norm, b->norm) &&
           a->overflow == b->overflow;
}

int rerun_judge(int iteration, int why, const rerun_result *first, const rerun_result *again) {
    int differs = world_any(!same_result(first, again));
    /* the value Megatron's message shows: the rejected one */
    int loss_bad = !isfinite(first->loss) || !(why & RERUN_REJECT_NAN);
    float was = loss_bad ? first->loss : first->norm, now = loss_bad ? again->loss : again->norm;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    if (differs) {
        if (is_log_rank())
            printf("First rerun: unexpected result is not reproducible within the tolerance "
                   "(%g != %g)\n", (double)now, (double)was);
        fprintf(stderr, "Rank %d, node %s: Possible transient error! (iteration %d: the re-run's "
                "result is used)\n", parallel_world_rank(), host, iteration);
        fflush(stderr);
        return 0;
    }
    if (!(why & RERUN_REJECT_NAN)) { /* Megatron's spiky-loss check is not fatal */
        if (is_log_rank())
            printf("First rerun: unexpected result is reproducible within the tolerance "
                   "(%g = %g): a spiky loss, not an error (fatal=False); continuing\n",
                   (double)now, (double)was);
        return 0;
    }
    if (is_log_rank())
        printf("First rerun: unexpected result is reproducible within the tolerance (%g = %g). "
               "No other device to re-run on: a persistent error\n", (double)now, (double)was);
    fprintf(stderr, "Rank %d, node %s: Possible persistent error! (iteration %d: %s is %g on "
            "both runs); exiting with code %d\n", parallel_world_rank(), host, iteration,
            loss_bad ? "lm loss" : "grad norm", (double)was, RERUN_EXIT_FAILED_VALIDATION);
    fflush(stderr);
    return 1;
}

void rerun_count(rerun_state *rs, const rerun_result *first, const rerun_result *again) {
    rs->reruns++;
    if (!world_any(!same_result(first, again))) return;
    rs->differed++;
    double d = fabs((double)first->loss - (double)again->loss);
    double rel = first->loss != 0.0f ? d / fabs((double)first->loss) : d;
    if (!(rel <= rs->max_rel_diff)) rs->max_rel_diff = rel; /* NaN counts as the largest */
}

void rerun_report(rerun_state *rs, int iteration) {
    if (rs->mode != RERUN_REPORT_STATS) return;
    if (is_log_rank())
        printf(" rerun stats at iteration %d: %ld of %ld iterations gave other bits when re-run "
               "(largest relative loss difference %g)\n",
               iteration, rs->differed, rs->reruns, rs->max_rel_diff);
    rs->reruns = rs->differed = 0;
    rs->max_rel_diff = 0.0;
}
