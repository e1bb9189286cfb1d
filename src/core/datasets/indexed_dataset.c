#include "core/datasets/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/die.h"
#include "core/util/error.h"
#include "core/util/io.h"

static const unsigned char IDX_MAGIC[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

size_t idx_dtype_size(int code) {
    switch (code) {
    case IDX_DTYPE_UINT8:
    case IDX_DTYPE_INT8: return 1;
    case IDX_DTYPE_INT16:
    case IDX_DTYPE_UINT16: return 2;
    case IDX_DTYPE_INT32:
    case IDX_DTYPE_FLOAT32: return 4;
    case IDX_DTYPE_INT64:
    case IDX_DTYPE_FLOAT64: return 8;
    default: return 0;
    }
}

const char *idx_dtype_name(int code) {
    switch (code) {
    case IDX_DTYPE_UINT8: return "uint8";
    case IDX_DTYPE_INT8: return "int8";
    case IDX_DTYPE_INT16: return "int16";
    case IDX_DTYPE_INT32: return "int32";
    case IDX_DTYPE_INT64: return "int64";
    case IDX_DTYPE_FLOAT64: return "float64";
    case IDX_DTYPE_FLOAT32: return "float32";
    case IDX_DTYPE_UINT16: return "uint16";
    default: return "unknown";
    }
}

int idx_dtype_optimal(int64_t vocab_size) {
    return vocab_size < 65500 ? IDX_DTYPE_UINT16 : IDX_DTYPE_INT32;
}

static uint64_t rd_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static int64_t rd_i64(const unsigned char *p) {
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

int64_t indexed_dataset_pointer(const indexed_dataset *ds, uint64_t seq) {
    return rd_i64(ds->idx_map + ds->pointers_offset + 8 * seq);
}
int64_t indexed_dataset_document_index(const indexed_dataset *ds, uint64_t d) {
    return rd_i64(ds->idx_map + ds->doc_indices_offset + 8 * d);
}

static int map_file(const char *path, const unsigned char **map, size_t *size, char *err,
                    size_t errlen) {
    const void *p;
    const int rc = io_map_file(path, &p, size, err, errlen);
    *map = p;
    return rc;
}

static void escape_bytes(const unsigned char *p, size_t n, char *out, size_t outlen) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < outlen; i++) {
        unsigned char c = p[i];
        if (c >= 32 && c < 127 && c != '\'' && c != '\\') {
            out[o++] = (char)c;
        } else {
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
        }
    }
    out[o < outlen ? o : outlen - 1] = 0;
}

static char *str_concat(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    char *s = xmalloc(la + lb + 1, "a dataset path");
    memcpy(s, a, la);
    memcpy(s + la, b, lb + 1);
    return s;
}

void indexed_dataset_close(indexed_dataset *ds) {
    if (!ds) return;
    io_unmap(ds->idx_map, ds->idx_size);
    io_unmap(ds->bin_map, ds->bin_size);
    mem_free(ds->sequence_lengths);
    free(ds->prefix);
    free(ds->idx_path);
    free(ds->bin_path);
    free(ds);
}

/* Header and index checks. Every message: "PATH: offset N: expected X, found Y". */

/* The file holds a header field of `width` bytes at `off`. */
static int need_field(const indexed_dataset *ds, size_t off, size_t width, const char *what,
                      char *err, size_t errlen) {
    if (ds->idx_size >= off + width) return 0;
    err_set(err, errlen, "%s: offset %zu: expected %s, found end of file (file is %zu bytes)",
            ds->idx_path, off, what, ds->idx_size);
    return -1;
}

