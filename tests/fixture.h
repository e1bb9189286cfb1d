/* The unit tests' model fixture: a transformer_config built from command-line flags by the real
 * parser, validation and model provider (args_parse, args_validate, model_config_from_args),
 * as `megadlm train` builds it, so a test's model is one a user can ask for, with the flags'
 * defaults and derived values (kv_channels, padded_vocab_size, rot_dim, the GELU form) rather
 * than a hand-filled struct that can drift from them.
 *
 *     transformer_config c = fixture_config("--num-layers 2 --hidden-size 32 "
 *                                           "--num-attention-heads 4 --seq-length 12 ...");
 *
 * The flags are split at spaces (no quoting). Flags that only validation needs and that do not
 * reach the model (a batch size, an iteration count, a learning rate, mock data) are added
 * before the test's, so a test names only its model's. A refused flag ends the test with the
 * parser's message: a fixture that cannot build its model is a broken test, not a failed check. */
#ifndef MEGADLM_TESTS_FIXTURE_H
#define MEGADLM_TESTS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "training/arguments.h"
#include "training/model_provider.h"

#define FIXTURE_RUN_FLAGS "--micro-batch-size 1 --train-iters 1 --lr 1e-3 --mock-data"

/* Parses and validates `flags` (after FIXTURE_RUN_FLAGS) into *a, as `train` does; exits with
 * the parser's message on a refusal. args_free(a) when done. */
static void fixture_args(megadlm_args *a, const char *flags) {
    char buf[4096], err[1024] = "";
    char *argv[256];
    int argc = 0;
    argv[argc++] = "train";
    if (snprintf(buf, sizeof buf, "%s %s", FIXTURE_RUN_FLAGS, flags) >= (int)sizeof buf) {
        fprintf(stderr, "fixture: flags longer than %zu bytes: %s\n", sizeof buf, flags);
        exit(2);
    }
    for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
        if (argc == 255) {
            fprintf(stderr, "fixture: more than 254 words of flags: %s\n", flags);
            exit(2);
        }
        argv[argc++] = t;
    }
    argv[argc] = NULL;
    args_defaults(a);
    if (args_parse(a, argc, argv, err, sizeof err) != 0 || args_validate(a, err, sizeof err) != 0) {
        fprintf(stderr, "fixture: the flags '%s' are refused: %s\n", flags, err);
        exit(2);
    }
}

/* The transformer_config `train` builds from `flags` (one process: no tensor, context or
 * pipeline parallelism among them). */
static transformer_config fixture_config(const char *flags) {
    megadlm_args a;
    fixture_args(&a, flags);
    transformer_config c = model_config_from_args(&a);
    args_free(&a);
    return c;
}

#endif
