/* The data path of gpt_data.h: Megatron's BlendedMegatronDatasetBuilder over GPTDatasets
 * (see gpt_dataset.h for the index algorithms) plus mock data.
 *
 * Splits and blends, as Megatron:
 *   - one prefix, no weight: each split s with a non-zero --split weight and
 *     num_samples[s] > 0 is a GPTDataset over its sequence range with num_samples[s];
 *   - weighted prefixes (any count): weights normalized; prefix k contributes a GPTDataset
 *     asked for ceil(num_samples[s] * w_k * 1.005) samples; the split is a BlendedDataset of
 *     size sum_k of those, blending index built with the (re-normalized) weights;
 *   - several prefixes without weights (Megatron's get_blend_from_list of prefixes only):
 *     each GPTDataset is one epoch (num_samples None); blended with weights proportional to
 *     their sample counts; size min(num_samples[s], sum of counts); a dataset with no sample
 *     is refused (BlendedDataset asserts positive weights).
 * The per-split seed of every GPTDataset is --seed (numpy.random.RandomState(seed)).
 * num_samples[s] == 0 means the split is not built (Megatron would build one epoch).
 *
 * Mock data (--mock-data; --split and --data-path are ignored, as Megatron's mock ignores
 * the blend and uses an even split): split s has exactly num_samples[s] samples; sample i is
 *     token[j] = (start + j) mod (vocab_size - 1),  j = 0 .. seq_length,
 *     start    = mix(mix(mix(seed) ^ s) ^ i) mod (vocab_size - 1),
 * where mix is the SplitMix64 step (x += 0x9e3779b97f4a7c15, then the SplitMix64
 * finalizer). Every label is its token + 1 (mod vocab_size - 1): learnable after one token,
 * deterministic in (seed, split, index), and never the end-of-document id when that id is
 * vocab_size - 1 (ByteLevel, NullTokenizer). */
#include "core/datasets/gpt_data.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/datasets/gpt_data_debug.h"
#include "core/datasets/gpt_dataset.h"
#include "core/datasets/index_cache.h"
#include "core/datasets/indexed_dataset.h"
#include "core/datasets/sft_dataset.h"
#include "core/tensor/memory.h"
#include "core/util/error.h"
#include "core/util/alloc.h"

typedef struct {
    indexed_dataset *ds; /* not owned */
    indexed_dataset *mask; /* its loss mask (SFT), not owned; NULL without */
    int64_t beg, end;    /* sequence range of the split */
    gpt_indices ix;
} mid_ds;

typedef struct {
    int kind;
    uint64_t size;
    int n_mid;
    mid_ds *mid;
    int16_t *dataset_index;
    int64_t *dataset_sample_index;
    double *blend_weights;
} split_ds;

struct gpt_data {
    int seq_length;
    uint64_t seed;
    int vocab_size;
    int eod;
    int num_ds;
    indexed_dataset **ds;
    indexed_dataset **mask; /* SFT: one per dataset; NULL without */
    int sft_padded, sft_pad_mask;
    split_ds split[3];
};

static const char *SPLIT_NAMES[3] = {"train", "valid", "test"};

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void gpt_data_free(gpt_data *d) {
    if (!d) return;
    for (int s = 0; s < 3; s++) {
        split_ds *sp = &d->split[s];
        for (int k = 0; k < sp->n_mid; k++) gpt_indices_free(&sp->mid[k].ix);
        free(sp->mid);
        mem_free(sp->dataset_index);
        mem_free(sp->dataset_sample_index);
        free(sp->blend_weights);
    }
    for (int i = 0; i < d->num_ds; i++) {
        indexed_dataset_close(d->ds[i]);
        if (d->mask) indexed_dataset_close(d->mask[i]);
    }
    free(d->ds);
    free(d->mask);
    free(d);
}

/* The indices of split s of ds: built, or with a cache directory read from the cache (and
 * written there when missing). An index_cache_status. */
