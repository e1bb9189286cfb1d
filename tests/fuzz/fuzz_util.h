/* Helpers shared by the libFuzzer targets tests/fuzz/fuzz_*.c (one reader of user files each).
 *
 * The readers take paths, so a target writes its input into files of a scratch directory that
 * belongs to the process (created on first use under $TMPDIR, /tmp if unset; removed at exit).
 * Inputs made of two files (.idx + .bin, vocab.json + merges.txt) hold both, separated by the
 * first FUZZ_SEP; without it the second file is empty. */
#ifndef MEGADLM_TESTS_FUZZ_UTIL_H
#define MEGADLM_TESTS_FUZZ_UTIL_H

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_SEP "\n--next-file--\n"

static char fuzz_dir_path[PATH_MAX];

static inline int fuzz_rm_one(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(p);
}
static inline void fuzz_dir_remove(void) {
    if (fuzz_dir_path[0]) nftw(fuzz_dir_path, fuzz_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* The scratch directory of this process. */
static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_path[0]) {
        const char *t = getenv("TMPDIR");
        if (snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/megadlm-fuzz-XXXXXX",
                     t && *t ? t : "/tmp") >= (int)sizeof fuzz_dir_path ||
            !mkdtemp(fuzz_dir_path)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* fuzz_dir()/name, in a static buffer of the caller's choosing. */
static inline const char *fuzz_path(char *buf, size_t len, const char *name) {
    if (snprintf(buf, len, "%s/%s", fuzz_dir(), name) >= (int)len) abort();
    return buf;
}

/* Writes bytes to path (created or truncated). Aborts on failure: the harness, not the input. */
static inline void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

static inline void fuzz_mkdir(const char *path) {
    if (mkdir(path, 0755) != 0 && access(path, F_OK) != 0) {
        perror(path);
        abort();
    }
}

/* Splits data at the first FUZZ_SEP: [0, *alen) and [*b, *b + *blen). */
static inline void fuzz_split(const uint8_t *data, size_t size, size_t *alen, const uint8_t **b,
                       size_t *blen) {
    const size_t sl = sizeof FUZZ_SEP - 1;
    const uint8_t *p = size >= sl ? memmem(data, size, FUZZ_SEP, sl) : NULL;
    if (!p) {
        *alen = size;
        *b = data + size;
        *blen = 0;
        return;
    }
    *alen = (size_t)(p - data);
    *b = p + sl;
    *blen = size - *alen - sl;
}

/* With FUZZ_VERBOSE=1 in the environment: prints what the reader said about the input (to see
 * which seeds are accepted and where the others stop). */
static inline void fuzz_note(const char *what, const char *msg) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("FUZZ_VERBOSE") && atoi(getenv("FUZZ_VERBOSE")) > 0;
    if (verbose) fprintf(stderr, "fuzz: %s: %s\n", what, msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
