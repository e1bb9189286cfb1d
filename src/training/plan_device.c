#include "training/plan_device.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "core/kernels/activation.h"
#include "core/kernels/dropout.h"
#include "core/kernels/gemm.h"
#include "core/kernels/norm.h"
#include "core/parallel_state.h"
#include "core/threads.h"

/* ---- presets: public figures (docs/PLAN.md, "Devices", cites each) ---- */

#define GIB (1024.0 * 1024.0 * 1024.0)

/* The sustained share of the dense peak the model's FLOPs run at on a GPU preset: an
 * assumption (docs/PLAN.md says why 0.7 and what it moves), replaced by a device file's own. */
#define PLAN_GPU_EFFICIENCY 0.7

/* What every GPU preset shares: the assumed efficiency, an 8-GPU node, memory of its own per
 * rank, Megatron's accounting of it, no modelled latency */
#define GPU_PRESET                                                                             \
    .efficiency = PLAN_GPU_EFFICIENCY, .latency = 0.0, .ranks_per_node = 8, .shared = 0,       \
    .account = PLAN_ACCOUNT_MEGATRON

static const plan_device PRESETS[] = {
    {GPU_PRESET,
     .name = "A100-80GB",
     .flops_bf16 = 312e12,
     .flops_fp32 = 19.5e12,
     .memory_bytes = 80.0 * GIB,
     .memory_bandwidth = 2039e9,
     .intra_bandwidth = 300e9,
     .inter_bandwidth = 25e9,
     .source = "NVIDIA A100 80GB SXM datasheet: 312 TFLOP/s bf16 dense, 19.5 TFLOP/s fp32, "
               "80 GB HBM2e at 2039 GB/s, NVLink 600 GB/s (300 per direction); DGX A100: 8 "
               "GPUs, one 200 Gb/s HDR InfiniBand port each (25 GB/s)"},
    {GPU_PRESET,
     .name = "H100-80GB",
     .flops_bf16 = 989e12,
     .flops_fp32 = 67e12,
     .memory_bytes = 80.0 * GIB,
     .memory_bandwidth = 3350e9,
     .intra_bandwidth = 450e9,
     .inter_bandwidth = 50e9,
     .source = "NVIDIA H100 SXM5 80GB datasheet: 989 TFLOP/s bf16 dense, 67 TFLOP/s fp32, 80 GB "
               "HBM3 at 3.35 TB/s, NVLink 900 GB/s (450 per direction); DGX H100: 8 GPUs, one "
               "400 Gb/s NDR InfiniBand port each (50 GB/s)"},
};
#define NUM_PRESETS (int)(sizeof(PRESETS) / sizeof(PRESETS[0]))

int plan_device_preset(const char *name, plan_device *d) {
    for (int i = 0; i < NUM_PRESETS; i++)
        if (!strcasecmp(name, PRESETS[i].name)) {
            *d = PRESETS[i];
            return 0;
        }
    return -1;
}

const char *plan_device_preset_names(void) { return "A100-80GB, H100-80GB"; }

/* ---- JSON ---- */

static int fail(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
    if (err && errlen) snprintf(err, errlen, fmt, a, b);
    return -1;
}

/* A number of the file, within [lo, hi]: the bounds are wide of any real device (rates from
 * 1 MFLOP/s to 1 EFLOP/s, memory from 1 MiB to 1 PB, bandwidths from 1 MB/s to 1 PB/s, latency
 * up to 1 s) and keep every term of the cost model a finite, normal number; a denormal rate
 * or a huge latency would make every row's time inf and the order meaningless. 0 is also
 * accepted where zero_ok (the key's "none": no latency, no elementwise measurement). */
typedef struct {
    const char *key;
    size_t off;   /* offset of a double field, or of the int for INT keys */
    int is_int;
    int required;
    int zero_ok;
    double lo, hi;
    const char *unit;
} num_key;

#define D(key, field, req, zero, lo, hi, unit) \
    {key, offsetof(plan_device, field), 0, req, zero, lo, hi, unit}