static int build_indices(const gpt_data_config *cfg, int s, const indexed_dataset *ds,
                         const int64_t beg[3], const int64_t end[3], uint64_t num_samples,
                         gpt_indices *ix, char *err, size_t errlen) {
    if (cfg->sft && cfg->sft_padded) /* one sequence a sample: cheap, never cached */
        return sft_doc_index_build(beg[s], end[s], num_samples, (uint32_t)cfg->seed, ix, err,
                                   errlen) == 0
                   ? INDEX_CACHE_OK
                   : INDEX_CACHE_BUILD_FAILED;
    if (!cfg->cache_dir || !cfg->cache_dir[0])
        return index_cache_status_of(gpt_indices_build(ds->sequence_lengths, beg[s], end[s],
                                                       num_samples, cfg->seq_length,
                                                       (uint32_t)cfg->seed, 1, ix, err, errlen));
    uint64_t tokens = 0;
    for (uint64_t i = 0; i < ds->sequence_count; i++) tokens += (uint64_t)ds->sequence_lengths[i];
    index_cache_key key = {.dir = cfg->cache_dir, .prefix = ds->prefix, .split = SPLIT_NAMES[s],
                           .sequence_count = ds->sequence_count, .token_count = tokens,
                           .doc_beg = beg[s], .doc_end = end[s], .num_samples = num_samples,
                           .seq_length = cfg->seq_length, .seed = (uint32_t)cfg->seed,
                           .log = cfg->log, .stale = cfg->cache_stale,
                           .stale_ctx = cfg->cache_stale_ctx};
    return index_cache_indices(&key, ds->sequence_lengths, ix, err, errlen);
}

/* Builds component k of split s over prefix k's split range. */
static gpt_data_fault build_mid(gpt_data *d, const gpt_data_config *cfg, int s, mid_ds *m,
                                indexed_dataset *ds, const int64_t beg[3], const int64_t end[3],
                                uint64_t num_samples, char *err, size_t errlen) {
    m->ds = ds;
    for (int k = 0; d->mask && k < d->num_ds; k++)
        if (d->ds[k] == ds) m->mask = d->mask[k];
    m->beg = beg[s];
    m->end = end[s];
    char e2[512];
    int rc = build_indices(cfg, s, ds, beg, end, num_samples, &m->ix, e2, sizeof e2);
    if (rc == INDEX_CACHE_OK) return GPT_DATA_OK;
    if (rc == INDEX_CACHE_DIR_FAILED) { /* the cache's own error */
        err_set(err, errlen, "%s", e2);
        return GPT_DATA_FAULT_CACHE;
    }
    err_set(err, errlen,
            "the %s split of %s (sequences [%" PRId64 ", %" PRId64 ") of %" PRIu64
            " with split weights %s): %s",
            SPLIT_NAMES[s], ds->prefix, beg[s], end[s], ds->sequence_count, cfg->split, e2);
    return rc == INDEX_CACHE_TOO_MANY ? GPT_DATA_FAULT_SAMPLES : GPT_DATA_FAULT_SPLIT;
}

/* The blend weights of the datasets normalised (malloc'ed; NULL with an error, or without
 * weights: *ok tells them apart). */
static double *blend_weights(const gpt_data_config *cfg, int *ok, char *err, size_t errlen) {
    const int n = cfg->num_paths;
    *ok = 1;
    if (!cfg->weights) return NULL;
    *ok = 0;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        if (!isfinite(cfg->weights[k]) || cfg->weights[k] < 0) {
            err_set(err, errlen, "expected a non-negative weight for %s, found %g",
                    cfg->data_paths[k], cfg->weights[k]);
            return NULL;
        }
        sum += cfg->weights[k];
    }
    if (!(sum > 0) || !isfinite(sum)) {
        err_set(err, errlen, "expected weights with a positive finite sum, found %g", sum);
        return NULL;
    }
    if (n > 32766) {
        err_set(err, errlen, "expected at most 32766 datasets, found %d", n);
        return NULL;
    }
    double *w = xcalloc((size_t)n, sizeof(double), "blend weights");
    gpt_normalize(cfg->weights, n, w);
    *ok = 1;
    return w;
}

/* Without weights, Megatron weighs each dataset by its sample count, and BlendedDataset
 * asserts that every weight is positive: a dataset with no sample in the split is refused. */
