#include "core/datasets/gpt_dataset.h"

/* Megatron computes these indices without fused multiply-adds (helpers.cpp is built without
 * -march flags). The whole build uses -ffp-contract=off; this file says so itself as well,
 * since Megatron-identical blending indices depend on it (a * b - c never becomes an FMA). */
#pragma GCC optimize("fp-contract=off")

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/random/mt19937.h"
#include "core/tensor/memory.h"
#include "core/util/alloc.h"
#include "core/util/error.h"

#define ADD_EXTRA_TOKEN 1 /* Megatron's add_extra_token_to_sequence = True */

/* ------------------------------------------------------------------ indices */

/* _build_document_index(documents, num_epochs, rs, separate_final_epoch=False): the
 * documents repeated num_epochs times (as int32), shuffled as one array. */
static void build_document_index_part(int64_t doc_beg, int64_t doc_end, int num_epochs,
                                      mt19937_state *rs, int32_t *out) {
    uint64_t n = (uint64_t)(doc_end - doc_beg);
    for (int e = 0; e < num_epochs; e++)
        for (uint64_t i = 0; i < n; i++) out[(uint64_t)e * n + i] = (int32_t)(doc_beg + (int64_t)i);
    mt19937_shuffle_i32(rs, out, n * (uint64_t)num_epochs);
}

/* helpers.cpp build_sample_idx. Returns the number of samples (rows - 1). */
static uint64_t build_sample_idx(const int32_t *sizes, const int32_t *document_idx,
                                 uint64_t document_idx_len, int seq_length, int num_epochs,
                                 int64_t tokens_per_epoch, int drop_last_partial,
                                 int64_t **out) {
    int64_t num_samples;
    if (drop_last_partial)
        num_samples = ((int64_t)num_epochs * tokens_per_epoch - ADD_EXTRA_TOKEN) / seq_length;
    else /* float, as helpers.cpp does */
        num_samples = (int64_t)ceilf((float)((int64_t)num_epochs * tokens_per_epoch -
                                             ADD_EXTRA_TOKEN) /
                                     (float)seq_length);
    int64_t *sample_idx = (int64_t *)mem_alloc(
        MEM_OTHER, 2 * (size_t)(num_samples + 1) * sizeof(int64_t), "GPT sample index");
    int64_t sample_idx_index = 0;
    int64_t document_idx_index = 0;
    int64_t doc_offset = 0;
    sample_idx[0] = document_idx_index;
    sample_idx[1] = doc_offset;
    ++sample_idx_index;
    while (sample_idx_index <= num_samples) {
        int64_t remaining_seq_length = seq_length + ADD_EXTRA_TOKEN;
        while (remaining_seq_length != 0) {
            int32_t document_index = document_idx[document_idx_index];
            int64_t document_length = (int64_t)sizes[document_index] - doc_offset;
            remaining_seq_length -= document_length;
            if (remaining_seq_length <= 0) {
                doc_offset += (remaining_seq_length + document_length - ADD_EXTRA_TOKEN);
                remaining_seq_length = 0;
            } else {
                if ((uint64_t)document_idx_index == document_idx_len - 1) {
                    /* reached the end of the documents (partial last sample) */
                    doc_offset = sizes[document_idx[document_idx_index]] - ADD_EXTRA_TOKEN;
                    break;
                }
                ++document_idx_index;
                doc_offset = 0;
            }
        }
        sample_idx[2 * sample_idx_index] = document_idx_index;
        sample_idx[2 * sample_idx_index + 1] = doc_offset;
        ++sample_idx_index;
    }
    *out = sample_idx;
    return (uint64_t)num_samples;
}

/* _build_shuffle_index(num_samples, total_size, rs) */
static int64_t *build_shuffle_index(uint64_t num_samples, uint64_t total_size,
                                    mt19937_state *rs) {
    int64_t *idx = (int64_t *)mem_alloc(MEM_OTHER, (total_size ? total_size : 1) * sizeof(int64_t),
                                        "GPT shuffle index");
    for (uint64_t i = 0; i < total_size; i++) idx[i] = (int64_t)i;
    mt19937_shuffle_i64(rs, idx, num_samples);
    if (num_samples == total_size) return idx;
    mt19937_shuffle_i64(rs, idx + num_samples, total_size - num_samples);
    return idx;
}

