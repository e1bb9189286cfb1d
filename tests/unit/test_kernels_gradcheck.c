/* Gradient check of every kernel's backward pass, and forward check against naive loops.
 *
 * Method: for each kernel the test holds a naive double-precision reference forward written
 * here (plain loops: triple-loop matmul, explicit mask + softmax for attention, ...). With a
 * fixed random R (float, so the kernel sees exactly the same R), the objective is
 *   L(x) = sum(ref_forward(x) * R)
 * and its gradient is taken by central differences IN DOUBLE on the reference, step
 * FD_H = 1e-5 (truncation ~1e-10, roundoff ~1e-11 * |L|: far below float noise). Then
 *   - forward: kernel output (float) vs reference output (double on the same float inputs):
 *       max |out - ref| <= FWD_TOL * max |ref|,   FWD_TOL = 1e-5 (observed <= 3e-7)
 *   - backward: kernel backward with dout = R, gradient buffers pre-filled with random values
 *     G0; after one call (g - G0) must match the numeric gradient, after a second call
 *     (g - G0) must match twice it (backward accumulates). Per element:
 *       |analytic - numeric| <= GRAD_ATOL * max|numeric| + GRAD_RTOL * |numeric|,
 *       GRAD_ATOL = 1e-5, GRAD_RTOL = 1e-3  (observed errors are <= 4e-7 relative to max).
 *   - every comparison also checks that it CAN fail: the same comparison with one element of
 *     the kernel result perturbed by 1% of the max magnitude must be rejected.
 * Dropout masks are pure functions of (key, index), so FD through dropout is exact. */
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/kernels/activation.h"
#include "core/kernels/adamw.h"
#include "core/kernels/attention.h"
#include "core/kernels/bf16.h"
#include "core/kernels/cross_entropy.h"
#include "core/kernels/dropout.h"
#include "core/kernels/embedding.h"
#include "core/kernels/linear.h"
#include "core/kernels/norm.h"
#include "core/kernels/rope.h"
#include "test_util.h"

#define FD_H 1e-5
#define FWD_TOL 1e-5
#define GRAD_ATOL 1e-5
#define GRAD_RTOL 1e-3

/* ------------------------------------------------------------------ utilities */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double urand(void) { /* xorshift64*, uniform [0,1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}
static float *falloc(size_t n) { return calloc(n ? n : 1, sizeof(float)); }
static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static float *frandom(size_t n, double lo, double hi) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * urand());
    return x;
}
static float *fcopy(const float *x, size_t n) {
    float *y = falloc(n);
    memcpy(y, x, n * sizeof(float));
    return y;
}
static double *to_double(const float *x, size_t n) {
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i];
    return y;
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}
static double maxabs(const double *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

/* Central differences of loss(ctx) w.r.t. x[0..n). */
typedef double (*loss_fn)(void *ctx);
static double *numgrad(loss_fn loss, void *ctx, double *x, size_t n) {
    double *g = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        const double xi = x[i];
        x[i] = xi + FD_H;
        const double lp = loss(ctx);
        x[i] = xi - FD_H;
        const double lm = loss(ctx);
        x[i] = xi;
        g[i] = (lp - lm) / (2.0 * FD_H);
    }
    return g;
}

/* Worst ratio of error to tolerance (<= 1 passes) of analytic a vs numeric num. */
static double grad_err(const double *a, const double *num, size_t n) {
    double mx = maxabs(num, n), worst = 0.0;
    if (mx < 1e-30)
        mx = 1e-30;
    for (size_t i = 0; i < n; i++) {
        const double r = fabs(a[i] - num[i]) / (GRAD_ATOL * mx + GRAD_RTOL * fabs(num[i]));
        if (!(r <= worst))
            worst = r; /* NaN propagates */
    }
    return worst;
}
static size_t argmaxabs(const double *x, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > fabs(x[k]))
            k = i;
    return k;
}

/* Compares a kernel gradient with the numeric one. g0: buffer contents before the first
 * backward call (NULL: 0); g1: after the first call; g2: after a second call (NULL: the kernel
 * writes instead of accumulating, not checked). */
static void check_grad(const char *name, const float *g0, const float *g1, const float *g2,
                       const double *num, size_t n) {
    double *a = dalloc(n), *num2 = dalloc(n);
    for (size_t i = 0; i < n; i++)
        a[i] = (double)g1[i] - (g0 ? (double)g0[i] : 0.0);
    const double mx = maxabs(num, n);
    double rel = 0.0;
    for (size_t i = 0; i < n; i++)
        rel = fmax(rel, fabs(a[i] - num[i]));
    rel /= fmax(mx, 1e-30);
    const double e1 = grad_err(a, num, n);
    /* the check can fail: perturb the largest element by 1% of max|num| */
    const size_t k = argmaxabs(num, n);
    a[k] += 0.01 * mx;
    const double ep = grad_err(a, num, n);
    a[k] -= 0.01 * mx;
    double e2 = 0.0;
    if (g2) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (double)g2[i] - (g0 ? (double)g0[i] : 0.0);
            num2[i] = 2.0 * num[i];
        }
        e2 = grad_err(a, num2, n);
    }
    printf("  grad %-30s n=%6zu max|g|=%.2e  max err/max|g|=%.1e  (tol ratio %.3f%s)\n", name, n,
           mx, rel, e1, g2 ? ", accumulates x2 ok" : "");
    if (!(e1 <= 1.0))
        fprintf(stderr, "FAIL grad %s: error ratio %g\n", name, e1);
    if (g2 && !(e2 <= 1.0))
        fprintf(stderr, "FAIL grad %s (2nd call, accumulate): %g\n", name, e2);
    CHECK(e1 <= 1.0);
    CHECK(!g2 || e2 <= 1.0);
    CHECK(mx > 0.0); /* a vacuous all-zero gradient would prove nothing */
    CHECK(ep > 1.0); /* the comparison detects a 1% error */
    free(a);
    free(num2);
}

/* Forward: max|got - ref| <= FWD_TOL * max|ref|, and a 1% perturbation would be caught. */
static double fwd_err(const float *got, const double *ref, size_t n, size_t k, double bump) {
    const double mx = fmax(maxabs(ref, n), 1e-30);
    double err = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] + (i == k ? bump : 0.0) - ref[i]);
        if (!(e <= err))
            err = e;
    }
    return err / mx;
}
static void check_fwd(const char *name, const float *got, const double *ref, size_t n) {
    const double err = fwd_err(got, ref, n, n, 0.0);
    const double errp = fwd_err(got, ref, n, argmaxabs(ref, n), 0.01 * maxabs(ref, n));
    printf("  fwd  %-30s n=%6zu max|y|=%.2e  max err/max|y|=%.1e\n", name, n, maxabs(ref, n), err);
    if (!(err <= FWD_TOL))
        fprintf(stderr, "FAIL fwd %s: %g\n", name, err);
    CHECK(err <= FWD_TOL);
    CHECK(errp > FWD_TOL);
}

/* A gradient buffer: random initial contents g0 (to check +=), snapshot after call 1. */
typedef struct {
    size_t n;
    float *g, *g0, *g1;
} gbuf;
static gbuf gb_new(size_t n) {
    gbuf b = {n, NULL, frandom(n, -1.0, 1.0), falloc(n)};
    b.g = fcopy(b.g0, n);
    return b;
}
static void gb_snap(gbuf *b) { memcpy(b->g1, b->g, b->n * sizeof(float)); }
static void gb_check(const char *name, gbuf *b, const double *num) {
    check_grad(name, b->g0, b->g1, b->g, num, b->n);
}
static void gb_free(gbuf *b) {
    free(b->g);
    free(b->g0);
    free(b->g1);
}