static const num_key NUM_KEYS[] = {
    D("flops_bf16", flops_bf16, 1, 0, 1e6, 1e18, "FLOP/s"),
    D("flops_fp32", flops_fp32, 1, 0, 1e6, 1e18, "FLOP/s"),
    D("efficiency", efficiency, 0, 0, 1e-3, 1.0, "a share of the peak"),
    D("memory_bytes", memory_bytes, 1, 0, 1048576.0, 1e15, "bytes"),
    D("memory_bandwidth", memory_bandwidth, 1, 0, 1e6, 1e15, "bytes/s"),
    D("intra_node_bandwidth", intra_bandwidth, 1, 0, 1e6, 1e15, "bytes/s"),
    D("inter_node_bandwidth", inter_bandwidth, 1, 0, 1e6, 1e15, "bytes/s"),
    D("latency", latency, 0, 1, 1e-12, 1.0, "seconds"),
    D("elementwise_bandwidth", elementwise_bandwidth, 0, 1, 1e6, 1e15, "bytes/s"),
    {"ranks_per_node", offsetof(plan_device, ranks_per_node), 1, 0, 1, 1.0, 1e9, "ranks"},
};
#undef D
#define NUM_NUM_KEYS (int)(sizeof(NUM_KEYS) / sizeof(NUM_KEYS[0]))

/* "\"KEY\": VALUE is outside [LO, HI] UNIT" (or 0) */
static int out_of_bounds(char *err, size_t errlen, const char *key, double x, double lo,
                         double hi, int zero_ok, const char *unit) {
    if (err && errlen)
        snprintf(err, errlen, "\"%s\": %g is outside [%g, %g] %s%s", key, x, lo, hi, unit,
                 zero_ok ? " (or 0)" : "");
    return -1;
}

static int read_number(const cJSON *o, const num_key *k, plan_device *d, char *err,
                       size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k->key);
    if (!v) return k->required ? fail(err, errlen, "\"%s\": missing (a number)%s", k->key, "") : 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return fail(err, errlen, "\"%s\": expected a number%s", k->key, "");
    double x = v->valuedouble;
    if (!(x == 0.0 && k->zero_ok) && !(x >= k->lo && x <= k->hi))
        return out_of_bounds(err, errlen, k->key, x, k->lo, k->hi, k->zero_ok, k->unit);
    if (k->is_int) {
        if (x != floor(x))
            return fail(err, errlen, "\"%s\": expected a whole number of ranks%s", k->key, "");
        *(int *)((char *)d + k->off) = (int)x;
    } else {
        *(double *)((char *)d + k->off) = x;
    }
    return 0;
}

static int read_string(const cJSON *o, const char *key, char *out, size_t n, char *err,
                       size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return fail(err, errlen, "\"%s\": expected a string%s", key, "");
    snprintf(out, n, "%s", v->valuestring);
    return 0;
}

/* "gemm_dims", "gemm_rates_fp32", "gemm_rates_bf16": arrays of the same length (at most
 * PLAN_GEMM_POINTS), positive numbers, the sizes increasing */
static int read_array(const cJSON *o, const char *key, double *out, int *n, char *err,
                      size_t errlen) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return 0;
    int len = cJSON_GetArraySize(v);
    if (!cJSON_IsArray(v) || len < 1 || len > PLAN_GEMM_POINTS)
        return fail(err, errlen, "\"%s\": expected an array of 1 to 8 numbers%s", key, "");
    if (*n && len != *n)
        return fail(err, errlen, "\"%s\": expected as many numbers as \"gemm_dims\"%s", key, "");
    for (int i = 0; i < len; i++) {
        const cJSON *x = cJSON_GetArrayItem(v, i);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            return fail(err, errlen, "\"%s\": expected positive numbers%s", key, "");
        /* sizes n of n x n x n GEMMs; rates as flops_* */
        int dims = !strcmp(key, "gemm_dims");
        double lo = dims ? 1.0 : 1e6, hi = dims ? 1e6 : 1e18;
        if (!(x->valuedouble >= lo && x->valuedouble <= hi)) {
            char at[64];
            snprintf(at, sizeof at, "%s[%d]", key, i);
            return out_of_bounds(err, errlen, at, x->valuedouble, lo, hi, 0,
                                 dims ? "(the GEMM size)" : "FLOP/s");
        }
        out[i] = x->valuedouble;
        if (!strcmp(key, "gemm_dims") && i > 0 && out[i] <= out[i - 1])
            return fail(err, errlen, "\"%s\": expected increasing sizes%s", key, "");
    }
    *n = len;
    return 0;
}