int gpt_indices_build(const int32_t *sizes, int64_t doc_beg, int64_t doc_end,
                      uint64_t num_samples_requested, int seq_length, uint32_t seed,
                      int drop_last_partial, gpt_indices *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (seq_length < 2) {
        err_set(err, errlen, "expected a sequence length of at least 2, found %d", seq_length);
        return GPT_INDICES_BAD;
    }
    if (doc_end < doc_beg || doc_end - doc_beg > INT32_MAX || doc_end > INT32_MAX) {
        err_set(err, errlen, "documents [%" PRId64 ", %" PRId64 "): expected at most 2^31 - 1",
               doc_beg, doc_end);
        return -1;
    }
    /* _get_num_tokens_per_epoch */
    int64_t num_tokens_per_epoch = 0;
    for (int64_t d = doc_beg; d < doc_end; d++) num_tokens_per_epoch += sizes[d];
    if (num_tokens_per_epoch <= ADD_EXTRA_TOKEN) {
        err_set(err, errlen,
               "expected more than %d token(s) in the %" PRId64 " sequence(s) [%" PRId64
               ", %" PRId64 "), found %" PRId64,
               ADD_EXTRA_TOKEN, doc_end - doc_beg, doc_beg, doc_end, num_tokens_per_epoch);
        return -1;
    }
    /* _get_num_epochs: the fewest epochs whose tokens reach the request (Megatron counts them
     * in a loop; here in closed form, in 64 bits, refusing a request beyond them) */
    int64_t docs = doc_end - doc_beg;
    uint64_t epochs = 1;
    if (num_samples_requested > 0) {
        if (num_samples_requested > (uint64_t)(INT64_MAX - ADD_EXTRA_TOKEN) / (uint64_t)seq_length) {
            err_set(err, errlen,
                    "%" PRIu64 " samples of %d tokens: more tokens than 2^63",
                    num_samples_requested, seq_length);
            return GPT_INDICES_TOO_MANY;
        }
        uint64_t requested = num_samples_requested * (uint64_t)seq_length + ADD_EXTRA_TOKEN;
        uint64_t tpe = (uint64_t)num_tokens_per_epoch;
        epochs = (requested + tpe - 1) / tpe;
        if (epochs < 1) epochs = 1;
    }
    if (epochs * (uint64_t)docs > INT32_MAX) { /* epochs < 2^63 / 2 tokens: no overflow */
        /* build_sample_idx indexes the document index with int32 in Megatron too */
        err_set(err, errlen,
               "%" PRIu64 " epochs of %" PRId64 " documents (for %" PRIu64 " samples of %d "
               "tokens): the document index would exceed 2^31 - 1 entries (a larger dataset needs "
               "fewer epochs)",
               epochs, docs, num_samples_requested, seq_length);
        return GPT_INDICES_TOO_MANY;
    }
    int num_epochs = (int)epochs;

    int separate_final_epoch = 0;
    int64_t num_samples_sans_final_epoch = 0;
    if (num_epochs > 1) {
        num_samples_sans_final_epoch =
            ((int64_t)(num_epochs - 1) * num_tokens_per_epoch - ADD_EXTRA_TOKEN) / seq_length;
        int64_t num_samples_from_final_epoch =
            (int64_t)num_samples_requested - num_samples_sans_final_epoch;
        int64_t num_samples_per_epoch = (num_tokens_per_epoch - ADD_EXTRA_TOKEN) / seq_length;
        /* threshold 0.80: int(0.80 * num_samples_per_epoch) */
        separate_final_epoch =
            num_samples_from_final_epoch < (int64_t)(0.80 * (double)num_samples_per_epoch);
    }

    mt19937_state rs;
    mt19937_seed(&rs, seed);

    /* _build_document_index */
    uint64_t ndocs = (uint64_t)(doc_end - doc_beg);
    out->document_index_len = ndocs * (uint64_t)num_epochs;
    out->document_index = (int32_t *)mem_alloc(
        MEM_OTHER, (out->document_index_len ? out->document_index_len : 1) * sizeof(int32_t),
        "GPT document index");
    if (!separate_final_epoch) {
        build_document_index_part(doc_beg, doc_end, num_epochs, &rs, out->document_index);
    } else {
        build_document_index_part(doc_beg, doc_end, num_epochs - 1, &rs, out->document_index);
        build_document_index_part(doc_beg, doc_end, 1, &rs,
                                  out->document_index + ndocs * (uint64_t)(num_epochs - 1));
    }

    /* helpers.build_sample_idx */
    out->num_samples =
        build_sample_idx(sizes, out->document_index, out->document_index_len, seq_length,
                         num_epochs, num_tokens_per_epoch, drop_last_partial, &out->sample_index);

    /* _build_shuffle_index */
    if (separate_final_epoch)
        out->shuffle_index =
            build_shuffle_index((uint64_t)num_samples_sans_final_epoch, out->num_samples, &rs);
    else
        out->shuffle_index = build_shuffle_index(out->num_samples, out->num_samples, &rs);

    out->num_epochs = num_epochs;
    out->separate_final_epoch = separate_final_epoch;
    out->num_tokens_per_epoch = (uint64_t)num_tokens_per_epoch;
    return 0;
}

void gpt_indices_free(gpt_indices *ix) {
    if (!ix) return;
    mem_free(ix->document_index);
    mem_free(ix->sample_index);
    mem_free(ix->shuffle_index);
    memset(ix, 0, sizeof *ix);
}

