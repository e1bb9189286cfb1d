/* Checkpointing and the safetensors reader/writer: bitwise round trips (with and without
 * optimizer state), the tracker file, state.json, refusal of damaged or mismatched files with
 * messages naming the file and the tensor (or the offset), and saves interrupted at every
 * stage never moving "latest" away from a loadable checkpoint. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

#include "core/tensor/memory.h"
#include "core/tensor/safetensors.h"
#include "core/tensor/tensor.h"
#include "test_util.h"
#include "training/checkpoint_files.h"

static char g_root[256];
static char g_err[1024];

/* Checks that cond holds and that g_err contains each of up to three substrings. */
#define CHECK_ERR(cond, s1, s2, s3)                                                        \
    do {                                                                                   \
        CHECK(cond);                                                                       \
        const char *_subs[3] = {(s1), (s2), (s3)};                                         \
        for (int _k = 0; _k < 3; _k++) {                                                   \
            test_checks++;                                                                 \
            if (_subs[_k] && !strstr(g_err, _subs[_k])) {                                  \
                fprintf(stderr, "%s:%d: error message \"%s\" lacks \"%s\"\n", __FILE__,    \
                        __LINE__, g_err, _subs[_k]);                                       \
                test_failures++;                                                           \
            }                                                                              \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------------ helpers */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
} spec;

static const spec g_spec[] = {
    {"embedding.word_embeddings.weight", 2, {64, 16}},
    {"decoder.layers.0.self_attention.linear_qkv.weight", 2, {48, 16}},
    {"decoder.layers.0.self_attention.linear_qkv.bias", 1, {48}},
    {"decoder.layers.0.mlp.linear_fc1.weight", 2, {64, 16}},
    {"decoder.final_layernorm.weight", 1, {16}},
    {"a.tensor.3d", 3, {2, 3, 5}},
    {"a.scalar", 0, {0}},
};
#define NSPEC ((int)(sizeof g_spec / sizeof g_spec[0]))

/* A param_set over the given tensors; data filled with random bits (every finite float
 * pattern, denormals and -0 included, so the round trip must be bitwise; NaN and infinities
 * are never saved: test_nonfinite_refused) when fill. */
static param_set make_ps(const spec *sp, int n, int fill) {
    param_set ps;
    memset(&ps, 0, sizeof ps);
    ps.count = n;
    ps.tensors = calloc((size_t)n, sizeof(param_tensor));
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        param_tensor *t = &ps.tensors[i];
        snprintf(t->name, sizeof t->name, "%s", sp[i].name);
        t->ndim = sp[i].ndim;
        t->numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            t->shape[d] = sp[i].shape[d];
            t->numel *= (size_t)sp[i].shape[d];
        }
        t->offset = off;
        off += t->numel;
    }
    ps.numel = off;
    ps.data = mem_alloc_floats(MEM_PARAMS, off + 1, "test params");
    ps.grad = NULL;
    ps.exp_avg = mem_alloc_floats(MEM_OPTIMIZER, off + 1, "test exp_avg");
    ps.exp_avg_sq = mem_alloc_floats(MEM_OPTIMIZER, off + 1, "test exp_avg_sq");
    if (fill) {
        float *bufs[3] = {ps.data, ps.exp_avg, ps.exp_avg_sq};
        for (int b = 0; b < 3; b++)
            for (size_t i = 0; i < off; i++) {
                uint32_t bits = rnd() ^ (rnd() << 21);
                if ((bits & 0x7f800000u) == 0x7f800000u) bits ^= 0x00800000u; /* finite */
                memcpy(&bufs[b][i], &bits, 4);
            }
    }
    return ps;
}

static void free_ps(param_set *ps) {
    free(ps->tensors);
    mem_free(ps->data);
    mem_free(ps->exp_avg);
    mem_free(ps->exp_avg_sq);
    memset(ps, 0, sizeof *ps);
}

static void fill_sentinel(param_set *ps) {
    uint32_t s = 0xdeadbeefu;
    for (size_t i = 0; i < ps->numel; i++) {
        memcpy(&ps->data[i], &s, 4);
        memcpy(&ps->exp_avg[i], &s, 4);
        memcpy(&ps->exp_avg_sq[i], &s, 4);
    }
}

static int all_sentinel(const float *p, size_t n) {
    uint32_t s = 0xdeadbeefu;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&p[i], &s, 4) != 0) return 0;
    return 1;
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * 4) == 0; }

