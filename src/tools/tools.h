/* Subcommand entry points of the megadlm binary (src/main.c dispatches to these). Each takes
 * the arguments after the subcommand name (argv[0] is the subcommand) and returns the exit
 * status. */
#ifndef MEGADLM_TOOLS_TOOLS_H
#define MEGADLM_TOOLS_TOOLS_H

int train_main(int argc, char **argv);      /* src/training/training.c */
int preprocess_main(int argc, char **argv); /* src/tools/preprocess.c */
int generate_main(int argc, char **argv);   /* src/tools/generate.c */
int tokenize_main(int argc, char **argv);   /* src/tools/tokenize.c */
int memory_main(int argc, char **argv);     /* src/tools/memory.c */
int convert_main(int argc, char **argv);    /* src/tools/convert.c */

#endif