/* ------------------------------------------------------------------ linear */

typedef struct {
    int N, C, OC;
    double *inp, *w, *b, *R, *out;
} lin_ctx;
static void linear_ref(double *out, const double *inp, const double *w, const double *b, int N,
                       int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++)
                s += inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}
static double lin_loss(void *p) {
    lin_ctx *c = p;
    linear_ref(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
static void test_linear(void) {
    printf("linear\n");
    const int N = 5, C = 9, OC = 70; /* OC > 64: two bias-reduction blocks */
    float *inp = frandom(N * C, -1, 1), *w = frandom(OC * C, -1, 1), *b = frandom(OC, -1, 1);
    float *out = falloc(N * OC), *R = frandom(N * OC, -1, 1);
    lin_ctx c = {N,
                 C,
                 OC,
                 to_double(inp, N * C),
                 to_double(w, OC * C),
                 to_double(b, OC),
                 to_double(R, N * OC),
                 dalloc(N * OC)};
    linear_forward(out, inp, linear_w32(w), b, N, C, OC);
    linear_ref(c.out, c.inp, c.w, c.b, N, C, OC);
    check_fwd("linear", out, c.out, N * OC);
    linear_forward(out, inp, linear_w32(w), NULL, N, C, OC);
    linear_ref(c.out, c.inp, c.w, NULL, N, C, OC);
    check_fwd("linear (no bias)", out, c.out, N * OC);

    gbuf di = gb_new(N * C), dw = gb_new(OC * C), db = gb_new(OC);
    for (int rep = 0; rep < 2; rep++) {
        linear_backward(di.g, dw.g, db.g, R, inp, linear_w32(w), N, C, OC);
        if (rep == 0) {
            gb_snap(&di);
            gb_snap(&dw);
            gb_snap(&db);
        }
    }
    double *ni = numgrad(lin_loss, &c, c.inp, N * C), *nw = numgrad(lin_loss, &c, c.w, OC * C);
    double *nb = numgrad(lin_loss, &c, c.b, OC);
    gb_check("linear dinp", &di, ni);
    gb_check("linear dweight", &dw, nw);
    gb_check("linear dbias", &db, nb);
    /* NULL dinp / dbias: dweight still accumulates the same amount */
    float *dw2 = fcopy(dw.g0, OC * C);
    linear_backward(NULL, dw2, NULL, R, inp, linear_w32(w), N, C, OC);
    CHECK(memcmp(dw2, dw.g1, OC * C * sizeof(float)) == 0);
    free(dw2);
    gb_free(&di);
    gb_free(&dw);
    gb_free(&db);
    free(ni);
    free(nw);
    free(nb);
    free(inp);
    free(w);
    free(b);
    free(out);
    free(R);
    free(c.inp);
    free(c.w);
    free(c.b);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ layernorm / rmsnorm */

/* One vector: y = (x - mean) * rstd * w + b (layernorm) or x * rstd * w (rms). */
static void norm_vec_ref(double *y, double *mean_out, double *rstd_out, const double *x,
                         const double *w, const double *b, int C, int layernorm, double eps) {
    double m = 0.0, v = 0.0;
    if (layernorm) {
        for (int i = 0; i < C; i++)
            m += x[i];
        m /= C;
        for (int i = 0; i < C; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= C;
    } else {
        for (int i = 0; i < C; i++)
            v += x[i] * x[i];
        v /= C;
    }
    const double s = 1.0 / sqrt(v + eps);
    for (int i = 0; i < C; i++)
        y[i] = (x[i] - m) * s * w[i] + (b ? b[i] : 0.0);
    if (mean_out)
        *mean_out = m;
    if (rstd_out)
        *rstd_out = s;
}

typedef struct {
    int N, C, layernorm;
    double eps;
    double *inp, *w, *b, *R, *out;
} norm_ctx;
static double norm_loss(void *p) {
    norm_ctx *c = p;
    for (int n = 0; n < c->N; n++)
        norm_vec_ref(c->out + n * c->C, NULL, NULL, c->inp + n * c->C, c->w,
                     c->layernorm ? c->b : NULL, c->C, c->layernorm, c->eps);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_norm(int layernorm) {
    printf("%s\n", layernorm ? "layernorm" : "rmsnorm");
    const int N = 4, C = 40; /* C > 32: two weight-gradient blocks */
    const float eps = 1e-5f;
    float *inp = frandom(N * C, -1.5, 2.5), *w = frandom(C, 0.5, 1.5), *b = frandom(C, -1, 1);
    float *out = falloc(N * C), *mean = falloc(N), *rstd = falloc(N), *R = frandom(N * C, -1, 1);
    norm_ctx c = {N,
                  C,
                  layernorm,
                  eps,
                  to_double(inp, N * C),
                  to_double(w, C),
                  to_double(b, C),
                  to_double(R, N * C),
                  dalloc(N * C)};
    double *rm = dalloc(N), *rs = dalloc(N);
    for (int n = 0; n < N; n++)
        norm_vec_ref(c.out + n * C, rm + n, rs + n, c.inp + n * C, c.w, layernorm ? c.b : NULL, C,
                     layernorm, eps);
    gbuf di = gb_new(N * C), dw = gb_new(C), db = gb_new(C);
    if (layernorm) {
        layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
        check_fwd("layernorm out", out, c.out, N * C);
        check_fwd("layernorm mean", mean, rm, N);
        check_fwd("layernorm rstd", rstd, rs, N);
        for (int rep = 0; rep < 2; rep++) {
            layernorm_backward(di.g, dw.g, db.g, R, inp, w, mean, rstd, N, C);
            if (rep == 0) {
                gb_snap(&di);
                gb_snap(&dw);
                gb_snap(&db);
            }
        }
    } else {
        rmsnorm_forward(out, rstd, inp, w, N, C, eps);
        check_fwd("rmsnorm out", out, c.out, N * C);
        check_fwd("rmsnorm rstd", rstd, rs, N);
        for (int rep = 0; rep < 2; rep++) {
            rmsnorm_backward(di.g, dw.g, R, inp, w, rstd, N, C);
            if (rep == 0) {
                gb_snap(&di);
                gb_snap(&dw);
            }
        }
    }
    double *ni = numgrad(norm_loss, &c, c.inp, N * C), *nw = numgrad(norm_loss, &c, c.w, C);
    gb_check(layernorm ? "layernorm dinp" : "rmsnorm dinp", &di, ni);
    gb_check(layernorm ? "layernorm dweight" : "rmsnorm dweight", &dw, nw);
    free(ni);
    free(nw);
    if (layernorm) {
        double *nb = numgrad(norm_loss, &c, c.b, C);
        gb_check("layernorm dbias", &db, nb);
        free(nb);
    }
    gb_free(&di);
    gb_free(&dw);
    gb_free(&db);
    free(inp);
    free(w);
    free(b);
    free(out);
    free(mean);
    free(rstd);
    free(R);
    free(c.inp);
    free(c.w);
    free(c.b);
    free(c.R);
    free(c.out);
    free(rm);
    free(rs);
}

/* ------------------------------------------------------------------ qk_norm */

typedef struct {
    int N, NH, NG, HS, layernorm;
    double eps;
    double *inp, *qw, *qb, *kw, *kb, *R, *out;
} qkn_ctx;
static void qk_norm_ref(qkn_ctx *c) {
    const int Q = c->NH / c->NG, HS = c->HS, C3 = c->NG * (Q + 2) * HS;
    for (int n = 0; n < c->N; n++)
        for (int g = 0; g < c->NG; g++)
            for (int k = 0; k < Q + 2; k++) {
                const int off = n * C3 + (g * (Q + 2) + k) * HS;
                if (k == Q + 1) {
                    for (int i = 0; i < HS; i++)
                        c->out[off + i] = c->inp[off + i];
                } else {
                    const int is_q = k < Q;
                    norm_vec_ref(c->out + off, NULL, NULL, c->inp + off, is_q ? c->qw : c->kw,
                                 c->layernorm ? (is_q ? c->qb : c->kb) : NULL, HS, c->layernorm,
                                 c->eps);
                }
            }
}
static double qkn_loss(void *p) {
    qkn_ctx *c = p;
    qk_norm_ref(c);
    const int C3 = c->NG * (c->NH / c->NG + 2) * c->HS;
    return dot(c->out, c->R, (size_t)c->N * C3);
}
static void test_qk_norm(int layernorm) {
    printf("qk_norm (%s, NH=4 NG=2)\n", layernorm ? "layernorm" : "rmsnorm");
    const int N = 3, NH = 4, NG = 2, HS = 36, Q = NH / NG, C3 = NG * (Q + 2) * HS;
    const float eps = 1e-6f;
    const size_t n = (size_t)N * C3;
    float *inp = frandom(n, -1.5, 2.0), *R = frandom(n, -1, 1), *out = falloc(n);
    float *qw = frandom(HS, 0.5, 1.5), *qb = frandom(HS, -1, 1);
    float *kw = frandom(HS, 0.5, 1.5), *kb = frandom(HS, -1, 1);
    float *mean = falloc(N * (NH + NG)), *rstd = falloc(N * (NH + NG));
    qkn_ctx c = {N,
                 NH,
                 NG,
                 HS,
                 layernorm,
                 eps,
                 to_double(inp, n),
                 to_double(qw, HS),
                 to_double(qb, HS),
                 to_double(kw, HS),
                 to_double(kb, HS),
                 to_double(R, n),
                 dalloc(n)};
    const norm_kind kind = layernorm ? NORM_LAYERNORM : NORM_RMSNORM;
    const qkv_layout lay = {NH, NG, HS};
    const qk_norm_weights wts = {qw, layernorm ? qb : NULL, kw, layernorm ? kb : NULL};
    qk_norm_forward(out, (qk_norm_stats){layernorm ? mean : NULL, rstd}, inp, wts, N, lay, kind,
                    eps);
    qk_norm_ref(&c);
    check_fwd(layernorm ? "qk_norm ln out" : "qk_norm rms out", out, c.out, n);
    /* value heads copied bit-exactly */
    int vbad = 0;
    for (int r = 0; r < N; r++)
        for (int g = 0; g < NG; g++)
            for (int i = 0; i < HS; i++) {
                const size_t off = (size_t)r * C3 + (size_t)(g * (Q + 2) + Q + 1) * HS + i;
                vbad += out[off] != inp[off];
            }
    CHECK(vbad == 0);
    /* in place (out == inp) gives the same result */
    float *inpl = fcopy(inp, n);
    qk_norm_forward(inpl, (qk_norm_stats){NULL, NULL}, inpl, wts, N, lay, kind, eps);
    CHECK(memcmp(inpl, out, n * sizeof(float)) == 0);
    free(inpl);

    gbuf di = gb_new(n), dqw = gb_new(HS), dqb = gb_new(HS), dkw = gb_new(HS), dkb = gb_new(HS);
    for (int rep = 0; rep < 2; rep++) {
        const qk_norm_grads grads = {dqw.g, layernorm ? dqb.g : NULL, dkw.g,
                                     layernorm ? dkb.g : NULL};
        qk_norm_backward(di.g, grads, R, inp, wts, (qk_norm_stats){layernorm ? mean : NULL, rstd},
                         N, lay, kind);
        if (rep == 0) {
            gb_snap(&di);
            gb_snap(&dqw);
            gb_snap(&dqb);
            gb_snap(&dkw);
            gb_snap(&dkb);
        }
    }
    double *ni = numgrad(qkn_loss, &c, c.inp, n);
    double *nqw = numgrad(qkn_loss, &c, c.qw, HS), *nkw = numgrad(qkn_loss, &c, c.kw, HS);
    gb_check("qk_norm dinp", &di, ni);
    gb_check("qk_norm dq_weight", &dqw, nqw);
    gb_check("qk_norm dk_weight", &dkw, nkw);
    free(ni);
    free(nqw);
    free(nkw);
    if (layernorm) {
        double *nqb = numgrad(qkn_loss, &c, c.qb, HS), *nkb = numgrad(qkn_loss, &c, c.kb, HS);
        gb_check("qk_norm dq_bias", &dqb, nqb);
        gb_check("qk_norm dk_bias", &dkb, nkb);
        free(nqb);
        free(nkb);
    } else { /* untouched for RMSNorm */
        CHECK(memcmp(dqb.g, dqb.g0, HS * sizeof(float)) == 0);
    }
    gb_free(&di);
    gb_free(&dqw);
    gb_free(&dqb);
    gb_free(&dkw);
    gb_free(&dkb);
    free(inp);
    free(R);
    free(out);
    free(qw);
    free(qb);
    free(kw);
    free(kb);
    free(mean);
    free(rstd);
    free(c.inp);
    free(c.qw);
    free(c.qb);
    free(c.kw);
    free(c.kb);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ gelu / swiglu */

typedef struct {
    int n, F, kind; /* kind: 0 gelu tanh, 1 gelu erf, 2 swiglu (n = rows) */
    double *inp, *R, *out;
} act_ctx;
static void act_ref(act_ctx *c) {
    if (c->kind == 2) {
        for (int r = 0; r < c->n; r++)
            for (int j = 0; j < c->F; j++) {
                const double g = c->inp[r * 2 * c->F + j], u = c->inp[r * 2 * c->F + c->F + j];
                c->out[r * c->F + j] = g / (1.0 + exp(-g)) * u;
            }
        return;
    }
    for (int i = 0; i < c->n; i++) {
        const double x = c->inp[i];
        c->out[i] = c->kind == 0
                        ? 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)))
                        : 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    }
}
static double act_loss(void *p) {
    act_ctx *c = p;
    act_ref(c);
    return dot(c->out, c->R, (size_t)(c->kind == 2 ? c->n * c->F : c->n));
}
static void test_gelu(gelu_kind kind) {
    printf("gelu (%s)\n", kind == GELU_TANH ? "tanh" : "erf");
    const int n = 300;
    float *inp = frandom(n, -6, 6), *R = frandom(n, -1, 1), *out = falloc(n);
    act_ctx c = {n, 0, kind == GELU_TANH ? 0 : 1, to_double(inp, n), to_double(R, n), dalloc(n)};
    gelu_forward(out, inp, n, kind);
    act_ref(&c);
    check_fwd(kind == GELU_TANH ? "gelu tanh" : "gelu erf", out, c.out, n);
    gbuf di = gb_new(n);
    gelu_backward(di.g, R, inp, n, kind);
    gb_snap(&di);
    gelu_backward(di.g, R, inp, n, kind);
    double *ni = numgrad(act_loss, &c, c.inp, n);
    gb_check(kind == GELU_TANH ? "gelu tanh dinp" : "gelu erf dinp", &di, ni);
    gb_free(&di);
    free(ni);
    free(inp);
    free(R);
    free(out);
    free(c.inp);
    free(c.R);
    free(c.out);
}
static void test_swiglu(void) {
    printf("swiglu\n");
    const int N = 4, F = 13;
    float *inp = frandom(N * 2 * F, -4, 4), *R = frandom(N * F, -1, 1), *out = falloc(N * F);
    act_ctx c = {N, F, 2, to_double(inp, N * 2 * F), to_double(R, N * F), dalloc(N * F)};
    swiglu_forward(out, inp, N, F);
    act_ref(&c);
    check_fwd("swiglu", out, c.out, N * F);
    gbuf di = gb_new(N * 2 * F);
    swiglu_backward(di.g, R, inp, N, F);
    gb_snap(&di);
    swiglu_backward(di.g, R, inp, N, F);
    double *ni = numgrad(act_loss, &c, c.inp, N * 2 * F);
    gb_check("swiglu dinp", &di, ni);
    gb_free(&di);
    free(ni);
    free(inp);
    free(R);
    free(out);
    free(c.inp);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ attention */

typedef struct {
    int B, T, NH, NG, HS, causal;
    float p;
    dropout_key key;
    double *qkv, *R, *out, *probs;
    int kv; /* keys j >= kv masked (padding); 0: none */
    const int32_t *ds, *de; /* packed documents [B, T]: keys outside [ds, de) masked; NULL: none */
} att_ctx;

/* Packed documents for the attention tests (attention.h: attention_docs), set by
 * test_attention_docs around its calls; NULL: none. */
static const int32_t *g_doc_start, *g_doc_end;
/* Naive attention: explicit scores, explicit mask, softmax, dropout via dropout_keep with the
 * global index ((b * NH + h) * L + i) * L + j, then P @ V. L = T, or kv when the keys from kv
 * on are masked: a padded sequence draws the masks of its unpadded length, as one process
 * running the sequence unpadded (attention.h, attention_rows.T_key). */
static void attention_ref(att_ctx *c) {
    const int B = c->B, T = c->T, NH = c->NH, NG = c->NG, HS = c->HS, Q = NH / NG;
    const int C3 = NG * (Q + 2) * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double s[256], pd[256];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / Q;
            const int qo = (g * (Q + 2) + h % Q) * HS, ko = (g * (Q + 2) + Q) * HS, vo = ko + HS;
            for (int i = 0; i < T; i++) {
                double mx = -INFINITY;
                for (int j = 0; j < T; j++) {
                    const int masked = (c->causal && j > i) || (c->kv > 0 && j >= c->kv) ||
                                       (c->ds && (j < c->ds[b * T + i] || j >= c->de[b * T + i]));
                    double d = 0.0;
                    for (int e = 0; e < HS; e++)
                        d += c->qkv[(b * T + i) * C3 + qo + e] * c->qkv[(b * T + j) * C3 + ko + e];
                    s[j] = masked ? -INFINITY : d * scale;
                    if (s[j] > mx)
                        mx = s[j];
                }
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    s[j] = s[j] == -INFINITY ? 0.0 : exp(s[j] - mx);
                    sum += s[j];
                }
                for (int j = 0; j < T; j++) {
                    s[j] /= sum;
                    const uint64_t idx = ((uint64_t)(b * NH + h) * T + i) * T + j;
                    const uint64_t L = c->kv > 0 && c->kv < T ? (uint64_t)c->kv : (uint64_t)T;
                    const uint64_t didx = ((uint64_t)(b * NH + h) * L + i) * L + j;
                    if (c->probs)
                        c->probs[idx] = s[j];
                    pd[j] = c->p > 0.0f
                                ? (dropout_keep(c->key, didx, c->p) ? s[j] / (1.0 - c->p) : 0.0)
                                : s[j];
                }
                for (int e = 0; e < HS; e++) {
                    double o = 0.0;
                    for (int j = 0; j < T; j++)
                        o += pd[j] * c->qkv[(b * T + j) * C3 + vo + e];
                    c->out[(b * T + i) * NH * HS + h * HS + e] = o;
                }
            }
        }
}
static double att_loss(void *p) {
    att_ctx *c = p;
    attention_ref(c);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->HS);
}
static void test_attention_kv(int B, int T, int NH, int NG, int HS, int causal, float p, int kv) {
    printf("attention B=%d T=%d NH=%d NG=%d HS=%d causal=%d dropout=%.2f kv_len=%d\n", B, T, NH,
           NG, HS, causal, p, kv);
    const int Q = NH / NG, C3 = NG * (Q + 2) * HS;
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * NH * HS,
                 nprobs = (size_t)B * NH * T * T;
    dropout_key key = {.seed = 99,
                       .iteration = 3,
                       .microbatch = 1,
                       .layer = 2,
                       .site = DROPOUT_SITE_ATTENTION_PROBS};
    float *qkv = frandom(nqkv, -2, 2), *R = frandom(nout, -1, 1);
    float *out = falloc(nout), *probs = falloc(nprobs);
    const int threads = omp_get_max_threads();
    const attention_workspace ws = {falloc(attention_workspace_floats(T, threads)), threads};
    const qkv_batch xb = {B, T, {NH, NG, HS}};
    const attention_opts opts = {causal, p,  key, {0, NH}, HALF_NONE, kv,
                                 {g_doc_start, g_doc_end, T}};
    att_ctx c = {B,
                 T,
                 NH,
                 NG,
                 HS,
                 causal,
                 p,
                 key,
                 to_double(qkv, nqkv),
                 to_double(R, nout),
                 dalloc(nout),
                 dalloc(nprobs),
                 kv,
                 g_doc_start,
                 g_doc_end};
    attention_forward(out, (attention_probs){probs, NULL}, qkv, xb, opts, ws);
    attention_ref(&c);
    check_fwd("attention out", out, c.out, nout);
    check_fwd("attention probs", probs, c.probs, nprobs);
    /* masked probabilities are exactly 0 */
    int mbad = 0;
    for (int bh = 0; bh < B * NH; bh++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                if ((causal && j > i) || (kv > 0 && j >= kv) ||
                    (g_doc_start && (j < g_doc_start[bh / NH * T + i] ||
                                     j >= g_doc_end[bh / NH * T + i])))
                    mbad += probs[((size_t)bh * T + i) * T + j] != 0.0f;
    CHECK(mbad == 0);
    /* probs == NULL (no saved probabilities) gives the same output */
    float *out2 = falloc(nout);
    attention_forward(out2, (attention_probs){NULL, NULL}, qkv, xb, opts, ws);
    CHECK(memcmp(out, out2, nout * sizeof(float)) == 0);
    free(out2);

    gbuf dq = gb_new(nqkv);
    for (int rep = 0; rep < 2; rep++) {
        attention_backward(dq.g, R, qkv, (attention_probs){probs, NULL}, xb, opts, ws);
        if (rep == 0)
            gb_snap(&dq);
    }
    free(c.probs);
    c.probs = NULL;
    double *nq = numgrad(att_loss, &c, c.qkv, nqkv);
    gb_check("attention dqkv", &dq, nq);
    gb_free(&dq);
    free(nq);
    free(qkv);
    free(R);
    free(out);
    free(probs);
    free(ws.data);
    free(c.qkv);
    free(c.R);
    free(c.out);
}

static void test_attention(int B, int T, int NH, int NG, int HS, int causal, float p) {
    test_attention_kv(B, T, NH, NG, HS, causal, p, 0);
}

/* Packed documents (--reset-attention-mask): the kernel that skips the query x key blocks across
 * documents against the reference's explicit mask (dropout masks at the unpacked indices),
 * output, probabilities and gradients; then under --bf16 with dropout the three ways of keeping
 * the probabilities (fp32, bf16, recomputed) give the same bits. Row b's documents end at
 * ends[b][k] (the last at T); a one-document row takes the code without documents. */
static void test_attention_docs(int B, int T, int NH, int NG, int HS, int causal, float p, int kv,
                                const int *ends) {
    int32_t *ds = malloc((size_t)B * T * sizeof(int32_t)), *de = malloc((size_t)B * T * sizeof(int32_t));
    for (int b = 0, k = 0; b < B; b++) {
        int start = 0;
        for (int t = 0; t < T; t++) {
            int end = T;
            for (int e = k; ends[e] >= 0; e++)
                if (ends[e] > t) {
                    end = ends[e];
                    break;
                }
            ds[b * T + t] = start;
            de[b * T + t] = end;
            if (t + 1 == end) start = end;
        }
        while (ends[k] >= 0) k++;
        k++; /* past this row's -1 */
    }
    printf("attention with documents: ");
    g_doc_start = ds;
    g_doc_end = de;
    test_attention_kv(B, T, NH, NG, HS, causal, p, kv);
    /* bf16 with dropout: fp32-kept, bf16-kept and recomputed probabilities, the same bits */
    const int Q = NH / NG, C3 = NG * (Q + 2) * HS;
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * NH * HS,
                 nprobs = (size_t)B * NH * T * T;
    float *qkv = frandom(nqkv, -3, 3), *R = frandom(nout, -1, 1), *probs = falloc(nprobs);
    bf16_round_f32(qkv, nqkv);
    bf16 *probs16 = calloc(nprobs, sizeof(bf16));
    const int threads = omp_get_max_threads();
    const attention_workspace ws = {falloc(attention_workspace_floats(T, threads)), threads};
    const qkv_batch xb = {B, T, {NH, NG, HS}};
    const dropout_key key = {.seed = 5, .iteration = 1, .layer = 1};
    const attention_opts opts = {causal, 0.2f, key, {0, NH}, HALF_BF16, kv, {ds, de, T}};
    const attention_probs keep[3] = {{probs, NULL}, {NULL, probs16}, {NULL, NULL}};
    float *out[3], *dq[3];
    for (int k = 0; k < 3; k++) {
        out[k] = falloc(nout);
        dq[k] = falloc(nqkv);
        attention_forward(out[k], keep[k], qkv, xb, opts, ws);
        attention_backward(dq[k], R, qkv, keep[k], xb, opts, ws);
    }
    for (int k = 1; k < 3; k++) {
        CHECK(memcmp(out[0], out[k], nout * sizeof(float)) == 0);
        CHECK(memcmp(dq[0], dq[k], nqkv * sizeof(float)) == 0);
    }
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(dq[k]);
    }
    free(qkv);
    free(R);
    free(probs);
    free(probs16);
    free(ws.data);
    g_doc_start = g_doc_end = NULL;
    free(ds);
    free(de);
}

/* --bf16 attention (opts.bf16): Megatron's bf16 core attention rounds the scaled scores, the
 * probabilities and the dropped probabilities to bf16. Checked against a double-precision
 * reference that rounds at the same three places (scores and probabilities may differ by one
 * bf16 unit where our fp32 sums and the reference's double ones round to different sides), and
 * the three ways of keeping the probabilities (fp32, bf16 storage, not kept: recomputed) give
 * the same output and gradient bits. */
static double bf16_round_d(double x) {
    float f = (float)x;
    bf16 h;
    bf16_from_f32(&h, &f, 1);
    bf16_to_f32(&f, &h, 1);
    return f;
}
static double bf16_ulp(double x) { return x == 0.0 ? 0.0 : ldexp(1.0, ilogb(x) - 7); }
static void test_attention_bf16(int B, int T, int NH, int NG, int HS, int causal, float p) {
    printf("attention bf16 B=%d T=%d NH=%d NG=%d HS=%d causal=%d dropout=%.2f\n", B, T, NH, NG,
           HS, causal, p);
    const int Q = NH / NG, C3 = NG * (Q + 2) * HS;
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * NH * HS,
                 nprobs = (size_t)B * NH * T * T;
    dropout_key key = {.seed = 5, .iteration = 1, .microbatch = 0, .layer = 1,
                       .site = DROPOUT_SITE_ATTENTION_PROBS};
    float *qkv = frandom(nqkv, -3, 3), *R = frandom(nout, -1, 1);
    bf16_round_f32(qkv, nqkv); /* Q, K, V are bf16 tensors in a --bf16 model */
    const int threads = omp_get_max_threads();
    const attention_workspace ws = {falloc(attention_workspace_floats(T, threads)), threads};
    const qkv_batch xb = {B, T, {NH, NG, HS}};
    const attention_opts opts = {causal, p, key, {0, NH}, HALF_BF16, 0, {NULL, NULL, 0}};
    float *probs = falloc(nprobs), *out[3], *dq[3];
    bf16 *probs16 = calloc(nprobs, sizeof(bf16));
    const attention_probs keep[3] = {{probs, NULL}, {NULL, probs16}, {NULL, NULL}};
    for (int k = 0; k < 3; k++) {
        out[k] = falloc(nout);
        dq[k] = falloc(nqkv);
        attention_forward(out[k], keep[k], qkv, xb, opts, ws);
        attention_backward(dq[k], R, qkv, keep[k], xb, opts, ws);
    }
    for (int k = 1; k < 3; k++) {
        CHECK(memcmp(out[0], out[k], nout * sizeof(float)) == 0);
        CHECK(memcmp(dq[0], dq[k], nqkv * sizeof(float)) == 0);
    }
    int not_bf16 = 0, stored_bad = 0;
    for (size_t i = 0; i < nprobs; i++) {
        not_bf16 += bf16_round_d(probs[i]) != probs[i];
        float w;
        bf16_to_f32(&w, &probs16[i], 1);
        stored_bad += memcmp(&w, &probs[i], sizeof w) != 0;
    }
    CHECK(not_bf16 == 0);
    CHECK(stored_bad == 0);
    /* the reference, rounding where Megatron's bf16 attention does */
    const double scale = 1.0 / sqrt((double)HS);
    int far = 0, exact = 0, count = 0;
    double out_err = 0.0, out_max = 0.0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / Q;
            const int qo = (g * (Q + 2) + h % Q) * HS, ko = (g * (Q + 2) + Q) * HS, vo = ko + HS;
            for (int i = 0; i < T; i++) {
                double s[256], pr[256], mx = -INFINITY, sum = 0.0;
                const int L = causal ? i + 1 : T;
                for (int j = 0; j < L; j++) {
                    double d = 0.0;
                    for (int e = 0; e < HS; e++)
                        d += (double)qkv[(b * T + i) * C3 + qo + e] * qkv[(b * T + j) * C3 + ko + e];
                    s[j] = bf16_round_d(d * scale);
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < L; j++) sum += (pr[j] = exp(s[j] - mx));
                for (int j = 0; j < L; j++) {
                    const double ref = pr[j] / sum, rounded = bf16_round_d(ref);
                    const float got = probs[((size_t)(b * NH + h) * T + i) * T + j];
                    far += fabs(got - ref) > 1.5 * bf16_ulp(ref);
                    exact += got == rounded;
                    count++;
                    const uint64_t idx = ((uint64_t)(b * NH + h) * T + i) * T + j;
                    pr[j] = p > 0.0f ? (dropout_keep(key, idx, p) ? bf16_round_d(got / (1.0 - p)) : 0.0)
                                     : got;
                }
                for (int e = 0; e < HS; e++) {
                    double o = 0.0;
                    for (int j = 0; j < L; j++) o += pr[j] * qkv[(b * T + j) * C3 + vo + e];
                    const double diff = fabs(o - out[0][(b * T + i) * NH * HS + h * HS + e]);
                    out_err = diff > out_err ? diff : out_err;
                    out_max = fabs(o) > out_max ? fabs(o) : out_max;
                }
            }
        }
    printf("  probabilities: %d of %d equal to the reference's bf16 rounding, %d over 1.5 units; "
           "output max error %.2e of %.2e\n", exact, count, far, out_err, out_max);
    CHECK(far == 0);
    CHECK(exact >= count * 9 / 10);
    CHECK(out_err <= 1e-5 * (out_max > 1.0 ? out_max : 1.0));
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(dq[k]);
    }
    free(probs);
    free(probs16);
    free(qkv);
    free(R);
    free(ws.data);
}