static int rm_one(const char *p, const struct stat *sb, int t, struct FTW *f) {
    (void)sb, (void)t, (void)f;
    return remove(p);
}
static void rm_rf(const char *p) { nftw(p, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

static int exists(const char *fmt, const char *a) {
    char p[1024];
    snprintf(p, sizeof p, fmt, a);
    struct stat sb;
    return lstat(p, &sb) == 0;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    if (len) *len = got;
    return b;
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    char *b = read_file(from, &n);
    write_file(to, b, n);
    free(b);
}

static int tracker_is(const char *dir, const char *want) {
    char p[1024];
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", dir);
    char *t = read_file(p, NULL);
    int ok = t && strcmp(t, want) == 0;
    free(t);
    return ok;
}

/* Loads `it` from dir into a fresh param_set and compares it bitwise with want. */
static int loads_as(const char *dir, int it, const param_set *want, int with_opt) {
    param_set got = make_ps(g_spec, NSPEC, 0);
    int ok = ckpt_load_tensors(dir, it, &got, with_opt, g_err, sizeof g_err) == 0 &&
             same_bits(got.data, want->data, want->numel) &&
             (!with_opt || (same_bits(got.exp_avg, want->exp_avg, want->numel) &&
                            same_bits(got.exp_avg_sq, want->exp_avg_sq, want->numel)));
    if (!ok) fprintf(stderr, "loads_as(%s, %d): %s\n", dir, it, g_err);
    free_ps(&got);
    return ok;
}

static ckpt_state make_state(int it) {
    ckpt_state st;
    memset(&st, 0, sizeof st);
    st.iteration = it;
    st.consumed_train_samples = 1000ull * (uint64_t)it + 7;
    st.optimizer_step = it - 1; /* one iteration skipped (at most iteration) */
    st.args = cJSON_CreateObject();
    cJSON_AddNumberToObject(st.args, "num_layers", 2);
    cJSON_AddStringToObject(st.args, "normalization", "RMSNorm");
    return st;
}

/* ------------------------------------------------------------------ tests */

static void test_round_trip(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/rt/nested", g_root); /* created with mkdir -p */
    param_set ps = make_ps(g_spec, NSPEC, 1);
    int it = -1;
    CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 1); /* nothing saved yet */

    /* Without optimizer state. */
    ckpt_state st = make_state(1);
    CHECK(ckpt_save(dir, &ps, &st, 0, g_err, sizeof g_err) == 0);
    CHECK(tracker_is(dir, "1"));
    CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 0 && it == 1);
    CHECK(exists("%s/iter_0000001/model.safetensors", dir));
    CHECK(exists("%s/iter_0000001/state.json", dir));
    CHECK(!exists("%s/iter_0000001/optimizer.safetensors", dir));
    CHECK(loads_as(dir, 1, &ps, 0));
    {
        param_set got = make_ps(g_spec, NSPEC, 0);
        fill_sentinel(&got);
        CHECK_ERR(ckpt_load_tensors(dir, 1, &got, 1, g_err, sizeof g_err) == -1,
                  "iter_0000001/optimizer.safetensors", "without optimizer state", NULL);
        CHECK(all_sentinel(got.data, got.numel)); /* nothing loaded on error */
        free_ps(&got);
    }
    ckpt_state ld;
    CHECK(ckpt_load_state(dir, 1, &ld, g_err, sizeof g_err) == 0);
    CHECK(ld.iteration == 1 && ld.consumed_train_samples == 1007 && ld.optimizer_step == 0);
    CHECK(ld.args && cJSON_Compare(ld.args, st.args, 1));
    CHECK(ld.grad_scaler == NULL); /* none saved */
    ckpt_state_free(&ld);
    CHECK(ld.args == NULL);
    ckpt_state_free(&st);

    /* A loss scaler's state (--fp16), elsewhere: kept as given */
    {
        char sdir[600];
        snprintf(sdir, sizeof sdir, "%s/rt/scaler", g_root);
        ckpt_state sc = make_state(1);
        sc.grad_scaler = cJSON_Parse("{\"scale\": 65536, \"growth_tracker\": 7, "
                                     "\"hysteresis_tracker\": -1}");
        CHECK(ckpt_save(sdir, &ps, &sc, 0, g_err, sizeof g_err) == 0);
        CHECK(ckpt_load_state(sdir, 1, &ld, g_err, sizeof g_err) == 0);
        CHECK(ld.grad_scaler && cJSON_Compare(ld.grad_scaler, sc.grad_scaler, 1));
        ckpt_state_free(&ld);
        CHECK(ld.grad_scaler == NULL);
        ckpt_state_free(&sc);
    }

    /* With optimizer state. */
    st = make_state(2);
    CHECK(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);
    CHECK(tracker_is(dir, "2"));
    CHECK(loads_as(dir, 2, &ps, 1));
    CHECK(loads_as(dir, 1, &ps, 0)); /* the older one is still there */

    /* The files themselves: header padded, crc32 metadata, tensors in the param_set's order. */
    char path[600];
    snprintf(path, sizeof path, "%s/iter_0000002/model.safetensors", dir);
    st_file f;
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    CHECK(f.header_len % 8 == 0);
    CHECK(f.count == NSPEC);
    CHECK(st_metadata(&f, "format") && strcmp(st_metadata(&f, "format"), "pt") == 0);
    uint64_t prev_end = 0;
    for (int i = 0; i < NSPEC && i < f.count; i++) {
        const st_entry *e = &f.entries[i];
        CHECK(strcmp(e->name, g_spec[i].name) == 0); /* given order, not sorted */
        CHECK(e->begin == prev_end);
        prev_end = e->end;
        CHECK(e->dtype == ST_F32 && e->ndim == g_spec[i].ndim);
        char key[200], want[16];
        snprintf(key, sizeof key, "crc32.%s", e->name);
        snprintf(want, sizeof want, "%08lx",
                 crc32(0L, (const Bytef *)(ps.data + ps.tensors[i].offset),
                       (uInt)(ps.tensors[i].numel * 4)));
        CHECK(st_metadata(&f, key) && strcmp(st_metadata(&f, key), want) == 0);
        CHECK(st_find(&f, g_spec[i].name) == e);
    }
    CHECK(prev_end == f.buffer_len);
    CHECK(st_find(&f, "no.such.tensor") == NULL);
    st_close(&f);
    snprintf(path, sizeof path, "%s/iter_0000002/optimizer.safetensors", dir);
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    CHECK(f.count == 2 * NSPEC);
    CHECK(st_find(&f, "optimizer.exp_avg.decoder.final_layernorm.weight") != NULL);
    CHECK(st_find(&f, "optimizer.exp_avg_sq.a.scalar") != NULL);
    CHECK(st_metadata(&f, "crc32.optimizer.exp_avg_sq.a.scalar") != NULL);
    st_close(&f);

    /* state.json holds exactly the documented keys. */
    snprintf(path, sizeof path, "%s/iter_0000002/state.json", dir);
    char *text = read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    CHECK(j && cJSON_GetArraySize(j) == 6);
    CHECK(cJSON_IsString(cJSON_GetObjectItem(j, "params_dtype")) &&
          strcmp(cJSON_GetObjectItem(j, "params_dtype")->valuestring, "float32") == 0);
    CHECK(cJSON_GetObjectItem(j, "format_version") &&
          cJSON_GetObjectItem(j, "format_version")->valueint == 1);
    CHECK(cJSON_GetObjectItem(j, "consumed_train_samples") &&
          cJSON_GetObjectItem(j, "consumed_train_samples")->valuedouble == 2007);
    cJSON_Delete(j);
    free(text);
    free_ps(&ps);
}

