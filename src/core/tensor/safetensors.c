/* safetensors reader and writer: see safetensors.h for the format and the guarantees. */
#include "core/tensor/safetensors.h"
#include "core/tensor/dtype.h"
#include "core/util/error.h"
#include "core/util/alloc.h"
#include "core/util/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* Offsets and sizes go through JSON numbers (doubles in cJSON): integers are exact below 2^53. */
#define ST_MAX_JSON_INT 9007199254740992.0 /* 2^53 */
/* The reference implementation's limit on the header, against maliciously large headers. */
#define ST_MAX_HEADER 100000000ull

static const struct {
    const char *name;
    size_t size;
} g_dtypes[ST_NUM_DTYPES] = {
    [ST_BOOL] = {"BOOL", 1},       [ST_U8] = {"U8", 1},   [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},         [ST_U16] = {"U16", 2}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},       [ST_I32] = {"I32", 4}, [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},         [ST_I64] = {"I64", 8}, [ST_U64] = {"U64", 8},
    [ST_F64] = {"F64", 8},
};

const char *st_dtype_name(st_dtype dt) {
    return (dt >= 0 && dt < ST_NUM_DTYPES) ? g_dtypes[dt].name : "?";
}

size_t st_dtype_size(st_dtype dt) { return (dt >= 0 && dt < ST_NUM_DTYPES) ? g_dtypes[dt].size : 0; }

int st_dtype_parse(const char *name, st_dtype *dt) {
    for (int i = 0; i < ST_NUM_DTYPES; i++)
        if (strcmp(g_dtypes[i].name, name) == 0) {
            *dt = (st_dtype)i;
            return 0;
        }
    return -1;
}

/* "[2, 3]" */
static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* Product of the dimensions times the element size, or -1 on overflow past 2^53. */
static int tensor_bytes(int ndim, const int64_t *shape, size_t elem, size_t *numel,
                        uint64_t *bytes) {
    uint64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return -1;
        if (__builtin_mul_overflow(n, (uint64_t)shape[d], &n)) return -1;
    }
    uint64_t b;
    if (__builtin_mul_overflow(n, (uint64_t)elem, &b) || (double)b >= ST_MAX_JSON_INT) return -1;
    *numel = (size_t)n;
    *bytes = b;
    return 0;
}

/* ======================================================================== writing */

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int st_header(const char *path, const st_tensor_desc *tensors, int n, const st_meta *meta,
              int nmeta, uint8_t **header, uint64_t *header_bytes, uint64_t *begin,
              uint64_t *buffer_bytes, char *err, size_t errlen) {
    *header = NULL;
    if (n < 0 || nmeta < 0) {
        err_set(err, errlen, "%s: invalid tensor count %d / metadata count %d", path, n, nmeta);
        return -1;
    }
    /* Validate the tensors and lay them out in the given order. */
    const char **names = calloc((size_t)n + 1, sizeof(char *));
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    int rc = -1;
    if (!names || !root) {
        err_set(err, errlen, "%s: out of memory building the header", path);
        goto done;
    }
    uint64_t offset = 0;
    if (nmeta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < nmeta; i++) {
            if (!meta[i].key || !meta[i].value) {
                err_set(err, errlen, "%s: metadata entry %d has no key or value", path, i);
                goto done;
            }
            cJSON_AddStringToObject(m, meta[i].key, meta[i].value);
        }
    }
    for (int i = 0; i < n; i++) {
        const st_tensor_desc *t = &tensors[i];
        const char *name = t->name ? t->name : "";
        if (!*name || strcmp(name, "__metadata__") == 0) {
            err_set(err, errlen, "%s: tensor %d: invalid name \"%s\"", path, i, name);
            goto done;
        }
        size_t es = st_dtype_size(t->dtype);
        size_t numel;
        uint64_t bytes;
        if (es == 0) {
            err_set(err, errlen, "%s: tensor %s: invalid dtype %d", path, name, (int)t->dtype);
            goto done;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS || (t->ndim > 0 && !t->shape) ||
            tensor_bytes(t->ndim, t->shape, es, &numel, &bytes) != 0) {
            err_set(err, errlen, "%s: tensor %s: invalid shape (ndim %d)", path, name, t->ndim);
            goto done;
        }
        names[i] = name;
        if (begin) begin[i] = offset;
        cJSON *e = cJSON_AddObjectToObject(root, name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++)
            cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t->shape[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
        if ((double)(offset + bytes) >= ST_MAX_JSON_INT) {
            err_set(err, errlen, "%s: tensor %s: file larger than 2^53 bytes", path, name);
            goto done;
        }
        offset += bytes;
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)offset));
    }
    qsort(names, (size_t)n, sizeof(char *), cmp_str_ptr);
    for (int i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            err_set(err, errlen, "%s: tensor %s: name given twice", path, names[i]);
            goto done;
        }

    json = cJSON_PrintUnformatted(root);
    if (!json) {
        err_set(err, errlen, "%s: out of memory printing the header", path);
        goto done;
    }
    size_t jlen = strlen(json);
    uint64_t hlen = (jlen + 7) / 8 * 8; /* padded with spaces to a multiple of 8 */
    uint8_t *h = malloc(8 + hlen);
    if (!h) {
        err_set(err, errlen, "%s: out of memory for a %llu-byte header", path,
                (unsigned long long)hlen);
        goto done;
    }
    for (int k = 0; k < 8; k++) h[k] = (uint8_t)(hlen >> (8 * k));
    memcpy(h + 8, json, jlen);
    memset(h + 8 + jlen, ' ', hlen - jlen);
    *header = h;
    *header_bytes = 8 + hlen;
    if (buffer_bytes) *buffer_bytes = offset;
    rc = 0;
