/* The compute limit of this machine, measured (never taken from a datasheet): each thread of the
 * OpenMP team runs independent chains of one multiply-add instruction on registers only (no
 * memory traffic), and the team's rate is the sum over the threads, timed together:
 *   fp32   VFMADD231PS on 512-bit registers where the CPU has AVX-512F (on 256-bit ones
 *          otherwise): 2 x 16 (or 8) FLOP an instruction;
 *   bf16   VDPBF16PS (AVX512_BF16): 32 pairs of bf16 products summed into 16 fp32 lanes,
 *          2 x 32 FLOP an instruction;
 *   AMX    TDPBF16PS (AMX-BF16): a 16 x 32 bf16 tile times a 32 x 16 one into a 16 x 16 fp32
 *          tile, 2 x 16 x 16 x 32 FLOP an instruction, four accumulating tiles in flight. Linux
 *          hands out the tiles' state only on request (arch_prctl ARCH_REQ_XCOMP_PERM), made here.
 * A peak that cannot be measured here (no such instructions, or the OS refused the tiles) is
 * reported as 0 with the reason. The instructions are compiled for their own functions only
 * (target attributes) and run only after the CPU said it has them. */
#ifndef MEGADLM_BENCH_COMPUTE_PEAK_H
#define MEGADLM_BENCH_COMPUTE_PEAK_H

#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench_util.h"

#define PEAK_CHAINS 12

typedef struct {
    double gflops;   /* the team's rate, 0 where not measured */
    char why[96];    /* what ran, or why nothing did */
} peak_result;

/* CPUID leaf 7 sub-leaf `sub`, register `reg` (0 eax, 1 ebx, 2 ecx, 3 edx), bit `bit` */
static inline int peak_cpuid7(unsigned sub, int reg, int bit) {
    unsigned r[4] = {0, 0, 0, 0};
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, sub, r[0], r[1], r[2], r[3]);
    return (r[reg] >> bit) & 1u;
}

/* The OS saves these XSAVE state components (XCR0 bits) */
static inline int peak_os_saves(uint64_t mask) {
    unsigned a, b, c, d;
    __cpuid(1, a, b, c, d);
    if (!(c & (1u << 27))) return 0; /* OSXSAVE */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((((uint64_t)hi << 32) | lo) & mask) == mask;
}

static inline int peak_has_avx512f(void) { return peak_cpuid7(0, 1, 16) && peak_os_saves(0xe6); }
static inline int peak_has_avx512bf16(void) {
    return peak_has_avx512f() && peak_cpuid7(1, 0, 5);
}

__attribute__((target("avx512f"))) static double peak_fma512(long n) {
    __m512 acc[PEAK_CHAINS];
    const __m512 x = _mm512_set1_ps(1e-7f), y = _mm512_set1_ps(0.999f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long r = 0; r < n; r++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_fmadd_ps(acc[i], y, x);
    float s = 0.0f;
    for (int i = 0; i < PEAK_CHAINS; i++) s += _mm512_reduce_add_ps(acc[i]);
    return s;
}

__attribute__((target("avx2,fma"))) static double peak_fma256(long n) {
    __m256 acc[PEAK_CHAINS];
    const __m256 x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(0.999f);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long r = 0; r < n; r++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm256_fmadd_ps(acc[i], y, x);
    float lanes[8], s = 0.0f;
    for (int i = 0; i < PEAK_CHAINS; i++) {
        _mm256_storeu_ps(lanes, acc[i]);
        for (int j = 0; j < 8; j++) s += lanes[j];
    }
    return s;
}

__attribute__((target("avx512f,avx512bf16"))) static double peak_dpbf16(long n) {
    __m512 acc[PEAK_CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3400);
    for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long r = 0; r < n; r++)
        for (int i = 0; i < PEAK_CHAINS; i++) acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
    float s = 0.0f;
    for (int i = 0; i < PEAK_CHAINS; i++) s += _mm512_reduce_add_ps(acc[i]);
    return s;
}

