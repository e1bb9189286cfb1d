/* The distributed timeout (Megatron's --distributed-timeout-minutes). A rank that makes no
 * progress for that long — it waits in a collective or transfer for a rank that died or hung —
 * prints which rank it is and what it last did, and exits; mpirun then ends every rank. (A rank
 * killed outright is noticed by mpirun itself, which names it and ends the job.) */
#ifndef MEGADLM_TRAINING_WATCHDOG_H
#define MEGADLM_TRAINING_WATCHDOG_H

/* Starts the watchdog thread (only under MPI with more than one rank). */
void watchdog_start(double timeout_minutes);
/* Marks progress; `what` (a string literal) says what the rank does next. */
void watchdog_progress(const char *what);
void watchdog_stop(void);

#endif