static void test_tracker(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tracker", g_root);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/latest_checkpointed_iteration.txt", dir);
    int it = -1;
    CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 1);
    const char *good[] = {"5", "5\n", " 5 \n"};
    for (int i = 0; i < 3; i++) {
        write_file(path, good[i], strlen(good[i]));
        it = -1;
        CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 0 && it == 5);
    }
    const char *bad[] = {"", "abc", "12x", "-3", "release", "99999999999", "1 2"};
    for (int i = 0; i < 7; i++) {
        write_file(path, bad[i], strlen(bad[i]));
        g_err[0] = 0;
        CHECK_ERR(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == -1,
                  "latest_checkpointed_iteration.txt", "expected an iteration number", NULL);
    }
    write_file(path, "release", 7);
    ckpt_read_latest(dir, &it, g_err, sizeof g_err);
    CHECK(strstr(g_err, "release checkpoints are not supported") != NULL);
}

static void test_mismatch(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/mismatch", g_root);
    param_set ps = make_ps(g_spec, NSPEC, 1);
    ckpt_state st = make_state(3);
    CHECK(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);

    /* A tensor the checkpoint lacks. */
    spec extra[NSPEC + 1];
    memcpy(extra, g_spec, sizeof g_spec);
    extra[NSPEC] = (spec){"decoder.layers.1.mlp.linear_fc2.weight", 2, {16, 64}};
    param_set big = make_ps(extra, NSPEC + 1, 0);
    fill_sentinel(&big);
    CHECK_ERR(ckpt_load_tensors(dir, 3, &big, 0, g_err, sizeof g_err) == -1,
              "iter_0000003/model.safetensors", "tensor decoder.layers.1.mlp.linear_fc2.weight",
              "missing");
    CHECK(all_sentinel(big.data, big.numel));
    free_ps(&big);

    /* A tensor of another shape (same element count). */
    spec wrong[NSPEC];
    memcpy(wrong, g_spec, sizeof g_spec);
    wrong[3].shape[0] = 16;
    wrong[3].shape[1] = 64;
    param_set w = make_ps(wrong, NSPEC, 0);
    CHECK_ERR(ckpt_load_tensors(dir, 3, &w, 0, g_err, sizeof g_err) == -1,
              "iter_0000003/model.safetensors", "tensor decoder.layers.0.mlp.linear_fc1.weight",
              "shape [64, 16] in the checkpoint, [16, 64] in the model");
    free_ps(&w);

    /* Missing optimizer moment: delete one from a hand-made optimizer file. */
    char path[600], bak[640];
    snprintf(path, sizeof path, "%s/iter_0000003/optimizer.safetensors", dir);
    snprintf(bak, sizeof bak, "%s.bak", path);
    copy_file(path, bak);
    {
        st_file f;
        CHECK(st_open(bak, &f, g_err, sizeof g_err) == 0);
        st_tensor_desc d[2 * NSPEC];
        int n = 0;
        for (int i = 0; i < f.count; i++) {
            if (strcmp(f.entries[i].name, "optimizer.exp_avg_sq.a.tensor.3d") == 0) continue;
            d[n++] = (st_tensor_desc){f.entries[i].name, f.entries[i].dtype, f.entries[i].ndim,
                                      f.entries[i].shape, f.entries[i].data, NULL};
        }
        CHECK(st_write_file(path, d, n, NULL, 0, g_err, sizeof g_err) == 0);
        st_close(&f);
        param_set got = make_ps(g_spec, NSPEC, 0);
        CHECK_ERR(ckpt_load_tensors(dir, 3, &got, 1, g_err, sizeof g_err) == -1,
                  "iter_0000003/optimizer.safetensors", "tensor optimizer.exp_avg_sq.a.tensor.3d",
                  "missing");
        /* A file without crc32 metadata (e.g. written by another tool) still loads. */
        CHECK(st_open(bak, &f, g_err, sizeof g_err) == 0);
        for (int i = 0; i < f.count; i++)
            d[i] = (st_tensor_desc){f.entries[i].name, f.entries[i].dtype, f.entries[i].ndim,
                                    f.entries[i].shape, f.entries[i].data, NULL};
        CHECK(st_write_file(path, d, f.count, NULL, 0, g_err, sizeof g_err) == 0);
        st_close(&f);
        CHECK(loads_as(dir, 3, &ps, 1));
        free_ps(&got);
        copy_file(bak, path);
    }
    CHECK(loads_as(dir, 3, &ps, 1));

    /* state.json whose iteration disagrees with its directory. */
    snprintf(path, sizeof path, "%s/iter_0000003/state.json", dir);
    char *text = read_file(path, NULL);
    cJSON *j = cJSON_Parse(text);
    cJSON_ReplaceItemInObject(j, "iteration", cJSON_CreateNumber(4));
    char *t2 = cJSON_Print(j);
    write_file(path, t2, strlen(t2));
    ckpt_state ld;
    CHECK_ERR(ckpt_load_state(dir, 3, &ld, g_err, sizeof g_err) == -1,
              "iter_0000003/state.json", "\"iteration\" is 4", NULL);
    cJSON_ReplaceItemInObject(j, "iteration", cJSON_CreateNumber(3));
    cJSON_ReplaceItemInObject(j, "optimizer_step", cJSON_CreateNumber(4));
    free(t2);
    t2 = cJSON_Print(j);
    write_file(path, t2, strlen(t2));
    CHECK_ERR(ckpt_load_state(dir, 3, &ld, g_err, sizeof g_err) == -1,
              "iter_0000003/state.json", "\"optimizer_step\" 4 is more than \"iteration\" 3", NULL);
    write_file(path, "{\"iteration\": 3,", 16);
    CHECK_ERR(ckpt_load_state(dir, 3, &ld, g_err, sizeof g_err) == -1,
              "iter_0000003/state.json", "expected valid JSON", NULL);
    write_file(path, text, strlen(text));
    CHECK(ckpt_load_state(dir, 3, &ld, g_err, sizeof g_err) == 0 && ld.iteration == 3);
    ckpt_state_free(&ld);
    CHECK_ERR(ckpt_load_state(dir, 9, &ld, g_err, sizeof g_err) == -1,
              "iter_0000009/state.json", NULL, NULL);
    cJSON_Delete(j);
    free(t2);
    free(text);
    free_ps(&ps);
}

