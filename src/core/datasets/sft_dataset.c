/* Supervised fine-tuning data: sft_dataset.h. */
#include "core/datasets/sft_dataset.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/random/mt19937.h"
#include "core/tensor/memory.h"
#include "core/util/error.h"

/* The first difference between the mask's shape and the tokens', or "" when none. */
static void shape_difference(const indexed_dataset *t, const indexed_dataset *m, char *what,
                             size_t n) {
    what[0] = 0;
    if (m->sequence_count != t->sequence_count || m->document_count != t->document_count) {
        snprintf(what, n,
                 "%" PRIu64 " sequences in %" PRIu64 " documents, the tokens %" PRIu64
                 " in %" PRIu64,
                 m->sequence_count, m->document_count - 1, t->sequence_count,
                 t->document_count - 1);
        return;
    }
    for (uint64_t i = 0; i < t->sequence_count; i++)
        if (m->sequence_lengths[i] != t->sequence_lengths[i]) {
            snprintf(what, n, "sequence %" PRIu64 " holds %d values, the tokens' %d", i,
                     m->sequence_lengths[i], t->sequence_lengths[i]);
            return;
        }
    for (uint64_t d = 0; d < t->document_count; d++)
        if (indexed_dataset_document_index(m, d) != indexed_dataset_document_index(t, d)) {
            snprintf(what, n, "document index %" PRIu64 " differs from the tokens'", d);
            return;
        }
}

indexed_dataset *sft_mask_open(const indexed_dataset *tokens, char *err, size_t errlen) {
    size_t len = strlen(tokens->prefix) + sizeof SFT_MASK_SUFFIX;
    char *prefix = malloc(len);
    if (!prefix) {
        err_set(err, errlen, "out of memory");
        return NULL;
    }
    snprintf(prefix, len, "%s%s", tokens->prefix, SFT_MASK_SUFFIX);
    char e2[768];
    indexed_dataset *m = indexed_dataset_open(prefix, e2, sizeof e2);
    if (!m) {
        err_set(err, errlen, "the loss mask of %s (written by preprocess in SFT mode): %s",
                tokens->prefix, e2);
        free(prefix);
        return NULL;
    }
    char what[256];
    if (m->dtype != IDX_DTYPE_UINT8)
        snprintf(what, sizeof what, "dtype %s, expected uint8", idx_dtype_name(m->dtype));
    else
        shape_difference(tokens, m, what, sizeof what);
    if (what[0]) {
        err_set(err, errlen, "%s.idx: not the loss mask of %s: %s", prefix, tokens->prefix,
                what);
        indexed_dataset_close(m);
        m = NULL;
    }
    free(prefix);
    return m;
}

int sft_doc_index_build(int64_t beg, int64_t end, uint64_t num_samples, uint32_t seed,
                        gpt_indices *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (end <= beg) {
        err_set(err, errlen, "no sequence in the range [%" PRId64 ", %" PRId64 ")", beg, end);
        return -1;
    }
    uint64_t n = (uint64_t)(end - beg);
    if (num_samples == 0) num_samples = n;
    uint64_t epochs = (num_samples + n - 1) / n;
    out->document_index_len = epochs * n;
    out->document_index =
        mem_alloc(MEM_OTHER, out->document_index_len * sizeof(int32_t), "SFT document index");
    for (uint64_t e = 0; e < epochs; e++)
        for (uint64_t i = 0; i < n; i++)
            out->document_index[e * n + i] = (int32_t)(beg + (int64_t)i);
    mt19937_state rs;
    mt19937_seed(&rs, seed);
    mt19937_shuffle_i32(&rs, out->document_index, out->document_index_len);
    out->num_samples = num_samples;
    out->num_epochs = (int)epochs;
    return 0;
}

uint64_t sft_padded_sample(const indexed_dataset *tokens, const indexed_dataset *mask,
                           uint64_t seq, uint64_t want, int32_t pad_id, int32_t pad_mask,
                           int32_t *out_tokens, int32_t *out_mask) {
    uint64_t len = (uint64_t)tokens->sequence_lengths[seq];
    uint64_t got = len < want ? len : want;
    indexed_dataset_read(tokens, seq, 0, got, out_tokens);
    indexed_dataset_read(mask, seq, 0, got, out_mask);
    for (uint64_t t = got; t < want; t++) {
        out_tokens[t] = pad_id;
        out_mask[t] = pad_mask;
    }
    return got;
}

int sft_mask_check(const indexed_dataset *mask, const int32_t *values, uint64_t n, char *err,
                   size_t errlen) {
    for (uint64_t i = 0; i < n; i++)
        if (values[i] != 0 && values[i] != 1) {
            err_set(err, errlen, "loss mask %s holds %d: expected 0 (prompt) or 1 (response)",
                    mask->prefix, values[i]);
            return -1;
        }
    return 0;
}
