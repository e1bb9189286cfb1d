/* The one place that calls BLAS (and oneDNN). Row-major throughout. Callers that call gemm()
 * or gemm_bf16() from every thread of their own OpenMP team (attention) bracket the region with
 * gemm_serial_begin/end, see gemm.h. */
#include "core/kernels/gemm.h"
#include "core/kernels/onednn_matmul.h"

#include <cblas.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MEGADLM_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include "core/tensor/memory.h"
#include "core/util/die.h"
#include "core/util/error.h"

/* C = beta * C (BLAS's result for K = 0; beta = 0 gives zeros whatever C held) */
static void scale_c(gemm_dims d, float beta, gemm_out C) {
    for (int i = 0; i < d.M; i++)
        for (int j = 0; j < d.N; j++) {
            float *c = C.p + (size_t)i * C.ld + j;
            *c = beta == 0.0f ? 0.0f : beta * *c;
        }
}

/* C[M,N] = alpha * op(A) @ op(B) + beta * C;  op(A) is [M,K], op(B) is [K,N]. */
void gemm(gemm_dims d, float alpha, gemm_in A, gemm_in B, float beta, gemm_out C) {
    if (d.M <= 0 || d.N <= 0)
        return;
    if (d.K <= 0) { /* BLAS would scale C by beta; do the same without touching A, B */
        scale_c(d, beta, C);
        return;
    }
    cblas_sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                B.trans ? CblasTrans : CblasNoTrans, d.M, d.N, d.K, alpha, A.p, A.ld, B.p, B.ld,
                beta, C.p, C.ld);
}

int gemm_serial_begin(void) {
    const int saved = openblas_get_num_threads();
    if (saved != 1) {
        /* OpenBLAS's OpenMP build sets OpenMP's thread count too (omp_set_num_threads): put
         * that back, or the region this brackets would get a team of one */
        const int team = omp_get_max_threads();
        openblas_set_num_threads(1);
        omp_set_num_threads(team);
    }
    return saved;
}

void gemm_serial_end(int saved_threads) {
    if (saved_threads != 1)
        openblas_set_num_threads(saved_threads);
}

void gemm_set_threads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }
const char *gemm_blas_config(void) { return openblas_get_config(); }
const char *gemm_blas_kernels(void) { return openblas_get_corename(); }

/* ======================================================================== bf16 operands */

/* The fallback's workspace: WS_FLOATS floats (32 MiB), allocated once. A call from serial code
 * uses all of it; a call from inside a parallel region uses its thread's 1/team-size slice.
 * Each operand is widened once per call where the workspace holds it (op(A) [mb, kb] and op(B)
 * [kb, nb] tiles, (mb + nb) * kb floats), and each product runs over the whole K where that
 * leaves tiles of TILE_MN rows or columns (all of GPT-2 124M's layer products do): few, large
 * sgemm calls, C written once, few conversions (each a parallel region when large). Products
 * too large for that go in K steps of at least TILE_K, sized from the whole workspace (not the
 * thread's slice), so that the order of the sums does not depend on the team size (unless the
 * slice holds less than two rows of a K step: teams of hundreds of threads). */
#define WS_FLOATS ((size_t)8 << 20)
#define TILE_K 256
#define TILE_MN 2048

static struct {
    int ready;            /* gemm_bf16_init ran */
    gemm_bf16_path path;  /* FALLBACK or ONEDNN */
    char why[128];        /* how it was chosen */
    char line[256];       /* gemm_bf16_describe */
    float *ws;            /* WS_FLOATS floats, or NULL until the fallback is first chosen */
    size_t limit;         /* floats a call may use (tests make tiles small); 0: WS_FLOATS */
} g_bf16;

#ifdef MEGADLM_HAVE_ONEDNN
/* Exported by libdnnl (extern "C", DNNL_API; its gtests and benchdnn call it) but not declared
 * in its public headers, so declared here as oneDNN defines it: row-major like dnnl_sgemm, A and
 * B bf16 (its bfloat16_t is the bit pattern in a uint16_t), C fp32. */
dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
                                    dnnl_dim_t K, float alpha, const uint16_t *A,
                                    dnnl_dim_t lda, const uint16_t *B, dnnl_dim_t ldb,
                                    float beta, float *C, dnnl_dim_t ldc);

