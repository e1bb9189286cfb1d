/* The training data path, as Megatron's BlendedMegatronDatasetBuilder + GPTDataset build it:
 * train / validation / test datasets of fixed-length samples (seq_length + 1 tokens each:
 * tokens = sample[:-1], labels = sample[1:]) drawn from one or more indexed datasets
 * (PREFIX.bin / PREFIX.idx, Megatron's MMIDIDX format), or from mock data.
 *
 * Split: the documents of each indexed dataset are divided by the --split weights
 * (e.g. "969,30,1") as Megatron does; each split gets its own document index over epochs,
 * sample index (samples cross document boundaries) and seeded shuffle index.
 * Blending ("W1 P1 W2 P2 ..."): Megatron's blending index (greedy, lowest error first) with
 * each dataset asked for ceil(weight * num_samples * 1.005) samples. Several prefixes without
 * weights: one epoch of each, weighted by their sample counts, min(num_samples, their sum)
 * samples (a split may then hold fewer samples than asked for).
 * Mock data: deterministic learnable sequences (see gpt_data.c).
 */
#ifndef MEGADLM_CORE_DATASETS_GPT_DATA_H
#define MEGADLM_CORE_DATASETS_GPT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { SPLIT_TRAIN = 0, SPLIT_VALID = 1, SPLIT_TEST = 2 };

typedef struct {
    int mock;               /* --mock-data */
    int num_paths;          /* number of prefixes in data_paths */
    const char **data_paths; /* --data-path prefixes */
    const double *weights;  /* one per prefix, or NULL: no weights (one prefix, or several
                               blended by their sample counts, as Megatron) */
    const char *split;      /* --split, e.g. "969,30,1" */
    int seq_length;         /* --seq-length */
    uint64_t seed;          /* --seed */
    int vocab_size;         /* tokenizer vocab size incl. eod (mock data draws ids < this) */
    int eod;                /* end-of-document id */
    uint64_t num_samples[3]; /* samples wanted per split (train, valid, test); 0 = none */
    const char *cache_dir;  /* --data-cache-path: indices cached there (NULL or "": not) */
    FILE *log;              /* where the cache's load/build lines and each blend's weights
                               and sizes go (NULL: nowhere) */
    /* a cached index that cannot be read back (why) is rebuilt; this says so (NULL: a
     * "warning: index cache: WHY; rebuilding the indices" line on stderr) */
    void (*cache_stale)(void *ctx, const char *why);
    void *cache_stale_ctx;
    int sft;                /* open each prefix's loss mask PREFIX_loss_mask (sft_dataset.h);
                               gpt_data_get_sft reads it with the tokens */
    int sft_padded;         /* with sft: one sequence per sample, cut or padded with eod
                               (sft_dataset.h), instead of Megatron's packed samples */
    int sft_pad_mask;       /* the padding's mask value: 0 (no loss) or 1 (LLaDA: the padding
                               end-of-document tokens are part of the response) */
} gpt_data_config;

/* Which input of gpt_data_config a failed build is about. The messages describe the problem in
 * the data's own terms ("expected up to 3 comma-separated weights, found 'x'"); the caller
 * knows which of its settings gave that input and names it (training: the flag). */
typedef enum {
    GPT_DATA_OK = 0,
    GPT_DATA_FAULT_PATHS,      /* data_paths / weights: a dataset, its files or its weight */
    GPT_DATA_FAULT_SPLIT,      /* split: the weights, or a split its sequences cannot fill */
    GPT_DATA_FAULT_SAMPLES,    /* num_samples: more than a split's indices can hold */
    GPT_DATA_FAULT_SEQ_LENGTH, /* seq_length */
    GPT_DATA_FAULT_SEED,       /* seed */
    GPT_DATA_FAULT_MOCK,       /* mock: the vocabulary is too small */
    GPT_DATA_FAULT_CACHE       /* cache_dir: cannot be created or written */
} gpt_data_fault;

typedef struct gpt_data gpt_data;

/* Builds the three splits. NULL on error with a message naming the file (and offset) or
 * describing the input at fault in err (e.g. "data.idx: offset 0: expected magic MMIDIDX,
 * found ..."), and which input that is in *fault (fault may be NULL). */
gpt_data *gpt_data_build(const gpt_data_config *cfg, gpt_data_fault *fault, char *err,
                         size_t errlen);
void gpt_data_free(gpt_data *d);

/* Number of samples available in a split (0 if the split is empty). */
uint64_t gpt_data_num_samples(const gpt_data *d, int split);
/* Copies sample `index` (wraps modulo the split size) of `split`: seq_length + 1 tokens.
 * 0, or -1 when the sample holds an id outside [0, vocab_size), with a message naming the
 * dataset, the id and the vocabulary size (tokens are filled either way; the caller adds
 * which of its settings to check). */
int gpt_data_get(const gpt_data *d, int split, uint64_t index, int32_t *tokens, char *err,
                 size_t errlen);
/* gpt_data_get plus the sample's loss mask (seq_length + 1 values of 0/1, aligned with the
 * tokens) from data built with cfg.sft; -1 with a message naming the mask dataset when a value
 * is not 0 or 1, or when the data has no masks. */
int gpt_data_get_sft(const gpt_data *d, int split, uint64_t index, int32_t *tokens,
                     int32_t *mask, char *err, size_t errlen);

#endif