done:
    free(json);
    cJSON_Delete(root);
    free(names);
    return rc;
}

/* Elements converted per write: 64 Ki (128 KiB of 16-bit values). */
#define ST_CHUNK 65536

/* Writes a tensor's bytes: its data as given, or its floats converted to its dtype a chunk at
 * a time. 0, or -1 with errno set. */
static int write_tensor(int fd, const st_tensor_desc *t, uint64_t bytes) {
    if (!t->from_f32 || t->dtype == ST_F32)
        return io_write_all(fd, t->from_f32 ? (const void *)t->from_f32 : t->data, bytes);
    uint16_t *buf = malloc(ST_CHUNK * sizeof(uint16_t));
    if (!buf) {
        errno = ENOMEM;
        return -1;
    }
    const size_t n = (size_t)(bytes / 2);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i += ST_CHUNK) {
        const size_t k = n - i < ST_CHUNK ? n - i : ST_CHUNK;
        if (t->dtype == ST_BF16)
            bf16_from_f32(buf, t->from_f32 + i, k);
        else
            fp16_from_f32(buf, t->from_f32 + i, k);
        rc = io_write_all(fd, buf, k * sizeof(uint16_t));
    }
    free(buf);
    return rc;
}

int st_write_fd(int fd, const char *path, const st_tensor_desc *tensors, int n,
                const st_meta *meta, int nmeta, char *err, size_t errlen) {
    if (n < 0 || nmeta < 0) {
        err_set(err, errlen, "%s: invalid tensor count %d / metadata count %d", path, n, nmeta);
        return -1;
    }
    uint64_t *begin = calloc((size_t)n + 1, sizeof(uint64_t));
    uint8_t *header = NULL;
    uint64_t header_bytes = 0, buffer_bytes = 0;
    int rc = -1;
    if (!begin) {
        err_set(err, errlen, "%s: out of memory building the header", path);
        return -1;
    }
    if (st_header(path, tensors, n, meta, nmeta, &header, &header_bytes, begin, &buffer_bytes,
                  err, errlen) != 0)
        goto done;
    begin[n] = buffer_bytes;
    for (int i = 0; i < n; i++) {
        const st_tensor_desc *t = &tensors[i];
        if (t->data && t->from_f32) {
            err_set(err, errlen, "%s: tensor %s: both data and from_f32 given", path, t->name);
            goto done;
        }
        if (t->from_f32 && t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
            err_set(err, errlen, "%s: tensor %s: floats can be written as F32, F16 or BF16, not %s",
                    path, t->name, st_dtype_name(t->dtype));
            goto done;
        }
        if (begin[i + 1] > begin[i] && !t->data && !t->from_f32) {
            err_set(err, errlen, "%s: tensor %s: no data", path, t->name);
            goto done;
        }
    }
    if (io_write_all(fd, header, header_bytes)) {
        err_set(err, errlen, "%s: writing the header: %s", path, strerror(errno));
        goto done;
    }
    for (int i = 0; i < n; i++)
        if (write_tensor(fd, &tensors[i], begin[i + 1] - begin[i])) {
            err_set(err, errlen, "%s: tensor %s: write failed: %s", path, tensors[i].name,
                    strerror(errno));
            goto done;
        }
    rc = 0;
done:
    free(header);
    free(begin);
    return rc;
}