static void test_corruption(void) {
    char dir[512], path[600], bak[640];
    snprintf(dir, sizeof dir, "%s/corrupt", g_root);
    param_set ps = make_ps(g_spec, NSPEC, 1);
    ckpt_state st = make_state(4);
    CHECK(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);
    snprintf(path, sizeof path, "%s/iter_0000004/model.safetensors", dir);
    snprintf(bak, sizeof bak, "%s.bak", path);
    copy_file(path, bak);
    size_t len;
    char *orig = read_file(bak, &len);

    /* One flipped bit inside a tensor's data: the crc32 catches it, nothing is loaded. */
    st_file f;
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    const st_entry *e = st_find(&f, "decoder.layers.0.self_attention.linear_qkv.bias");
    size_t at = (size_t)(8 + f.header_len + e->begin + 37);
    st_close(&f);
    char *bad = malloc(len);
    memcpy(bad, orig, len);
    bad[at] ^= 0x10;
    write_file(path, bad, len);
    param_set got = make_ps(g_spec, NSPEC, 0);
    fill_sentinel(&got);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors",
              "tensor decoder.layers.0.self_attention.linear_qkv.bias", "crc32 mismatch");
    CHECK(all_sentinel(got.data, got.numel));

    /* Truncated: the last tensor runs past the end of the file. */
    write_file(path, orig, len - 2);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "tensor a.scalar", "truncated");
    /* Truncated inside the header. */
    write_file(path, orig, 100);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset 0: expected a header length of at most 92",
              NULL);
    write_file(path, orig, 5);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset 0", "file of 5 bytes");

    /* Bytes appended after the last tensor. */
    {
        char *longer = calloc(1, len + 4);
        memcpy(longer, orig, len);
        write_file(path, longer, len + 4);
        free(longer);
        char want[64];
        snprintf(want, sizeof want, "offset %zu: expected the end of the file", len);
        CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
                  "iter_0000004/model.safetensors", want, "found 4 more bytes");
    }

    /* Garbage header. */
    memcpy(bad, orig, len);
    memcpy(bad + 8, "garbage!", 8);
    write_file(path, bad, len);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset 8: expected '{'", NULL);
    memcpy(bad, orig, len);
    memcpy(bad + 30, "\"\"\"\"", 4);
    write_file(path, bad, len);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "expected valid JSON", "offset ");
    memcpy(bad, orig, len);
    bad[20] = (char)0xff;
    write_file(path, bad, len);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset 20: expected UTF-8", "0xff");
    memcpy(bad, orig, len);
    for (int k = 0; k < 8; k++) bad[k] = (char)0xff; /* header length 2^64-1 */
    write_file(path, bad, len);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset 0", "found 18446744073709551615");
    memcpy(bad, orig, len);
    bad[0] = (char)0xf8; /* header length changed, still inside the file: JSON cut short */
    bad[1] = 0;
    write_file(path, bad, len);
    CHECK_ERR(ckpt_load_tensors(dir, 4, &got, 0, g_err, sizeof g_err) == -1,
              "iter_0000004/model.safetensors", "offset ", NULL);

    /* Back to the good file: loads bitwise. */
    write_file(path, orig, len);
    CHECK(loads_as(dir, 4, &ps, 1));
    CHECK(all_sentinel(got.exp_avg, got.numel));
    free(bad);
    free(orig);
    free_ps(&got);
    free_ps(&ps);
}

