/* bf16 / fp16 conversions (core/kernels/bf16.h), gemm_bf16 and gemm_half's fp16 operands
 * (core/kernels/gemm.h).
 *
 * Conversions, without PyTorch (tests/scripts/test_bf16_torch.sh compares the bits with
 * PyTorch's): a table of values worked out by hand, and every narrowing result against an
 * oracle that rounds by a different method (the nearest of the two neighbouring representable
 * values, distances in double, ties to the even one) on every fp32 upper half with the lower
 * halves that decide the rounding; widening then narrowing gives back every bit pattern.
 *
 * gemm_bf16, on each implementation that runs here (the fallback always; oneDNN where it is
 * built in and runs on the CPU, otherwise reported as skipped): against a double-precision
 * product of the same bf16 values, on shapes with M, N or K = 1, odd sizes, K up to 4096, all
 * four transpose combinations, row strides past the columns (the padding holds NaNs, which
 * must not be read, and C's padding must stay untouched), beta 0 (C full of NaNs, not read),
 * 1 and 0.5, alpha 1 and -0.75, K = 0; the fallback also with a workspace small enough that its
 * tiles split M, N and K; calls from every thread of a parallel region. And the choice of the
 * implementation: MEGADLM_BF16_GEMM, and auto against the CPU's flags in /proc/cpuinfo.
 * gemm_half with fp16 operands: the same cases and bound (fp16 x fp16 products are exact in fp32
 * too), its operands fp16 values the bf16 ones are not (a bf16 reading of the bits fails).
 * half_round_f32 / half_from_f32 / half_to_f32 dispatch to the format's own conversions.
 *
 * Error bound: both implementations multiply bf16 values exactly in fp32 (8-bit significands)
 * and sum in fp32, then apply alpha and add beta * C. Whatever the order of the sums, the error
 * of an element is at most (K + 2) u S, u = 2^-24, S = |alpha| sum_k |a_ik b_kj| + |beta c_ij|
 * (Higham, "Accuracy and Stability of Numerical Algorithms", 3.1): checked for every element.
 * Rounding errors of random signs grow like sqrt(K) instead: the largest err / S over a call
 * must also stay under 4 u sqrt(K + 2) (1.5e-5 at K = 4096; measured: under 0.9 u sqrt(K + 2)).
 * A sum in bf16 (u = 2^-9), inputs rounded again, or one wrong element by a transposition or a
 * stride fail both. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/kernels/bf16.h"
#include "core/kernels/gemm.h"
#include "core/kernels/onednn_matmul.h"
#include "test_util.h"

static uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}
static float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

/* ------------------------------------------------------------ conversions, by hand */