int st_write_file(const char *path, const st_tensor_desc *tensors, int n, const st_meta *meta,
                  int nmeta, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err_set(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    int rc = st_write_fd(fd, path, tensors, n, meta, nmeta, err, errlen);
    return io_fsync_close(fd, path, rc, err, errlen);
}

/* ======================================================================== reading */

/* Offset of the first byte that is not valid UTF-8 in s[0..n), or n. */
static size_t utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            len = 2;
            cp = c & 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3;
            cp = c & 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return i;
        }
        if (i + len > n) return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return i;
        i += len;
    }
    return n;
}

static const char *json_type_name(const cJSON *v) {
    if (!v) return "nothing";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    return "an invalid value";
}

/* A non-negative JSON integer below 2^53. */
static int json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0) || d >= ST_MAX_JSON_INT || d != (double)(uint64_t)d) return -1;
    *out = (uint64_t)d;
    return 0;
}

void st_close(st_file *f) {
    if (!f) return;
    io_unmap(f->map, f->map_len);
    if (f->entries)
        for (int i = 0; i < f->count; i++) free(f->entries[i].name);
    for (int i = 0; i < f->nmeta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_values[i]);
    }
    free_all(f->meta_keys, f->meta_values, f->entries, f->by_name, f->path);
    memset(f, 0, sizeof(*f));
}

/* qsort contexts: qsort has no user pointer, so sort pointers to entries. */
static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}
static int cmp_entry_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_entry(const char *path, const cJSON *item, st_entry *e, uint64_t buffer_len,
                       char *err, size_t errlen) {
    const char *name = item->string;
    if (!cJSON_IsObject(item)) {
        err_set(err, errlen,
                "%s: tensor %s: expected an object {\"dtype\", \"shape\", \"data_offsets\"}, "
                "found %s",
                path, name, json_type_name(item));
        return -1;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt)) {
        err_set(err, errlen, "%s: tensor %s: expected a string \"dtype\", found %s", path, name,
                json_type_name(dt));
        return -1;
    }
    if (st_dtype_parse(dt->valuestring, &e->dtype) != 0) {
        err_set(err, errlen, "%s: tensor %s: unknown dtype \"%s\"", path, name, dt->valuestring);
        return -1;
    }
    if (!cJSON_IsArray(sh)) {
        err_set(err, errlen, "%s: tensor %s: expected an array \"shape\", found %s", path, name,
                json_type_name(sh));
        return -1;
    }
    int ndim = cJSON_GetArraySize(sh);
    if (ndim > ST_MAX_DIMS) {
        err_set(err, errlen, "%s: tensor %s: %d dimensions, at most %d supported", path, name,
                ndim, ST_MAX_DIMS);
        return -1;
    }
    e->ndim = ndim;
    int d = 0;
    for (const cJSON *v = sh->child; v; v = v->next, d++) {
        uint64_t x;
        if (json_uint(v, &x) != 0) {
            err_set(err, errlen,
                    "%s: tensor %s: shape dimension %d: expected a non-negative integer, found %s",
                    path, name, d, cJSON_IsNumber(v) ? "a non-integer or too large number"
                                                     : json_type_name(v));
            return -1;
        }
        e->shape[d] = (int64_t)x;
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        json_uint(off->child, &e->begin) != 0 || json_uint(off->child->next, &e->end) != 0) {
        err_set(err, errlen,
                "%s: tensor %s: expected \"data_offsets\": [begin, end] of non-negative integers",
                path, name);
        return -1;
    }
    char sbuf[160];
    shape_str(sbuf, sizeof sbuf, e->ndim, e->shape);
    if (e->end < e->begin) {
        err_set(err, errlen, "%s: tensor %s: data_offsets [%llu, %llu] end before they begin",
                path, name, (unsigned long long)e->begin, (unsigned long long)e->end);
        return -1;
    }
    uint64_t bytes;
    if (tensor_bytes(e->ndim, e->shape, st_dtype_size(e->dtype), &e->numel, &bytes) != 0) {
        err_set(err, errlen, "%s: tensor %s: shape %s is too large", path, name, sbuf);
        return -1;
    }
    if (bytes != e->end - e->begin) {
        err_set(err, errlen,
                "%s: tensor %s: shape %s of %s needs %llu bytes, but data_offsets [%llu, %llu] "
                "hold %llu",
                path, name, sbuf, st_dtype_name(e->dtype), (unsigned long long)bytes,
                (unsigned long long)e->begin, (unsigned long long)e->end,
                (unsigned long long)(e->end - e->begin));
        return -1;
    }
    if (e->end > buffer_len) {
        err_set(err, errlen,
                "%s: tensor %s: data_offsets [%llu, %llu] extend past the end of the data buffer "
                "(%llu bytes): the file is truncated or the header is wrong",
                path, name, (unsigned long long)e->begin, (unsigned long long)e->end,
                (unsigned long long)buffer_len);
        return -1;
    }
    return 0;
}

