/* Fuzz target: Megatron's indexed dataset reader (indexed_dataset_open: PREFIX.idx +
 * PREFIX.bin). Input: the .idx bytes, FUZZ_SEP, the .bin bytes. A dataset the reader accepts
 * is then read the way training reads it: every document index and pointer, and the tokens of
 * every sequence (at most 4096 tokens in all), which must stay inside the mapped files. */
#include "fuzz/fuzz_util.h"

#include "core/datasets/indexed_dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char prefix[PATH_MAX], idx[PATH_MAX], bin[PATH_MAX];
    if (!prefix[0]) {
        fuzz_path(prefix, sizeof prefix, "ds");
        fuzz_path(idx, sizeof idx, "ds.idx");
        fuzz_path(bin, sizeof bin, "ds.bin");
    }
    size_t ilen, blen;
    const uint8_t *b;
    fuzz_split(data, size, &ilen, &b, &blen);
    fuzz_write(idx, data, ilen);
    fuzz_write(bin, b, blen);

    char err[1024];
    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    if (!ds) {
        fuzz_note("refused", err);
        return 0;
    }
    fuzz_note("accepted", "");
    uint64_t budget = 4096;
    int64_t sum = 0;
    for (uint64_t d = 0; d < ds->document_count; d++) sum += indexed_dataset_document_index(ds, d);
    int32_t out[64];
    for (uint64_t s = 0; s < ds->sequence_count && budget > 0; s++) {
        sum += indexed_dataset_pointer(ds, s);
        uint64_t len = (uint64_t)ds->sequence_lengths[s];
        for (uint64_t off = 0; off < len && budget > 0;) {
            uint64_t n = len - off < 64 ? len - off : 64;
            if (n > budget) n = budget;
            indexed_dataset_read(ds, s, off, n, out);
            for (uint64_t i = 0; i < n; i++) sum += out[i];
            off += n;
            budget -= n;
        }
    }
    indexed_dataset_close(ds);
    return sum == 42 ? 0 : 0; /* keep the reads */
}
