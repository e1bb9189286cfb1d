/* Helper for tests/scripts/test_bf16_torch.sh: converts a raw little-endian array with the
 * conversions of core/kernels/bf16.h, so that tests/python/check_bf16.py can compare the bits
 * with PyTorch's.
 *
 *   bf16_convert MODE IN OUT     MODE: f32-bf16 | f32-fp16 | bf16-f32 | fp16-f32
 *
 * IN holds the source elements (4 bytes each for f32-*, 2 for bf16-* and fp16-*), OUT gets the
 * converted ones. The whole array goes through one call of the array function (large inputs
 * take its multi-threaded path); the first 1000 elements are also converted one by one with
 * the scalar functions, which must agree. CMake builds this tool three times: with the
 * project's flags (x86-64-v3), for the baseline x86-64 (SSE2 only) and for the building
 * machine's CPU (-march=native), each compiling bf16.c into itself, so the bits can be
 * compared across instruction sets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/tensor/dtype.h"

static void *read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)n + 16);
    if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(2);
    }
    fclose(f);
    *bytes = (size_t)n;
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s f32-bf16|f32-fp16|bf16-f32|fp16-f32 IN OUT\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    const int from32 = strncmp(mode, "f32-", 4) == 0;
    size_t bytes;
    void *in = read_all(argv[2], &bytes);
    const size_t n = bytes / (from32 ? 4 : 2);
    void *out = malloc(n * (from32 ? 2 : 4) + 16);
    size_t mismatches = 0;
    const size_t one = n < 1000 ? n : 1000;
    if (strcmp(mode, "f32-bf16") == 0) {
        bf16_from_f32(out, in, n);
        for (size_t i = 0; i < one; i++)
            mismatches += bf16_from_float(((float *)in)[i]) != ((bf16 *)out)[i];
    } else if (strcmp(mode, "f32-fp16") == 0) {
        fp16_from_f32(out, in, n);
        for (size_t i = 0; i < one; i++)
            mismatches += fp16_from_float(((float *)in)[i]) != ((fp16 *)out)[i];
    } else if (strcmp(mode, "bf16-f32") == 0) {
        bf16_to_f32(out, in, n);
        for (size_t i = 0; i < one; i++) {
            float x = bf16_to_float(((bf16 *)in)[i]);
            mismatches += memcmp(&x, (float *)out + i, 4) != 0;
        }
    } else if (strcmp(mode, "fp16-f32") == 0) {
        fp16_to_f32(out, in, n);
        for (size_t i = 0; i < one; i++) {
            float x = fp16_to_float(((fp16 *)in)[i]);
            mismatches += memcmp(&x, (float *)out + i, 4) != 0;
        }
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (mismatches) {
        fprintf(stderr, "%s: %zu of the first %zu elements differ between the array and the "
                        "scalar conversion\n", mode, mismatches, one);
        return 1;
    }
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(out, from32 ? 2 : 4, n, f) != n || fclose(f) != 0) {
        perror(argv[3]);
        return 2;
    }
    free(in);
    free(out);
    return 0;
}