/* Parses the n header bytes at hdr (offsets in messages count from the file's start): valid
 * JSON, then only space padding. NULL with the message in err. */
static cJSON *parse_header(const char *hdr, size_t n, const char *path, char *err, size_t errlen) {
    /* Parse a NUL-terminated copy: the mapping has no terminator after the header. */
    char *hcopy = malloc(n + 1);
    if (!hcopy) {
        err_set(err, errlen, "%s: out of memory reading a %zu-byte header", path, n);
        return NULL;
    }
    memcpy(hcopy, hdr, n);
    hcopy[n] = 0;
    const char *parse_end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hcopy, n, &parse_end, 0);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        size_t pos = (at && at >= hcopy && at <= hcopy + n) ? (size_t)(at - hcopy) : 0;
        char snip[24];
        size_t k = 0;
        for (; k < sizeof snip - 1 && pos + k < n; k++) {
            char c = hdr[pos + k];
            snip[k] = (c >= 0x20 && c < 0x7f) ? c : '?';
        }
        snip[k] = 0;
        err_set(err, errlen, "%s: offset %llu: expected valid JSON in the header, found \"%s\"",
                path, (unsigned long long)(8 + pos), k ? snip : "the end of the header");
    }
    for (const char *p = parse_end; root && p && p < hcopy + n; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            err_set(err, errlen,
                    "%s: offset %llu: expected only space padding after the JSON header, found "
                    "byte 0x%02x",
                    path, (unsigned long long)(8 + (size_t)(p - hcopy)), (unsigned)(uint8_t)*p);
            cJSON_Delete(root);
            root = NULL;
        }
    free(hcopy);
    return root;
}

/* The 8-byte header length and the JSON header after it: a length that fits, '{' first,
 * UTF-8, valid JSON with only space padding after it, an object. Sets header_len, buffer and
 * buffer_len; returns the parsed header (NULL with the message in err). */
static cJSON *read_header(st_file *f, const char *path, char *err, size_t errlen) {
    if (f->map_len < 8) {
        err_set(err, errlen,
                "%s: offset 0: expected an 8-byte header length, found a file of %zu bytes",
                path, f->map_len);
        return NULL;
    }
    const uint8_t *base = (const uint8_t *)f->map;
    uint64_t n = 0;
    for (int k = 0; k < 8; k++) n |= (uint64_t)base[k] << (8 * k);
    f->header_len = n;
    if (n > ST_MAX_HEADER) {
        err_set(err, errlen, "%s: offset 0: expected a header length of at most %llu, found %llu",
                path, (unsigned long long)ST_MAX_HEADER, (unsigned long long)n);
        return NULL;
    }
    if (n > f->map_len - 8) {
        err_set(err, errlen,
                "%s: offset 0: expected a header length of at most %zu (the file size minus 8), "
                "found %llu",
                path, f->map_len - 8, (unsigned long long)n);
        return NULL;
    }
    const char *hdr = (const char *)base + 8;
    if (n == 0 || hdr[0] != '{') {
        if (n == 0)
            err_set(err, errlen, "%s: offset 8: expected '{' (the JSON header), found an empty "
                                 "header", path);
        else
            err_set(err, errlen, "%s: offset 8: expected '{' (the JSON header), found byte 0x%02x",
                    path, (unsigned)(uint8_t)hdr[0]);
        return NULL;
    }
    size_t bad = utf8_invalid_at((const uint8_t *)hdr, (size_t)n);
    if (bad < n) {
        err_set(err, errlen, "%s: offset %llu: expected UTF-8 text in the header, found byte 0x%02x",
                path, (unsigned long long)(8 + bad), (unsigned)(uint8_t)hdr[bad]);
        return NULL;
    }
    cJSON *root = parse_header(hdr, (size_t)n, path, err, errlen);
    if (root && !cJSON_IsObject(root)) {
        err_set(err, errlen, "%s: offset 8: expected a JSON object, found %s", path,
                json_type_name(root));
        cJSON_Delete(root);
        return NULL;
    }
    f->buffer = base + 8 + n;
    f->buffer_len = f->map_len - 8 - n;
    return root;
}