/* ------------------------------------------------------------------ rope */

typedef struct {
    int B, T, NH, NG, HS, rot_dim, pos_offset;
    double base;
    double *qkv, *R, *out;
} rope_ctx;
/* Megatron rotate_half with double-precision angles pos * base^(-2i / rot_dim). */
static void rope_ref(rope_ctx *c) {
    const int Q = c->NH / c->NG, HS = c->HS, C3 = c->NG * (Q + 2) * HS, half = c->rot_dim / 2;
    const size_t n = (size_t)c->B * c->T * C3;
    memcpy(c->out, c->qkv, n * sizeof(double));
    for (int b = 0; b < c->B; b++)
        for (int t = 0; t < c->T; t++)
            for (int g = 0; g < c->NG; g++)
                for (int k = 0; k <= Q; k++) {
                    const size_t off = ((size_t)b * c->T + t) * C3 + (size_t)(g * (Q + 2) + k) * HS;
                    for (int i = 0; i < half; i++) {
                        const double a = (c->pos_offset + t) * pow(c->base, -2.0 * i / c->rot_dim);
                        const double x1 = c->qkv[off + i], x2 = c->qkv[off + half + i];
                        c->out[off + i] = x1 * cos(a) - x2 * sin(a);
                        c->out[off + half + i] = x2 * cos(a) + x1 * sin(a);
                    }
                }
}
static double rope_loss(void *p) {
    rope_ctx *c = p;
    rope_ref(c);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NG * (c->NH / c->NG + 2) * c->HS);
}
static void test_rope(int rot_dim) {
    const int B = 2, T = 5, NH = 4, NG = 2, HS = 8, pos_offset = 3, Q = NH / NG;
    const int C3 = NG * (Q + 2) * HS, half = rot_dim / 2;
    const float base = 10000.0f;
    printf("rope rot_dim=%d HS=%d\n", rot_dim, HS);
    const size_t n = (size_t)B * T * C3;
    float *cos_t = falloc(T * half), *sin_t = falloc(T * half);
    rope_tables(cos_t, sin_t, T, rot_dim, base, pos_offset);
    double *rc = dalloc(T * half), *rsn = dalloc(T * half);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            const double a = (pos_offset + t) * pow((double)base, -2.0 * i / rot_dim);
            rc[t * half + i] = cos(a);
            rsn[t * half + i] = sin(a);
        }
    check_fwd("rope cos table", cos_t, rc, T * half);
    check_fwd("rope sin table", sin_t, rsn, T * half);
    float *qkv = frandom(n, -1, 1), *R = frandom(n, -1, 1), *x = fcopy(qkv, n);
    rope_ctx c = {
        B, T, NH, NG, HS, rot_dim, pos_offset, base, to_double(qkv, n), to_double(R, n), dalloc(n)};
    const qkv_batch xb = {B, T, {NH, NG, HS}};
    const rope_table tab = {cos_t, sin_t, rot_dim};
    rope_forward(x, xb, tab);
    rope_ref(&c);
    check_fwd("rope", x, c.out, n);
    /* rope_backward transforms in place (dqkv := R^T dqkv), it does not accumulate */
    float *g = fcopy(R, n);
    rope_backward(g, xb, tab);
    double *ng = numgrad(rope_loss, &c, c.qkv, n);
    check_grad("rope dqkv", NULL, g, NULL, ng, n);
    /* backward undoes forward (rotation is orthogonal) */
    rope_backward(x, xb, tab);
    double err = 0.0;
    for (size_t i = 0; i < n; i++)
        err = fmax(err, fabs(x[i] - qkv[i]));
    CHECK(err < 1e-6);
    free(ng);
    free(g);
    free(cos_t);
    free(sin_t);
    free(rc);
    free(rsn);
    free(qkv);
    free(R);
    free(x);
    free(c.qkv);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ embedding */