static void test_hand_values(void) {
    static const struct {
        uint32_t f32;
        uint16_t bf16, fp16;
    } t[] = {
        {0x00000000u, 0x0000, 0x0000}, /* +0 */
        {0x80000000u, 0x8000, 0x8000}, /* -0 keeps its sign */
        {0x3f800000u, 0x3f80, 0x3c00}, /* 1 */
        {0xc0490fdbu, 0xc049, 0xc248}, /* -pi: bf16 drops 0x0fdb < half; fp16 1.5707963 * 2
                                          keeps 0x248 (0x490fdb >> 13 = 0x248, rest 0xfdb < 0x1000) */
        /* bf16 ties (dropped half 0x8000): to the even neighbour */
        {0x3f808000u, 0x3f80, 0x3c04}, /* 1 + 2^-8: tie, 0x3f80 is even; fp16 exact 1 + 4*2^-10 */
        {0x3f818000u, 0x3f82, 0x3c0c}, /* 1 + 3*2^-8: tie, 0x3f81 odd -> up */
        {0x3f808001u, 0x3f81, 0x3c04}, /* past the tie: up */
        {0x3f807fffu, 0x3f80, 0x3c04}, /* below the tie: down (fp16: 0x3c03 + 0x1fff/0x2000 > half: up to 0x3c04) */
        /* fp16 ties (dropped 13 bits = 0x1000) */
        {0x3f801000u, 0x3f80, 0x3c00}, /* 1 + 2^-11: tie, 0x3c00 even */
        {0x3f803000u, 0x3f80, 0x3c02}, /* 1 + 3*2^-11: tie, 0x3c01 odd -> up */
        /* largest finite values and overflow */
        {0x7f7f7fffu, 0x7f7f, 0x7c00}, /* below bf16's max + half ulp: max bf16 */
        {0x7f7f8000u, 0x7f80, 0x7c00}, /* bf16 max + half an ulp: tie, 0x7f7f odd -> inf */
        {0x7f7fffffu, 0x7f80, 0x7c00}, /* FLT_MAX -> inf in both */
        {0x477fe000u, 0x4780, 0x7bff}, /* 65504 = fp16 max (bf16: 0x477fe000 rounds up) */
        {0x477fefffu, 0x4780, 0x7bff}, /* 65519.996: under 65520, stays 65504 */
        {0x477ff000u, 0x4780, 0x7c00}, /* 65520: tie between 65504 (odd) and 65536: inf */
        {0xc7800000u, 0xc780, 0xfc00}, /* -65536 -> -inf */
        /* fp16 subnormals: units of 2^-24 */
        {0x33800000u, 0x3380, 0x0001}, /* 2^-24 */
        {0x33000000u, 0x3300, 0x0000}, /* 2^-25: tie between 0 and 1 unit: 0 (even) */
        {0x33000001u, 0x3300, 0x0001}, /* just past: 1 unit */
        {0x33c00000u, 0x33c0, 0x0002}, /* 1.5 units: tie, 1 odd -> 2 */
        {0x34200000u, 0x3420, 0x0002}, /* 2.5 units: tie, 2 even -> 2 */
        {0x387fc000u, 0x3880, 0x03ff}, /* 1023 units (bf16: 0x387fc000 rounds 0x387f.c -> 0x3880) */
        {0x387fe000u, 0x3880, 0x0400}, /* 1023.5 units: tie, 1023 odd -> 1024 = 2^-14, normal */
        {0x38800000u, 0x3880, 0x0400}, /* 2^-14 */
        /* fp32 subnormals: rounded like any value, no flush to zero */
        {0x00008000u, 0x0000, 0x0000}, /* tie, to even 0 */
        {0x00018000u, 0x0002, 0x0000}, /* tie, 1 odd -> 2 */
        {0x007fffffu, 0x0080, 0x0000}, /* largest subnormal -> FLT_MIN (0x0080) in bf16 */
        {0x80000001u, 0x8000, 0x8000}, /* -denormal_min -> -0 */
        /* infinities and NaNs: quiet, sign and top payload bits kept */
        {0x7f800000u, 0x7f80, 0x7c00},
        {0xff800000u, 0xff80, 0xfc00},
        {0x7fc00000u, 0x7fc0, 0x7e00},
        {0xffc00000u, 0xffc0, 0xfe00},
        {0x7f800001u, 0x7fc0, 0x7e00}, /* signaling, payload in the dropped bits: quiet */
        {0x7fa00000u, 0x7fe0, 0x7f00}, /* signaling, payload 0x200000 -> bf16 0x20, fp16 0x100 */
        {0xffc12345u, 0xffc1, 0xfe09}, /* payload 0x412345: bf16 0x41, fp16 0x412345 >> 13 = 0x209 */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const float x = u2f(t[i].f32);
        const uint16_t b = bf16_from_float(x), h = fp16_from_float(x);
        if (b != t[i].bf16 || h != t[i].fp16) {
            fprintf(stderr, "f32 %#010x: bf16 %#06x (expected %#06x), fp16 %#06x (expected %#06x)\n",
                    t[i].f32, b, t[i].bf16, h, t[i].fp16);
            test_failures++;
        }
        test_checks++;
    }
    /* widening, by hand */
    CHECK(f2u(bf16_to_float(0x3f80)) == 0x3f800000u);
    CHECK(f2u(bf16_to_float(0x8001)) == 0x80010000u);   /* a bf16 subnormal */
    CHECK(f2u(bf16_to_float(0x7f81)) == 0x7f810000u);   /* signaling NaN kept as it is */
    CHECK(f2u(fp16_to_float(0x3c00)) == 0x3f800000u);
    CHECK(f2u(fp16_to_float(0x0001)) == 0x33800000u);   /* 2^-24 */
    CHECK(f2u(fp16_to_float(0x83ff)) == 0xb87fc000u);   /* -1023 * 2^-24 */
    CHECK(f2u(fp16_to_float(0x0400)) == 0x38800000u);   /* 2^-14 */
    CHECK(f2u(fp16_to_float(0x7bff)) == 0x477fe000u);   /* 65504 */
    CHECK(f2u(fp16_to_float(0xfc00)) == 0xff800000u);   /* -inf */
    CHECK(f2u(fp16_to_float(0x7c01)) == 0x7f802000u);   /* signaling NaN, payload kept */
    CHECK(f2u(fp16_to_float(0x8000)) == 0x80000000u);
}

