/* A checkpoint's model rebuilt for inference in one process (what `megadlm eval` scores): the
 * arguments saved in its state.json validated as train validates them (fp32: a --bf16 or
 * --fp16 run's 16-bit parameters widened exactly), its tokenizer (the file flags override the
 * checkpoint's absolute paths), and a forward-only model holding every tensor whole whatever
 * layout it was trained with. The same steps as generate's loading. */
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

/* The latest iteration of dir: its arguments, tokenizer and family (no model yet); files: the
 * tokenizer file flags given (NULL fields: the checkpoint's). 0, or 1 after printing an error
 * that names --load and the directory. */
int checkpoint_model_open(checkpoint_model *cm, const char *dir, const tokenizer_options *files);
/* Then its model, for batches of up to max_batch sequences, loaded: 0, or 1 after the error. */
int checkpoint_model_build(checkpoint_model *cm, const char *dir, int max_batch);
void checkpoint_model_free(checkpoint_model *cm);

#endif
