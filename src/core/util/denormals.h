/* Denormal (subnormal) floats: flushed to zero in every thread that computes, unless the
 * environment asks to keep them.
 *
 * Why: a diffusion run makes denormals as it trains. Tiny attention probabilities times small
 * output gradients give denormal entries in the softmax backward's dS (about 6% of its entries
 * after 300 iterations of the README's byte-level run), and fewer in the probabilities and the
 * output layer's logit gradients; OpenBLAS's GEMMs fed such operands slow down on x86 (the
 * step took 1.9x as long by iteration 500 on SkylakeX kernels). docs/architecture/determinism.md
 * ("Denormals") has the measurements. Flushing makes the hardware treat a denormal operand as 0
 * (DAZ) and round a denormal result to 0 (FTZ): values below 2^-126 ~ 1.2e-38, far under
 * anything a loss or an update can resolve, become exact zeros, at full speed.
 *
 * Where: the bits live per thread (x86: MXCSR's FTZ and DAZ; AArch64: FPCR.FZ, which flushes
 * both inputs and outputs). A thread made by pthread_create copies its creator's bits, so
 * setting them on the main thread before the first parallel region covers OpenMP's workers,
 * and through them OpenBLAS's (the OpenMP build) and oneDNN's (OpenMP runtime); the team call
 * below also sets them on workers that exist already. */
#ifndef MEGADLM_CORE_UTIL_DENORMALS_H
#define MEGADLM_CORE_UTIL_DENORMALS_H

#include <stddef.h>

typedef enum {
    DENORMALS_FLUSH = 0, /* default: flush to zero (FTZ + DAZ) */
    DENORMALS_KEEP = 1,  /* IEEE gradual underflow, as PyTorch's default */
} denormals_mode;

/* The environment variable that chooses: unset or "flush" -> FLUSH, "keep" -> KEEP. */
#define DENORMALS_ENV "MEGADLM_DENORMALS"

/* Reads DENORMALS_ENV into *mode. Any other value (the empty string included): a message
 * naming the variable and the value in err, -1. */
int denormals_mode_from_env(denormals_mode *mode, char *err, size_t errlen);

/* Sets the calling thread's bits for `mode`. 0, or -1 on a CPU architecture without such a
 * control (nothing changes: denormals are kept). */
int denormals_apply_thread(denormals_mode mode);

/* 1 when the calling thread flushes denormal operands and results to zero, else 0. */
int denormals_thread_flushes(void);

/* The calling thread, then every thread of an OpenMP team of `threads`. */
void denormals_apply_team(denormals_mode mode, int threads);

/* How many threads of an OpenMP team of `threads` flush (the calling thread is one of them). */
int denormals_team_flushing(int threads);

/* "flush" or "keep": the mode the process was set up with (denormals_apply_team's last). */
const char *denormals_mode_name(void);

#endif
