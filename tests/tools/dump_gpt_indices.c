/* Dumps what megadlm reads and builds, for tests/python/megatron_reference.py to compare
 * with its transcription of Megatron:
 *
 *   dump_gpt_indices read PREFIX
 *       the indexed dataset as text: header fields, document indices, every sequence
 *       (length, pointer, tokens).
 *   dump_gpt_indices indices OUTDIR SPLIT SEQ_LENGTH SEED N_TRAIN,N_VALID,N_TEST
 *                    plain PREFIX... | weighted W1 PREFIX1 W2 PREFIX2 ...
 *       builds gpt_data and writes OUTDIR/meta.txt plus raw little-endian arrays:
 *       s{S}_c{K}_doc.bin (int32), s{S}_c{K}_sample.bin (int64 pairs), s{S}_c{K}_shuffle.bin
 *       (int64), s{S}_blend_ds.bin (int16), s{S}_blend_si.bin (int64) and s{S}_tokens.bin
 *       (int32, the first min(size, 300) samples as gpt_data_get returns them). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/datasets/gpt_data.h"
#include "core/datasets/gpt_data_debug.h"
#include "core/datasets/indexed_dataset.h"

static int dump_read(const char *prefix) {
    char err[1024];
    indexed_dataset *ds = indexed_dataset_open(prefix, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("dtype %d\nsequences %" PRIu64 "\ndocuments %" PRIu64 "\ndocument_indices", ds->dtype,
           ds->sequence_count, indexed_dataset_num_documents(ds));
    for (uint64_t d = 0; d < ds->document_count; d++)
        printf(" %" PRId64, indexed_dataset_document_index(ds, d));
    printf("\n");
    int32_t *buf = NULL;
    size_t cap = 0;
    for (uint64_t s = 0; s < ds->sequence_count; s++) {
        size_t len = (size_t)ds->sequence_lengths[s];
        if (len > cap) {
            cap = len;
            buf = realloc(buf, cap * sizeof(int32_t));
        }
        indexed_dataset_read(ds, s, 0, len, buf);
        printf("seq %" PRIu64 " %zu %" PRId64 ":", s, len, indexed_dataset_pointer(ds, s));
        for (size_t i = 0; i < len; i++) printf(" %d", buf[i]);
        printf("\n");
    }
    free(buf);
    indexed_dataset_close(ds);
    return 0;
}

static void write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (bytes && fwrite(p, 1, bytes, f) != bytes)) {
        fprintf(stderr, "%s: cannot write: %s\n", path, strerror(errno));
        exit(1);
    }
    fclose(f);
}

static int dump_indices(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: dump_gpt_indices indices OUTDIR SPLIT SEQ SEED N0,N1,N2 "
                        "plain|weighted ARGS...\n");
        return 2;
    }
    const char *out = argv[2];
    mkdir(out, 0755);
    gpt_data_config cfg = {0};
    cfg.split = argv[3];
    cfg.seq_length = atoi(argv[4]);
    cfg.seed = strtoull(argv[5], NULL, 10);
    if (sscanf(argv[6], "%" SCNu64 ",%" SCNu64 ",%" SCNu64, &cfg.num_samples[0],
               &cfg.num_samples[1], &cfg.num_samples[2]) != 3) {
        fprintf(stderr, "bad sample counts '%s'\n", argv[6]);
        return 2;
    }
    int weighted = strcmp(argv[7], "weighted") == 0;
    int nargs = argc - 8;
    const char **paths = calloc((size_t)nargs, sizeof(char *));
    double *weights = calloc((size_t)nargs, sizeof(double));
    if (weighted) {
        cfg.num_paths = nargs / 2;
        for (int k = 0; k < cfg.num_paths; k++) {
            weights[k] = strtod(argv[8 + 2 * k], NULL);
            paths[k] = argv[9 + 2 * k];
        }
        cfg.weights = weights;
    } else {
        cfg.num_paths = nargs;
        for (int k = 0; k < nargs; k++) paths[k] = argv[8 + k];
    }
    cfg.data_paths = paths;
    cfg.vocab_size = 1 << 30;
    cfg.eod = 0;
    char err[1024];
    gpt_data *d = gpt_data_build(&cfg, NULL, err, sizeof err);
    if (!d) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char path[1024], name[256];
    snprintf(path, sizeof path, "%s/meta.txt", out);
    FILE *meta = fopen(path, "w");
    for (int s = 0; s < 3; s++) {
        uint64_t n = gpt_data_num_samples(d, s);
        int nc = gpt_data_num_components(d, s);
        fprintf(meta, "split %d kind %d size %" PRIu64 " components %d\n", s,
                gpt_data_split_kind(d, s), n, nc);
        for (int k = 0; k < nc; k++) {
            const gpt_indices *ix = gpt_data_component(d, s, k);
            int64_t beg, end;
            gpt_data_component_range(d, s, k, &beg, &end);
            fprintf(meta,
                    "component %d %d range %" PRId64 " %" PRId64 " epochs %d separate %d "
                    "samples %" PRIu64 " doclen %" PRIu64 "\n",
                    s, k, beg, end, ix->num_epochs, ix->separate_final_epoch, ix->num_samples,
                    ix->document_index_len);
            snprintf(name, sizeof name, "s%d_c%d_doc.bin", s, k);
            write_raw(out, name, ix->document_index, ix->document_index_len * sizeof(int32_t));
            snprintf(name, sizeof name, "s%d_c%d_sample.bin", s, k);
            write_raw(out, name, ix->sample_index, 2 * (ix->num_samples + 1) * sizeof(int64_t));
            snprintf(name, sizeof name, "s%d_c%d_shuffle.bin", s, k);
            write_raw(out, name, ix->shuffle_index, ix->num_samples * sizeof(int64_t));
        }
        if (gpt_data_split_kind(d, s) == GPT_SPLIT_BLENDED) {
            snprintf(name, sizeof name, "s%d_blend_ds.bin", s);
            write_raw(out, name, gpt_data_blend_dataset_index(d, s), n * sizeof(int16_t));
            snprintf(name, sizeof name, "s%d_blend_si.bin", s);
            write_raw(out, name, gpt_data_blend_sample_index(d, s), n * sizeof(int64_t));
        }
        uint64_t m = n < 300 ? n : 300;
        size_t per = (size_t)cfg.seq_length + 1;
        int32_t *tok = malloc((m ? m : 1) * per * sizeof(int32_t));
        for (uint64_t i = 0; i < m; i++) gpt_data_get(d, s, i, tok + i * per, NULL, 0);
        snprintf(name, sizeof name, "s%d_tokens.bin", s);
        write_raw(out, name, tok, m * per * sizeof(int32_t));
        free(tok);
    }
    fclose(meta);
    gpt_data_free(d);
    free(paths);
    free(weights);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "read") == 0) return dump_read(argv[2]);
    if (argc >= 2 && strcmp(argv[1], "indices") == 0) return dump_indices(argc, argv);
    fprintf(stderr, "usage: dump_gpt_indices read PREFIX | indices ...\n");
    return 2;
}