/* ------------------------------------------------------------ conversions, by an oracle */

static int is_nan32(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* The nearest of the sorted finite values vals[0..n) (all >= 0) to a >= 0, ties to the even
 * index (the even bit pattern: patterns and values increase together); `inf_from` and above
 * (the overflow threshold: max + half an ulp) give n, meaning infinity. */
static size_t nearest(const double *vals, size_t n, double a, double inf_from) {
    if (a >= inf_from) return n;
    size_t lo = 0, hi = n - 1; /* vals[lo] <= a < vals[hi] or a at an end */
    if (a >= vals[hi]) return hi;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (vals[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    const double dl = a - vals[lo], dh = vals[hi] - a;
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

static void test_oracle(void) {
    /* every finite non-negative bf16 and fp16 value, in order of their bit patterns */
    static double bvals[0x7f80], hvals[0x7c00];
    for (uint32_t i = 0; i < 0x7f80; i++) bvals[i] = (double)u2f(i << 16);
    for (uint32_t i = 0; i < 0x7c00; i++) {
        const uint32_t e = i >> 10, m = i & 0x3ff;
        hvals[i] = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp((double)m, -24);
    }
    const double binf = (double)u2f(0x7f7f0000u) + ldexp(1.0, 127 - 8); /* max + half ulp */
    const double hinf = 65520.0;
    static const uint16_t lows[] = {0x0000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1000, 0x3000,
                                    0x0fff, 0x2000, 0x4000, 0xc000, 0x6000, 0x1001, 0x5a5a};
    const size_t nl = sizeof lows / sizeof lows[0], n = nl << 16;
    float *x = malloc(n * sizeof(float));
    bf16 *b = malloc(n * sizeof(bf16));
    fp16 *h = malloc(n * sizeof(fp16));
    for (size_t k = 0; k < nl; k++)
        for (uint32_t up = 0; up < 65536; up++) x[(k << 16) + up] = u2f(up << 16 | lows[k]);
    bf16_from_f32(b, x, n); /* large: the multi-threaded path */
    fp16_from_f32(h, x, n);
    size_t bad_b = 0, bad_h = 0;
    for (size_t i = 0; i < n; i++) {
        const uint32_t u = f2u(x[i]), sign = u >> 31;
        uint16_t want_b, want_h;
        if (is_nan32(u)) {
            want_b = (uint16_t)((u >> 16) | 0x40);
            want_h = (uint16_t)((sign << 15) | 0x7e00 | ((u >> 13) & 0x3ff));
        } else {
            const double a = fabs((double)x[i]);
            const size_t ib = nearest(bvals, 0x7f80, a, binf);
            const size_t ih = nearest(hvals, 0x7c00, a, hinf);
            want_b = (uint16_t)((sign << 15) | (ib == 0x7f80 ? 0x7f80 : ib));
            want_h = (uint16_t)((sign << 15) | (ih == 0x7c00 ? 0x7c00 : ih));
        }
        if (b[i] != want_b && bad_b++ < 5)
            fprintf(stderr, "bf16(%#010x) = %#06x, expected %#06x\n", u, b[i], want_b);
        if (h[i] != want_h && bad_h++ < 5)
            fprintf(stderr, "fp16(%#010x) = %#06x, expected %#06x\n", u, h[i], want_h);
    }
    CHECK(bad_b == 0);
    CHECK(bad_h == 0);
    printf("oracle: %zu values, %zu bf16 and %zu fp16 differ\n", n, bad_b, bad_h);
    free(x);
    free(b);
    free(h);
}

/* widening is exact and narrowing gives the pattern back, for every non-NaN pattern; NaNs
 * stay NaNs of their sign */
static void test_round_trip(void) {
    size_t bad = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        const uint16_t p = (uint16_t)i;
        const float xb = bf16_to_float(p), xh = fp16_to_float(p);
        const int bnan = (p & 0x7fff) > 0x7f80, hnan = (p & 0x7fff) > 0x7c00;
        if (!bnan && bf16_from_float(xb) != p) bad++;
        if (!hnan && fp16_from_float(xh) != p) bad++;
        if (!hnan && (double)xh != (p & 0x8000 ? -1 : 1) *
                                     ((p & 0x7c00) ? ldexp(1.0 + (p & 0x3ff) / 1024.0,
                                                           ((p >> 10) & 0x1f) - 15)
                                                   : ldexp((double)(p & 0x3ff), -24)) &&
            (p & 0x7c00) != 0x7c00)
            bad++;
        if (bnan && !(isnan(xb) && (bf16_from_float(xb) & 0x8000) == (p & 0x8000))) bad++;
        if (hnan && !(isnan(xh) && (fp16_from_float(xh) & 0x8000) == (p & 0x8000))) bad++;
    }
    CHECK(bad == 0);
    /* the array versions match the scalar ones on every pattern */
    static uint16_t p[65536];
    static float f[65536];
    for (uint32_t i = 0; i < 65536; i++) p[i] = (uint16_t)i;
    bf16_to_f32(f, p, 65536);
    for (uint32_t i = 0; i < 65536; i++) bad += f2u(f[i]) != f2u(bf16_to_float((uint16_t)i));
    fp16_to_f32(f, p, 65536);
    for (uint32_t i = 0; i < 65536; i++) bad += f2u(f[i]) != f2u(fp16_to_float((uint16_t)i));
    CHECK(bad == 0);
}

/* ------------------------------------------------------------ gemm_bf16 */

static _Thread_local uint64_t g_rng = 0x9e3779b97f4a7c15ull; /* each thread its own */
static double rnd(void) { /* uniform [0, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) / 9007199254740992.0;
}

/* The operands' format: HALF_BF16 (gemm_bf16's tests) or HALF_FP16 (gemm_half's). */
static half_kind g_fmt = HALF_BF16;

static float widen(uint16_t h) { return g_fmt == HALF_FP16 ? fp16_to_float(h) : bf16_to_float(h); }

/* A stored rows x cols matrix of g_fmt with row stride ld; padding columns hold NaN. Values:
 * random signs, magnitudes over 2^-4 .. 2^4 (fp16: with 11-bit significands), rounded. */
static bf16 *make_bf16(int rows, int cols, int ld) {
    bf16 *p = malloc(((size_t)rows * ld + 1) * sizeof(bf16));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < ld; c++) {
            float v = (float)((rnd() + 0.5) * ldexp(1.0, (int)(rnd() * 9) - 4));
            if (rnd() < 0.5) v = -v;
            const uint16_t nan = g_fmt == HALF_FP16 ? 0x7e01 : 0x7fc1;
            p[(size_t)r * ld + c] =
                c >= cols ? nan : g_fmt == HALF_FP16 ? fp16_from_float(v) : bf16_from_float(v);
        }
    return p;
}

/* The product under test: gemm_bf16 for bf16 (the implementation in use), gemm_half for fp16. */
static void product(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta,
                    gemm_out C) {
    if (g_fmt == HALF_FP16)
        gemm_half(HALF_FP16, d, alpha, A, B, beta, C);
    else
        gemm_bf16(d, alpha, A, B, beta, C);
}

typedef struct {
    double max_rel;  /* largest err / S */
    int failed;
} gemm_check;

/* Runs gemm_bf16 on one case and checks it against the double product. */
static gemm_check check_case(int M, int N, int K, int ta, int tb, int pad, float alpha,
                             float beta, int verbose) {
    const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    bf16 *A = make_bf16(ta ? K : M, ta ? M : K, lda > 0 ? lda : 1);
    bf16 *B = make_bf16(tb ? N : K, tb ? K : N, ldb > 0 ? ldb : 1);
    float *C = malloc(((size_t)M * ldc + 1) * sizeof(float));
    float *C0 = malloc(((size_t)M * ldc + 1) * sizeof(float));
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C0[i] = (i % ldc) < (size_t)N ? (beta == 0.0f ? NAN : (float)(rnd() * 2 - 1)) : -7.25f;
    memcpy(C, C0, (size_t)M * ldc * sizeof(float));
    product((gemm_dims){M, N, K}, alpha, (gemm_in_bf16){A, lda, ta}, (gemm_in_bf16){B, ldb, tb},
            beta, gemm_o(C, ldc));
    gemm_check r = {0, 0};
    const double u = ldexp(1.0, -24);
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < ldc; j++) {
            const float got = C[(size_t)i * ldc + j];
            if (j >= N) { /* padding: untouched */
                if (f2u(got) != f2u(C0[(size_t)i * ldc + j])) r.failed++;
                continue;
            }
            double sum = 0, sabs = 0;
            for (int k = 0; k < K; k++) {
                const double a = widen(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                const double b = widen(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                sum += a * b;
                sabs += fabs(a * b);
            }
            const double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            const double want = alpha * sum + beta * c0;
            const double S = fabs(alpha) * sabs + fabs(beta * c0);
            const double err = fabs((double)got - want);
            if (!(err <= (K + 2) * u * S)) {
                if (r.failed < 3 && verbose)
                    fprintf(stderr, "  C[%d,%d] = %.9g, expected %.9g (err %.3g, bound %.3g)\n", i,
                            j, got, want, err, (K + 2) * u * S);
                r.failed++;
            }
            if (S > 0 && err / S > r.max_rel) r.max_rel = err / S;
        }
    }
    if (r.max_rel > 4 * u * sqrt(K + 2.0)) {
        if (verbose)
            fprintf(stderr, "  largest err/S %.3g over 4 u sqrt(K + 2) = %.3g\n", r.max_rel,
                    4 * u * sqrt(K + 2.0));
        r.failed++;
    }
    free(A);
    free(B);
    free(C);
    free(C0);
    return r;
}

/* The largest err / S of the call. */
static double run_case(const char *path, int M, int N, int K, int ta, int tb, int pad,
                       float alpha, float beta) {
    gemm_check r = check_case(M, N, K, ta, tb, pad, alpha, beta, 1);
    test_checks++;
    if (r.failed) {
        fprintf(stderr, "%s: M %d N %d K %d op %c%c pad %d alpha %g beta %g: %d failures\n", path,
                M, N, K, ta ? 'T' : 'N', tb ? 'T' : 'N', pad, alpha, beta, r.failed);
        test_failures++;
    }
    return r.max_rel;
}

static void test_gemm_path(const char *path) {
    static const int shapes[][3] = {
        {1, 1, 1},   {1, 1, 7},   {1, 9, 1},  {9, 1, 1},   {1, 13, 17}, {13, 1, 17},
        {5, 3, 2},   {17, 33, 65}, {64, 64, 64}, {31, 47, 257}, {100, 37, 1000},
        {3, 5, 4096}, {2, 130, 3001},
    };
    const int ns = (int)(sizeof shapes / sizeof shapes[0]);
    double worst = 0;
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < 4; t++) {
            const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            const int pad = (s + t) % 3 == 0 ? 0 : 3;
            const float beta = (s + t) % 3 == 0 ? 0.0f : ((s + t) % 3 == 1 ? 1.0f : 0.5f);
            const float alpha = t == 2 ? -0.75f : 1.0f;
            const double rel = run_case(path, M, N, K, t & 1, t >> 1, pad, alpha, beta) /
                               (ldexp(1.0, -24) * sqrt(K + 2.0));
            if (rel > worst) worst = rel;
        }
    printf("%s: %d shapes x 4 layouts, largest err/S %.3g u sqrt(K + 2)\n", path, ns, worst);

    /* K = 0: C = beta * C, A and B not read */
    float c[6] = {1, 2, 3, 4, 5, 6};
    product((gemm_dims){2, 3, 0}, 1.0f, gemm_n_bf16(NULL, 1), gemm_n_bf16(NULL, 3), 0.5f,
            gemm_o(c, 3));
    CHECK(c[0] == 0.5f && c[5] == 3.0f);
    c[0] = NAN;
    product((gemm_dims){2, 3, 0}, 1.0f, gemm_n_bf16(NULL, 1), gemm_n_bf16(NULL, 3), 0.0f,
            gemm_o(c, 3));
    CHECK(c[0] == 0.0f && c[5] == 0.0f);
    /* M or N = 0: nothing happens */
    product((gemm_dims){0, 3, 4}, 1.0f, gemm_n_bf16(NULL, 4), gemm_n_bf16(NULL, 3), 0.0f,
            gemm_o(NULL, 3));

    /* from every thread of a parallel region, each its own product (the fallback then uses
     * its thread's slice of the workspace; oneDNN runs on the calling thread) */
    int failed = 0;
    const int blas = gemm_serial_begin();
#pragma omp parallel num_threads(3) reduction(+ : failed)
    {
        const int me = omp_get_thread_num();
        g_rng += (uint64_t)me * 7919u; /* this thread's generator */
        for (int rep = 0; rep < 3; rep++)
            failed += check_case(20 + me * 7, 30 + rep * 5, 300 + me, me & 1, rep & 1, me, 1.0f,
                                 rep == 1 ? 0.0f : 1.0f, 1)
                          .failed;
    }
    gemm_serial_end(blas);
    CHECK(failed == 0);
}

/* The matmul primitive's cache: a key's second call reuses its primitive and gives the first
 * call's bits; another beta (or stride) is another primitive; the step's shapes (the output
 * layer's chunk among them) agree with the fallback within the bound of check_case. */
static void test_matmul_cache(void) {
    onednn_matmul_clear();
    CHECK(onednn_matmul_cached() == 0);
    enum { M = 96, N = 80, K = 300 };
    float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N);
    bf16 *A16 = malloc(sizeof(bf16) * M * K), *B16 = malloc(sizeof(bf16) * K * N);
    float C1[M * N], C2[M * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)(rnd() * 2 - 1);
    for (int i = 0; i < K * N; i++) B[i] = (float)(rnd() * 2 - 1);
    bf16_from_f32(A16, A, (size_t)M * K);
    bf16_from_f32(B16, B, (size_t)K * N);
    const gemm_dims d = {M, N, K};
    gemm_bf16(d, 1.0f, gemm_n_bf16(A16, K), gemm_t_bf16(B16, K), 0.0f, gemm_o(C1, N));
    CHECK(onednn_matmul_cached() == 1);
    gemm_bf16(d, 1.0f, gemm_n_bf16(A16, K), gemm_t_bf16(B16, K), 0.0f, gemm_o(C2, N));
    CHECK(onednn_matmul_cached() == 1 && memcmp(C1, C2, sizeof C1) == 0);
    gemm_bf16(d, 1.0f, gemm_n_bf16(A16, K), gemm_t_bf16(B16, K), 1.0f, gemm_o(C2, N));
    CHECK(onednn_matmul_cached() == 2);
    int twice = 0; /* beta = 1 accumulated the same product onto itself */
    for (int i = 0; i < M * N; i++) twice += fabsf(C2[i] - 2 * C1[i]) > 1e-5f * (1 + fabsf(C1[i]));
    CHECK(twice == 0);
    CHECK(onednn_matmul_refused() == 0);
    printf("onednn-matmul cache: %d primitives, implementation %s\n", onednn_matmul_cached(),
           onednn_matmul_impl());
    free(A);
    free(B);
    free(A16);
    free(B16);
    /* GPT shapes: a layer's weight gradient and an output-layer chunk (scaled down in K) */
    run_case("onednn-matmul (step shapes)", 256, 96, 1024, 1, 0, 0, 1.0f, 1.0f);
    run_case("onednn-matmul (step shapes)", 43, 2000, 768, 0, 1, 0, 1.0f, 0.0f);
    run_case("onednn-matmul (step shapes)", 43, 96, 5000, 0, 0, 1, 1.0f, 1.0f);
}

static void test_fallback_tiles(void) {
    /* the workspace limited so that tiles split M, N and K (K steps of at least 256, balanced:
     * 600 = 3 x 200, 513 = 3 x 171; M and N share the rest): at 512 floats, mb + nb = 2; at
     * 4096, about 20; at 256 * 300, whole K where it fits and M, N one tile when small */
    static const size_t limits[] = {512, 4096, 256 * 300};
    for (size_t l = 0; l < sizeof limits / sizeof limits[0]; l++) {
        gemm_bf16_limit_workspace(limits[l]);
        run_case("fallback (tiles)", 7, 9, 600, 0, 0, 2, 1.0f, 1.0f);
        run_case("fallback (tiles)", 9, 7, 600, 1, 1, 0, -0.75f, 0.0f);
        run_case("fallback (tiles)", 40, 3, 300, 1, 0, 1, 1.0f, 0.5f);
        run_case("fallback (tiles)", 3, 40, 257, 0, 1, 0, 1.0f, 0.0f);
        run_case("fallback (tiles)", 170, 180, 513, 0, 1, 5, 1.0f, 1.0f);
        run_case("fallback (tiles)", 33, 20, 5, 1, 1, 0, 1.0f, 1.0f);
    }
    gemm_bf16_limit_workspace(0);
}

/* ------------------------------------------------------------ fp16 and the run's format */

/* half_* take the format's own conversions: compared with bf16_* / fp16_* on values whose
 * roundings differ between the two formats, NaN and infinity, and past fp16's range. */
static void test_half_dispatch(void) {
    enum { n = 8 };
    const float x[n] = {1.0f + 0x1p-9f, -3.14159265f, 70000.0f, 1e-6f, -0.0f, INFINITY, NAN,
                        0.1f};
    uint16_t hb[n], hf[n], rb[n], rf[n];
    float wb[n], wf[n], gb[n], gf[n], xb[n], xf[n];
    half_from_f32(HALF_BF16, hb, x, n);
    half_from_f32(HALF_FP16, hf, x, n);
    bf16_from_f32(rb, x, n);
    fp16_from_f32(rf, x, n);
    CHECK(memcmp(hb, rb, sizeof hb) == 0 && memcmp(hf, rf, sizeof hf) == 0);
    CHECK(memcmp(hb, hf, sizeof hb) != 0);
    CHECK(hf[2] == 0x7c00); /* 70000 is past fp16's largest finite value */
    half_to_f32(HALF_BF16, wb, hb, n);
    half_to_f32(HALF_FP16, wf, hf, n);
    for (int i = 0; i < n; i++) {
        gb[i] = bf16_to_float(hb[i]);
        gf[i] = fp16_to_float(hf[i]);
    }
    CHECK(memcmp(wb, gb, sizeof wb) == 0 && memcmp(wf, gf, sizeof wf) == 0);
    memcpy(xb, x, sizeof xb);
    memcpy(xf, x, sizeof xf);
    half_round_f32(HALF_BF16, xb, n);
    half_round_f32(HALF_FP16, xf, n);
    CHECK(memcmp(xb, wb, sizeof xb) == 0 && memcmp(xf, wf, sizeof xf) == 0);
    float same[n];
    memcpy(same, x, sizeof same);
    half_round_f32(HALF_NONE, same, n); /* fp32 training: unchanged */
    CHECK(memcmp(same, x, sizeof same) == 0);
    /* a block with row strides */
    float blk[2 * 3];
    const uint16_t src[2 * 4] = {hf[0], hf[1], hf[3], 0, hf[7], hf[4], hf[2], 0};
    half_to_f32_2d(HALF_FP16, blk, 3, src, 4, 2, 3);
    CHECK(blk[0] == wf[0] && blk[2] == wf[3] && blk[3] == wf[7] && isinf(blk[5]));
    CHECK(!strcmp(half_kind_name(HALF_FP16), "fp16") && !strcmp(half_kind_name(HALF_BF16), "bf16"));
}

/* The fp16 product reads its operands as fp16: the bits of 1.5 (0x3e00) read as bf16 are
 * 0.125; 1.5 * 1.5 = 2.25. */
static void test_fp16_not_bf16(void) {
    const uint16_t a = 0x3e00, b = 0x3e00;
    float c = -1.0f;
    gemm_half(HALF_FP16, (gemm_dims){1, 1, 1}, 1.0f, gemm_n_half(&a, 1), gemm_n_half(&b, 1), 0.0f,
              gemm_o(&c, 1));
    CHECK(c == 2.25f);
}

/* ------------------------------------------------------------ choosing the implementation */

/* 1: /proc/cpuinfo lists avx512_bf16 or amx_bf16; 0: it does not; -1: unreadable */
static int cpu_has_bf16_units(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    char line[8192];
    int found = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            found = strstr(line, " avx512_bf16") != NULL || strstr(line, " amx_bf16") != NULL;
            break;
        }
    fclose(f);
    return found;
}

