#include "core/kernels/blas_kernels.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/kernels/gemm.h"

/* Set in the re-executed process's environment: the kernel set OpenBLAS first chose. Read and
 * removed at start, so no process started by this one sees it. */
#define REPLACED_ENV "MEGADLM_BLAS_REPLACED"

static char g_replaced[32];

const char *blas_kernels_missed(void) {
    static const char *const sse_only[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                           "Atom", "Katmai", "Coppermine", "Northwood", "Banias"};
    const char *k = gemm_blas_kernels();
    int old = 0;
    for (size_t i = 0; i < sizeof sse_only / sizeof *sse_only; i++)
        if (!strcmp(k, sse_only[i])) old = 1;
    __builtin_cpu_init();
    if (!old || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return NULL;
    if (__builtin_cpu_supports("avx512bf16")) return "Cooperlake";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    return "Haswell";
}

void blas_kernels_choose(char **argv) {
    const char *was = getenv(REPLACED_ENV);
    if (was) { /* the re-executed process */
        strncpy(g_replaced, was, sizeof g_replaced - 1);
        unsetenv(REPLACED_ENV);
        return;
    }
    const char *set = getenv("OPENBLAS_CORETYPE");
    const char *better = blas_kernels_missed();
    if ((set && set[0]) || !better) return;
    /* the binary's own path, not /proc/self/exe: the process keeps its name (ps, pgrep -P
     * walks, /proc/PID/comm), which exec takes from the path's last component */
    char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0 || n >= (ssize_t)sizeof path - 1) return;
    path[n] = '\0';
    if (setenv("OPENBLAS_CORETYPE", better, 1) != 0 ||
        setenv(REPLACED_ENV, gemm_blas_kernels(), 1) != 0)
        return;
    execv(path, argv);
    /* not re-executed (no /proc): run on, the log warns */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(REPLACED_ENV);
}


const char *blas_kernels_line(void) {
    static char line[512];
    int n = snprintf(line, sizeof line, "%s; kernels %s", gemm_blas_config(), gemm_blas_kernels());
    if (g_replaced[0] && n > 0 && (size_t)n < sizeof line)
        snprintf(line + n, sizeof line - (size_t)n,
                 " (OpenBLAS did not recognise this CPU and chose its %s kernels, which use no "
                 "AVX2: megadlm restarted itself with OPENBLAS_CORETYPE=%s; set "
                 "OPENBLAS_CORETYPE to choose)", g_replaced, gemm_blas_kernels());
    return line;
}
