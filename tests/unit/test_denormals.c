/* Denormals flushed in every thread that computes (core/util/denormals.h), set up as main()
 * sets it up: the main thread, OpenMP teams of any size (workers that existed and workers made
 * later), OpenBLAS's threads inside a GEMM and the bf16 GEMM. Each check computes with
 * denormal operands and looks at the result, so it fails on any CPU or library where a thread
 * that computes keeps denormals; MEGADLM_DENORMALS=keep is checked to keep them (the checks
 * can fail). */
#include <float.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/util/denormals.h"
#include "test_util.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* 1 when this thread's arithmetic flushes: a denormal operand reads as 0 (DAZ) and a result
 * below FLT_MIN becomes 0 (FTZ). volatile: computed at run time, under this thread's bits. */
static int thread_arithmetic_flushes(void) {
    volatile float denormal = from_bits(0x00000400u); /* 2^-139 */
    volatile float one = 1.0f, half = 0.5f, min = FLT_MIN;
    const float in = denormal * one; /* DAZ: 0 */
    const float out = min * half;    /* FTZ: 0 (else 2^-127, denormal) */
    return in == 0.0f && out == 0.0f;
}

static int thread_arithmetic_keeps(void) {
    volatile float denormal = from_bits(0x00000400u);
    volatile float one = 1.0f, half = 0.5f, min = FLT_MIN;
    return denormal * one != 0.0f && min * half != 0.0f;
}

/* Threads of a team of n whose arithmetic flushes (keep = 0) or keeps (keep = 1). */
static int team_count(int n, int keep) {
    int count = 0;
#pragma omp parallel num_threads(n) reduction(+ : count)
    count += keep ? thread_arithmetic_keeps() : thread_arithmetic_flushes();
    return count;
}

static void check_env(void) {
    denormals_mode m = DENORMALS_KEEP;
    char err[256];
    unsetenv(DENORMALS_ENV);
    CHECK(denormals_mode_from_env(&m, err, sizeof err) == 0 && m == DENORMALS_FLUSH);
    setenv(DENORMALS_ENV, "keep", 1);
    CHECK(denormals_mode_from_env(&m, err, sizeof err) == 0 && m == DENORMALS_KEEP);
    setenv(DENORMALS_ENV, "flush", 1);
    CHECK(denormals_mode_from_env(&m, err, sizeof err) == 0 && m == DENORMALS_FLUSH);
    const char *bad[] = {"", "FLUSH", "off", "keep "};
    for (int i = 0; i < 4; i++) {
        setenv(DENORMALS_ENV, bad[i], 1);
        err[0] = 0;
        CHECK(denormals_mode_from_env(&m, err, sizeof err) == -1);
        CHECK(strstr(err, DENORMALS_ENV) != NULL && strstr(err, "flush") && strstr(err, "keep"));
    }
    unsetenv(DENORMALS_ENV);
}

/* C = A B with every A entry denormal and B all ones: 0 everywhere under DAZ, K denormals
 * summed (nonzero) otherwise. Large enough that OpenBLAS splits it over its threads, so a
 * thread of its own that kept denormals leaves nonzero rows. Returns the nonzero entries. */
#define GN 384
static size_t sgemm_nonzero(void) {
    float *A = malloc(sizeof(float) * GN * GN), *B = malloc(sizeof(float) * GN * GN);
    float *C = malloc(sizeof(float) * GN * GN);
    for (size_t i = 0; i < (size_t)GN * GN; i++) {
        A[i] = from_bits(0x00000400u + (uint32_t)(i % 7));
        B[i] = 1.0f;
        C[i] = 1.0f;
    }
    gemm((gemm_dims){GN, GN, GN}, 1.0f, gemm_n(A, GN), gemm_n(B, GN), 0.0f, gemm_o(C, GN));
    size_t nz = 0;
    for (size_t i = 0; i < (size_t)GN * GN; i++)
        nz += C[i] != 0.0f;
    free(A), free(B), free(C);
    return nz;
}

/* The same through gemm_bf16 (oneDNN or the fallback: whichever this machine runs) */
static size_t bf16_gemm_nonzero(void) {
    bf16 *A = malloc(sizeof(bf16) * GN * GN), *B = malloc(sizeof(bf16) * GN * GN);
    float *C = malloc(sizeof(float) * GN * GN);
    for (size_t i = 0; i < (size_t)GN * GN; i++) {
        A[i] = (bf16)(0x0004u + (uint16_t)(i % 7)); /* denormal bf16: exponent bits 0 */
        B[i] = (bf16)0x3F80u;                       /* 1.0 */
        C[i] = 1.0f;
    }
    gemm_bf16((gemm_dims){GN, GN, GN}, 1.0f, (gemm_in_bf16){A, GN, 0},
              (gemm_in_bf16){B, GN, 0}, 0.0f, gemm_o(C, GN));
    size_t nz = 0;
    for (size_t i = 0; i < (size_t)GN * GN; i++)
        nz += C[i] != 0.0f;
    free(A), free(B), free(C);
    return nz;
}

int main(void) {
    check_env();
    /* a process starts with gradual underflow; a pool of 4 workers exists before the setup
     * (as if a library had run a parallel region first): the setup must reach them too */
    CHECK(team_count(4, 1) == 4);
    /* as main(): the calling thread and a team of the current size */
    denormals_apply_team(DENORMALS_FLUSH, 4);
    CHECK(strcmp(denormals_mode_name(), "flush") == 0);
    CHECK(denormals_thread_flushes() == 1);
    CHECK(thread_arithmetic_flushes() == 1);
    /* teams larger than the one set up: the extra workers are made now and copy the bits */
    for (int n = 1; n <= 8; n++) {
        CHECK(team_count(n, 0) == n);
        CHECK(denormals_team_flushing(n) == n);
    }
    gemm_set_threads(4); /* OpenBLAS computes on threads of its own team */
    CHECK(sgemm_nonzero() == 0);
    char err[256];
    if (gemm_bf16_init(err, sizeof err) == 0) CHECK(bf16_gemm_nonzero() == 0);
    else fprintf(stderr, "bf16 GEMM not available: %s\n", err);

    /* keep: every thread back to gradual underflow, and the same checks see denormals */
    denormals_apply_team(DENORMALS_KEEP, 8);
    CHECK(strcmp(denormals_mode_name(), "keep") == 0);
    CHECK(denormals_team_flushing(8) == 0);
    CHECK(team_count(8, 1) == 8);
    CHECK(sgemm_nonzero() == (size_t)GN * GN);
    TEST_DONE();
}