/* __metadata__'s string pairs, no key twice. */
static int read_metadata(st_file *f, const cJSON *meta, const char *path, char *err,
                         size_t errlen) {
    for (const cJSON *m = meta->child; m; m = m->next) {
        if (!cJSON_IsString(m)) {
            err_set(err, errlen, "%s: __metadata__: key \"%s\": expected a string value, found %s",
                    path, m->string, json_type_name(m));
            return -1;
        }
        for (int k = 0; k < f->nmeta; k++)
            if (strcmp(f->meta_keys[k], m->string) == 0) {
                err_set(err, errlen, "%s: __metadata__: key \"%s\" appears twice", path,
                        m->string);
                return -1;
            }
        f->meta_keys[f->nmeta] = xstrdup(m->string, "safetensors metadata");
        f->meta_values[f->nmeta] = xstrdup(m->valuestring, "safetensors metadata");
        f->nmeta++;
    }
    return 0;
}

/* The header's tensors (entries, each checked against the buffer) and metadata. */
static int read_entries(st_file *f, const cJSON *root, const char *path, char *err,
                        size_t errlen) {
    int count = 0, nmeta = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it->string && strcmp(it->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(it)) {
                err_set(err, errlen, "%s: __metadata__: expected an object, found %s", path,
                        json_type_name(it));
                return -1;
            }
            nmeta += cJSON_GetArraySize(it);
        } else {
            count++;
        }
    }
    f->entries = xcalloc((size_t)count + 1, sizeof(st_entry), "safetensors entries");
    f->by_name = xcalloc((size_t)count + 1, sizeof(int), "safetensors entries");
    f->meta_keys = xcalloc((size_t)nmeta + 1, sizeof(char *), "safetensors metadata");
    f->meta_values = xcalloc((size_t)nmeta + 1, sizeof(char *), "safetensors metadata");
    for (const cJSON *it = root->child; it; it = it->next) {
        if (it->string && strcmp(it->string, "__metadata__") == 0) {
            if (read_metadata(f, it, path, err, errlen)) return -1;
            continue;
        }
        st_entry *e = &f->entries[f->count];
        e->name = xstrdup(it->string ? it->string : "", "tensor name");
        f->count++;
        if (parse_entry(path, it, e, f->buffer_len, err, errlen) != 0) return -1;
        e->data = f->buffer + e->begin;
    }
    return 0;
}

/* No name twice (cJSON keeps duplicate keys); fills by_name. order: [count] scratch. */
static int check_names(st_file *f, const st_entry **order, const char *path, char *err,
                       size_t errlen) {
    for (int i = 0; i < f->count; i++) order[i] = &f->entries[i];
    qsort(order, (size_t)f->count, sizeof(*order), cmp_entry_name);
    for (int i = 0; i < f->count; i++) {
        f->by_name[i] = (int)(order[i] - f->entries);
        if (i > 0 && strcmp(order[i - 1]->name, order[i]->name) == 0) {
            err_set(err, errlen, "%s: tensor %s: appears twice in the header", path,
                    order[i]->name);
            return -1;
        }
    }
    return 0;
}

/* No overlapping data (empty tensors occupy nothing), and the buffer fully indexed: no gaps,
 * nothing after the last tensor (as the reference implementation requires; it also rules out
 * polyglot files). order: [count] scratch. */
static int check_offsets(const st_file *f, const st_entry **order, const char *path, char *err,
                         size_t errlen) {
    for (int i = 0; i < f->count; i++) order[i] = &f->entries[i];
    qsort(order, (size_t)f->count, sizeof(*order), cmp_entry_begin);
    const st_entry *reach = NULL; /* the non-empty tensor reaching furthest so far */
    for (int i = 0; i < f->count; i++) {
        const st_entry *e = order[i];
        if (e->begin == e->end) continue;
        if (reach && e->begin < reach->end) {
            err_set(err, errlen,
                    "%s: tensor %s: data_offsets [%llu, %llu] overlap those of tensor %s "
                    "[%llu, %llu]",
                    path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    reach->name, (unsigned long long)reach->begin,
                    (unsigned long long)reach->end);
            return -1;
        }
        if (!reach || e->end > reach->end) reach = e;
    }
    uint64_t cursor = 0;
    for (int i = 0; i < f->count; i++) {
        const st_entry *e = order[i];
        if (e->begin == e->end) continue;
        if (e->begin != cursor) {
            err_set(err, errlen,
                    "%s: tensor %s: data_offsets [%llu, %llu] leave bytes [%llu, %llu) of the "
                    "buffer unused (the buffer must be fully indexed)",
                    path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                    (unsigned long long)cursor, (unsigned long long)e->begin);
            return -1;
        }
        cursor = e->end;
    }
    if (cursor != f->buffer_len) {
        err_set(err, errlen,
                "%s: offset %llu: expected the end of the file (the last tensor ends there), "
                "found %llu more bytes",
                path, (unsigned long long)(8 + f->header_len + cursor),
                (unsigned long long)(f->buffer_len - cursor));
        return -1;
    }
    return 0;
}