static int read_gemm_table(const cJSON *o, plan_device *d, char *err, size_t errlen) {
    int n = 0;
    if (read_array(o, "gemm_dims", d->gemm_dim, &n, err, errlen)) return -1;
    int has_dims = n;
    if (read_array(o, "gemm_rates_fp32", d->gemm_fp32, &n, err, errlen) ||
        read_array(o, "gemm_rates_bf16", d->gemm_bf16, &n, err, errlen))
        return -1;
    int with_rates = cJSON_GetObjectItemCaseSensitive(o, "gemm_rates_fp32") &&
                     cJSON_GetObjectItemCaseSensitive(o, "gemm_rates_bf16");
    if (has_dims != 0 && !with_rates)
        return fail(err, errlen, "\"gemm_dims\": needs \"gemm_rates_fp32\" and "
                                 "\"gemm_rates_bf16\"%s%s", "", "");
    if (!has_dims && (cJSON_GetObjectItemCaseSensitive(o, "gemm_rates_fp32") ||
                      cJSON_GetObjectItemCaseSensitive(o, "gemm_rates_bf16")))
        return fail(err, errlen, "\"gemm_rates_fp32\" / \"gemm_rates_bf16\": need "
                                 "\"gemm_dims\"%s%s", "", "");
    d->gemm_points = has_dims ? n : 0;
    return 0;
}

static void add_array(cJSON *o, const char *key, const double *x, int n) {
    cJSON *arr = cJSON_AddArrayToObject(o, key);
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(x[i]));
}

int plan_device_from_json(const cJSON *o, plan_device *d, char *err, size_t errlen) {
    if (!cJSON_IsObject(o)) return fail(err, errlen, "expected a JSON object%s%s", "", "");
    memset(d, 0, sizeof(*d));
    d->efficiency = 1.0;
    snprintf(d->name, sizeof d->name, "custom");
    for (int i = 0; i < NUM_NUM_KEYS; i++)
        if (read_number(o, &NUM_KEYS[i], d, err, errlen)) return -1;
    if (read_gemm_table(o, d, err, errlen)) return -1;
    char account[32] = "megatron";
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shared");
    if (sh && !cJSON_IsBool(sh)) return fail(err, errlen, "\"shared\": expected true or false%s%s", "", "");
    d->shared = sh && cJSON_IsTrue(sh);
    if (read_string(o, "name", d->name, sizeof d->name, err, errlen) ||
        read_string(o, "source", d->source, sizeof d->source, err, errlen) ||
        read_string(o, "memory_account", account, sizeof account, err, errlen))
        return -1;
    if (!strcmp(account, "megatron")) d->account = PLAN_ACCOUNT_MEGATRON;
    else if (!strcmp(account, "megadlm")) d->account = PLAN_ACCOUNT_MEGADLM;
    else return fail(err, errlen, "\"memory_account\": \"%s\": expected megatron or megadlm%s", account, "");
    return 0;
}

cJSON *plan_device_to_json(const plan_device *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", d->name);
    for (int i = 0; i < NUM_NUM_KEYS; i++) {
        const char *p = (const char *)d + NUM_KEYS[i].off;
        cJSON_AddNumberToObject(o, NUM_KEYS[i].key,
                                NUM_KEYS[i].is_int ? *(const int *)p : *(const double *)p);
    }
    if (d->gemm_points > 0) {
        add_array(o, "gemm_dims", d->gemm_dim, d->gemm_points);
        add_array(o, "gemm_rates_fp32", d->gemm_fp32, d->gemm_points);
        add_array(o, "gemm_rates_bf16", d->gemm_bf16, d->gemm_points);
    }
    cJSON_AddBoolToObject(o, "shared", d->shared);
    cJSON_AddStringToObject(o, "memory_account",
                            d->account == PLAN_ACCOUNT_MEGADLM ? "megadlm" : "megatron");
    cJSON_AddStringToObject(o, "source", d->source);
    return o;
}

