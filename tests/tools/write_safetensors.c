/* Helper for tests/scripts/test_safetensors_python.sh: the megadlm side of the safetensors
 * interoperability check with an independent Python reader/writer
 * (tests/python/check_safetensors.py).
 *
 *   write_safetensors write FILE   writes the fixed test tensors (below) with st_write_file
 *   write_safetensors dump FILE    reads FILE with st_open and prints it as JSON:
 *                                  {"metadata": {k: v}, "tensors": {name: {"dtype", "shape",
 *                                   "data_offsets", "f32_bits": [uint32 of each element read
 *                                   with st_read_f32]}}}   (exit 1 with the error on failure)
 *   write_safetensors ckpt DIR     ckpt_save of a small param_set (iteration 7, with optimizer
 *                                  state) whose values follow the same formula, NaN and
 *                                  infinity patterns made finite (exponent bit 23 cleared)
 *   write_safetensors write16 FILE writes 16-bit tensors (g_tensors16): floats of the formula
 *                                  converted to BF16 / F16 by the writer (from_f32), and raw
 *                                  bf16 patterns given as they are
 * dump also prints, for every F32/F16/BF16 tensor, "bf16_bits" and "f16_bits": the elements
 * read with st_read_as as BF16 and as F16 (and checks that reading the two halves of the
 * tensor separately gives the same).
 *
 * Test tensor k (0-based, in the order of g_tensors) holds, as float32 bit patterns,
 *   bits[i] = (uint32)(i * 2654435761 + k * 40503 + 12345)    (i = row-major element index)
 * which covers NaNs, infinities, denormals and negative zero among ordinary values.
 * The optimizer file's exp_avg uses k + 100 and exp_avg_sq k + 200. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/tensor/memory.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"
#include "training/checkpoint_files.h"

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} tspec;

/* Given order (not sorted by name): the file keeps it. */
static const tspec g_tensors[] = {
    {"decoder.layers.0.self_attention.linear_qkv.weight", 2, {24, 8}},
    {"embedding.word_embeddings.weight", 2, {33, 8}},
    {"decoder.final_layernorm.weight", 1, {8}},
    {"block.3d", 3, {2, 3, 4}},
    {"scalar", 0, {0}},
    {"empty", 2, {0, 4}},
    {"n\xc3\xa4me with \"quotes\", \\backslash and unicode \xe2\x88\x91", 1, {3}},
};
#define NT ((int)(sizeof g_tensors / sizeof g_tensors[0]))

static size_t numel_of(const tspec *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static void fill(uint32_t *dst, size_t n, uint32_t k) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint32_t)((uint64_t)i * 2654435761u + (uint64_t)k * 40503u + 12345u);
}

/* fill, with the NaN and infinity patterns made finite (the exponent's lowest bit cleared):
 * a checkpoint never holds a non-finite value (ckpt_save refuses it). */
static void fill_finite(uint32_t *dst, size_t n, uint32_t k) {
    fill(dst, n, k);
    for (size_t i = 0; i < n; i++)
        if ((dst[i] & 0x7f800000u) == 0x7f800000u) dst[i] ^= 0x00800000u;
}

/* 16-bit tensors: {name, dtype, shape, formula k or -1 for raw bf16 patterns}. "big" crosses
 * the writer's 65536-element conversion chunks. */
static const struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[2];
    int k;
} g_tensors16[] = {
    {"w.bf16", ST_BF16, 2, {6, 50}, 0},  {"w.f16", ST_F16, 2, {7, 30}, 1},
    {"w.f32", ST_F32, 1, {5}, 2},        {"raw.bf16", ST_BF16, 2, {3, 4}, -1},
    {"big.bf16", ST_BF16, 1, {140001}, 3}, {"empty.f16", ST_F16, 2, {0, 3}, 4},
};
#define NT16 ((int)(sizeof g_tensors16 / sizeof g_tensors16[0]))

