/* Megatron's dataset index cache (its --data-cache-path) (megatron/core/datasets/gpt_dataset.py,
 * _build_document_sample_shuffle_indices with path_to_cache). A GPTDataset's document, sample
 * and shuffle indices are written to DIR as NumPy .npy files named by a hash of the dataset's
 * configuration,
 *     DIR/<hash>-GPTDataset-<split>-document_index.npy   int32 [documents x epochs]
 *     DIR/<hash>-GPTDataset-<split>-sample_index.npy     int64 [samples + 1, 2]
 *     DIR/<hash>-GPTDataset-<split>-shuffle_index.npy    int64 [samples]
 *     DIR/<hash>-GPTDataset-<split>-description.txt      the configuration, then the counts
 * and read back instead of built when the description matches. <hash> is the FNV-1a 64-bit
 * hash of the description (Megatron: the MD5 of its JSON description; the files are not
 * interchangeable with Megatron's). The description holds what the indices depend on: the
 * dataset prefix, its sequence count and token total (so a rewritten dataset is not matched by
 * its name alone, which Megatron does), the split's sequence range, the samples asked for, the
 * seed and the sequence length.
 *
 * Files are written to a temporary name and renamed, so ranks that build the same indices at
 * once never read a half-written file. A cached file that cannot be read back as the indices
 * it should hold (bad header, shape, size or values) is reported and rebuilt. */
#ifndef MEGADLM_CORE_DATASETS_INDEX_CACHE_H
#define MEGADLM_CORE_DATASETS_INDEX_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/datasets/gpt_dataset.h"

typedef struct {
    const char *dir;    /* the cache directory */
    const char *prefix; /* the indexed dataset */
    const char *split;  /* "train", "valid", "test" */
    uint64_t sequence_count, token_count;
    int64_t doc_beg, doc_end;
    uint64_t num_samples;
    int seq_length;
    uint32_t seed;
    FILE *log; /* where the load/build lines go (NULL: nowhere) */
    /* told why a cached index cannot be read back, before it is rebuilt (NULL: a warning line
     * on stderr); the caller words it, naming its setting */
    void (*stale)(void *ctx, const char *why);
    void *stale_ctx;
} index_cache_key;

/* What index_cache_indices returns: the caller words a failure by whose it is (the split's
 * indices, or the cache directory), so it is told which, not left to read the message. */
typedef enum {
    INDEX_CACHE_OK = 0,
    INDEX_CACHE_BUILD_FAILED = -1, /* the indices could not be built (or out of memory) */
    INDEX_CACHE_DIR_FAILED = -2,   /* the cache directory cannot be created or written */
    INDEX_CACHE_TOO_MANY = -3,     /* more samples asked for than the indices can hold */
} index_cache_status;

/* The status of a gpt_indices_build result (GPT_INDICES_*). */
static inline int index_cache_status_of(int gpt_indices_rc) {
    return gpt_indices_rc == GPT_INDICES_OK         ? INDEX_CACHE_OK
           : gpt_indices_rc == GPT_INDICES_TOO_MANY ? INDEX_CACHE_TOO_MANY
                                                    : INDEX_CACHE_BUILD_FAILED;
}

/* The indices of `key` from the cache, else built with gpt_indices_build(sizes, ...) and
 * written to the cache. INDEX_CACHE_OK, or a failure with a message (a cache directory's names
 * the directory or the file). */
int index_cache_indices(const index_cache_key *key, const int32_t *sizes, gpt_indices *out,
                        char *err, size_t errlen);

#endif
