#include "training/watchdog.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "core/parallel_state.h"

static atomic_llong g_last_ns;
static const char *_Atomic g_what = "starting";
static atomic_int g_running;
static double g_timeout_s;
static pthread_t g_thread;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *watch(void *arg) {
    (void)arg;
    while (atomic_load(&g_running)) {
        usleep(200 * 1000);
        double idle = (now_ns() - atomic_load(&g_last_ns)) * 1e-9;
        if (idle > g_timeout_s && atomic_load(&g_running)) {
            fprintf(stderr,
                    "[rank %d] error: no progress for %.1f s (--distributed-timeout-minutes "
                    "%.2f) while %s: another rank died or hangs; ending the job\n",
                    parallel_world_rank(), idle, g_timeout_s / 60.0, atomic_load(&g_what));
            fflush(stderr);
            _exit(3); /* MPI calls are not allowed from this thread; mpirun ends the rest */
        }
    }
    return NULL;
}

void watchdog_start(double timeout_minutes) {
    if (!parallel_get()->mpi || parallel_world_size() < 2 || atomic_load(&g_running)) return;
    g_timeout_s = timeout_minutes * 60.0;
    atomic_store(&g_last_ns, now_ns());
    atomic_store(&g_running, 1);
    pthread_create(&g_thread, NULL, watch, NULL);
}

void watchdog_progress(const char *what) {
    atomic_store(&g_what, what);
    atomic_store(&g_last_ns, now_ns());
}

void watchdog_stop(void) {
    if (!atomic_load(&g_running)) return;
    atomic_store(&g_running, 0);
    pthread_join(g_thread, NULL);
}