static gpt_data_fault check_unweighted(const gpt_data *d, const gpt_data_config *cfg, int s,
                                       const mid_ds *mid, char *err, size_t errlen) {
    for (int k = 0; k < d->num_ds; k++)
        if (mid[k].ix.num_samples == 0) {
            err_set(err, errlen,
                    "the %s split of %s (sequences [%" PRId64 ", %" PRId64
                    "), %" PRIu64 " tokens) holds no sample of sequence length %d + 1 tokens; "
                    "without weights each dataset is weighted by its samples, and a weight of "
                    "0 is refused (as Megatron's BlendedDataset does): give weights "
                    "W1 P1 W2 P2 ..., or leave this dataset out",
                    SPLIT_NAMES[s], mid[k].ds->prefix, mid[k].beg, mid[k].end,
                    mid[k].ix.num_tokens_per_epoch, cfg->seq_length);
            return GPT_DATA_FAULT_PATHS;
        }
    return GPT_DATA_OK;
}

/* The blend's size and, per dataset, its weight and samples: the weights Megatron derives
 * from the sizes when none are given are nowhere else to be seen. */
static void log_blend(const gpt_data *d, const gpt_data_config *cfg, int s, int weighted) {
    const split_ds *sp = &d->split[s];
    if (!cfg->log) return;
    fprintf(cfg->log, " > %s split: a blend of %d datasets, %" PRIu64 " samples (%s)\n",
            SPLIT_NAMES[s], sp->n_mid, sp->size,
            weighted ? "weights as given, normalized"
                     : "no weights: one epoch of each, weighted by its samples, as Megatron");
    for (int k = 0; k < sp->n_mid; k++)
        fprintf(cfg->log, "    weight %.12f  samples %" PRIu64 "  %s\n", sp->blend_weights[k],
                sp->mid[k].ix.num_samples, sp->mid[k].ds->prefix);
}

/* A blended split of N samples from n datasets: with weights w, Megatron's per-dataset sizes
 * and BlendedDataset's indices; without, each dataset whole (one epoch), weighted by its
 * samples, min(N, their sum) samples. */
static gpt_data_fault build_blended(gpt_data *d, const gpt_data_config *cfg, int s,
                                    const double *w, int64_t (*beg)[3], int64_t (*end)[3],
                                    uint64_t N, char *err, size_t errlen) {
    split_ds *sp = &d->split[s];
    const int n = d->num_ds;
    sp->kind = GPT_SPLIT_BLENDED;
    sp->blend_weights = xcalloc((size_t)n, sizeof(double), "blend weights");
    uint64_t size = 0;
    gpt_data_fault fail = GPT_DATA_OK;
    if (w) {
        for (int k = 0; k < n && !fail; k++) {
            uint64_t nk = gpt_blend_dataset_size(N, w[k]);
            fail = build_mid(d, cfg, s, &sp->mid[k], d->ds[k], beg[k], end[k], nk, err, errlen);
            size += nk;
        }
        /* BlendedDataset normalizes the (already normalized) weights again */
        gpt_normalize(w, n, sp->blend_weights);
    } else {
        double *lens = xcalloc((size_t)n, sizeof(double), "dataset lengths");
        uint64_t total = 0;
        for (int k = 0; k < n && !fail; k++) {
            /* num_samples 0: Megatron's None, one epoch */
            fail = build_mid(d, cfg, s, &sp->mid[k], d->ds[k], beg[k], end[k], 0, err, errlen);
            if (!fail) {
                lens[k] = (double)sp->mid[k].ix.num_samples;
                total += sp->mid[k].ix.num_samples;
            }
        }
        if (!fail) fail = check_unweighted(d, cfg, s, sp->mid, err, errlen);
        if (!fail) gpt_normalize(lens, n, sp->blend_weights);
        free(lens);
        size = N < total ? N : total;
    }
    if (fail) return fail;
    sp->size = size;
    sp->dataset_index =
        mem_alloc(MEM_OTHER, (size ? size : 1) * sizeof(int16_t), "blend dataset index");
    sp->dataset_sample_index =
        mem_alloc(MEM_OTHER, (size ? size : 1) * sizeof(int64_t), "blend dataset sample index");
    gpt_blending_indices(sp->blend_weights, n, size, sp->dataset_index,
                         sp->dataset_sample_index);
    log_blend(d, cfg, s, w != NULL);
    return GPT_DATA_OK;
}

/* Split s (train/valid/test) of cfg->num_samples[s] samples; nothing when that is 0 or the
 * split's weight is 0 (Megatron builds no dataset then). */