/* Magic, version, dtype and the two counts (IDX_HEADER_BYTES). */
static int validate_header(indexed_dataset *ds, char *err, size_t errlen) {
    const char *path = ds->idx_path;
    const unsigned char *m = ds->idx_map;
    size_t size = ds->idx_size;
    size_t cmp = size < 9 ? size : 9;
    if (memcmp(m ? m : IDX_MAGIC, IDX_MAGIC, cmp) != 0) {
        char found[64];
        escape_bytes(m, cmp, found, sizeof found);
        err_set(err, errlen, "%s: offset 0: expected magic 'MMIDIDX\\x00\\x00', found '%s'", path,
               found);
        return -1;
    }
    if (size < 9) {
        err_set(err, errlen,
               "%s: offset 0: expected magic 'MMIDIDX\\x00\\x00' (9 bytes), found end of file "
               "after %zu bytes",
               path, size);
        return -1;
    }
    if (need_field(ds, 9, 8, "version (uint64)", err, errlen)) return -1;
    uint64_t version = rd_u64(m + 9);
    if (version != 1) {
        err_set(err, errlen, "%s: offset 9: expected version 1, found %" PRIu64, path, version);
        return -1;
    }
    if (need_field(ds, 17, 1, "dtype code (uint8)", err, errlen)) return -1;
    int code = m[17];
    if (idx_dtype_size(code) == 0) {
        err_set(err, errlen,
               "%s: offset 17: expected dtype code 1-8 (uint8, int8, int16, int32, int64, "
               "float64, float32, uint16), found %d",
               path, code);
        return -1;
    }
    ds->dtype = code;
    ds->itemsize = idx_dtype_size(code);
    if (need_field(ds, 18, 8, "sequence count (uint64)", err, errlen) ||
        need_field(ds, 26, 8, "document count (uint64)", err, errlen))
        return -1;
    ds->sequence_count = rd_u64(m + 18);
    ds->document_count = rd_u64(m + 26);
    if (ds->document_count == 0) {
        err_set(err, errlen,
               "%s: offset 26: expected document count >= 1 (document_indices starts with 0), "
               "found 0",
               path);
        return -1;
    }
    return 0;
}

/* The file holds name[count] of elem bytes at off (checked without overflow). */
static int need_section(const indexed_dataset *ds, size_t off, uint64_t count, size_t elem,
                        const char *name, char *err, size_t errlen) {
    const size_t avail = ds->idx_size - off;
    if (count <= avail / elem) return 0;
    if (count <= UINT64_MAX / elem)
        err_set(err, errlen,
               "%s: offset %zu: expected %s[%" PRIu64 "] (%" PRIu64
               " bytes), found %zu bytes to the end of the file",
               ds->idx_path, off, name, count, count * elem, avail);
    else
        err_set(err, errlen,
               "%s: offset %zu: expected %s[%" PRIu64
               "] (more than 2^64 bytes), found %zu bytes to the end of the file",
               ds->idx_path, off, name, count, avail);
    return -1;
}

/* document_indices: starts at 0, non-decreasing, ends at the sequence count. */
static int validate_document_indices(const indexed_dataset *ds, char *err, size_t errlen) {
    const char *path = ds->idx_path;
    const size_t doff = ds->doc_indices_offset;
    const uint64_t S = ds->sequence_count, D = ds->document_count;
    int64_t prev = rd_i64(ds->idx_map + doff);
    if (prev != 0) {
        err_set(err, errlen, "%s: offset %zu: expected document_indices[0] = 0, found %" PRId64,
               path, doff, prev);
        return -1;
    }
    for (uint64_t d = 1; d < D; d++) {
        int64_t v = rd_i64(ds->idx_map + doff + 8 * d);
        if (v < prev || (uint64_t)v > S) {
            err_set(err, errlen,
                   "%s: offset %zu: expected document_indices[%" PRIu64 "] in [%" PRId64
                   ", %" PRIu64 "] (non-decreasing, at most the sequence count), found %" PRId64,
                   path, (size_t)(doff + 8 * d), d, prev, S, v);
            return -1;
        }
        prev = v;
    }
    if ((uint64_t)prev != S) {
        err_set(err, errlen,
               "%s: offset %zu: expected document_indices[%" PRIu64 "] = sequence count %" PRIu64
               ", found %" PRId64,
               path, (size_t)(doff + 8 * (D - 1)), D - 1, S, prev);
        return -1;
    }
    return 0;
}

static int validate_idx(indexed_dataset *ds, char *err, size_t errlen) {
    if (validate_header(ds, err, errlen)) return -1;
    const uint64_t S = ds->sequence_count, D = ds->document_count;
    if (need_section(ds, IDX_HEADER_BYTES, S, 4, "sequence_lengths", err, errlen)) return -1;
    ds->pointers_offset = IDX_HEADER_BYTES + (size_t)S * 4;
    if (need_section(ds, ds->pointers_offset, S, 8, "sequence_pointers", err, errlen)) return -1;
    ds->doc_indices_offset = ds->pointers_offset + (size_t)S * 8;
    if (need_section(ds, ds->doc_indices_offset, D, 8, "document_indices", err, errlen)) return -1;
    return validate_document_indices(ds, err, errlen);
}