typedef struct {
    int B, T, C, pos_offset;
    const int *tokens;
    double *wte, *wpe, *R, *out;
} emb_ctx;
static void embedding_ref(emb_ctx *c) {
    for (int bt = 0; bt < c->B * c->T; bt++)
        for (int i = 0; i < c->C; i++)
            c->out[bt * c->C + i] = c->wte[c->tokens[bt] * c->C + i] +
                                    (c->wpe ? c->wpe[(c->pos_offset + bt % c->T) * c->C + i] : 0.0);
}
static double emb_loss(void *p) {
    emb_ctx *c = p;
    embedding_ref(c);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void test_embedding(void) {
    printf("embedding (repeated tokens)\n");
    const int V = 10, B = 2, T = 6, C = 70, MAXT = 10, pos_offset = 2;
    const int tokens[12] = {1, 3, 3, 7, 1, 1, 0, 9, 3, 2, 2, 1};
    float *wte = frandom(V * C, -1, 1), *wpe = frandom(MAXT * C, -1, 1);
    float *R = frandom(B * T * C, -1, 1), *out = falloc(B * T * C);
    emb_ctx c = {B,
                 T,
                 C,
                 pos_offset,
                 tokens,
                 to_double(wte, V * C),
                 to_double(wpe, MAXT * C),
                 to_double(R, B * T * C),
                 dalloc(B * T * C)};
    embedding_forward(out, tokens, wte, wpe, B, T, C, pos_offset);
    embedding_ref(&c);
    check_fwd("embedding", out, c.out, B * T * C);
    double *wpe_d = c.wpe;
    c.wpe = NULL;
    embedding_forward(out, tokens, wte, NULL, B, T, C, pos_offset);
    embedding_ref(&c);
    check_fwd("embedding (no wpe)", out, c.out, B * T * C);
    c.wpe = wpe_d;

    gbuf dte = gb_new(V * C), dpe = gb_new(MAXT * C);
    for (int rep = 0; rep < 2; rep++) {
        embedding_backward(dte.g, dpe.g, R, tokens, B, T, C, pos_offset);
        if (rep == 0) {
            gb_snap(&dte);
            gb_snap(&dpe);
        }
    }
    double *nte = numgrad(emb_loss, &c, c.wte, V * C),
           *npe = numgrad(emb_loss, &c, c.wpe, MAXT * C);
    gb_check("embedding dwte", &dte, nte);
    gb_check("embedding dwpe", &dpe, npe);
    float *dte2 = fcopy(dte.g0, V * C);
    embedding_backward(dte2, NULL, R, tokens, B, T, C, pos_offset);
    CHECK(memcmp(dte2, dte.g1, V * C * sizeof(float)) == 0);
    free(dte2);
    gb_free(&dte);
    gb_free(&dpe);
    free(nte);
    free(npe);
    free(wte);
    free(wpe);
    free(R);
    free(out);
    free(c.wte);
    free(c.wpe);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ cross entropy */

typedef struct {
    int N, V;
    const int *targets;
    double *logits, *R, *losses, *lse;
} ce_ctx;
static void ce_ref(ce_ctx *c) {
    for (int n = 0; n < c->N; n++) {
        const double *x = c->logits + (size_t)n * c->V;
        double mx = x[0], s = 0.0;
        for (int v = 1; v < c->V; v++)
            mx = fmax(mx, x[v]);
        for (int v = 0; v < c->V; v++)
            s += exp(x[v] - mx);
        c->lse[n] = mx + log(s);
        c->losses[n] = c->lse[n] - x[c->targets[n]];
    }
}
static double ce_loss(void *p) {
    ce_ctx *c = p;
    ce_ref(c);
    return dot(c->losses, c->R, c->N);
}
static void test_cross_entropy(void) {
    printf("cross_entropy\n");
    const int N = 6, V = 37;
    const int targets[6] = {0, 36, 5, 5, 17, 2};
    float *logits = frandom(N * V, -3, 3), *R = frandom(N, 0.2, 1.5);
    float *losses = falloc(N), *lse = falloc(N);
    ce_ctx c = {N, V, targets, to_double(logits, N * V), to_double(R, N), dalloc(N), dalloc(N)};
    cross_entropy_forward(losses, lse, logits, targets, N, V);
    ce_ref(&c);
    check_fwd("cross_entropy losses", losses, c.losses, N);
    check_fwd("cross_entropy lse", lse, c.lse, N);
    /* backward writes (no accumulation): pre-fill with garbage */
    float *dl = falloc(N * V);
    for (int i = 0; i < N * V; i++)
        dl[i] = 1e30f;
    cross_entropy_backward(dl, logits, lse, targets, R, N, V);
    double *nl = numgrad(ce_loss, &c, c.logits, N * V);
    check_grad("cross_entropy dlogits", NULL, dl, NULL, nl, N * V);
    /* in place: dlogits == logits */
    float *inpl = fcopy(logits, N * V);
    cross_entropy_backward(inpl, inpl, lse, targets, R, N, V);
    CHECK(memcmp(inpl, dl, N * V * sizeof(float)) == 0);
    /* stability: logits shifted by +200 (exp overflows float without max subtraction) */
    float *shifted = falloc(N * V), *l2 = falloc(N), *lse2 = falloc(N);
    for (int i = 0; i < N * V; i++)
        shifted[i] = logits[i] + 200.0f;
    cross_entropy_forward(l2, lse2, shifted, targets, N, V);
    for (int n = 0; n < N; n++) {
        CHECK(isfinite(l2[n]));
        CHECK_CLOSE(l2[n], c.losses[n], 0.0, 1e-3); /* float logits near 200: ulp 1.5e-5 */
    }
    cross_entropy_backward(shifted, shifted, lse2, targets, R, N, V);
    double err = 0.0;
    for (int i = 0; i < N * V; i++)
        err = fmax(err, fabs(shifted[i] - dl[i]));
    CHECK(err < 1e-3);
    free(shifted);
    free(l2);
    free(lse2);
    free(inpl);
    free(dl);
    free(nl);
    free(logits);
    free(R);
    free(losses);
    free(lse);
    free(c.logits);
    free(c.R);
    free(c.losses);
    free(c.lse);
}

/* ------------------------------------------------------------------ dropout */

typedef struct {
    size_t n;
    float p;
    dropout_key key;
    uint64_t offset;
    int residual;
    double *res, *x, *R, *out;
} drop_ctx;
static void dropout_ref(drop_ctx *c) {
    for (size_t i = 0; i < c->n; i++) {
        const double d = dropout_keep(c->key, c->offset + i, c->p) ? c->x[i] / (1.0 - c->p) : 0.0;
        c->out[i] = (c->residual ? c->res[i] : 0.0) + d;
    }
}
static double drop_loss(void *p) {
    drop_ctx *c = p;
    dropout_ref(c);
    return dot(c->out, c->R, c->n);
}
static void test_dropout(int residual) {
    printf("%s\n", residual ? "residual_dropout" : "dropout");
    const size_t n = 203;
    const float p = 0.3f;
    const uint64_t offset = 5;
    const dropout_key key = {
        .seed = 5, .iteration = 11, .microbatch = 0, .layer = 1, .site = DROPOUT_SITE_MLP_OUT};
    float *x = frandom(n, -1, 1), *res = frandom(n, -1, 1), *R = frandom(n, -1, 1);
    float *out = falloc(n);
    drop_ctx c = {
        n,        p, key, offset, residual, to_double(res, n), to_double(x, n), to_double(R, n),
        dalloc(n)};
    if (residual)
        residual_dropout_forward(out, res, x, n, p, key, offset);
    else
        dropout_forward(out, x, n, p, key, offset);
    dropout_ref(&c);
    check_fwd(residual ? "residual_dropout" : "dropout", out, c.out, n);
    gbuf dx = gb_new(n), dr = gb_new(n);
    for (int rep = 0; rep < 2; rep++) {
        if (residual)
            residual_dropout_backward(dr.g, dx.g, R, n, p, key, offset);
        else
            dropout_backward(dx.g, R, n, p, key, offset);
        if (rep == 0) {
            gb_snap(&dx);
            gb_snap(&dr);
        }
    }
    double *nx = numgrad(drop_loss, &c, c.x, n);
    gb_check(residual ? "residual_dropout dx" : "dropout dinp", &dx, nx);
    if (residual) {
        double *nr = numgrad(drop_loss, &c, c.res, n);
        gb_check("residual_dropout dresidual", &dr, nr);
        free(nr);
    }
    gb_free(&dx);
    gb_free(&dr);
    free(nx);
    free(x);
    free(res);
    free(R);
    free(out);
    free(c.res);
    free(c.x);
    free(c.R);
    free(c.out);
}

/* ------------------------------------------------------------------ adamw */

/* Three steps. Each step is compared with the formula evaluated in double from the kernel's
 * own float state before the step (so only that step's float rounding counts):
 *   m, v: |kernel - formula| <= 1e-6 * (|b1 m| + |(1-b1) g|)  (resp. b2 v, (1-b2) g^2), i.e.
 *         a few float ulps of the terms (m can cancel, so not relative to m itself);
 *   p:    the update p - p0 within rel 1e-3 of its size (the update is ~1e-2 of p, so the
 *         float rounding of p costs ~1e-5 relative in the update; + 2e-7 absolute, ~2 ulp of p).
 * Independently, a pure double trajectory from the initial state must end within 1e-6 of the
 * kernel's parameters after 3 steps. */
/* adamw_update_half (--bf16 / --fp16: the 16-bit copy written in AdamW's pass): the parameters
 * and moments are adamw_update's bit for bit, and the copy is each updated parameter rounded by
 * dtype.h's conversion (PyTorch's bits: test_bf16), in both formats, over enough elements for
 * the OpenMP team, with a value past fp16's range. */
static void test_adamw_half(void) {
    const size_t n = 100003;
    const adamw_hparams h = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
    for (int f = 0; f < 2; f++) {
        const half_kind kind = f ? HALF_FP16 : HALF_BF16;
        float *p = frandom(n, -1, 1), *g = frandom(n, -2, 2), *m = frandom(n, -1, 1);
        float *v = frandom(n, 0, 1), *p2 = falloc(n), *m2 = falloc(n), *v2 = falloc(n);
        uint16_t *p16 = malloc(n * sizeof(uint16_t));
        p[7] = 70000.0f; /* rounds to fp16's infinity */
        memcpy(p2, p, n * sizeof(float));
        memcpy(m2, m, n * sizeof(float));
        memcpy(v2, v, n * sizeof(float));
        adamw_update(p, g, m, v, n, h);
        adamw_update_half(p2, p16, kind, g, m2, v2, n, h);
        size_t off = 0;
        for (size_t i = 0; i < n; i++)
            off += p16[i] != (kind == HALF_FP16 ? fp16_from_float(p2[i]) : bf16_from_float(p2[i]));
        printf("  adamw_update_half %s: %zu copies off\n", half_kind_name(kind), off);
        CHECK(memcmp(p, p2, n * sizeof(float)) == 0 && memcmp(m, m2, n * sizeof(float)) == 0 &&
              memcmp(v, v2, n * sizeof(float)) == 0);
        CHECK(off == 0);
        CHECK(kind == HALF_BF16 || p16[7] == 0x7c00u);
        free(p);
        free(g);
        free(m);
        free(v);
        free(p2);
        free(m2);
        free(v2);
        free(p16);
    }
}

static void test_adamw(void) {
    printf("adamw\n");
    test_adamw_half();
    const size_t n = 64;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    float *p = frandom(n, -1, 1), *m = falloc(n), *v = falloc(n);
    double *tp = to_double(p, n), *tm = dalloc(n), *tv = dalloc(n); /* double trajectory */
    for (int step = 1; step <= 3; step++) {
        float *g = frandom(n, -2, 2);
        if (step == 2)
            g[0] = 0.0f; /* a zero gradient still decays */
        double *p0 = to_double(p, n), *m0 = to_double(m, n), *v0 = to_double(v, n);
        adamw_update(p, g, m, v, n, (adamw_hparams){lr, b1, b2, eps, wd, step});
        const double bc1 = 1.0 - pow(b1, step), bc2 = 1.0 - pow(b2, step);
        double worst_p = 0.0, worst_mv = 0.0, worst_nowd = 0.0;
        for (size_t i = 0; i < n; i++) {
            const double gi = g[i];
            const double mi = (double)b1 * m0[i] + (1.0 - (double)b1) * gi;
            const double vi = (double)b2 * v0[i] + (1.0 - (double)b2) * gi * gi;
            const double adam = lr * ((mi / bc1) / (sqrt(vi / bc2) + eps));
            const double upd = adam + (double)lr * wd * p0[i];
            const double got = (double)p[i] - p0[i];
            worst_p = fmax(worst_p, fabs(got + upd) / (1e-3 * fabs(upd) + 2e-7));
            worst_nowd = fmax(worst_nowd, fabs(got + adam) / (1e-3 * fabs(adam) + 2e-7));
            worst_mv =
                fmax(worst_mv,
                     fabs(m[i] - mi) / (1e-6 * (fabs(b1 * m0[i]) + fabs((1 - b1) * gi)) + 1e-30));
            worst_mv =
                fmax(worst_mv, fabs(v[i] - vi) /
                                   (1e-6 * (fabs(b2 * v0[i]) + fabs((1 - b2) * gi * gi)) + 1e-30));
            /* pure double trajectory */
            tm[i] = (double)b1 * tm[i] + (1.0 - (double)b1) * gi;
            tv[i] = (double)b2 * tv[i] + (1.0 - (double)b2) * gi * gi;
            tp[i] -= lr * ((tm[i] / bc1) / (sqrt(tv[i] / bc2) + eps) + (double)wd * tp[i]);
        }
        printf("  adamw step %d: update err/tol %.3f, m/v err/tol %.3f\n", step, worst_p, worst_mv);
        CHECK(worst_p <= 1.0);
        CHECK(worst_mv <= 1.0);
        CHECK(worst_nowd > 1.0); /* the check would catch a missing weight decay */
        free(g);
        free(p0);
        free(m0);
        free(v0);
    }
    double perr = 0.0;
    for (size_t i = 0; i < n; i++)
        perr = fmax(perr, fabs(p[i] - tp[i]));
    printf("  adamw 3-step trajectory: max |p - p_double| = %.1e\n", perr);
    CHECK(perr < 1e-6);
    free(p);
    free(m);
    free(v);
    free(tp);
    free(tm);
    free(tv);
}

int main(void) {
    test_linear();
    test_norm(1);
    test_norm(0);
    test_qk_norm(1);
    test_qk_norm(0);
    test_gelu(GELU_TANH);
    test_gelu(GELU_ERF);
    test_swiglu();
    /* GQA (NG < NH), causal and not, with and without dropout */
    test_attention(2, 7, 4, 2, 4, 1, 0.0f);
    test_attention(2, 7, 4, 2, 4, 0, 0.0f);
    test_attention(2, 7, 4, 2, 4, 1, 0.2f);
    test_attention(2, 7, 4, 2, 4, 0, 0.2f);
    /* MHA (NG == NH), odd sizes */
    test_attention(2, 9, 3, 3, 5, 1, 0.15f);
    /* T > 64: crosses the causal row-block boundary; MQA (NG = 1) */
    test_attention(1, 70, 2, 1, 4, 1, 0.1f);
    test_attention(1, 70, 2, 1, 4, 0, 0.0f);
    /* keys from kv_len on masked (a variable-length micro-batch padded for sequence
     * parallelism): bidirectional and causal, with dropout, and across a 64-row block */
    test_attention_kv(2, 7, 4, 2, 4, 0, 0.0f, 5);
    test_attention_kv(2, 7, 4, 2, 4, 0, 0.2f, 4);
    test_attention_kv(2, 7, 4, 2, 4, 1, 0.0f, 5);
    test_attention_kv(1, 70, 2, 1, 4, 0, 0.1f, 66);
    /* packed documents: rows of several documents (crossing the 64-row blocks at T = 70) and
     * a row of one (the code without documents); dropout on; padding */
    {
        const int ends7[] = {2, 3, 7, -1, 7, -1};
        const int ends70[] = {5, 63, 66, 70, -1};
        test_attention_docs(2, 7, 4, 2, 4, 1, 0.2f, 0, ends7);
        test_attention_docs(2, 7, 4, 2, 4, 0, 0.2f, 0, ends7);
        test_attention_docs(1, 70, 2, 1, 4, 1, 0.1f, 0, ends70);
        test_attention_docs(1, 70, 2, 1, 4, 0, 0.1f, 68, ends70);
    }
    test_attention_bf16(2, 7, 4, 2, 4, 1, 0.0f);
    test_attention_bf16(2, 9, 3, 3, 5, 0, 0.2f);
    test_attention_bf16(1, 70, 2, 1, 8, 1, 0.1f);
    test_rope(8);
    test_rope(4); /* rot_dim < HS: channels past rot_dim pass through */
    test_embedding();
    test_cross_entropy();
    test_dropout(0);
    test_dropout(1);
    test_adamw();
    TEST_DONE();
}