static gpt_data_fault build_split(gpt_data *d, const gpt_data_config *cfg, int s,
                                  const double *split_w, const double *w, char *err,
                                  size_t errlen) {
    split_ds *sp = &d->split[s];
    const uint64_t N = cfg->num_samples[s];
    const int n = d->num_ds;
    if (N == 0) return GPT_DATA_OK;
    /* Per-prefix ranges (each prefix is split by its own sequence count). */
    int64_t (*beg)[3] = xcalloc((size_t)n, sizeof *beg, "split ranges");
    int64_t (*end)[3] = xcalloc((size_t)n, sizeof *end, "split ranges");
    int present[3];
    gpt_data_fault fail = GPT_DATA_OK;
    for (int k = 0; k < n; k++)
        gpt_split_ranges(split_w, d->ds[k]->sequence_count, present, beg[k], end[k]);
    if (present[s]) {
        sp->n_mid = n;
        sp->mid = xcalloc((size_t)n, sizeof(mid_ds), "split datasets");
        if (n == 1 && !w) {
            sp->kind = GPT_SPLIT_SINGLE;
            fail = build_mid(d, cfg, s, &sp->mid[0], d->ds[0], beg[0], end[0], N, err, errlen);
            if (!fail) sp->size = sp->mid[0].ix.num_samples;
        } else {
            fail = build_blended(d, cfg, s, w, beg, end, N, err, errlen);
        }
    }
    free(beg);
    free(end);
    return fail;
}

/* Mock data: every split of its sample count, ids below the vocabulary. */
static gpt_data_fault build_mock(gpt_data *d, const gpt_data_config *cfg, char *err,
                                 size_t errlen) {
    if (cfg->vocab_size < 2) {
        err_set(err, errlen, "expected a vocabulary of at least 2 ids, found %d",
                cfg->vocab_size);
        return GPT_DATA_FAULT_MOCK;
    }
    for (int s = 0; s < 3; s++) {
        d->split[s].kind = cfg->num_samples[s] ? GPT_SPLIT_MOCK : GPT_SPLIT_EMPTY;
        d->split[s].size = cfg->num_samples[s];
    }
    return GPT_DATA_OK;
}

/* The inputs a dataset build needs before anything is opened. */
static gpt_data_fault check_data_inputs(const gpt_data_config *cfg, double *split_w, char *err,
                                        size_t errlen) {
    if (cfg->num_paths < 1 || !cfg->data_paths) {
        err_set(err, errlen, "expected at least one dataset prefix (or mock data)");
        return GPT_DATA_FAULT_PATHS;
    }
    if (cfg->seed > 0xffffffffULL) {
        err_set(err, errlen,
               "expected a value below 2^32 (numpy.random.RandomState seeds the data "
               "indices), found %" PRIu64,
               cfg->seed);
        return GPT_DATA_FAULT_SEED;
    }
    return gpt_split_parse(cfg->split, split_w, err, errlen) ? GPT_DATA_FAULT_SPLIT : GPT_DATA_OK;
}

/* SFT: the loss mask beside every prefix (a bad one is a data_paths fault). */
static int open_masks(gpt_data *d, const gpt_data_config *cfg, char *err, size_t errlen) {
    d->mask = xcalloc((size_t)d->num_ds, sizeof(indexed_dataset *), "loss masks");
    d->sft_padded = cfg->sft_padded;
    d->sft_pad_mask = cfg->sft_pad_mask;
    for (int k = 0; k < d->num_ds; k++) {
        d->mask[k] = sft_mask_open(d->ds[k], err, errlen);
        if (!d->mask[k]) return -1;
    }
    return 0;
}