/* Writes a safetensors file with a hand-written header (padded to 8) and `buflen` data bytes. */
static void write_raw(const char *path, const char *header, size_t buflen) {
    size_t hl = strlen(header), n = (hl + 7) / 8 * 8;
    size_t total = 8 + n + buflen;
    char *b = calloc(1, total);
    for (int k = 0; k < 8; k++) b[k] = (char)((uint64_t)n >> (8 * k));
    memset(b + 8, ' ', n);
    memcpy(b + 8, header, hl);
    write_file(path, b, total);
    free(b);
}

static void test_header_validation(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/raw.safetensors", g_root);
    st_file f;
    struct {
        const char *header;
        size_t buflen;
        const char *want1, *want2;
    } cases[] = {
        {"{\"x\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "tensor x: unknown dtype \"F33\"", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
         "tensor x: shape [2, 3] of F32 needs 24 bytes", "[0, 20] hold 20"},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         "tensor y: data_offsets [4, 12] overlap those of tensor x [0, 8]", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
         "tensor x: data_offsets [0, 16] extend past the end", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
         "tensor x: appears twice", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4,
         "tensor x: shape dimension 0", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4,
         "tensor x: shape dimension 0", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4]}}", 4,
         "tensor x: expected \"data_offsets\"", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
         "tensor x: data_offsets [8, 4] end before", NULL},
        {"{\"x\":[1,2]}", 0, "tensor x: expected an object", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
         "tensor y: data_offsets [8, 12] leave bytes [4, 8) of the buffer unused", NULL},
        {"{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 7,
         "offset 68: expected the end of the file", "found 3 more bytes"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__: key \"k\": expected a string", NULL},
        {"[1,2]", 0, "offset 8: expected '{'", NULL},
        {"{\"a\":1} x", 0, "offset 16: expected only space padding", NULL},
        {"{\"a\":", 0, "offset 15: expected valid JSON", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw(path, cases[i].header, cases[i].buflen);
        g_err[0] = 0;
        CHECK_ERR(st_open(path, &f, g_err, sizeof g_err) == -1, "raw.safetensors: ",
                  cases[i].want1, cases[i].want2);
    }
    /* Valid oddities: empty tensors, a scalar, unsorted offsets, metadata, F16/BF16. */
    write_raw(path,
              "{\"__metadata__\":{\"who\":\"hand\"},"
              "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[8,14]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[14,18]},"
              "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
              "\"e\":{\"dtype\":\"F32\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
              "\"i\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              18);
    /* Fill the data: s = 1.5f, i = 7, h = {1.0, -2.0, 2^-24 (subnormal)}, b = {1.0, -inf} */
    {
        size_t len;
        char *b = read_file(path, &len);
        size_t base = len - 18;
        float s = 1.5f;
        int32_t iv = 7;
        uint16_t h[3] = {0x3c00, 0xc000, 0x0001}, bf[2] = {0x3f80, 0xff80};
        memcpy(b + base, &s, 4);
        memcpy(b + base + 4, &iv, 4);
        memcpy(b + base + 8, h, 6);
        memcpy(b + base + 14, bf, 4);
        write_file(path, b, len);
        free(b);
    }
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    if (f.map) {
        CHECK(f.count == 5 && strcmp(st_metadata(&f, "who"), "hand") == 0);
        float out[8];
        const st_entry *e = st_find(&f, "s");
        CHECK(e && e->ndim == 0 && e->numel == 1);
        CHECK(e && st_read_f32(&f, e, out, g_err, sizeof g_err) == 0 && out[0] == 1.5f);
        e = st_find(&f, "h");
        CHECK(e && st_read_f32(&f, e, out, g_err, sizeof g_err) == 0 && out[0] == 1.0f &&
              out[1] == -2.0f && out[2] == ldexpf(1.0f, -24));
        e = st_find(&f, "b");
        CHECK(e && st_read_f32(&f, e, out, g_err, sizeof g_err) == 0 && out[0] == 1.0f &&
              isinf(out[1]) && out[1] < 0);
        e = st_find(&f, "e");
        CHECK(e && e->numel == 0 && e->shape[0] == 0 && e->shape[1] == 5);
        e = st_find(&f, "i");
        CHECK_ERR(e && st_read_f32(&f, e, out, g_err, sizeof g_err) == -1, "tensor i: dtype I32",
                  NULL, NULL);
        st_close(&f);
    }
    /* Writer refuses duplicate names. */
    float x[2] = {1, 2};
    int64_t shp[1] = {2};
    st_tensor_desc d[2] = {{"dup", ST_F32, 1, shp, x, NULL}, {"dup", ST_F32, 1, shp, x, NULL}};
    CHECK_ERR(st_write_file(path, d, 2, NULL, 0, g_err, sizeof g_err) == -1, "tensor dup",
              "twice", NULL);
}