int plan_device_load(const char *path, plan_device *d, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return fail(err, errlen, "%s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (1u << 20)) { /* a description is a few hundred bytes */
                free(buf);
                fclose(f);
                return fail(err, errlen, "%s: larger than 1 MiB: not a device description%s", path, "");
            }
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return fail(err, errlen, "%s: out of memory%s", path, "");
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    fclose(f);
    buf[n] = 0;
    cJSON *o = cJSON_Parse(buf);
    free(buf);
    if (!o) return fail(err, errlen, "%s: not valid JSON%s", path, "");
    char inner[512];
    int rc = plan_device_from_json(o, d, inner, sizeof inner);
    cJSON_Delete(o);
    if (rc) return fail(err, errlen, "%s: %s", path, inner);
    return 0;
}

/* mkdir -p of path's directory */
static int make_parent_dirs(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

int plan_device_save(const char *path, const plan_device *d, char *err, size_t errlen) {
    if (make_parent_dirs(path)) return fail(err, errlen, "%s: cannot create its directory: %s", path, strerror(errno));
    cJSON *o = plan_device_to_json(d);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    FILE *f = s ? fopen(path, "w") : NULL;
    int ok = f && fprintf(f, "%s\n", s) > 0;
    if (f && fclose(f) != 0) ok = 0;
    free(s);
    if (!ok) return fail(err, errlen, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

int plan_device_cache_path(char *out, size_t n) {
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (xdg && xdg[0]) snprintf(out, n, "%s/megadlm/device-this-cpu.json", xdg);
    else if (home && home[0]) snprintf(out, n, "%s/.cache/megadlm/device-this-cpu.json", home);
    else return -1;
    return 0;
}

/* ---- calibration ---- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Every measurement below is a window: all ranks start together (a barrier under mpirun) and
 * count the work they finish in about `seconds` of wall time, so that ranks sharing cores
 * (more ranks than CPUs, or a busy machine) each count only what they got, and the sum over
 * the ranks is the node's rate */
static void window_start(void) {
    if (parallel_get()->mpi) MPI_Barrier(MPI_COMM_WORLD);
}

/* GEMM FLOP/s of this process for an n x n x n product, fp32 (sgemm) or bf16 operands
 * (gemm_bf16: oneDNN or the widening fallback, what --bf16 runs), over a window of about
 * `seconds` (after one untimed call) */
static double measure_gemm(int n, int half, double seconds) {
    size_t nn = (size_t)n * n;
    float *A = malloc(sizeof(float) * nn), *B = malloc(sizeof(float) * nn);
    float *C = calloc(nn, sizeof(float));
    bf16 *Ah = malloc(sizeof(bf16) * nn), *Bh = malloc(sizeof(bf16) * nn);
    double best = 0.0;
    if (A && B && C && Ah && Bh) {
        for (size_t i = 0; i < nn; i++) {
            A[i] = (float)((i * 7919u) % 1000u) * 1e-3f;
            B[i] = (float)((i * 104729u) % 1000u) * 1e-3f;
        }
        bf16_from_f32(Ah, A, nn);
        bf16_from_f32(Bh, B, nn);
        gemm_dims dims = {n, n, n};
#define RUN_GEMM()                                                                                 \
    do {                                                                                           \
        if (half) gemm_bf16(dims, 1.0f, gemm_n_bf16(Ah, n), gemm_n_bf16(Bh, n), 0.0f, gemm_o(C, n)); \
        else gemm(dims, 1.0f, gemm_n(A, n), gemm_n(B, n), 0.0f, gemm_o(C, n));                     \
    } while (0)
        RUN_GEMM();
        window_start();
        double start = now(), calls = 0.0;
        do {
            RUN_GEMM();
            calls += 1.0;
        } while (now() - start < seconds);
#undef RUN_GEMM
        best = 2.0 * n * n * (double)n * calls / (now() - start);
    } else {
        window_start(); /* the other ranks wait for this one */
    }
    free(A), free(B), free(C), free(Ah), free(Bh);
    return best;
}

/* Bytes/s of a triad a = b + s c over arrays larger than any cache (3 arrays of 32 MiB: two
 * read, one written), with this process's threads, over a window */
static double measure_memory(double seconds) {
    size_t n = 8u << 20;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float)),
          *c = malloc(n * sizeof(float));
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        window_start();
        return 0.0;
    }
    for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
    window_start();
    double start = now(), passes = 0.0;
    do {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)n; i++) a[i] = b[i] + 0.5f * c[i];
        passes += 1.0;
    } while (now() - start < seconds);
    double best = 3.0 * n * sizeof(float) * passes / (now() - start);
    volatile float sink = a[n / 2];
    (void)sink;
    free(a), free(b), free(c);
    return best;
}

