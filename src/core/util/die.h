/* The one failure policy for internal errors (a broken invariant, an allocation that failed, a
 * table that overflowed): not a user's mistake, so there is nothing to hand back to a caller.
 * die() prints "[rank N] error: <message> (at src/FILE.c:LINE)" on stderr, the place that
 * gave up, and ends the job: with more than one
 * process, every process, because a rank that exits alone leaves the others waiting in their
 * next collective. core/util knows nothing of MPI; parallel_state installs the hook that
 * reaches the other ranks (MPI_Abort) when it starts MPI, and removes it when it finalises.
 * Errors a user can act on (flags, files) are returned as messages instead (error.h). */
#ifndef MEGADLM_CORE_UTIL_DIE_H
#define MEGADLM_CORE_UTIL_DIE_H

/* Prints the message and ends the job with exit status `code`; die() passes the caller's
 * file and line. */
#define die(code, ...) die_at(__FILE__, __LINE__, (code), __VA_ARGS__)
void die_at(const char *file, int line, int code, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

/* What die() calls after printing: abort_all(code) must not return (MPI_Abort); NULL means a
 * plain exit(code). `rank` is the N of the message. */
void die_set_abort(int rank, void (*abort_all)(int code));

#endif
