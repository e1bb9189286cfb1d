#include "training/debug.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A debugger may set this to 1 to end the wait without staying attached (gdb: set
 * {int}&megadlm_debugger_go = 1, then detach); global, so that its symbol is there without
 * debug information. */
volatile int megadlm_debugger_go = 0;

/* The PID of the process tracing this one (0: none; -1: unknown, no /proc). */
static long tracer_pid(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long pid = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "TracerPid:", 10)) {
            pid = strtol(line + 10, NULL, 10);
            break;
        }
    fclose(f);
    return pid;
}

void debug_wait_for_debugger(const megadlm_args *a, int world_rank) {
    if (!a->debug || !a->turn_on_debugpy || world_rank != 0) return;
    printf("Waiting for debugger attach: gdb -p %ld (--turn-on-debugpy; then continue, or set "
           "{int}&megadlm_debugger_go = 1 and detach) ...\n", (long)getpid());
    fflush(stdout);
    if (tracer_pid() < 0) {
        printf("warning: --turn-on-debugpy: no /proc/self/status to see a debugger; not "
               "waiting\n");
        return;
    }
    const struct timespec poll = {0, 100 * 1000 * 1000}; /* 0.1 s */
    while (!megadlm_debugger_go && tracer_pid() == 0) nanosleep(&poll, NULL);
    printf("debugger attached, training goes on\n");
    fflush(stdout);
}

int debug_detect_anomaly(const megadlm_args *a) {
    if (!a->debug || !a->detect_anomaly) return 0;
    printf("WARNING: Detecting anomaly is turned on. This will slow down the training "
           "process.\n");
    return 1;
}