gpt_data *gpt_data_build(const gpt_data_config *cfg_in, gpt_data_fault *fault, char *err,
                         size_t errlen) {
    gpt_data_fault dummy;
    if (!fault) fault = &dummy;
    *fault = GPT_DATA_OK;
    if (cfg_in->seq_length < 2) {
        err_set(err, errlen, "expected at least 2, found %d", cfg_in->seq_length);
        *fault = GPT_DATA_FAULT_SEQ_LENGTH;
        return NULL;
    }
    gpt_data *d = xcalloc(1, sizeof *d, "the datasets");
    d->seq_length = cfg_in->seq_length;
    d->seed = cfg_in->seed;
    d->vocab_size = cfg_in->vocab_size;
    d->eod = cfg_in->eod;
    if (cfg_in->mock && cfg_in->sft) {
        err_set(err, errlen, "mock data has no loss masks for supervised fine-tuning: give "
                             "data written by preprocess in SFT mode");
        *fault = GPT_DATA_FAULT_MOCK;
        gpt_data_free(d);
        return NULL;
    }
    if (cfg_in->mock) {
        *fault = build_mock(d, cfg_in, err, errlen);
        if (*fault == GPT_DATA_OK) return d;
        gpt_data_free(d);
        return NULL;
    }
    gpt_data_config cfg = *cfg_in;
    if (!cfg.split) cfg.split = "969,30,1";
    double split_w[3], *w = NULL;
    *fault = check_data_inputs(&cfg, split_w, err, errlen);
    int ok = *fault == GPT_DATA_OK;
    if (ok) w = blend_weights(&cfg, &ok, err, errlen);
    if (!ok && *fault == GPT_DATA_OK) *fault = GPT_DATA_FAULT_PATHS;
    if (ok) {
        d->ds = xcalloc((size_t)cfg.num_paths, sizeof(indexed_dataset *), "datasets");
        d->num_ds = cfg.num_paths;
    }
    for (int k = 0; ok && k < d->num_ds; k++) {
        char e2[768];
        d->ds[k] = indexed_dataset_open(cfg.data_paths[k], e2, sizeof e2);
        if (!d->ds[k]) {
            err_set(err, errlen, "%s", e2);
            *fault = GPT_DATA_FAULT_PATHS;
            ok = 0;
        }
    }
    if (ok && cfg.sft && open_masks(d, &cfg, err, errlen) != 0) {
        *fault = GPT_DATA_FAULT_PATHS;
        ok = 0;
    }
    for (int s = 0; ok && s < 3; s++) {
        *fault = build_split(d, &cfg, s, split_w, w, err, errlen);
        ok = *fault == GPT_DATA_OK;
    }
    free(w);
    if (ok) return d;
    gpt_data_free(d);
    return NULL;
}

uint64_t gpt_data_num_samples(const gpt_data *d, int split) {
    if (!d || split < 0 || split > 2) return 0;
    return d->split[split].size;
}

static void read_ds(void *ctx, uint64_t seq, uint64_t offset, uint64_t count, int32_t *out) {
    indexed_dataset_read((const indexed_dataset *)ctx, seq, offset, count, out);
}

/* Every id a batch gets from a dataset must index the vocabulary: an id out of range would
 * read and write outside the embedding and the logits. The one check of the data path. */
static int check_ids(const gpt_data *d, const mid_ds *m, const int32_t *tokens, uint64_t n,
                     char *err, size_t errlen) {
    if (d->vocab_size <= 0) return 0;
    for (uint64_t t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= d->vocab_size) {
            err_set(err, errlen, "dataset %s holds id %" PRId32 " but the vocabulary has %d",
                    m->ds->prefix, tokens[t], d->vocab_size);
            return -1;
        }
    return 0;
}