static int cmd_write16(const char *path) {
    st_tensor_desc d[NT16];
    void *bufs[NT16];
    for (int i = 0; i < NT16; i++) {
        size_t n = 1;
        for (int a = 0; a < g_tensors16[i].ndim; a++) n *= (size_t)g_tensors16[i].shape[a];
        bufs[i] = mem_alloc(MEM_OTHER, n * 4 + 4, "write_safetensors");
        d[i] = (st_tensor_desc){.name = g_tensors16[i].name, .dtype = g_tensors16[i].dtype,
                                .ndim = g_tensors16[i].ndim, .shape = g_tensors16[i].shape};
        if (g_tensors16[i].k >= 0) {
            fill(bufs[i], n, (uint32_t)g_tensors16[i].k);
            d[i].from_f32 = bufs[i];
        } else {
            uint16_t *h = bufs[i];
            for (size_t j = 0; j < n; j++) h[j] = (uint16_t)(j * 40503u + 7u);
            d[i].data = h;
        }
    }
    st_meta meta[1] = {{"format", "pt"}};
    char err[1024];
    int rc = st_write_file(path, d, NT16, meta, 1, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    for (int i = 0; i < NT16; i++) mem_free(bufs[i]);
    return rc ? 1 : 0;
}

/* "key": [the elements of e read as `to` (16-bit patterns)]; 0, or 1 after printing the error */
static int dump16(const st_file *f, const st_entry *e, st_dtype to, cJSON *t, const char *key) {
    char err[1024];
    uint16_t *whole = malloc(e->numel * 2 + 2), *parts = malloc(e->numel * 2 + 2);
    const size_t half = e->numel / 2;
    int rc = 0;
    if (st_read_as(f, e, to, 0, e->numel, whole, err, sizeof err) ||
        st_read_as(f, e, to, 0, half, parts, err, sizeof err) ||
        st_read_as(f, e, to, half, e->numel - half, parts + half, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        rc = 1;
    } else if (memcmp(whole, parts, e->numel * 2) != 0) {
        fprintf(stderr, "error: %s: reading the two halves as %s differs from the whole\n",
                e->name, st_dtype_name(to));
        rc = 1;
    } else {
        cJSON *bits = cJSON_AddArrayToObject(t, key);
        for (size_t j = 0; j < e->numel; j++) cJSON_AddItemToArray(bits, cJSON_CreateNumber(whole[j]));
    }
    free(whole);
    free(parts);
    return rc;
}

static int cmd_write(const char *path) {
    st_tensor_desc d[NT];
    st_meta meta[NT + 2];
    char keys[NT][256], vals[NT][16];
    uint32_t *bufs[NT];
    for (int k = 0; k < NT; k++) {
        size_t n = numel_of(&g_tensors[k]);
        bufs[k] = mem_alloc(MEM_OTHER, n * 4 + 4, "write_safetensors");
        fill(bufs[k], n, (uint32_t)k);
        d[k] = (st_tensor_desc){g_tensors[k].name, ST_F32, g_tensors[k].ndim, g_tensors[k].shape,
                                bufs[k], NULL};
        snprintf(keys[k], sizeof keys[k], "crc32.%s", g_tensors[k].name);
        snprintf(vals[k], sizeof vals[k], "%08lx", crc32(0L, (const Bytef *)bufs[k], (uInt)(n * 4)));
        meta[k] = (st_meta){keys[k], vals[k]};
    }
    meta[NT] = (st_meta){"format", "pt"};
    meta[NT + 1] = (st_meta){"note", "h\xc3\xa9llo \"json\"\n\ttab"};
    char err[1024];
    int rc = st_write_file(path, d, NT, meta, NT + 2, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    for (int k = 0; k < NT; k++) mem_free(bufs[k]);
    return rc ? 1 : 0;
}

static int cmd_dump(const char *path) {
    st_file f;
    char err[1024];
    if (st_open(path, &f, err, sizeof err)) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
    for (int i = 0; i < f.nmeta; i++) cJSON_AddStringToObject(meta, f.meta_keys[i], f.meta_values[i]);
    cJSON *ts = cJSON_AddObjectToObject(root, "tensors");
    int rc = 0;
    for (int i = 0; i < f.count && rc == 0; i++) {
        const st_entry *e = &f.entries[i];
        if (st_find(&f, e->name) != e) {
            fprintf(stderr, "error: st_find(%s) did not return its entry\n", e->name);
            rc = 1;
            break;
        }
        cJSON *t = cJSON_AddObjectToObject(ts, e->name);
        cJSON_AddStringToObject(t, "dtype", st_dtype_name(e->dtype));
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < e->ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->shape[d]));
        cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)e->begin));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)e->end));
        float *vals = malloc(e->numel * 4 + 4);
        if (st_read_f32(&f, e, vals, err, sizeof err)) {
            fprintf(stderr, "error: %s\n", err);
            rc = 1;
        } else {
            cJSON *bits = cJSON_AddArrayToObject(t, "f32_bits");
            for (size_t j = 0; j < e->numel; j++) {
                uint32_t b;
                memcpy(&b, &vals[j], 4);
                cJSON_AddItemToArray(bits, cJSON_CreateNumber((double)b));
            }
            rc = dump16(&f, e, ST_BF16, t, "bf16_bits") || dump16(&f, e, ST_F16, t, "f16_bits");
        }
        free(vals);
    }
    if (rc == 0) {
        char *s = cJSON_PrintUnformatted(root);
        puts(s);
        free(s);
    }
    cJSON_Delete(root);
    st_close(&f);
    return rc;
}

