#include "core/datasets/packing.h"

/* ends[t] for t < n from starts: the next document's start, else n. */
static void document_ends(const int32_t *starts, int n, int32_t *ends) {
    int32_t end = n;
    for (int t = n - 1; t >= 0; t--) {
        ends[t] = end;
        if (starts[t] == t) end = t;
    }
}

void packing_ltor(const int32_t *tokens, int T, int32_t eod, int reset_position_ids,
                  int position_offset, int32_t *position_ids, int32_t *doc_start,
                  int32_t *doc_end) {
    int32_t start = 0;
    for (int t = 0; t < T; t++) {
        if (position_ids)
            position_ids[t] = position_offset + (reset_position_ids ? t - start : t);
        if (doc_start) doc_start[t] = start;
        if (tokens[t] == eod) start = t + 1;
    }
    if (doc_start && doc_end) document_ends(doc_start, T, doc_end);
}

void packing_difflm(const int32_t *sample, int L, int Lp, int32_t eod, int reset_position_ids,
                    int32_t *position_ids, int32_t *doc_start, int32_t *doc_end) {
    int32_t start = 0; /* the document start of sample token j + 1 */
    for (int k = 0; k <= L; k++) {
        if (k >= 1) {
            const int j = k - 1;
            if (position_ids) position_ids[j] = reset_position_ids ? k - start : k;
            if (doc_start) doc_start[j] = start > 0 ? start - 1 : 0;
        }
        if (sample[k] == eod) start = k + 1;
    }
    for (int j = L; j < Lp; j++) {
        if (position_ids) position_ids[j] = 0;
        if (doc_start) doc_start[j] = L > 0 ? doc_start[L - 1] : 0;
    }
    if (doc_start && doc_end) document_ends(doc_start, Lp, doc_end);
}