static int validate_sequences(indexed_dataset *ds, char *err, size_t errlen) {
    const unsigned char *m = ds->idx_map;
    uint64_t S = ds->sequence_count;
    ds->sequence_lengths = (int32_t *)mem_alloc(MEM_OTHER, (S ? S : 1) * sizeof(int32_t),
                                                "indexed dataset sequence lengths");
    if (S) memcpy(ds->sequence_lengths, m + IDX_HEADER_BYTES, S * sizeof(int32_t));
    for (uint64_t i = 0; i < S; i++) {
        int32_t len = ds->sequence_lengths[i];
        if (len < 0) {
            err_set(err, errlen,
                   "%s: offset %zu: expected sequence_lengths[%" PRIu64 "] >= 0, found %" PRId32,
                   ds->idx_path, (size_t)(IDX_HEADER_BYTES + 4 * i), i, len);
            return -1;
        }
        int64_t p = indexed_dataset_pointer(ds, i);
        size_t poff = ds->pointers_offset + 8 * (size_t)i;
        if (p < 0 || (uint64_t)p > ds->bin_size) {
            err_set(err, errlen,
                   "%s: offset %zu: expected sequence_pointers[%" PRIu64 "] in [0, %zu] (the size "
                   "of %s), found %" PRId64,
                   ds->idx_path, poff, i, ds->bin_size, ds->bin_path, p);
            return -1;
        }
        uint64_t need = (uint64_t)len * ds->itemsize;
        if (need > ds->bin_size - (uint64_t)p) {
            err_set(err, errlen,
                   "%s: offset %" PRId64 ": expected %" PRIu64 " bytes of sequence %" PRIu64
                   " (%" PRId32 " %s tokens), found %" PRIu64 " bytes (file is %zu bytes)",
                   ds->bin_path, p, need, i, len, idx_dtype_name(ds->dtype),
                   (uint64_t)(ds->bin_size - (uint64_t)p), ds->bin_size);
            return -1;
        }
    }
    return 0;
}

indexed_dataset *indexed_dataset_open(const char *prefix, char *err, size_t errlen) {
    indexed_dataset *ds = xcalloc(1, sizeof *ds, "an indexed dataset");
    ds->prefix = str_concat(prefix, "");
    ds->idx_path = str_concat(prefix, ".idx");
    ds->bin_path = str_concat(prefix, ".bin");
    if (map_file(ds->idx_path, &ds->idx_map, &ds->idx_size, err, errlen) != 0 ||
        validate_idx(ds, err, errlen) != 0 ||
        map_file(ds->bin_path, &ds->bin_map, &ds->bin_size, err, errlen) != 0 ||
        validate_sequences(ds, err, errlen) != 0) {
        indexed_dataset_close(ds);
        return NULL;
    }
    return ds;
}

/* A float token as an int32 id: truncated as numpy's astype does; -1 (never a valid id) for NaN
 * and values outside int32, whose conversion would be undefined behaviour. */
static int32_t float_id(double v) {
    return v > -2147483649.0 && v < 2147483648.0 ? (int32_t)v : -1;
}

void indexed_dataset_read(const indexed_dataset *ds, uint64_t seq, uint64_t offset,
                          uint64_t count, int32_t *out) {
    if (count == 0) return;
    const unsigned char *p =
        ds->bin_map + indexed_dataset_pointer(ds, seq) + offset * ds->itemsize;
/* count tokens of type T at p (unaligned) into out, each converted by `conv` */
#define CONVERT_TOKENS(T, conv)                                                                   \
    for (uint64_t i = 0; i < count; i++) {                                                        \
        T v;                                                                                      \
        memcpy(&v, p + sizeof(T) * i, sizeof(T));                                                 \
        out[i] = conv;                                                                            \
    }
    switch (ds->dtype) {
    case IDX_DTYPE_UINT8: CONVERT_TOKENS(uint8_t, v); break;
    case IDX_DTYPE_INT8: CONVERT_TOKENS(int8_t, v); break;
    case IDX_DTYPE_INT16: CONVERT_TOKENS(int16_t, v); break;
    case IDX_DTYPE_UINT16: CONVERT_TOKENS(uint16_t, v); break;
    case IDX_DTYPE_INT32: memcpy(out, p, count * 4); break;
    case IDX_DTYPE_INT64: CONVERT_TOKENS(int64_t, (int32_t)v); break;
    case IDX_DTYPE_FLOAT32: CONVERT_TOKENS(float, float_id(v)); break;
    case IDX_DTYPE_FLOAT64: CONVERT_TOKENS(double, float_id(v)); break;
    }
#undef CONVERT_TOKENS
}

