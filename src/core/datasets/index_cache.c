#include "core/datasets/index_cache.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tensor/memory.h"
#include "core/util/error.h"
#include "core/util/io.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the .npy files are written as little-endian ('<i4', '<i8')"
#endif

static uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* What the indices depend on, one "name value" per line. */
static void describe(const index_cache_key *k, char *buf, size_t n) {
    snprintf(buf, n,
             "class GPTDataset\ndataset_path %s\nsequence_count %" PRIu64 "\ntoken_count %" PRIu64
             "\nindex_split %s\nsequences [%" PRId64 ", %" PRId64 ")\nnum_samples %" PRIu64
             "\nrandom_seed %" PRIu32 "\nsequence_length %d\nadd_extra_token_to_sequence True\n"
             "drop_last_partial_sequence True\n",
             k->prefix, k->sequence_count, k->token_count, k->split, k->doc_beg, k->doc_end,
             k->num_samples, k->seed, k->seq_length);
}

/* mkdir -p (io.h), its error naming the directory */
static int make_dirs(const char *dir, char *err, size_t errlen) {
    char why[1024];
    if (io_mkdir_p(dir, 0, why, sizeof why) == 0) return 0;
    err_set(err, errlen, "%s: %s", dir, why);
    return -1;
}

/* ---- .npy files (NumPy format 1.0, C order) ---- */

static void npy_header(char *h, size_t n, const char *descr, const uint64_t *shape, int ndim) {
    char sh[96];
    if (ndim == 1)
        snprintf(sh, sizeof sh, "(%" PRIu64 ",)", shape[0]);
    else
        snprintf(sh, sizeof sh, "(%" PRIu64 ", %" PRIu64 ")", shape[0], shape[1]);
    int len = snprintf(h, n, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, sh);
    /* padded with spaces and a newline so the data starts at a multiple of 64 */
    int total = 10 + len + 1, pad = (64 - total % 64) % 64;
    memset(h + len, ' ', (size_t)pad);
    h[len + pad] = '\n';
    h[len + pad + 1] = 0;
}