int st_open(const char *path, st_file *f, char *err, size_t errlen) {
    memset(f, 0, sizeof(*f));
    const void *map;
    if (io_map_file(path, &map, &f->map_len, err, errlen)) return -1;
    f->map = (void *)map;
    f->path = xstrdup(path, "safetensors path");
    cJSON *root = read_header(f, path, err, errlen);
    int rc = root ? read_entries(f, root, path, err, errlen) : -1;
    cJSON_Delete(root);
    if (rc == 0) {
        const st_entry **order = xcalloc((size_t)f->count + 1, sizeof *order, "safetensors order");
        rc = check_names(f, order, path, err, errlen) || check_offsets(f, order, path, err, errlen)
                 ? -1
                 : 0;
        free(order);
    }
    if (rc) st_close(f);
    return rc;
}

const st_entry *st_find(const st_file *f, const char *name) {
    int lo = 0, hi = f->count - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const st_entry *e = &f->entries[f->by_name[mid]];
        int c = strcmp(name, e->name);
        if (c == 0) return e;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *st_metadata(const st_file *f, const char *key) {
    for (int i = 0; i < f->nmeta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_values[i];
    return NULL;
}

static int is_float_dtype(st_dtype dt) { return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16; }

int st_read_as(const st_file *f, const st_entry *e, st_dtype to, size_t first, size_t count,
               void *out, char *err, size_t errlen) {
    if (!is_float_dtype(to)) {
        err_set(err, errlen, "%s: tensor %s: cannot read as %s (F32, F16, BF16 can be)", f->path,
                e->name, st_dtype_name(to));
        return -1;
    }
    if (first > e->numel || count > e->numel - first) {
        err_set(err, errlen, "%s: tensor %s: elements [%zu, %zu) are outside its %zu", f->path,
                e->name, first, first + count, e->numel);
        return -1;
    }
    if (!is_float_dtype(e->dtype)) {
        err_set(err, errlen, "%s: tensor %s: dtype %s cannot be read as %s (F32, F16, BF16 can)",
                f->path, e->name, st_dtype_name(e->dtype), st_dtype_name(to));
        return -1;
    }
    const size_t in_size = st_dtype_size(e->dtype);
    const uint8_t *src = (const uint8_t *)e->data + in_size * first;
    if (e->dtype == to) { /* bit for bit */
        memcpy(out, src, count * in_size);
        return 0;
    }
    /* a chunk at a time through aligned buffers (the mapping need not be aligned): the source
     * as it is, then widened to float unless it is F32, then narrowed unless `to` is F32 */
    enum { CHUNK = 4096 };
    uint16_t h[CHUNK];
    float x[CHUNK];
    for (size_t i = 0; i < count; i += CHUNK) {
        const size_t k = count - i < CHUNK ? count - i : CHUNK;
        float *wide = to == ST_F32 ? (float *)out + i : x;
        if (e->dtype == ST_F32) {
            memcpy(wide, src + 4 * i, 4 * k);
        } else {
            memcpy(h, src + 2 * i, 2 * k);
            if (e->dtype == ST_BF16)
                bf16_to_f32(wide, h, k);
            else
                fp16_to_f32(wide, h, k);
        }
        if (to == ST_BF16)
            bf16_from_f32((uint16_t *)out + i, wide, k);
        else if (to == ST_F16)
            fp16_from_f32((uint16_t *)out + i, wide, k);
    }
    return 0;
}

int st_read_f32_range(const st_file *f, const st_entry *e, size_t first, size_t count,
                      float *out, char *err, size_t errlen) {
    return st_read_as(f, e, ST_F32, first, count, out, err, errlen);
}

int st_read_f32(const st_file *f, const st_entry *e, float *out, char *err, size_t errlen) {
    return st_read_f32_range(f, e, 0, e->numel, out, err, errlen);
}