/* ---------------------------------------------------------------- builder */

struct idx_builder {
    char *idx_path, *bin_path, *idx_tmp, *bin_tmp;
    int dtype;
    size_t itemsize;
    FILE *bin;
    int32_t *lengths;
    size_t n_lengths, cap_lengths;
    int64_t *doc_indices;
    size_t n_docs, cap_docs; /* entries of doc_indices (documents + 1) */
    uint64_t num_tokens;
    unsigned char *buf;
    size_t cap_buf;
};

static void builder_free(idx_builder *b) {
    if (!b) return;
    if (b->bin) fclose(b->bin);
    free_all(b->idx_path, b->bin_path, b->idx_tmp, b->bin_tmp, b->lengths, b->doc_indices,
             b->buf, b);
}

idx_builder *idx_builder_create(const char *prefix, int dtype, char *err, size_t errlen) {
    if (idx_dtype_size(dtype) == 0) {
        err_set(err, errlen, "%s: unknown dtype code %d", prefix, dtype);
        return NULL;
    }
    idx_builder *b = xcalloc(1, sizeof *b, "an indexed dataset builder");
    b->idx_path = str_concat(prefix, ".idx");
    b->bin_path = str_concat(prefix, ".bin");
    b->idx_tmp = str_concat(prefix, ".idx.tmp");
    b->bin_tmp = str_concat(prefix, ".bin.tmp");
    b->dtype = dtype;
    b->itemsize = idx_dtype_size(dtype);
    b->bin = fopen(b->bin_tmp, "wb");
    if (!b->bin) {
        err_set(err, errlen, "%s: cannot create: %s", b->bin_tmp, strerror(errno));
        builder_free(b);
        return NULL;
    }
    setvbuf(b->bin, NULL, _IOFBF, 1 << 20);
    b->doc_indices =
        xgrow_array(b->doc_indices, &b->cap_docs, 1, sizeof(int64_t), 1024, "a dataset index");
    b->doc_indices[0] = 0;
    b->n_docs = 1;
    return b;
}

static int fits(int dtype, int32_t v) {
    switch (dtype) {
    case IDX_DTYPE_UINT8: return v >= 0 && v <= 255;
    case IDX_DTYPE_INT8: return v >= -128 && v <= 127;
    case IDX_DTYPE_INT16: return v >= -32768 && v <= 32767;
    case IDX_DTYPE_UINT16: return v >= 0 && v <= 65535;
    case IDX_DTYPE_FLOAT32: return v >= -16777216 && v <= 16777216; /* exact in float32 */
    default: return 1;
    }
}

int idx_builder_add_item(idx_builder *b, const int32_t *ids, size_t n, char *err,
                         size_t errlen) {
    if (n > INT32_MAX) {
        err_set(err, errlen, "%s: sequence of %zu tokens exceeds the int32 length field",
               b->bin_path, n);
        return -1;
    }
    b->buf = xgrow_array(b->buf, &b->cap_buf, n * b->itemsize + 1, 1, 1024, "a dataset index");
    unsigned char *o = b->buf;
    for (size_t i = 0; i < n; i++) {
        int32_t v = ids[i];
        if (!fits(b->dtype, v)) {
            err_set(err, errlen, "%s: token id %" PRId32 " does not fit dtype %s", b->bin_path, v,
                   idx_dtype_name(b->dtype));
            return -1;
        }
        switch (b->dtype) {
        case IDX_DTYPE_UINT8:
        case IDX_DTYPE_INT8: o[i] = (unsigned char)v; break;
        case IDX_DTYPE_INT16:
        case IDX_DTYPE_UINT16: {
            uint16_t u = (uint16_t)v;
            memcpy(o + 2 * i, &u, 2);
            break;
        }
        case IDX_DTYPE_INT32: memcpy(o + 4 * i, &v, 4); break;
        case IDX_DTYPE_INT64: {
            int64_t w = v;
            memcpy(o + 8 * i, &w, 8);
            break;
        }
        case IDX_DTYPE_FLOAT32: {
            float f = (float)v;
            memcpy(o + 4 * i, &f, 4);
            break;
        }
        case IDX_DTYPE_FLOAT64: {
            double f = (double)v;
            memcpy(o + 8 * i, &f, 8);
            break;
        }
        }
    }
    if (n && fwrite(o, b->itemsize, n, b->bin) != n) {
        err_set(err, errlen, "%s: write failed: %s", b->bin_tmp, strerror(errno));
        return -1;
    }
    b->lengths = xgrow_array(b->lengths, &b->cap_lengths, b->n_lengths + 1, sizeof(int32_t), 1024,
                             "a dataset index");
    b->lengths[b->n_lengths++] = (int32_t)n;
    b->num_tokens += n;
    return 0;
}