/* ------------------------------------------------------------------ interrupted saves */

static const char *g_fail_stage;
static int fail_at(const char *stage) { return g_fail_stage && strcmp(stage, g_fail_stage) == 0; }
static int no_exchange(const char *stage) { return strcmp(stage, "exchange") == 0; }

static int own_tmp_left(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/iter_0000002.tmp-%ld", dir, (long)getpid());
    struct stat sb;
    int a = lstat(p, &sb) == 0;
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt.tmp-%ld", dir, (long)getpid());
    return a || lstat(p, &sb) == 0;
}

static void test_interrupted(void) {
    char dir[512], path[700];
    snprintf(dir, sizeof dir, "%s/interrupt", g_root);
    param_set a = make_ps(g_spec, NSPEC, 1), b = make_ps(g_spec, NSPEC, 1),
              c = make_ps(g_spec, NSPEC, 1);
    ckpt_state st = make_state(1);
    CHECK(ckpt_save(dir, &a, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);

    /* A crash left a partial temporary directory of iteration 2. */
    snprintf(path, sizeof path, "%s/iter_0000002.tmp-123", dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/iter_0000002.tmp-123/model.safetensors", dir);
    char half[700];
    snprintf(half, sizeof half, "%s/iter_0000001/model.safetensors", dir);
    {
        size_t n;
        char *t = read_file(half, &n);
        write_file(path, t, n / 2);
        free(t);
    }
    int it = -1;
    CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 0 && it == 1);
    CHECK(loads_as(dir, 1, &a, 1));

    /* Saves of iteration 2 failing at every stage. */
    const char *stages[] = {"tmpdir", "model", "optimizer", "state", "rename", "tracker"};
    ckpt_set_fault_injection(fail_at);
    for (int s = 0; s < 6; s++) {
        g_fail_stage = stages[s];
        st = make_state(2);
        g_err[0] = 0;
        CHECK_ERR(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == -1, stages[s], "test hook",
                  NULL);
        ckpt_state_free(&st);
        CHECK(tracker_is(dir, "1"));
        CHECK(!own_tmp_left(dir));
        CHECK(ckpt_read_latest(dir, &it, g_err, sizeof g_err) == 0 && it == 1);
        CHECK(loads_as(dir, 1, &a, 1));
        ckpt_state ld;
        CHECK(ckpt_load_state(dir, 1, &ld, g_err, sizeof g_err) == 0 && ld.iteration == 1);
        ckpt_state_free(&ld);
        /* Only the last stage (after the rename) leaves a complete iter_0000002 behind. */
        CHECK(exists("%s/iter_0000002", dir) == (s == 5));
    }
    ckpt_set_fault_injection(NULL);
    g_fail_stage = NULL;
    CHECK(exists("%s/iter_0000002.tmp-123", dir)); /* not ours to touch until a save succeeds */

    /* A real write failure midway through model.safetensors (file size limit: EFBIG). */
    snprintf(path, sizeof path, "%s/iter_0000002", dir);
    rm_rf(path);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    st = make_state(2);
    CHECK_ERR(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == -1,
              "iter_0000002.tmp-", "model.safetensors", "write failed");
    CHECK(setrlimit(RLIMIT_FSIZE, &old) == 0);
    signal(SIGXFSZ, SIG_DFL);
    CHECK(tracker_is(dir, "1"));
    CHECK(!own_tmp_left(dir));
    CHECK(!exists("%s/iter_0000002", dir));
    CHECK(loads_as(dir, 1, &a, 1));

    /* An unwritable target (only meaningful when not root). */
    if (geteuid() != 0) {
        chmod(dir, 0555);
        CHECK(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == -1);
        chmod(dir, 0755);
        CHECK(tracker_is(dir, "1"));
        CHECK(loads_as(dir, 1, &a, 1));
    }

    /* A save that succeeds moves "latest" and removes the leftovers. */
    CHECK(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == 0);
    CHECK(tracker_is(dir, "2"));
    CHECK(loads_as(dir, 2, &b, 1));
    CHECK(loads_as(dir, 1, &a, 1));
    CHECK(!exists("%s/iter_0000002.tmp-123", dir));

    /* Overwriting an existing iteration: atomic exchange, then the rename-away fallback. */
    CHECK(ckpt_save(dir, &c, &st, 0, g_err, sizeof g_err) == 0);
    CHECK(loads_as(dir, 2, &c, 0));
    CHECK(!exists("%s/iter_0000002/optimizer.safetensors", dir)); /* the old dir is gone */
    ckpt_set_fault_injection(no_exchange);
    CHECK(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_set_fault_injection(NULL);
    CHECK(loads_as(dir, 2, &b, 1));
    /* A failed overwrite keeps the previous iter_0000002 intact. */
    ckpt_set_fault_injection(fail_at);
    g_fail_stage = "rename";
    CHECK(ckpt_save(dir, &c, &st, 1, g_err, sizeof g_err) == -1);
    ckpt_set_fault_injection(NULL);
    g_fail_stage = NULL;
    CHECK(loads_as(dir, 2, &b, 1));
    ckpt_state_free(&st);

    /* Nothing but the two iterations and the tracker remains. */
    snprintf(path, sizeof path, "ls -A '%s' | tr '\\n' ' '", dir);
    FILE *p = popen(path, "r");
    char listing[512] = {0};
    if (p) {
        size_t n = fread(listing, 1, sizeof listing - 1, p);
        listing[n] = 0;
        pclose(p);
    }
    CHECK(strcmp(listing, "iter_0000001 iter_0000002 latest_checkpointed_iteration.txt ") == 0);
    if (strcmp(listing, "iter_0000001 iter_0000002 latest_checkpointed_iteration.txt ") != 0)
        fprintf(stderr, "listing: %s\n", listing);
    free_ps(&a);
    free_ps(&b);
    free_ps(&c);
}

/* A parameter or moment that is NaN or infinite refuses the save, naming the tensor, before
 * any file is made: the tracker and the previous checkpoint stay. */
static void test_nonfinite_refused(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/nonfinite", g_root);
    param_set a = make_ps(g_spec, NSPEC, 1), b = make_ps(g_spec, NSPEC, 1);
    ckpt_state st = make_state(1);
    CHECK(ckpt_save(dir, &a, &st, 1, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);
    const param_tensor *last = &b.tensors[b.count - 1];
    float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 6; k++) {
        float *buf = k < 3 ? b.data : b.exp_avg_sq;
        size_t at = last->offset + last->numel - 1;
        float keep = buf[at];
        buf[at] = bad[k % 3];
        st = make_state(2);
        g_err[0] = 0;
        CHECK_ERR(ckpt_save(dir, &b, &st, 1, g_err, sizeof g_err) == -1, last->name,
                  "non-finite", k < 3 ? "parameter" : "exp_avg_sq");
        ckpt_state_free(&st);
        buf[at] = keep;
        CHECK(tracker_is(dir, "1"));
        CHECK(!exists("%s/iter_0000002", dir));
        CHECK(!own_tmp_left(dir));
        CHECK(loads_as(dir, 1, &a, 1));
    }
    /* without the optimizer state, a non-finite moment is not saved, so it does not matter */
    b.exp_avg[0] = NAN;
    st = make_state(2);
    CHECK(ckpt_save(dir, &b, &st, 0, g_err, sizeof g_err) == 0);
    ckpt_state_free(&st);
    CHECK(tracker_is(dir, "2"));
    free_ps(&a);
    free_ps(&b);
}

/* ------------------------------------------------------------------ 16-bit parameters */

/* A --bf16 checkpoint through ckpt_save / ckpt_load_tensors (the one-process API of convert and
 * generate): model.safetensors holds the set's bf16 copy as BF16, the optimizer file also the
 * fp32 main parameters; loaded with the optimizer state the parameters are the main ones bit for
 * bit, without it the BF16 values widened (bits << 16, computed here). The copy is whatever the
 * set holds (here truncations, not roundings): the file is the copy, not a rounding of data. */
static void test_bf16_params(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/bf16", g_root);
    param_set ps = make_ps(g_spec, NSPEC, 1);
    uint16_t *copy = calloc(ps.numel + 1, sizeof *copy);
    for (size_t i = 0; i < ps.numel; i++) {
        uint32_t bits;
        memcpy(&bits, &ps.data[i], 4);
        copy[i] = (uint16_t)(bits >> 16);
    }
    ckpt_state st = make_state(5);
    st.precision = CKPT_BF16;
    /* no bf16 copy: refused */
    CHECK_ERR(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == -1, "bfloat16",
              "no bfloat16 copy", NULL);
    ps.data_bf16 = copy;
    CHECK(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == 0);

    char path[1024];
    st_file f;
    snprintf(path, sizeof path, "%s/iter_0000005/model.safetensors", dir);
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    CHECK(f.count == NSPEC);
    for (int i = 0; i < f.count && i < NSPEC; i++) {
        const param_tensor *t = &ps.tensors[i];
        CHECK(f.entries[i].dtype == ST_BF16 && strcmp(f.entries[i].name, t->name) == 0);
        CHECK(memcmp(f.entries[i].data, copy + t->offset, t->numel * 2) == 0);
    }
    st_close(&f);
    snprintf(path, sizeof path, "%s/iter_0000005/optimizer.safetensors", dir);
    CHECK(st_open(path, &f, g_err, sizeof g_err) == 0);
    CHECK(f.count == 3 * NSPEC);
    const st_entry *e = st_find(&f, "optimizer.fp32_param.decoder.final_layernorm.weight");
    int k = param_set_find(&ps, "decoder.final_layernorm.weight");
    CHECK(e && k >= 0 && e->dtype == ST_F32 && e == &f.entries[2 * NSPEC + k] &&
          memcmp(e->data, ps.data + ps.tensors[k].offset, ps.tensors[k].numel * 4) == 0);
    st_close(&f);
    ckpt_state back;
    CHECK(ckpt_load_state(dir, 5, &back, g_err, sizeof g_err) == 0 &&
          back.precision == CKPT_BF16);
    ckpt_state_free(&back);

    /* with the optimizer state: the fp32 main parameters */
    CHECK(loads_as(dir, 5, &ps, 1));
    /* without: the BF16 values widened */
    param_set widened = make_ps(g_spec, NSPEC, 0);
    for (size_t i = 0; i < ps.numel; i++) {
        uint32_t bits = (uint32_t)copy[i] << 16;
        memcpy(&widened.data[i], &bits, 4);
    }
    CHECK(loads_as(dir, 5, &widened, 0));
    free_ps(&widened);

    /* a parameter file of mixed dtypes is refused, naming both tensors */
    st_tensor_desc d[2] = {
        {.name = "decoder.final_layernorm.weight", .dtype = ST_BF16, .ndim = 1,
         .shape = (int64_t[]){16}, .data = copy},
        {.name = "a.scalar", .dtype = ST_F32, .ndim = 0, .shape = NULL, .data = ps.data}};
    snprintf(path, sizeof path, "%s/mixed.safetensors", g_root);
    CHECK(st_write_file(path, d, 2, NULL, 0, g_err, sizeof g_err) == 0);
    ckpt_precision p;
    CHECK_ERR(ckpt_file_precision(path, &p, g_err, sizeof g_err) == -1,
              "decoder.final_layernorm.weight is BF16 but tensor a.scalar is F32",
              "expected every parameter in one dtype", "mixed.safetensors");

    /* a bf16 copy out of range (rounding overflowed) is never saved */
    copy[3] = 0x7f80; /* +inf */
    CHECK_ERR(ckpt_save(dir, &ps, &st, 1, g_err, sizeof g_err) == -1, "bf16 copy of parameter",
              "non-finite", "refusing to save");
    ps.data_bf16 = NULL;
    free(copy);
    free_ps(&ps);
    cJSON_Delete(st.args);
}

int main(void) {
    snprintf(g_root, sizeof g_root, "/tmp/test_checkpointing_XXXXXX");
    if (!mkdtemp(g_root)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_tracker();
    test_mismatch();
    test_corruption();
    test_header_validation();
    test_interrupted();
    test_nonfinite_refused();
    test_bf16_params();
    if (test_failures == 0)
        rm_rf(g_root);
    else
        fprintf(stderr, "files kept in %s\n", g_root);
    TEST_DONE();
}