/* Busy work of about `seconds` between transfers: a rank that computes, as in training, and is
 * not spinning in MPI */
static void busy(double seconds) {
    volatile double x = 0.0;
    double t0 = now();
    while (now() - t0 < seconds)
        for (int i = 0; i < 1000; i++) x += i * 1e-9;
}

/* Ranks 0 and 1 of the world: one-way time of 8-byte messages (the latency) and bandwidth of
 * 4 MiB ones, each the mean over repeats with 0.2 ms of compute before every exchange (every
 * rank computes, none waits in a barrier), so that the scheduling delays of a busy or
 * oversubscribed node are in the figures as training meets them */
static void measure_mpi(double *bandwidth, double *latency) {
    int rank = parallel_world_rank();
    size_t big = 4u << 20;
    char *buf = calloc(big, 1);
    double sum[2] = {0.0, 0.0}; /* seconds one way: small, big */
    const int small_reps = 100, big_reps = 10;
    for (int rep = 0; rep < small_reps + big_reps; rep++) {
        size_t n = rep < small_reps ? 8 : big;
        busy(2e-4);
        if (rank >= 2 || !buf) continue;
        int peer = 1 - rank;
        double t0 = now();
        if (rank == 0) {
            MPI_Send(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)n, MPI_BYTE, peer, 7, MPI_COMM_WORLD);
        }
        sum[n == big] += (now() - t0) / 2.0;
    }
    free(buf);
    double res[2] = {sum[0] / small_reps, 0.0};
    double big_one_way = sum[1] / big_reps - res[0];
    res[1] = big / (big_one_way > 0.0 ? big_one_way : sum[1] / big_reps);
    MPI_Bcast(res, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    *latency = res[0], *bandwidth = res[1];
}

static double node_memory_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (double)pages * (double)size : 0.0;
}

/* The sizes calibration measures: a small model's widths up to a large one's */
static const int CAL_DIMS[] = {32, 64, 128, 256, 512, 1024};
#define NUM_CAL_DIMS (int)(sizeof(CAL_DIMS) / sizeof(CAL_DIMS[0]))

