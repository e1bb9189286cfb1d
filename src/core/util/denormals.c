#include "core/util/denormals.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/util/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define MXCSR_DAZ 0x0040u /* denormal operands are zero */
#define MXCSR_FTZ 0x8000u /* denormal results are zero */
#elif defined(__aarch64__)
#define FPCR_FZ (1ull << 24) /* flush-to-zero: denormal inputs and outputs */
#endif

static denormals_mode g_mode = DENORMALS_KEEP; /* until denormals_apply_team */

int denormals_mode_from_env(denormals_mode *mode, char *err, size_t errlen) {
    const char *v = getenv(DENORMALS_ENV);
    if (!v || !strcmp(v, "flush")) {
        *mode = DENORMALS_FLUSH;
        return 0;
    }
    if (!strcmp(v, "keep")) {
        *mode = DENORMALS_KEEP;
        return 0;
    }
    err_set(err, errlen, "environment variable %s='%s': expected flush (the default) or keep",
            DENORMALS_ENV, v);
    return -1;
}

int denormals_apply_thread(denormals_mode mode) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned csr = _mm_getcsr();
    csr = mode == DENORMALS_FLUSH ? csr | MXCSR_DAZ | MXCSR_FTZ : csr & ~(MXCSR_DAZ | MXCSR_FTZ);
    _mm_setcsr(csr);
    return 0;
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    fpcr = mode == DENORMALS_FLUSH ? fpcr | FPCR_FZ : fpcr & ~FPCR_FZ;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
    return 0;
#else
    (void)mode;
    return -1;
#endif
}

int denormals_thread_flushes(void) {
#if defined(__x86_64__) || defined(__i386__)
    const unsigned both = MXCSR_DAZ | MXCSR_FTZ;
    return (_mm_getcsr() & both) == both;
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
    return (fpcr & FPCR_FZ) != 0;
#else
    return 0;
#endif
}

void denormals_apply_team(denormals_mode mode, int threads) {
    denormals_apply_thread(mode);
    g_mode = mode;
#pragma omp parallel num_threads(threads < 1 ? 1 : threads)
    denormals_apply_thread(mode);
}

int denormals_team_flushing(int threads) {
    int n = 0;
#pragma omp parallel num_threads(threads < 1 ? 1 : threads) reduction(+ : n)
    n += denormals_thread_flushes();
    return n;
}

const char *denormals_mode_name(void) { return g_mode == DENORMALS_FLUSH ? "flush" : "keep"; }
