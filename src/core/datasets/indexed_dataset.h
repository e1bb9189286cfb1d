/* Megatron's indexed dataset (megatron/core/datasets/indexed_dataset.py), byte-exact.
 *
 * PREFIX.bin: the tokens of every sequence, back to back, in the dataset's dtype (little
 * endian). PREFIX.idx (all little endian, no padding):
 *   offset  0  magic "MMIDIDX\0\0"                        9 bytes
 *   offset  9  version = 1                                uint64
 *   offset 17  dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64,
 *              7 float32, 8 uint16)                       uint8
 *   offset 18  sequence_count S                           uint64
 *   offset 26  document_count D (= documents + 1)         uint64
 *   offset 34  sequence_lengths[S]                        int32 (tokens)
 *              sequence_pointers[S]                       int64 (byte offsets into .bin)
 *              document_indices[D]                        int64 (document d = sequences
 *                                                         [document_indices[d], document_indices[d+1]))
 * Bytes after document_indices (Megatron's multimodal sequence modes) are ignored.
 *
 * The reader mmaps both files and checks every field (see indexed_dataset_open). The builder
 * writes PREFIX.bin.tmp / PREFIX.idx.tmp and renames them into place at finalize, so a crash
 * never leaves a half-written dataset under the final names. */
#ifndef MEGADLM_CORE_DATASETS_INDEXED_DATASET_H
#define MEGADLM_CORE_DATASETS_INDEXED_DATASET_H

#include <stddef.h>
#include <stdint.h>

enum {
    IDX_DTYPE_UINT8 = 1,
    IDX_DTYPE_INT8 = 2,
    IDX_DTYPE_INT16 = 3,
    IDX_DTYPE_INT32 = 4,
    IDX_DTYPE_INT64 = 5,
    IDX_DTYPE_FLOAT64 = 6,
    IDX_DTYPE_FLOAT32 = 7,
    IDX_DTYPE_UINT16 = 8
};

#define IDX_HEADER_BYTES 34 /* magic 9 + version 8 + dtype 1 + counts 16 */

/* Bytes per element of a dtype code, 0 for an unknown code. */
size_t idx_dtype_size(int code);
/* "uint16", ... ("unknown" for an unknown code). */
const char *idx_dtype_name(int code);
/* Megatron's DType.optimal_dtype: uint16 if vocab_size < 65500, else int32. */
int idx_dtype_optimal(int64_t vocab_size);

typedef struct {
    char *prefix;
    char *idx_path, *bin_path;
    int dtype;
    size_t itemsize;
    uint64_t sequence_count;
    uint64_t document_count; /* entries of document_indices: documents + 1 */
    int32_t *sequence_lengths; /* aligned copy (mem_alloc, MEM_OTHER) */
    /* The mapped files. Pointers and document indices sit at unaligned offsets in the .idx;
     * read them with the accessors below. */
    const unsigned char *idx_map;
    size_t idx_size;
    const unsigned char *bin_map;
    size_t bin_size;
    size_t pointers_offset, doc_indices_offset;
} indexed_dataset;

/* Opens PREFIX.idx and PREFIX.bin and validates them. NULL on error with
 * "PREFIX.idx: offset N: expected X, found Y" (or PREFIX.bin / "PREFIX.idx: cannot open: ...")
 * in err. */
indexed_dataset *indexed_dataset_open(const char *prefix, char *err, size_t errlen);
void indexed_dataset_close(indexed_dataset *ds);

static inline uint64_t indexed_dataset_num_documents(const indexed_dataset *ds) {
    return ds->document_count - 1;
}
int64_t indexed_dataset_pointer(const indexed_dataset *ds, uint64_t seq);
int64_t indexed_dataset_document_index(const indexed_dataset *ds, uint64_t d);
/* Copies `count` tokens of sequence `seq` starting at token `offset`, converted to int32
 * (Megatron's IndexedDataset.get(seq, offset, length)). The caller keeps the range inside
 * the sequence. float32/float64 tokens are truncated; NaN and values outside int32 read as -1. */
void indexed_dataset_read(const indexed_dataset *ds, uint64_t seq, uint64_t offset,
                          uint64_t count, int32_t *out);

/* ---- builder (Megatron's IndexedDatasetBuilder) ---- */
typedef struct idx_builder idx_builder;

/* Starts PREFIX.bin.tmp; dtype is a code above. NULL with a message on error. */
idx_builder *idx_builder_create(const char *prefix, int dtype, char *err, size_t errlen);
/* Appends one sequence (Megatron's add_item). Fails if an id does not fit the dtype. */
int idx_builder_add_item(idx_builder *b, const int32_t *ids, size_t n, char *err,
                         size_t errlen);
/* Closes the current document (Megatron's end_document). */
int idx_builder_end_document(idx_builder *b, char *err, size_t errlen);
/* add_item + end_document: one document made of one sequence (may be empty). */
int idx_builder_add_document(idx_builder *b, const int32_t *ids, size_t n, char *err,
                             size_t errlen);
uint64_t idx_builder_num_sequences(const idx_builder *b);
uint64_t idx_builder_num_documents(const idx_builder *b);
uint64_t idx_builder_num_tokens(const idx_builder *b);
/* Writes PREFIX.idx.tmp, then renames PREFIX.bin.tmp -> PREFIX.bin and PREFIX.idx.tmp ->
 * PREFIX.idx. Frees b in every case. 0 on success. */
int idx_builder_finalize(idx_builder *b, char *err, size_t errlen);
/* Discards everything (removes the temporary files) and frees b. */
void idx_builder_abort(idx_builder *b);

#endif
