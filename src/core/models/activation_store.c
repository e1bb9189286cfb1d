#include "core/models/activation_store.h"

#include <stdlib.h>

#include "core/tensor/memory.h"
#include "core/util/die.h"

void activation_store_free(activation_store *s) {
    if (!s) return;
    block_activations_free(&s->block);
    mem_free_all(s->tokens, s->labels, s->loss_mask, s->docs);
#define HEAD_SAVED_FREE(field, what, kept, floats) mem_free(s->field);
    HEAD_SAVED_TENSORS(HEAD_SAVED_FREE)
#undef HEAD_SAVED_FREE
    free(s);
}

void activation_store_set_chunk(activation_store *s, int chunk) {
    if (chunk < 0 || chunk >= s->num_chunks)
        die(1, "internal error: model chunk %d of %d", chunk, s->num_chunks);
    s->cfg.vp_rank = chunk;
}

size_t activation_store_layer_saved_bytes(const activation_store *s, int l) {
    return block_activations_layer_saved_bytes(&s->block, l);
}
