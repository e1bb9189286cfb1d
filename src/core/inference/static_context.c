#include "core/inference/static_context.h"

#include <stdlib.h>
#include <string.h>

#include "core/tensor/memory.h"
#include "core/util/die.h"

inference_context *inference_context_create(const transformer_config *c, int B, int max_T) {
    inference_context *ic = calloc(1, sizeof *ic);
    if (!ic) die(1, "out of memory (the inference context)");
    ic->B = B;
    ic->max_T = max_T;
    ic->layers = tc_stage_layers(c);
    ic->row = (size_t)tc_qkv_width_local(c);
    ic->qkv = calloc((size_t)ic->layers, sizeof *ic->qkv);
    if (!ic->qkv) die(1, "out of memory (the inference context)");
    size_t floats = (size_t)B * max_T * ic->row;
    for (int l = 0; l < ic->layers; l++)
        ic->qkv[l] = mem_alloc_floats(MEM_OTHER, floats, "key/value cache");
    ic->bytes = (size_t)ic->layers * floats * sizeof(float);
    return ic;
}

void inference_context_free(inference_context *ic) {
    if (!ic) return;
    for (int l = 0; l < ic->layers; l++) mem_free(ic->qkv[l]);
    free(ic->qkv);
    free(ic);
}

void inference_context_store(inference_context *ic, int layer, const float *src, int B, int t0,
                             int n) {
    if (layer < 0 || layer >= ic->layers || B > ic->B || t0 < 0 || t0 + n > ic->max_T)
        die(1, "internal error: cache rows [%d, %d) of %d sequences of layer %d (the cache holds "
               "%d x %d rows of %d layers)", t0, t0 + n, B, layer, ic->B, ic->max_T, ic->layers);
    for (int b = 0; b < B; b++)
        memcpy(inference_context_row(ic, layer, b, t0), src + (size_t)b * n * ic->row,
               (size_t)n * ic->row * sizeof(float));
}