static void test_choice(void) {
    char err[256];
    /* MEGADLM_BF16_GEMM is read by gemm_bf16_init while nothing is chosen yet */
    setenv("MEGADLM_BF16_GEMM", "fastest", 1);
    CHECK(gemm_bf16_init(err, sizeof err) == -1 && strstr(err, "MEGADLM_BF16_GEMM=fastest"));
    setenv("MEGADLM_BF16_GEMM", "fallback", 1);
    CHECK(gemm_bf16_init(err, sizeof err) == 0);
    CHECK(gemm_bf16_current() == GEMM_BF16_FALLBACK);
    CHECK(strstr(gemm_bf16_describe(), "fp32 sgemm on converted tiles") &&
          strstr(gemm_bf16_describe(), "MEGADLM_BF16_GEMM=fallback"));
    CHECK(gemm_bf16_workspace_bytes() > 0);
    printf("MEGADLM_BF16_GEMM=fallback: %s\n", gemm_bf16_describe());
    unsetenv("MEGADLM_BF16_GEMM");

    CHECK(gemm_bf16_use(GEMM_BF16_AUTO, err, sizeof err) == 0);
    printf("auto: %s\n", gemm_bf16_describe());
    const int units = cpu_has_bf16_units();
    if (!gemm_bf16_onednn_built()) {
        CHECK(gemm_bf16_current() == GEMM_BF16_FALLBACK);
        CHECK(gemm_bf16_use(GEMM_BF16_ONEDNN, err, sizeof err) == -1 &&
              strstr(err, "without oneDNN"));
    } else if (getenv("DNNL_MAX_CPU_ISA") || getenv("ONEDNN_MAX_CPU_ISA")) {
        /* oneDNN told to use less than the CPU has (it may then emulate a CPU without bf16
         * units): cpuinfo is not the reference any more */
        printf("DNNL_MAX_CPU_ISA is set: auto not compared with /proc/cpuinfo\n");
    } else if (units >= 0) {
        /* auto takes oneDNN's BLAS-like call exactly where the CPU has bf16 units (AMX or
         * AVX512_BF16), never its matmul primitive (forced only) */
        const gemm_bf16_path want = units ? GEMM_BF16_ONEDNN : GEMM_BF16_FALLBACK;
        CHECK(gemm_bf16_current() == want);
        printf("cpuinfo: bf16 units %s; auto chose %s\n", units ? "yes" : "no",
               want == GEMM_BF16_ONEDNN ? "oneDNN's GEMM" : "the fallback");
    }

}

