/* Subcommand entry points of the megadlm binary (src/main.c dispatches to these). Each takes
 * the arguments after the subcommand name (argv[0] is the subcommand) and returns the exit
 * status. */
#ifndef MEGADLM_TOOLS_TOOLS_H
#define MEGADLM_TOOLS_TOOLS_H

#include <stdint.h>
#include <stdio.h>

#include "training/tokenizer/tokenizer.h"

int train_main(int argc, char **argv);      /* src/tools/train.c */
int preprocess_main(int argc, char **argv); /* src/tools/preprocess.c */
int generate_main(int argc, char **argv);   /* src/tools/generate.c */
int tokenize_main(int argc, char **argv);   /* src/tools/tokenize.c */
int memory_main(int argc, char **argv);     /* src/tools/memory.c */
int convert_main(int argc, char **argv);    /* src/tools/convert.c */
int plan_main(int argc, char **argv);       /* src/tools/plan.c */
int eval_main(int argc, char **argv);       /* src/tools/eval.c */

/* preprocess's reading and encoding alone, without writing datasets (the fuzz target
 * tests/fuzz/fuzz_preprocess_jsonl.c): the items of f (JSONL lines, or .txt documents when
 * is_txt) encoded for nkeys keys (1..32) exactly as preprocess_main encodes them. Returns the
 * number of items (-1 on bad arguments or out of memory); *tokens: the tokens of all of them,
 * *malformed: items preprocess reports as malformed (skipped unless --strict), *failed: items
 * whose encoding failed (fatal in preprocess). */
long preprocess_encode_stream(FILE *f, int is_txt, const tokenizer *tok, int nkeys, char **keys,
                              int append_eod, uint64_t *tokens, uint64_t *malformed,
                              uint64_t *failed);

#endif