/* ---- AMX */
#define PEAK_ARCH_REQ_XCOMP_PERM 0x1023
#define PEAK_XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} peak_tile_config;

/* AMX-TILE and AMX-BF16 in CPUID, tile state in XCR0 (bits 17, 18), and Linux's permission */
static inline int peak_amx_ready(char *why, size_t len) {
    if (!peak_cpuid7(0, 3, 24) || !peak_cpuid7(0, 3, 22)) {
        snprintf(why, len, "no AMX-BF16 on this CPU");
        return 0;
    }
    if (!peak_os_saves((uint64_t)3 << 17)) {
        snprintf(why, len, "the OS does not enable the AMX tile state");
        return 0;
    }
    if (syscall(SYS_arch_prctl, PEAK_ARCH_REQ_XCOMP_PERM, PEAK_XFEATURE_XTILEDATA) != 0) {
        snprintf(why, len, "Linux refused the AMX tile state (arch_prctl)");
        return 0;
    }
    return 1;
}

__attribute__((target("amx-tile,amx-bf16"))) static double peak_tdpbf16(long n) {
    peak_tile_config cfg = {0};
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    static _Thread_local uint16_t tile[16 * 32];
    static _Thread_local float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++) tile[i] = 0x3400; /* bf16 2^-23: sums stay finite */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, tile, 64);
    _tile_loadd(5, tile, 64);
    _tile_loadd(6, tile, 64);
    _tile_loadd(7, tile, 64);
    for (long r = 0; r < n; r++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0];
}

/* The team runs kernel(n) at once; n doubles until a run takes `seconds`; the team's FLOP per
 * second for flop_per_iter FLOP an iteration on each thread. */
static inline double peak_team_rate(double (*kernel)(long), double flop_per_iter,
                                    double seconds) {
    volatile double sink = 0.0;
    for (long n = 1 << 14;; n *= 2) {
        double t0 = bench_now(), s = 0.0;
#pragma omp parallel reduction(+ : s)
        s += kernel(n);
        const double dt = bench_now() - t0;
        sink += s;
        if (dt >= seconds || n > (1L << 40))
            return omp_get_max_threads() * (double)n * flop_per_iter / dt / 1e9;
    }
    (void)sink;
}

static inline peak_result peak_fp32(double seconds) {
    peak_result r;
    if (peak_has_avx512f()) {
        r.gflops = peak_team_rate(peak_fma512, PEAK_CHAINS * 32.0, seconds);
        snprintf(r.why, sizeof r.why, "VFMADD231PS zmm");
    } else {
        r.gflops = peak_team_rate(peak_fma256, PEAK_CHAINS * 16.0, seconds);
        snprintf(r.why, sizeof r.why, "VFMADD231PS ymm");
    }
    return r;
}

static inline peak_result peak_bf16_avx512(double seconds) {
    peak_result r = {0.0, "no AVX512_BF16 on this CPU"};
    if (!peak_has_avx512bf16()) return r;
    r.gflops = peak_team_rate(peak_dpbf16, PEAK_CHAINS * 64.0, seconds);
    snprintf(r.why, sizeof r.why, "VDPBF16PS zmm");
    return r;
}

static inline peak_result peak_bf16_amx(double seconds) {
    peak_result r = {0.0, ""};
    if (!peak_amx_ready(r.why, sizeof r.why)) return r;
    int granted = 1;
#pragma omp parallel reduction(& : granted)
    { /* every thread of the team asks (the permission is per process: this only checks) */
        granted &= syscall(SYS_arch_prctl, PEAK_ARCH_REQ_XCOMP_PERM,
                           PEAK_XFEATURE_XTILEDATA) == 0;
    }
    if (!granted) {
        snprintf(r.why, sizeof r.why, "Linux refused the AMX tile state to a thread");
        return r;
    }
    r.gflops = peak_team_rate(peak_tdpbf16, 4 * 2.0 * 16 * 16 * 32, seconds);
    snprintf(r.why, sizeof r.why, "TDPBF16PS, 4 tiles in flight");
    return r;
}

#endif
