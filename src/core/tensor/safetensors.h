/* The safetensors file format (https://github.com/huggingface/safetensors):
 *
 *   bytes [0, 8)        N, the header length: unsigned 64-bit little-endian
 *   bytes [8, 8+N)      the header: a UTF-8 JSON object
 *                         {"__metadata__": {"key": "value", ...},          (optional, strings)
 *                          "tensor name": {"dtype": "F32", "shape": [d0, d1, ...],
 *                                          "data_offsets": [begin, end]}, ...}
 *                       padded with spaces (0x20) so that N is a multiple of 8
 *   bytes [8+N, EOF)    the byte buffer; each tensor occupies [begin, end) of it (offsets are
 *                       relative to the buffer start), contiguous, row-major (C order),
 *                       little-endian; shape [] is a scalar (one element).
 *
 * Writer: st_write_fd streams the header and then each tensor's bytes straight from the
 * caller's memory (no copy of the data; a tensor given as floats for an F16 or BF16 entry is
 * converted a chunk at a time), in the order given (not sorted): data_offsets
 * increase in that order, the header lists "__metadata__" first and then the tensors in that
 * order. st_write_file creates/truncates the file, writes, fsyncs and closes it. st_header
 * builds the same header alone, for writers that place the data themselves (pwrite).
 *
 * Reader: st_open maps the file read-only (mmap), parses the header with cJSON and validates
 * all of it before returning: header length within the file, UTF-8, JSON syntax, a JSON
 * object, metadata values are strings, every entry's dtype is known, shape dimensions are
 * non-negative integers, shape product * dtype size == end - begin, begin <= end <= buffer
 * length, no two tensors overlap, no name twice, and (as the reference implementation) the
 * tensors cover the buffer exactly: no gaps, no bytes after the last one; header length at
 * most 100,000,000 bytes (the reference implementation's limit). Errors read
 *   "FILE: offset N: expected X, found Y"     (structure of the file / header)
 *   "FILE: tensor NAME: ..."                  (one entry of the header)
 * Tensor data is then a pointer into the mapping (valid until st_close). It is aligned to
 * the dtype only if the writer aligned it (ours and Hugging Face's do); st_read_f32 copies
 * (and converts F16/BF16) into an aligned float buffer either way, st_read_as into a buffer of
 * F32, F16 or BF16.
 *
 * F16 is IEEE binary16, BF16 bfloat16, both little-endian 16-bit patterns as PyTorch's
 * torch.float16 / torch.bfloat16 store them; conversions are core/tensor/dtype.h's (to F32
 * exact, from F32 rounded to nearest even).
 *
 * Only little-endian hosts are supported (checked at compile time). */
#ifndef MEGADLM_CORE_TENSOR_SAFETENSORS_H
#define MEGADLM_CORE_TENSOR_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

typedef enum {
    ST_BOOL = 0,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_I64,
    ST_U64,
    ST_F64,
    ST_NUM_DTYPES
} st_dtype;

const char *st_dtype_name(st_dtype dt); /* "F32", ... */
size_t st_dtype_size(st_dtype dt);      /* bytes per element */
int st_dtype_parse(const char *name, st_dtype *dt); /* 0, or -1 if unknown */

/* ---------------- writing ---------------- */

typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;                /* 0..ST_MAX_DIMS; 0 = scalar */
    const int64_t *shape;    /* [ndim] */
    const void *data;        /* prod(shape) * st_dtype_size(dtype) bytes, little-endian */
    /* Instead of data (which is then NULL): prod(shape) floats, written converted to dtype,
     * which must be F32 (as they are), F16 or BF16 (rounded to nearest even, dtype.h). */
    const float *from_f32;
} st_tensor_desc;

typedef struct {
    const char *key;
    const char *value;
} st_meta;

/* Writes a complete safetensors file to fd (at its current position) in the order given.
 * `path` is only used in error messages. Does not fsync or close. 0, or -1 with a message. */
int st_write_fd(int fd, const char *path, const st_tensor_desc *tensors, int n,
                const st_meta *meta, int nmeta, char *err, size_t errlen);

/* The header st_write_fd writes for these tensors (their data is not read), for writers that
 * place the data themselves (several processes writing one file, each its own slices):
 * *header gets the 8-byte length and the space-padded JSON (*header_bytes = 8 + N bytes;
 * malloc'd, the caller frees it); begin[i] (if begin is not NULL) is tensor i's data_offsets
 * begin, so its data goes at file offset *header_bytes + begin[i]; *buffer_bytes (if not NULL)
 * the length of the byte buffer. The header's length depends on the names, dtypes, shapes and
 * the lengths of the metadata strings only. 0, or -1 with a message. */
int st_header(const char *path, const st_tensor_desc *tensors, int n, const st_meta *meta,
              int nmeta, uint8_t **header, uint64_t *header_bytes, uint64_t *begin,
              uint64_t *buffer_bytes, char *err, size_t errlen);

/* Creates (or truncates) path with mode 0644, st_write_fd, fsync, close. On failure the
 * partial file is left for the caller to remove. 0, or -1 with a message naming path. */
int st_write_file(const char *path, const st_tensor_desc *tensors, int n, const st_meta *meta,
                  int nmeta, char *err, size_t errlen);

/* ---------------- reading ---------------- */

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    uint64_t begin, end;  /* data_offsets, relative to the buffer */
    const void *data;     /* into the mapping: buffer + begin */
} st_entry;

typedef struct {
    char *path;
    void *map;
    size_t map_len;          /* file size */
    uint64_t header_len;     /* N */
    const uint8_t *buffer;   /* map + 8 + N */
    uint64_t buffer_len;
    int count;
    st_entry *entries;       /* in header order */
    int *by_name;            /* entry indices sorted by name (for st_find) */
    int nmeta;
    char **meta_keys, **meta_values;
} st_file;

/* Maps and validates path. 0, or -1 with a message (and *f left closed). */
int st_open(const char *path, st_file *f, char *err, size_t errlen);
void st_close(st_file *f);

/* The entry named `name`, or NULL. */
const st_entry *st_find(const st_file *f, const char *name);
/* The __metadata__ value of `key`, or NULL. */
const char *st_metadata(const st_file *f, const char *key);

/* Copies entry e into out[0 .. e->numel) as float: F32 bit-exactly, F16 and BF16 converted
 * exactly (every F16/BF16 value is representable in F32). Other dtypes are refused.
 * 0, or -1 with a message "FILE: tensor NAME: ...". */
int st_read_f32(const st_file *f, const st_entry *e, float *out, char *err, size_t errlen);
/* The same for elements [first, first + count) of e (row-major order) only: touches only those
 * bytes of the mapping. */
int st_read_f32_range(const st_file *f, const st_entry *e, size_t first, size_t count,
                      float *out, char *err, size_t errlen);
/* Elements [first, first + count) of e, an F32, F16 or BF16 entry, into out as `to` (F32, F16 or
 * BF16: float or uint16_t elements): the same dtype bit for bit, a wider one exactly, a
 * narrower one rounded to nearest even (F16 <-> BF16 through F32, one rounding). Other dtypes
 * are refused. 0, or -1 with a message "FILE: tensor NAME: ...". */
int st_read_as(const st_file *f, const st_entry *e, st_dtype to, size_t first, size_t count,
               void *out, char *err, size_t errlen);

#endif