/* Sample j of component m: its tokens and, when mask is not NULL, its loss mask. */
static int mid_get(const gpt_data *d, const mid_ds *m, uint64_t j, int32_t *tokens,
                   int32_t *mask, char *err, size_t errlen) {
    uint64_t want = (uint64_t)d->seq_length + 1, got;
    if (m->ix.num_samples == 0) {
        for (uint64_t t = 0; t < want; t++) tokens[t] = d->eod;
        if (mask) memset(mask, 0, want * sizeof(int32_t));
        return 0;
    }
    if (m->mask && d->sft_padded) { /* one sequence a sample */
        uint64_t seq = (uint64_t)m->ix.document_index[j % m->ix.num_samples];
        if (mask) {
            got = sft_padded_sample(m->ds, m->mask, seq, want, d->eod, d->sft_pad_mask, tokens,
                                    mask);
        } else {
            uint64_t len = (uint64_t)m->ds->sequence_lengths[seq];
            got = len < want ? len : want;
            indexed_dataset_read(m->ds, seq, 0, got, tokens);
            for (uint64_t t = got; t < want; t++) tokens[t] = d->eod;
        }
        if (check_ids(d, m, tokens, got, err, errlen) != 0) return -1;
        return mask ? sft_mask_check(m->mask, mask, got, err, errlen) : 0;
    }
    uint64_t s = (uint64_t)m->ix.shuffle_index[j % m->ix.num_samples];
    got = gpt_indices_sample(&m->ix, m->ds->sequence_lengths, d->seq_length, s, read_ds, m->ds,
                             tokens);
    /* Only a partial last sample (never built: drop_last_partial is on) is short; Megatron
     * pads with its pad id and masks the loss, we pad with end-of-document. */
    for (uint64_t t = got; t < want; t++) tokens[t] = d->eod;
    if (check_ids(d, m, tokens, got, err, errlen) != 0) return -1;
    if (!mask) return 0;
    /* the mask has the tokens' shape: the same reads through the sample index */
    uint64_t mgot = gpt_indices_sample(&m->ix, m->ds->sequence_lengths, d->seq_length, s,
                                       read_ds, m->mask, mask);
    for (uint64_t t = mgot; t < want; t++) mask[t] = 0;
    return sft_mask_check(m->mask, mask, mgot, err, errlen);
}

static int data_get(const gpt_data *d, int split, uint64_t index, int32_t *tokens,
                    int32_t *mask, char *err, size_t errlen) {
    uint64_t want = (uint64_t)d->seq_length + 1;
    const split_ds *sp = (split >= 0 && split <= 2) ? &d->split[split] : NULL;
    if (mask) memset(mask, 0, want * sizeof(int32_t));
    if (!sp || sp->size == 0) {
        for (uint64_t t = 0; t < want; t++) tokens[t] = d->eod;
        return 0;
    }
    uint64_t i = index % sp->size;
    switch (sp->kind) {
    case GPT_SPLIT_MOCK: {
        uint64_t m = (uint64_t)(d->vocab_size - 1);
        uint64_t start = mix64(mix64(mix64(d->seed) ^ (uint64_t)split) ^ i) % m;
        for (uint64_t t = 0; t < want; t++) tokens[t] = (int32_t)((start + t) % m);
        return 0;
    }
    case GPT_SPLIT_SINGLE: return mid_get(d, &sp->mid[0], i, tokens, mask, err, errlen);
    case GPT_SPLIT_BLENDED: {
        const mid_ds *m = &sp->mid[sp->dataset_index[i]];
        return mid_get(d, m, (uint64_t)sp->dataset_sample_index[i], tokens, mask, err, errlen);
    }
    default:
        for (uint64_t t = 0; t < want; t++) tokens[t] = d->eod;
        return 0;
    }
}

int gpt_data_get(const gpt_data *d, int split, uint64_t index, int32_t *tokens, char *err,
                 size_t errlen) {
    return data_get(d, split, index, tokens, NULL, err, errlen);
}

int gpt_data_get_sft(const gpt_data *d, int split, uint64_t index, int32_t *tokens,
                     int32_t *mask, char *err, size_t errlen) {
    if (!d->mask) {
        err_set(err, errlen, "the data was built without loss masks (no SFT data)");
        return -1;
    }
    return data_get(d, split, index, tokens, mask, err, errlen);
}

/* ---- introspection (gpt_data_debug.h) ---- */
int gpt_data_split_kind(const gpt_data *d, int split) { return d->split[split].kind; }
int gpt_data_num_components(const gpt_data *d, int split) { return d->split[split].n_mid; }
const gpt_indices *gpt_data_component(const gpt_data *d, int split, int k) {
    return &d->split[split].mid[k].ix;
}
void gpt_data_component_range(const gpt_data *d, int split, int k, int64_t *beg, int64_t *end) {
    *beg = d->split[split].mid[k].beg;
    *end = d->split[split].mid[k].end;
}
const int16_t *gpt_data_blend_dataset_index(const gpt_data *d, int split) {
    return d->split[split].dataset_index;
}
const int64_t *gpt_data_blend_sample_index(const gpt_data *d, int split) {
    return d->split[split].dataset_sample_index;
}
const double *gpt_data_blend_weights(const gpt_data *d, int split) {
    return d->split[split].blend_weights;
}
