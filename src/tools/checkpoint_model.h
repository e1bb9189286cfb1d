/* A checkpoint's model rebuilt for inference (what `megadlm generate` samples and `megadlm
 * eval` scores): the arguments saved in its state.json validated as train validates them
 * (fp32: a --bf16 or --fp16 run's 16-bit parameters widened exactly), its tokenizer (the file
 * flags override the checkpoint's absolute paths), and a forward-only model whatever layout it
 * was trained with: whole in each process, or split across the ranks of a tensor-parallel
 * group as in training (Megatron's text generation server runs under
 * --tensor-model-parallel-size the same way: every rank holds its slices of the weights and
 * runs the same sampling loop).
 *
 * Under tensor parallelism the output layer is vocab-parallel: a full forward's store holds
 * [M, V/t] logits on each rank (gpt_inference_full_logits gathers them into [M, V]; the row
 * forward of core/inference/gpt_inference_wrapper.h already returns [M, V]). Every rank then
 * sees the whole vocabulary's logits, and the counter-based draws seeded alike make every rank
 * pick the same tokens. No pipeline or context parallelism. */
#ifndef MEGADLM_TOOLS_CHECKPOINT_MODEL_H
#define MEGADLM_TOOLS_CHECKPOINT_MODEL_H

#include "core/models/gpt_model.h"
#include "training/arguments.h"
#include "training/tokenizer/tokenizer.h"

typedef struct {
    megadlm_args a;
    int iteration;
    int diffusion; /* --model-running-mode difflm-noshift */
    tokenizer *tok;
    gpt_model *model;
    activation_store *store;
} checkpoint_model;

/* The latest iteration of dir: its arguments, tokenizer and family (no model yet); tool: the
 * command whose tokenizer file flags the error suggests; files: the tokenizer file flags
 * given (NULL fields: the checkpoint's). 0, or 1 after printing an error that names --load
 * and the directory. */
int checkpoint_model_open(checkpoint_model *cm, const char *tool, const char *dir,
                          const tokenizer_options *files);

/* How the model runs: split over tp_size ranks (the tensor-parallel groups already set up
 * with that size), forwards of up to max_batch sequences, packed_docs for the document
 * arrays batches of left-padded prompts need; bf16: in bf16 as a --bf16 training run's
 * forward (the weights rounded to bf16 from the checkpoint's values, the GEMMs gemm_bf16's),
 * else in fp32. */
typedef struct {
    int tp_size;
    int max_batch;
    int packed_docs;
    int bf16;
} checkpoint_model_layout;

/* Then its model, this rank's slices of the parameters loaded and checked finite. Collective
 * over the world: 0, or 1 on every rank after rank 0 printed the one error (the flag, the
 * checkpoint's value, what was expected; a non-finite value in any rank's slice). */
int checkpoint_model_build(checkpoint_model *cm, const char *dir,
                           const checkpoint_model_layout *layout);
void checkpoint_model_free(checkpoint_model *cm);

#endif