int idx_builder_end_document(idx_builder *b, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    b->doc_indices = xgrow_array(b->doc_indices, &b->cap_docs, b->n_docs + 1, sizeof(int64_t),
                                 1024, "a dataset index");
    b->doc_indices[b->n_docs++] = (int64_t)b->n_lengths;
    return 0;
}

int idx_builder_add_document(idx_builder *b, const int32_t *ids, size_t n, char *err,
                             size_t errlen) {
    if (idx_builder_add_item(b, ids, n, err, errlen) != 0) return -1;
    return idx_builder_end_document(b, err, errlen);
}

uint64_t idx_builder_num_sequences(const idx_builder *b) { return b->n_lengths; }
uint64_t idx_builder_num_documents(const idx_builder *b) { return b->n_docs - 1; }
uint64_t idx_builder_num_tokens(const idx_builder *b) { return b->num_tokens; }

void idx_builder_abort(idx_builder *b) {
    if (!b) return;
    if (b->bin) {
        fclose(b->bin);
        b->bin = NULL;
    }
    unlink(b->bin_tmp);
    unlink(b->idx_tmp);
    builder_free(b);
}

/* 1 when all n bytes went to the stream (stdio buffers; the caller flushes and fsyncs). */
static int fwrite_all(FILE *f, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, f) == n;
}

int idx_builder_finalize(idx_builder *b, char *err, size_t errlen) {
    int ok = 1;
    if (fflush(b->bin) != 0 || fsync(fileno(b->bin)) != 0) ok = 0;
    if (fclose(b->bin) != 0) ok = 0;
    b->bin = NULL;
    if (!ok) {
        err_set(err, errlen, "%s: write failed: %s", b->bin_tmp, strerror(errno));
        idx_builder_abort(b);
        return -1;
    }
    FILE *f = fopen(b->idx_tmp, "wb");
    if (!f) {
        err_set(err, errlen, "%s: cannot create: %s", b->idx_tmp, strerror(errno));
        idx_builder_abort(b);
        return -1;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 20);
    uint64_t version = 1, S = b->n_lengths, D = b->n_docs;
    unsigned char code = (unsigned char)b->dtype;
    ok = fwrite_all(f, IDX_MAGIC, 9) && fwrite_all(f, &version, 8) && fwrite_all(f, &code, 1) &&
         fwrite_all(f, &S, 8) && fwrite_all(f, &D, 8) &&
         fwrite_all(f, b->lengths, S * sizeof(int32_t));
    /* sequence pointers: running byte offsets (Megatron's _sequence_pointers) */
    int64_t ptr = 0;
    for (uint64_t i = 0; ok && i < S; i++) {
        ok = fwrite_all(f, &ptr, 8);
        ptr += (int64_t)b->lengths[i] * (int64_t)b->itemsize;
    }
    ok = ok && fwrite_all(f, b->doc_indices, D * sizeof(int64_t));
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) ok = 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        err_set(err, errlen, "%s: write failed: %s", b->idx_tmp, strerror(errno));
        idx_builder_abort(b);
        return -1;
    }
    /* .bin first: a reader never sees a new .idx pointing into an old .bin. */
    if (rename(b->bin_tmp, b->bin_path) != 0) {
        err_set(err, errlen, "%s: cannot rename to %s: %s", b->bin_tmp, b->bin_path,
               strerror(errno));
        idx_builder_abort(b);
        return -1;
    }
    if (rename(b->idx_tmp, b->idx_path) != 0) {
        err_set(err, errlen, "%s: cannot rename to %s: %s", b->idx_tmp, b->idx_path,
               strerror(errno));
        idx_builder_abort(b);
        return -1;
    }
    builder_free(b);
    return 0;
}