uint64_t gpt_indices_sample(const gpt_indices *ix, const int32_t *sizes, int seq_length,
                            uint64_t sample, gpt_read_fn read, void *ctx, int32_t *out) {
    int64_t beg = ix->sample_index[2 * sample], off_beg = ix->sample_index[2 * sample + 1];
    int64_t end = ix->sample_index[2 * sample + 2], off_end = ix->sample_index[2 * sample + 3];
    uint64_t want = (uint64_t)seq_length + ADD_EXTRA_TOKEN, got = 0;
    if (beg == end) {
        uint64_t count = (uint64_t)(off_end - off_beg + ADD_EXTRA_TOKEN);
        if (count > want) count = want;
        read(ctx, (uint64_t)ix->document_index[beg], (uint64_t)off_beg, count, out);
        return count;
    }
    for (int64_t i = beg; i <= end; i++) {
        int32_t doc = ix->document_index[i];
        uint64_t offset = i > beg ? 0 : (uint64_t)off_beg;
        uint64_t count = i < end ? (uint64_t)sizes[doc] - offset
                                 : (uint64_t)(off_end + ADD_EXTRA_TOKEN);
        if (i == end && count > (uint64_t)sizes[doc]) count = (uint64_t)sizes[doc];
        if (got + count > want) count = want - got;
        read(ctx, (uint64_t)doc, offset, count, out + got);
        got += count;
    }
    return got;
}

/* ------------------------------------------------------------------ split and blend */

/* NumPy's pairwise summation (float64 add.reduce over a contiguous array). */
static double pairwise_sum(const double *a, int n) {
    if (n < 8) {
        double res = 0.;
        for (int i = 0; i < n; i++) res += a[i];
        return res;
    } else if (n <= 128) {
        double r[8], res;
        int i;
        for (int j = 0; j < 8; j++) r[j] = a[j];
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += a[i];
        return res;
    } else {
        int n2 = n / 2;
        n2 -= n2 % 8;
        return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
    }
}

void gpt_normalize(const double *w, int n, double *out) {
    double s = pairwise_sum(w, n);
    for (int i = 0; i < n; i++) out[i] = w[i] / s;
}

int gpt_split_parse(const char *split, double weights[3], char *err, size_t errlen) {
    double w[3] = {0, 0, 0};
    int n = 0;
    const char *p = split ? split : "";
    while (*p && isspace((unsigned char)*p)) p++;
    if (!*p) {
        err_set(err, errlen, "expected up to 3 comma-separated weights, found '%s'",
               split ? split : "");
        return -1;
    }
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        char *e;
        double v = strtod(p, &e);
        if (e == p || n >= 3 || !isfinite(v) || v < 0) {
            err_set(err, errlen,
                   "expected up to 3 comma-separated non-negative weights, found '%s'",
                   split);
            return -1;
        }
        w[n++] = v;
        p = e;
        while (isspace((unsigned char)*p)) p++;
        if (*p == 0) break;
        if (*p != ',' && *p != '/') {
            err_set(err, errlen, "expected up to 3 comma-separated weights, found '%s'",
                   split);
            return -1;
        }
        p++;
    }
    if (w[0] + w[1] + w[2] <= 0) {
        err_set(err, errlen, "expected weights with a positive sum, found '%s'", split);
        return -1;
    }
    gpt_normalize(w, 3, weights);
    return 0;
}

void gpt_split_ranges(const double weights[3], uint64_t num_elements, int present[3],
                      int64_t beg[3], int64_t end[3]) {
    /* expansion [0, w0, w0 + w1, w0 + w1 + w2]; bookends (lo, hi); None when hi <= lo */
    double exp[4];
    exp[0] = 0;
    for (int i = 0; i < 3; i++) exp[i + 1] = exp[i] + weights[i];
    for (int i = 0; i < 3; i++) {
        double lo = exp[i], hi = exp[i + 1];
        present[i] = !(hi <= lo);
        /* int(round(x * float(n))): Python's round is round-half-to-even, as nearbyint */
        beg[i] = present[i] ? (int64_t)nearbyint(lo * (double)num_elements) : 0;
        end[i] = present[i] ? (int64_t)nearbyint(hi * (double)num_elements) : 0;
    }
}

uint64_t gpt_blend_dataset_size(uint64_t target, double weight) {
    return (uint64_t)ceil((double)target * weight * 1.005);
}

void gpt_blending_indices(const double *weights, int num_datasets, uint64_t size,
                          int16_t *dataset_index, int64_t *dataset_sample_index) {
    int64_t *current = xcalloc((size_t)num_datasets, sizeof(int64_t), "blending counters");
    for (uint64_t s = 0; s < size; s++) {
        double sd = (double)s > 1.0 ? (double)s : 1.0;
        int max_i = 0;
        double max_error = weights[0] * sd - (double)current[0];
        for (int d = 1; d < num_datasets; d++) {
            double error = weights[d] * sd - (double)current[d];
            if (error > max_error) {
                max_error = error;
                max_i = d;
            }
        }
        dataset_index[s] = (int16_t)max_i;
        dataset_sample_index[s] = current[max_i];
        current[max_i]++;
    }
    free(current);
}
