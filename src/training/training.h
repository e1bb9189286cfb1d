/* The training loop (Megatron's megatron/training/training.py: pretrain, train, train_step,
 * evaluate, training_log). */
#ifndef MEGADLM_TRAINING_TRAINING_H
#define MEGADLM_TRAINING_TRAINING_H

#include "training/arguments.h"

/* Runs a whole training job from validated arguments. Returns the exit status. */
int pretrain(megadlm_args *a);
/* `megadlm train` (src/main.c): parses the arguments after the subcommand name and runs
 * pretrain; the exit status. */
int train_main(int argc, char **argv);

#endif
