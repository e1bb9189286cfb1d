/* Which OpenBLAS kernel set runs the GEMMs.
 *
 * Debian's OpenBLAS is a DYNAMIC_ARCH build: when it loads, it reads the CPU's identification
 * and picks a kernel set (Haswell, SkylakeX, Zen, ...). On a CPU it does not know (a model newer
 * than the library, a virtual machine's generic model name) it falls back to its Prescott (SSE3)
 * kernels, which run GEMMs 4-6x slower than the AVX2/AVX-512 kernels the CPU can run. The choice
 * is made before main and cannot be changed afterwards; only OPENBLAS_CORETYPE, read at load,
 * overrides it. So megadlm re-executes itself once with OPENBLAS_CORETYPE set to the best kernel
 * set the CPU supports, unless the user set OPENBLAS_CORETYPE (their choice is kept). */
#ifndef MEGADLM_BLAS_KERNELS_H
#define MEGADLM_BLAS_KERNELS_H

/* The kernel set to ask for when OpenBLAS fell back to SSE-only kernels on a CPU with AVX2 and
 * FMA (Cooperlake, SkylakeX or Haswell); NULL when its own choice is good. */
const char *blas_kernels_missed(void);

/* Call first in main, before MPI or any thread starts: re-executes the program (same PID, same
 * arguments and environment plus OPENBLAS_CORETYPE) when blas_kernels_missed() names a better
 * set and OPENBLAS_CORETYPE is unset. Returns normally when nothing is to be done or the
 * re-execution failed (then the log's warning says what to set). */
void blas_kernels_choose(char **argv);

/* The one line naming the BLAS build and kernel set, and a restart if there was one:
 * "<config>; kernels <set>[ (why: megadlm restarted itself ...)]" (the training log's
 * "> BLAS:" line, `megadlm --version`; benches and tests parse "; kernels <set>"). */
const char *blas_kernels_line(void);

#endif