int main(void) {
    test_hand_values();
    test_oracle();
    test_round_trip();
    test_choice();

    char err[256];
    CHECK(gemm_bf16_use(GEMM_BF16_FALLBACK, err, sizeof err) == 0);
    test_gemm_path("fallback");
    test_fallback_tiles();
    if (gemm_bf16_use(GEMM_BF16_ONEDNN, err, sizeof err) == 0) {
        CHECK(gemm_bf16_current() == GEMM_BF16_ONEDNN);
        printf("%s\n", gemm_bf16_describe());
        test_gemm_path("onednn");
    } else {
        printf("SKIPPED onednn: %s\n", err);
    }

    if (gemm_bf16_use(GEMM_BF16_ONEDNN_MATMUL, err, sizeof err) == 0) {
        CHECK(gemm_bf16_current() == GEMM_BF16_ONEDNN_MATMUL);
        printf("%s\n", gemm_bf16_describe());
        CHECK(strstr(gemm_bf16_describe(), "matmul primitive") &&
              !strstr(gemm_bf16_describe(), "(ref"));
        test_gemm_path("onednn-matmul");
        test_matmul_cache();
    } else {
        CHECK(!gemm_bf16_onednn_built() || strstr(err, "matmul primitive does not run"));
        printf("SKIPPED onednn-matmul: %s\n", err);
    }

    /* fp16 operands: the converted tiles, whichever bf16 implementation is in use */
    test_half_dispatch();
    g_fmt = HALF_FP16;
    CHECK(gemm_half_init(HALF_FP16, err, sizeof err) == 0);
    CHECK(strstr(gemm_half_describe(HALF_FP16), "fp16 GEMM: fp32 sgemm on converted tiles"));
    test_gemm_path("fp16");
    test_fallback_tiles();
    test_fp16_not_bf16();
    TEST_DONE();
}