static int cmd_ckpt(const char *dir) {
    param_set ps;
    memset(&ps, 0, sizeof ps);
    ps.count = NT;
    ps.tensors = calloc(NT, sizeof(param_tensor));
    for (int k = 0; k < NT; k++) {
        param_tensor *t = &ps.tensors[k];
        snprintf(t->name, sizeof t->name, "%s", g_tensors[k].name);
        t->ndim = g_tensors[k].ndim;
        for (int d = 0; d < t->ndim; d++) t->shape[d] = g_tensors[k].shape[d];
        t->numel = numel_of(&g_tensors[k]);
        t->offset = ps.numel;
        ps.numel += t->numel;
    }
    ps.data = mem_alloc_floats(MEM_PARAMS, ps.numel + 1, "params");
    ps.exp_avg = mem_alloc_floats(MEM_OPTIMIZER, ps.numel + 1, "exp_avg");
    ps.exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, ps.numel + 1, "exp_avg_sq");
    for (int k = 0; k < NT; k++) {
        const param_tensor *t = &ps.tensors[k];
        fill_finite((uint32_t *)(ps.data + t->offset), t->numel, (uint32_t)k);
        fill_finite((uint32_t *)(ps.exp_avg + t->offset), t->numel, (uint32_t)k + 100);
        fill_finite((uint32_t *)(ps.exp_avg_sq + t->offset), t->numel, (uint32_t)k + 200);
    }
    ckpt_state st = {.iteration = 7, .consumed_train_samples = 56, .optimizer_step = 7};
    st.args = cJSON_CreateObject();
    cJSON_AddNumberToObject(st.args, "hidden_size", 8);
    char err[1024];
    int rc = ckpt_save(dir, &ps, &st, 1, err, sizeof err);
    if (rc) fprintf(stderr, "error: %s\n", err);
    cJSON_Delete(st.args);
    mem_free(ps.data);
    mem_free(ps.exp_avg);
    mem_free(ps.exp_avg_sq);
    free(ps.tensors);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) return cmd_write(argv[2]);
    if (argc == 3 && strcmp(argv[1], "dump") == 0) return cmd_dump(argv[2]);
    if (argc == 3 && strcmp(argv[1], "ckpt") == 0) return cmd_ckpt(argv[2]);
    if (argc == 3 && strcmp(argv[1], "write16") == 0) return cmd_write16(argv[2]);
    fprintf(stderr, "usage: %s write FILE | dump FILE | ckpt DIR | write16 FILE\n", argv[0]);
    return 2;
}