/* oneDNN's name for the richest instruction set it may use here: what the CPU has, what the OS
 * grants (AMX needs a permission oneDNN requests itself) and DNNL_MAX_CPU_ISA allow. */
static const char *onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch ((int)isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

/* The CPU has bf16 units oneDNN uses: its ISA values are bit masks, each including the ones it
 * extends, and every ISA with AVX512_BF16 (AMX ones too) includes avx512_core_bf16's bits. */
static int onednn_has_bf16_units(void) {
    const unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    const unsigned bf16 = (unsigned)dnnl_cpu_isa_avx512_core_bf16;
    return (isa & bf16) == bf16;
}

/* oneDNN's bf16 GEMM runs on this CPU and gives 1*1 + 2*3 (it refuses CPUs without AVX-512). */
static int onednn_runs(void) {
    const uint16_t a[2] = {0x3f80, 0x4000}, b[2] = {0x3f80, 0x4040}; /* 1, 2 and 1, 3 */
    float c = -1.0f;
    return dnnl_gemm_bf16bf16f32('N', 'N', 1, 1, 2, 1.0f, a, 2, b, 1, 0.0f, &c, 1) ==
               dnnl_success && c == 7.0f;
}
#endif

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

/* n split into the fewest tiles of at most `cap`, all of nearly equal size (no thin last tile). */
static int balanced(int n, size_t cap) {
    const size_t tiles = ((size_t)n + cap - 1) / cap;
    return (int)(((size_t)n + tiles - 1) / tiles);
}

/* The K step: all of K where the plan's workspace holds op(A) and op(B) tiles of TILE_MN rows
 * and columns (or all of M, N when smaller) over the whole K, else the most it holds, at least
 * TILE_K. It depends on the shape and `plan` only (the whole workspace, or the tests' limit). */
static int plan_k(size_t plan, int M, int N, int K) {
    const size_t mn = min_sz((size_t)M, TILE_MN) + min_sz((size_t)N, TILE_MN);
    size_t kb = (size_t)K;
    if (mn * kb > plan) kb = plan / mn > TILE_K ? plan / mn : TILE_K;
    return balanced(K, min_sz(kb, (size_t)K));
}

/* The tile extents for a call with `floats` of workspace (`plan`: see plan_k). */
static void plan_tiles(size_t plan, size_t floats, int M, int N, int K, int *mb, int *nb,
                       int *kb) {
    *kb = plan_k(plan, M, N, K);
    if (floats < 2 * (size_t)*kb) *kb = (int)(floats / 2); /* a slice of a huge team */
    const size_t cap = floats / (size_t)*kb;                /* mb + nb, at least 2 */
    if ((size_t)M + (size_t)N <= cap) {
        *mb = M;
        *nb = N;
    } else if ((size_t)M <= cap / 2) {
        *mb = M;
        *nb = balanced(N, cap - (size_t)M);
    } else if ((size_t)N <= cap / 2) {
        *nb = N;
        *mb = balanced(M, cap - (size_t)N);
    } else {
        *mb = balanced(M, cap / 2);
        *nb = balanced(N, cap / 2);
    }
}

/* The stored block of rows [r0, r0 + rows) and columns [c0, c0 + cols) of X, to fp32 (dense). */
static void tile_to_f32(half_kind kind, float *dst, gemm_in_half X, int r0, int c0, int rows,
                        int cols) {
    half_to_f32_2d(kind, dst, (size_t)cols, X.p + (size_t)r0 * X.ld + c0, (size_t)X.ld,
                   (size_t)rows, (size_t)cols);
}

/* op(A)'s tile rows [m0, m0 + m), K [k0, k0 + k), to fp32 at `at` (stored [m, k] or [k, m]). */
static void widen_a(half_kind kind, float *at, gemm_in_half A, int m0, int k0, int m, int k) {
    if (A.trans)
        tile_to_f32(kind, at, A, k0, m0, k, m);
    else
        tile_to_f32(kind, at, A, m0, k0, m, k);
}

/* op(B)'s tile K [k0, k0 + k), columns [n0, n0 + n), to fp32 (stored [k, n] or [n, k]). */
static void widen_b(half_kind kind, float *bt, gemm_in_half B, int k0, int n0, int k, int n) {
    if (B.trans)
        tile_to_f32(kind, bt, B, n0, k0, n, k);
    else
        tile_to_f32(kind, bt, B, k0, n0, k, n);
}

/* The fallback: operands of format `kind` widened tile by tile, sgemm per tile. An op(A) tile
 * that spans all of M is widened once per K step, not once per op(B) tile. */
static void gemm_tiles(half_kind kind, gemm_dims d, float alpha, gemm_in_half A, gemm_in_half B,
                       float beta, gemm_out C) {
    float *ws = g_bf16.ws;
    size_t floats = WS_FLOATS;
    if (omp_in_parallel()) { /* this thread's slice */
        const int team = omp_get_num_threads(), me = omp_get_thread_num();
        floats = WS_FLOATS / (size_t)team;
        ws += (size_t)me * floats;
    }
    const size_t plan = g_bf16.limit ? g_bf16.limit : WS_FLOATS;
    if (g_bf16.limit && g_bf16.limit < floats) floats = g_bf16.limit;
    int mb, nb, kb;
    plan_tiles(plan, floats, d.M, d.N, d.K, &mb, &nb, &kb);
    float *at = ws, *bt = ws + (size_t)mb * kb;
    for (int k0 = 0; k0 < d.K; k0 += kb) {
        const int k = d.K - k0 < kb ? d.K - k0 : kb;
        if (mb == d.M) widen_a(kind, at, A, 0, k0, d.M, k);
        for (int n0 = 0; n0 < d.N; n0 += nb) {
            const int n = d.N - n0 < nb ? d.N - n0 : nb;
            widen_b(kind, bt, B, k0, n0, k, n);
            for (int m0 = 0; m0 < d.M; m0 += mb) {
                const int m = d.M - m0 < mb ? d.M - m0 : mb;
                if (mb != d.M) widen_a(kind, at, A, m0, k0, m, k);
                cblas_sgemm(CblasRowMajor, A.trans ? CblasTrans : CblasNoTrans,
                            B.trans ? CblasTrans : CblasNoTrans, m, n, k, alpha, at,
                            A.trans ? m : k, bt, B.trans ? k : n, k0 == 0 ? beta : 1.0f,
                            C.p + (size_t)m0 * C.ld + n0, C.ld);
            }
        }
    }
}

/* The tiles' workspace, allocated once (the fallback, and every fp16 product). */
static void tiles_workspace(void) {
    if (!g_bf16.ws) g_bf16.ws = mem_alloc_floats(MEM_WORKSPACE, WS_FLOATS, "16-bit GEMM tiles");
}

#ifdef MEGADLM_HAVE_ONEDNN
/* oneDNN's matmul primitive has a JIT implementation for a 64 x 64 x 64 product here and gives
 * its result (all ones: 64 everywhere); impl: the implementation's name. */
static int matmul_runs(char *impl, size_t len) {
    enum { P = 64 };
    static bf16 ones[P * P];
    static float c[P * P];
    char err[128];
    snprintf(impl, len, "none");
    if (onednn_matmul_init(err, sizeof err)) return 0;
    for (int i = 0; i < P * P; i++) ones[i] = 0x3f80;
    const int r = onednn_matmul_run((gemm_dims){P, P, P}, 1.0f, gemm_n_bf16(ones, P),
                                    gemm_t_bf16(ones, P), 0.0f, gemm_o(c, P));
    snprintf(impl, len, "%s", onednn_matmul_impl());
    if (r != 0) return 0;
    for (int i = 0; i < P * P; i++)
        if (c[i] != (float)P) return 0;
    return 1;
}

/* The oneDNN path `want` asks for (AUTO: the BLAS-like call where it runs) into *path (FALLBACK when
 * none), how it was chosen into why, oneDNN's line into g_bf16.line. -1: a forced path that
 * cannot run here. */
static int onednn_choose(gemm_bf16_path want, const char *source, gemm_bf16_path *path,
                         char *why, size_t whylen, char *err, size_t errlen) {
    const int runs = onednn_runs(), units = onednn_has_bf16_units();
    const char *isa = onednn_isa_name(dnnl_get_effective_cpu_isa());
    const int amx = strstr(isa, "amx") != NULL;
    char impl[64] = "none";
    const int mm = want == GEMM_BF16_ONEDNN_MATMUL && matmul_runs(impl, sizeof impl);
    *path = GEMM_BF16_FALLBACK;
    if ((want == GEMM_BF16_ONEDNN && !runs) || (want == GEMM_BF16_ONEDNN_MATMUL && !mm)) {
        err_set(err, errlen, "%s: oneDNN's bf16 %s does not run on this CPU (oneDNN's ISA here: "
                "%s%s%s)", source, want == GEMM_BF16_ONEDNN ? "GEMM" : "matmul primitive", isa,
                want == GEMM_BF16_ONEDNN ? "" : "; implementation: ",
                want == GEMM_BF16_ONEDNN ? "" : impl);
        return -1;
    }
    if (want == GEMM_BF16_ONEDNN || want == GEMM_BF16_ONEDNN_MATMUL) {
        *path = want;
        snprintf(why, whylen, "%s%s", source, units ? "" : "; no bf16 units: oneDNN emulates them");
    } else if (want == GEMM_BF16_FALLBACK) {
        snprintf(why, whylen, "%s", source);
    } else if (units && runs) {
        /* the BLAS-like call: faster than the matmul primitive on AVX512_BF16, and the primitive
         * measured no faster where oneDNN has AMX (bench/README.md) */
        *path = GEMM_BF16_ONEDNN;
        snprintf(why, whylen, "auto: the CPU has AVX512_BF16%s", amx ? " and AMX" : "");
    } else {
        snprintf(why, whylen, "auto: %s",
                 units ? "oneDNN's bf16 GEMM does not run here" : "no AVX512_BF16 or AMX");
    }
    const dnnl_version_t *v = dnnl_version();
    if (*path == GEMM_BF16_ONEDNN)
        snprintf(g_bf16.line, sizeof g_bf16.line,
                 "bf16 GEMM: oneDNN %d.%d.%d dnnl_gemm_bf16bf16f32 (CPU ISA %s; %s)", v->major,
                 v->minor, v->patch, isa, why);
    if (*path == GEMM_BF16_ONEDNN_MATMUL)
        snprintf(g_bf16.line, sizeof g_bf16.line,
                 "bf16 GEMM: oneDNN %d.%d.%d matmul primitive, cached per shape (%s; CPU ISA %s; "
                 "%s)", v->major, v->minor, v->patch, impl, isa, why);
    return 0;
}
#endif

/* Sets g_bf16.path, .why and .line; allocates the workspace for the fallback. */
static int bf16_choose(gemm_bf16_path want, const char *source, char *err, size_t errlen) {
    gemm_bf16_path path = GEMM_BF16_FALLBACK;
    char why[sizeof g_bf16.why];
#ifdef MEGADLM_HAVE_ONEDNN
    if (onednn_choose(want, source, &path, why, sizeof why, err, errlen)) return -1;
#else
    if (want == GEMM_BF16_ONEDNN || want == GEMM_BF16_ONEDNN_MATMUL) {
        err_set(err, errlen, "%s: megadlm was built without oneDNN (libdnnl-dev)", source);
        return -1;
    }
    snprintf(why, sizeof why, "%s", want == GEMM_BF16_FALLBACK ? source : "built without oneDNN");
#endif
    if (path == GEMM_BF16_FALLBACK) {
        tiles_workspace();
        snprintf(g_bf16.line, sizeof g_bf16.line,
                 "bf16 GEMM: fp32 sgemm on converted tiles (%s)", why);
    }
    g_bf16.path = path;
    snprintf(g_bf16.why, sizeof g_bf16.why, "%s", why);
    g_bf16.ready = 1;
    return 0;
}

int gemm_bf16_init(char *err, size_t errlen) {
    if (g_bf16.ready) return 0;
    const char *env = getenv("MEGADLM_BF16_GEMM");
    gemm_bf16_path want;
    if (!env || !env[0] || strcmp(env, "auto") == 0)
        want = GEMM_BF16_AUTO;
    else if (strcmp(env, "fallback") == 0)
        want = GEMM_BF16_FALLBACK;
    else if (strcmp(env, "onednn") == 0)
        want = GEMM_BF16_ONEDNN;
    else if (strcmp(env, "onednn-matmul") == 0)
        want = GEMM_BF16_ONEDNN_MATMUL;
    else {
        err_set(err, errlen,
                "MEGADLM_BF16_GEMM=%s: expected auto, onednn-matmul, onednn or fallback", env);
        return -1;
    }
    char source[64];
    snprintf(source, sizeof source, "MEGADLM_BF16_GEMM=%s", env ? env : "");
    return bf16_choose(want, source, err, errlen);
}

int gemm_bf16_use(gemm_bf16_path path, char *err, size_t errlen) {
    return bf16_choose(path,
                       path == GEMM_BF16_ONEDNN          ? "forced: onednn"
                       : path == GEMM_BF16_ONEDNN_MATMUL ? "forced: onednn-matmul"
                       : path == GEMM_BF16_FALLBACK      ? "forced: fallback"
                                                         : "auto",
                       err, errlen);
}

static void bf16_ready(void) {
    if (g_bf16.ready) return;
    char err[256];
    if (omp_in_parallel())
        die(1, "gemm_bf16 called first inside a parallel region: call gemm_bf16_init() before");
    if (gemm_bf16_init(err, sizeof err)) die(1, "%s", err);
}

gemm_bf16_path gemm_bf16_current(void) {
    bf16_ready();
    return g_bf16.path;
}

const char *gemm_bf16_describe(void) {
    bf16_ready();
    return g_bf16.line;
}

void gemm_bf16_limit_workspace(size_t floats) {
    g_bf16.limit = floats < 2 * TILE_K ? (floats ? 2 * TILE_K : 0) : floats;
}

int gemm_bf16_onednn_built(void) {
#ifdef MEGADLM_HAVE_ONEDNN
    return 1;
#else
    return 0;
#endif
}

size_t gemm_bf16_workspace_bytes(void) { return g_bf16.ws ? WS_FLOATS * sizeof(float) : 0; }

void gemm_bf16(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta,
               gemm_out C) {
    if (d.M <= 0 || d.N <= 0)
        return;
    if (d.K <= 0) { /* as gemm(): C = beta * C, A and B not read */
        scale_c(d, beta, C);
        return;
    }
    bf16_ready();
    /* the primitives' cache is not locked: calls from a parallel region take the BLAS-like
     * call (both multiply the same bf16 values in fp32) */
    if (g_bf16.path == GEMM_BF16_ONEDNN_MATMUL && !omp_in_parallel() &&
        onednn_matmul_run(d, alpha, A, B, beta, C) == 0)
        return;
#ifdef MEGADLM_HAVE_ONEDNN
    if (g_bf16.path == GEMM_BF16_ONEDNN || g_bf16.path == GEMM_BF16_ONEDNN_MATMUL) {
        const dnnl_status_t st = dnnl_gemm_bf16bf16f32(
            A.trans ? 'T' : 'N', B.trans ? 'T' : 'N', d.M, d.N, d.K, alpha, A.p, A.ld, B.p,
            B.ld, beta, C.p, C.ld);
        if (st != dnnl_success)
            die(1, "oneDNN's bf16 GEMM failed (status %d) on M %d N %d K %d", (int)st, d.M, d.N,
                d.K);
        return;
    }
#endif
    gemm_tiles(HALF_BF16, d, alpha, A, B, beta, C);
}

/* ======================================================================== fp16 operands */

int gemm_half_init(half_kind kind, char *err, size_t errlen) {
    if (kind == HALF_BF16) return gemm_bf16_init(err, errlen);
    if (kind != HALF_FP16) {
        err_set(err, errlen, "gemm_half_init: no 16-bit format");
        return -1;
    }
    tiles_workspace();
    return 0;
}

const char *gemm_half_describe(half_kind kind) {
    if (kind == HALF_BF16) return gemm_bf16_describe();
    return "fp16 GEMM: fp32 sgemm on converted tiles (oneDNN's GEMM API takes no fp16 operands)";
}

void gemm_half(half_kind kind, gemm_dims d, float alpha, gemm_in_half A, gemm_in_half B,
               float beta, gemm_out C) {
    if (kind == HALF_BF16) {
        gemm_bf16(d, alpha, A, B, beta, C);
        return;
    }
    if (kind != HALF_FP16) die(1, "internal error: gemm_half without a 16-bit format");
    if (d.M <= 0 || d.N <= 0) return;
    if (d.K <= 0) {
        scale_c(d, beta, C);
        return;
    }
    if (!g_bf16.ws) {
        if (omp_in_parallel())
            die(1, "fp16 GEMM called first inside a parallel region: call gemm_half_init() before");
        tiles_workspace();
    }
    gemm_tiles(HALF_FP16, d, alpha, A, B, beta, C);
}