/* Every rank measures at once with its share of the cores: the node's rates are the sums */
static void measure_gemm_table(plan_device *d, int mpi) {
    double r[2 * NUM_CAL_DIMS];
    for (int i = 0; i < NUM_CAL_DIMS; i++) {
        r[i] = measure_gemm(CAL_DIMS[i], 0, 0.15);
        r[NUM_CAL_DIMS + i] = measure_gemm(CAL_DIMS[i], 1, 0.15);
    }
    if (mpi) MPI_Allreduce(MPI_IN_PLACE, r, 2 * NUM_CAL_DIMS, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    d->gemm_points = NUM_CAL_DIMS;
    d->flops_fp32 = d->flops_bf16 = 0.0;
    for (int i = 0; i < NUM_CAL_DIMS; i++) {
        d->gemm_dim[i] = CAL_DIMS[i];
        d->gemm_fp32[i] = r[i];
        d->gemm_bf16[i] = r[NUM_CAL_DIMS + i];
        d->flops_fp32 = fmax(d->flops_fp32, r[i]);
        d->flops_bf16 = fmax(d->flops_bf16, r[NUM_CAL_DIMS + i]);
    }
}

/* megadlm's elementwise kernels, forward and backward, over 4 MiB of fp32 activations: the
 * three kinds a layer saves most of (dropout, GeLU, LayerNorm), each pair counted as taking
 * its 4 MiB through a layer once. Bytes per second over a window. */
static double measure_elementwise(double seconds) {
    size_t n = 1u << 20;
    int C = 256, N = (int)(n / 256);
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    float *dy = malloc(n * sizeof(float)), *dx = malloc(n * sizeof(float));
    float *w = malloc(C * sizeof(float)), *b = calloc(C, sizeof(float));
    float *dw = calloc(C, sizeof(float)), *db = calloc(C, sizeof(float));
    float *mean = malloc(N * sizeof(float)), *rstd = malloc(N * sizeof(float));
    double best = 0.0;
    if (x && y && dy && dx && w && b && dw && db && mean && rstd) {
        for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f, dy[i] = 1e-3f;
        for (int i = 0; i < C; i++) w[i] = 1.0f;
        dropout_key key = {1, 1, 0, 0, DROPOUT_SITE_MLP_OUT};
        window_start();
        double start = now(), rounds = 0.0;
        do {
            dropout_forward(y, x, n, 0.1f, key, 0);
            memset(dx, 0, n * sizeof(float));
            dropout_backward(dx, dy, n, 0.1f, key, 0);
            gelu_forward(y, x, n, GELU_TANH);
            gelu_backward(dx, dy, x, n, GELU_TANH);
            layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
            layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
            rounds += 1.0;
        } while (now() - start < seconds);
        best = 3.0 * n * sizeof(float) * rounds / (now() - start);
    } else {
        window_start();
    }
    free(x), free(y), free(dy), free(dx), free(w), free(b), free(dw), free(db), free(mean), free(rstd);
    return best;
}

void plan_device_calibrate(plan_device *d) {
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof d->name, "this-cpu");
    int world = parallel_world_size(), mpi = parallel_get()->mpi && world > 1;
    threads_setup(parallel_get()->mpi);
    measure_gemm_table(d, mpi);
    double bw[2] = {measure_memory(0.3), measure_elementwise(0.3)};
    if (mpi) MPI_Allreduce(MPI_IN_PLACE, bw, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    d->memory_bandwidth = bw[0];
    d->elementwise_bandwidth = bw[1];
    d->efficiency = 1.0; /* the rates are sustained ones */
    d->memory_bytes = node_memory_bytes();
    d->ranks_per_node = 0;
    d->shared = 1;
    d->account = PLAN_ACCOUNT_MEGADLM;
    if (mpi) {
        measure_mpi(&d->intra_bandwidth, &d->latency);
        snprintf(d->source, sizeof d->source,
                 "measured on this machine by %d ranks at once: sgemm and bf16 GEMMs of 32 to "
                 "1024, megadlm's dropout, GeLU and LayerNorm kernels, triad over 3 x 32 MiB, MPI ping-pong between ranks 0 and 1 (4 MiB, 8 B; means with compute between)",
                 world);
    } else {
        d->intra_bandwidth = d->memory_bandwidth / 2.0;
        d->latency = 5e-6;
        snprintf(d->source, sizeof d->source,
                 "measured on this machine by one process: sgemm and bf16 GEMMs of 32 to 1024, "
                 "megadlm's dropout, GeLU and LayerNorm kernels, triad over 3 x 32 MiB; not under mpirun: the link between ranks taken as half "
                 "the memory bandwidth and 5 us per message (run under mpirun -np 2 to measure "
                 "them)");
    }
    d->inter_bandwidth = d->intra_bandwidth;
}