/* Writes path via path.tmp.PID and rename. */
static int npy_write(const char *path, const char *descr, const uint64_t *shape, int ndim,
                     const void *data, size_t bytes, char *err, size_t errlen) {
    char tmp[4300], h[256];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    npy_header(h, sizeof h, descr, shape, ndim);
    uint16_t hl = (uint16_t)strlen(h);
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8 && fwrite(&hl, 2, 1, f) == 1 &&
             fwrite(h, 1, hl, f) == hl && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        err_set(err, errlen, "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Reads an .npy file that must hold `descr` with exactly `shape` (ndim 1 or 2) into a new
 * mem_alloc'd array. 0, or -1 with what is wrong. */
static int npy_read(const char *path, const char *descr, const uint64_t *shape, int ndim,
                    size_t elem, void **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    unsigned char magic[10];
    char h[1024], want[256];
    int rc = -1;
    if (fread(magic, 1, 10, f) != 10 || memcmp(magic, "\x93NUMPY\x01\x00", 8) != 0) {
        err_set(err, errlen, "%s: not a NumPy 1.0 .npy file", path);
        goto done;
    }
    uint16_t hl = (uint16_t)(magic[8] | magic[9] << 8);
    npy_header(want, sizeof want, descr, shape, ndim);
    if (hl >= sizeof h || fread(h, 1, hl, f) != hl || (h[hl] = 0, strcmp(h, want) != 0)) {
        err_set(err, errlen, "%s: expected the header %.*s", path, (int)strcspn(want, "}") + 1,
                want);
        goto done;
    }
    size_t count = (size_t)shape[0] * (ndim == 2 ? (size_t)shape[1] : 1);
    void *data = mem_alloc(MEM_OTHER, (count ? count : 1) * elem, "cached dataset index");
    if (fread(data, elem, count, f) != count || fgetc(f) != EOF) {
        err_set(err, errlen, "%s: expected %zu bytes of data after the header", path,
                count * elem);
        mem_free(data);
        goto done;
    }
    *out = data;
    rc = 0;
done:
    fclose(f);
    return rc;
}

/* ---- the cache ---- */

typedef struct {
    char desc[2048];
    char path[4][4200]; /* document, sample, shuffle, description */
} cache_names;

static void cache_names_init(const index_cache_key *k, cache_names *c) {
    static const char *const WHAT[4] = {"document_index.npy", "sample_index.npy",
                                        "shuffle_index.npy", "description.txt"};
    describe(k, c->desc, sizeof c->desc);
    uint64_t h = fnv1a64(c->desc);
    for (int i = 0; i < 4; i++)
        snprintf(c->path[i], sizeof c->path[i], "%s/%016" PRIx64 "-GPTDataset-%s-%s", k->dir, h,
                 k->split, WHAT[i]);
}

/* The counts after the description: "--- indices" then name value lines. */
static int read_counts(const char *text, gpt_indices *ix) {
    const char *p = strstr(text, "--- indices\n");
    if (!p) return -1;
    int sep = 0;
    unsigned long long n = 0, len = 0, tokens = 0;
    int epochs = 0;
    if (sscanf(p, "--- indices\nnum_samples %llu\ndocument_index_len %llu\nnum_epochs %d\n"
               "separate_final_epoch %d\nnum_tokens_per_epoch %llu\n",
               &n, &len, &epochs, &sep, &tokens) != 5)
        return -1;
    ix->num_samples = n;
    ix->document_index_len = len;
    ix->num_epochs = epochs;
    ix->separate_final_epoch = sep;
    ix->num_tokens_per_epoch = tokens;
    return 0;
}

/* Every value in range: documents of the split, sample positions ordered inside the document
 * index with offsets inside their documents, shuffled ids below the sample count. */
static int check_values(const index_cache_key *k, const int32_t *sizes, const gpt_indices *ix,
                        const cache_names *c, char *err, size_t errlen) {
    for (uint64_t i = 0; i < ix->document_index_len; i++)
        if (ix->document_index[i] < k->doc_beg || ix->document_index[i] >= k->doc_end) {
            err_set(err, errlen, "%s: entry %" PRIu64 " is %" PRId32 ", outside the split's "
                    "documents [%" PRId64 ", %" PRId64 ")", c->path[0], i, ix->document_index[i],
                    k->doc_beg, k->doc_end);
            return -1;
        }
    for (uint64_t i = 0; i <= ix->num_samples; i++) {
        int64_t pos = ix->sample_index[2 * i], off = ix->sample_index[2 * i + 1];
        if (pos < 0 || (uint64_t)pos >= ix->document_index_len ||
            (i > 0 && pos < ix->sample_index[2 * i - 2]) || off < 0 ||
            off > sizes[ix->document_index[pos]]) {
            err_set(err, errlen, "%s: row %" PRIu64 " (%" PRId64 ", %" PRId64 ") is not a "
                    "position in the document index", c->path[1], i, pos, off);
            return -1;
        }
    }
    for (uint64_t i = 0; i < ix->num_samples; i++)
        if (ix->shuffle_index[i] < 0 || (uint64_t)ix->shuffle_index[i] >= ix->num_samples) {
            err_set(err, errlen, "%s: entry %" PRIu64 " is %" PRId64 ", not a sample id",
                    c->path[2], i, ix->shuffle_index[i]);
            return -1;
        }
    return 0;
}

/* 1: loaded; 0: no cached indices for this description; -1: cached files that are not valid
 * (err says which and why). */
static int cache_load(const index_cache_key *k, const int32_t *sizes, const cache_names *c,
                      gpt_indices *ix, char *err, size_t errlen) {
    FILE *f = fopen(c->path[3], "rb");
    if (!f) return 0;
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    size_t dl = strlen(c->desc);
    if (strncmp(text, c->desc, dl) != 0) return 0; /* another configuration, same hash */
    memset(ix, 0, sizeof *ix);
    if (read_counts(text + dl, ix) != 0) {
        err_set(err, errlen, "%s: expected the counts after the description", c->path[3]);
        return -1;
    }
    uint64_t s1[1] = {ix->document_index_len}, s2[2] = {ix->num_samples + 1, 2},
             s3[1] = {ix->num_samples};
    void *d = NULL, *s = NULL, *sh = NULL;
    if (npy_read(c->path[0], "<i4", s1, 1, 4, &d, err, errlen) != 0 ||
        npy_read(c->path[1], "<i8", s2, 2, 8, &s, err, errlen) != 0 ||
        npy_read(c->path[2], "<i8", s3, 1, 8, &sh, err, errlen) != 0) {
        mem_free(d);
        mem_free(s);
        return -1;
    }
    ix->document_index = d;
    ix->sample_index = s;
    ix->shuffle_index = sh;
    if (check_values(k, sizes, ix, c, err, errlen) != 0) {
        gpt_indices_free(ix);
        return -1;
    }
    return 1;
}

static int cache_save(const cache_names *c, const gpt_indices *ix, char *err, size_t errlen) {
    uint64_t s1[1] = {ix->document_index_len}, s2[2] = {ix->num_samples + 1, 2},
             s3[1] = {ix->num_samples};
    if (npy_write(c->path[0], "<i4", s1, 1, ix->document_index, s1[0] * 4, err, errlen) ||
        npy_write(c->path[1], "<i8", s2, 2, ix->sample_index, s2[0] * 16, err, errlen) ||
        npy_write(c->path[2], "<i8", s3, 1, ix->shuffle_index, s3[0] * 8, err, errlen))
        return -1;
    /* the description last: its presence says the arrays are complete */
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", c->path[3], (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fprintf(f, "%s--- indices\nnum_samples %" PRIu64 "\ndocument_index_len %" PRIu64
                          "\nnum_epochs %d\nseparate_final_epoch %d\nnum_tokens_per_epoch %" PRIu64
                          "\n", c->desc, ix->num_samples, ix->document_index_len, ix->num_epochs,
                          ix->separate_final_epoch, ix->num_tokens_per_epoch) > 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, c->path[3]) != 0) {
        err_set(err, errlen, "cannot write %s: %s", c->path[3], strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int index_cache_indices(const index_cache_key *k, const int32_t *sizes, gpt_indices *out,
                        char *err, size_t errlen) {
    if (make_dirs(k->dir, err, errlen) != 0) return INDEX_CACHE_DIR_FAILED;
    cache_names *c = malloc(sizeof *c);
    if (!c) {
        err_set(err, errlen, "out of memory");
        return INDEX_CACHE_BUILD_FAILED;
    }
    cache_names_init(k, c);
    char why[1024];
    int rc = cache_load(k, sizes, c, out, why, sizeof why);
    if (rc == 1) {
        if (k->log)
            fprintf(k->log, " > loaded the GPTDataset %s indices of %s from the cache: %s, "
                    "sample_index.npy, shuffle_index.npy\n", k->split, k->prefix, c->path[0]);
        free(c);
        return INDEX_CACHE_OK;
    }
    if (rc < 0) { /* every rank says it: each reads the files */
        if (k->stale)
            k->stale(k->stale_ctx, why);
        else
            fprintf(stderr, "warning: index cache: %s; rebuilding the indices\n", why);
    }
    rc = index_cache_status_of(gpt_indices_build(sizes, k->doc_beg, k->doc_end, k->num_samples,
                                                 k->seq_length, k->seed, 1, out, err, errlen));
    if (rc == INDEX_CACHE_OK && cache_save(c, out, err, errlen) != 0) {
        gpt_indices_free(out);
        rc = INDEX_CACHE_DIR_FAILED;
    }
    if (rc == INDEX_CACHE_OK && k->log)
        fprintf(k->log, " > built the GPTDataset %s indices of %s and saved them to the cache: "
                "%s, sample_index.npy, shuffle_index.npy\n", k->split, k->prefix, c->path[0]);
    free(c);
    return rc;
}
