/* oneDNN's matmul primitive, one per call shape, cached: see onednn_matmul.h. */
#include "core/kernels/onednn_matmul.h"

#include <stdio.h>
#include <string.h>

#include "core/util/die.h"
#include "core/util/error.h"

#ifdef MEGADLM_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

/* Everything that decides a primitive: two calls with equal keys run the same primitive. */
typedef struct {
    int M, N, K, ta, tb, lda, ldb, ldc;
    float alpha, beta;
} mm_key;

typedef struct {
    mm_key key;
    int used;               /* the slot holds a key */
    dnnl_primitive_t prim;  /* NULL: oneDNN has only its reference code for this key */
    dnnl_memory_t a, b, c;  /* the operands' descriptions; data handles set per call */
} mm_entry;

/* A GPT step has about a dozen shapes (the output layer's chunks, TP, MoE add some): more than
 * this many keys replace the oldest. */
#define MM_CACHE 128

static struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mm_entry cache[MM_CACHE];
    int next;          /* the slot a new key takes */
    int cached, refused;
    char impl[64];     /* the last primitive's implementation */
} g_mm;

int onednn_matmul_init(char *err, size_t errlen) {
    if (g_mm.stream) return 0;
    if (dnnl_engine_create(&g_mm.engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&g_mm.stream, g_mm.engine, dnnl_stream_default_flags) != dnnl_success) {
        err_set(err, errlen, "oneDNN: cannot create a CPU engine and stream for its matmul");
        return -1;
    }
    snprintf(g_mm.impl, sizeof g_mm.impl, "none yet");
    return 0;
}

static int key_eq(const mm_key *a, const mm_key *b) {
    return a->M == b->M && a->N == b->N && a->K == b->K && a->ta == b->ta && a->tb == b->tb &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->alpha == b->alpha &&
           a->beta == b->beta;
}

static void entry_free(mm_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->a) dnnl_memory_destroy(e->a);
    if (e->b) dnnl_memory_destroy(e->b);
    if (e->c) dnnl_memory_destroy(e->c);
    memset(e, 0, sizeof *e);
}

/* A [rows, cols] matrix stored with row stride ld, or transposed (stored [cols, rows]). */
static int md_2d(dnnl_memory_desc_t *md, int rows, int cols, int ld, int trans,
                 dnnl_data_type_t dt) {
    const dnnl_dims_t dims = {rows, cols};
    const dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides) == dnnl_success ? 0 : -1;
}

/* alpha as oneDNN's output scale, beta as its sum post-op (C read only when beta != 0) */
static dnnl_primitive_attr_t make_attr(float alpha, float beta) {
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return NULL;
    int ok = alpha == 1.0f ||
             dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
    if (ok && beta != 0.0f) {
        dnnl_post_ops_t po = NULL;
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
        if (po) dnnl_post_ops_destroy(po);
    }
    if (!ok) {
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    return attr;
}

/* The primitive for key k into e (e->prim stays NULL where oneDNN has only reference code). */
static void entry_build(mm_entry *e, const mm_key *k) {
    e->key = *k;
    e->used = 1;
    dnnl_memory_desc_t amd, bmd, cmd;
    if (md_2d(&amd, k->M, k->K, k->lda, k->ta, dnnl_bf16) ||
        md_2d(&bmd, k->K, k->N, k->ldb, k->tb, dnnl_bf16) ||
        md_2d(&cmd, k->M, k->N, k->ldc, 0, dnnl_f32))
        return;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd) != dnnl_success) return;
    dnnl_primitive_attr_t attr = make_attr(k->alpha, k->beta);
    if (!attr) return;
    dnnl_primitive_desc_t pd = NULL;
    const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, g_mm.engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    snprintf(g_mm.impl, sizeof g_mm.impl, "none offered");
    if (st != dnnl_success) return;
    const char *impl = "";
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    const int jit = impl && strncmp(impl, "ref", 3) != 0;
    snprintf(g_mm.impl, sizeof g_mm.impl, "%s", impl ? impl : "?");
    if (jit && dnnl_primitive_create(&e->prim, pd) == dnnl_success &&
        dnnl_memory_create(&e->a, &amd, g_mm.engine, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_memory_create(&e->b, &bmd, g_mm.engine, DNNL_MEMORY_NONE) == dnnl_success &&
        dnnl_memory_create(&e->c, &cmd, g_mm.engine, DNNL_MEMORY_NONE) == dnnl_success) {
        g_mm.cached++;
    } else {
        entry_free(e);
        e->key = *k;
        e->used = 1; /* remembered: no primitive for this key */
    }
    dnnl_primitive_desc_destroy(pd);
}

static mm_entry *lookup(const mm_key *k) {
    for (int i = 0; i < MM_CACHE; i++)
        if (g_mm.cache[i].used && key_eq(&g_mm.cache[i].key, k)) return &g_mm.cache[i];
    mm_entry *e = &g_mm.cache[g_mm.next];
    g_mm.next = (g_mm.next + 1) % MM_CACHE;
    if (e->prim) g_mm.cached--;
    entry_free(e);
    entry_build(e, k);
    if (!e->prim) g_mm.refused++;
    return e;
}

int onednn_matmul_run(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta,
                      gemm_out C) {
    const mm_key k = {d.M, d.N, d.K, A.trans, B.trans, A.ld, B.ld, C.ld, alpha, beta};
    mm_entry *e = lookup(&k);
    if (!e->prim) return 1;
    dnnl_memory_set_data_handle(e->a, (void *)A.p);
    dnnl_memory_set_data_handle(e->b, (void *)B.p);
    dnnl_memory_set_data_handle(e->c, C.p);
    const dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    if (dnnl_primitive_execute(e->prim, g_mm.stream, 3, args) != dnnl_success ||
        dnnl_stream_wait(g_mm.stream) != dnnl_success)
        die(1, "oneDNN's bf16 matmul failed on M %d N %d K %d", d.M, d.N, d.K);
    return 0;
}

const char *onednn_matmul_impl(void) { return g_mm.impl[0] ? g_mm.impl : "none yet"; }
int onednn_matmul_cached(void) { return g_mm.cached; }
int onednn_matmul_refused(void) { return g_mm.refused; }

void onednn_matmul_clear(void) {
    for (int i = 0; i < MM_CACHE; i++) entry_free(&g_mm.cache[i]);
    g_mm.next = g_mm.cached = g_mm.refused = 0;
}

#else /* built without oneDNN */

int onednn_matmul_init(char *err, size_t errlen) {
    err_set(err, errlen, "megadlm was built without oneDNN (libdnnl-dev)");
    return -1;
}
int onednn_matmul_run(gemm_dims d, float alpha, gemm_in_bf16 A, gemm_in_bf16 B, float beta,
                      gemm_out C) {
    return 1;
}
const char *onednn_matmul_impl(void) { return "none (built without oneDNN)"; }
int onednn_matmul_cached(void) { return 0; }
int onednn_matmul_refused(void) { return 0; }
void onednn_matmul_clear(void) {}

#endif
