/* `megadlm generate`'s model: the checkpoint's model rebuilt for this process, whole in one
 * process or split across the ranks of a tensor-parallel group as in training (Megatron's
 * text generation server runs under --tensor-model-parallel-size the same way: every rank
 * holds its slices of the weights and runs the same sampling loop).
 *
 * Under tensor parallelism the output layer is vocab-parallel: a full forward's store holds
 * [M, V/t] logits on each rank (gpt_inference_full_logits gathers them into [M, V]; the row
 * forward of core/inference/gpt_inference_wrapper.h already returns [M, V]). Every rank then
 * sees the whole vocabulary's logits, and the counter-based draws seeded alike make every rank
 * pick the same tokens. Only pipeline-free, context-free, one-replica layouts: the world is
 * exactly the tensor-parallel group. */
#ifndef MEGADLM_TOOLS_GENERATE_MODEL_H
#define MEGADLM_TOOLS_GENERATE_MODEL_H

#include <stddef.h>

#include "core/models/gpt_model.h"
#include "training/arguments.h"

/* Which model: the checkpoint, the split and the batches it runs. */
typedef struct {
    const char *load; /* the checkpoint directory */
    int iteration;    /* its iteration to load */
    int tp_size;      /* --tensor-model-parallel-size: the ranks the model is split over */
    int max_batch;    /* sequences a forward runs together */
    int packed_docs;  /* the document arrays batches of left-padded prompts need */
} generate_model_spec;

/* The model of a checkpoint's validated arguments a (any layout it was trained with), split
 * over tp_size ranks, the whole world (mpirun -np tp_size; 1 without mpirun): the
 * tensor-parallel group set up, this rank's transformer_config (no sequence, context or
 * pipeline parallelism), a forward-only model for max_batch sequences, this rank's slices of
 * DIR/iter_NNNNNNN's parameters loaded (fp32, 16-bit ones widened exactly) and checked finite.
 * Collective; returns the model, or NULL on every rank with the same message in err (the
 * flag, the checkpoint's value, what was expected). */
gpt_model *generate_model_load(const megadlm_args *a, const generate_model_spec *spec,
                               char *err, size_t errlen);

#endif
