/* megadlm: one binary, one subcommand per job (`megadlm <command> [flags]`). */
#include <stdio.h>
#include <string.h>

#include "core/kernels/blas_kernels.h"
#include "core/parallel_state.h"
#include "core/util/denormals.h"
#include "tools/tools.h"
#include "training/training.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command k_commands[] = {
    {"train", train_main, "train a GPT model (Megatron's pretrain_gpt.py flags)"},
    {"preprocess", preprocess_main,
     "tokenize .jsonl/.txt into Megatron's indexed dataset (.bin/.idx)"},
    {"generate", generate_main, "sample text from a trained checkpoint"},
    {"eval", eval_main,
     "score a checkpoint on a task file by log-likelihood (multiple choice, perplexity)"},
    {"tokenize", tokenize_main, "print the token ids of stdin's lines (--decode: ids to text)"},
    {"memory", memory_main,
     "theoretical memory and FLOPs of a configuration, without running it (train's flags)"},
    {"plan", plan_main,
     "the fastest layouts that fit a memory budget: TP, PP, DP, SP, recompute (train's flags)"},
    {"convert", convert_main, "Hugging Face interchange: --to hf DIR OUT, --from hf IN OUT"},
};
#define NUM_COMMANDS (int)(sizeof(k_commands) / sizeof(k_commands[0]))

static void usage(FILE *out) {
    fprintf(out, "usage: megadlm <command> [flags]\n\ncommands:\n");
    for (int i = 0; i < NUM_COMMANDS; i++)
        fprintf(out, "  %-11s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(out, "\n`megadlm <command> --help` lists every flag of a command with its default.\n"
                 "`megadlm --version` names the BLAS library and the kernel set its GEMMs run.\n");
}

/* The BLAS build and kernel set this process runs (after blas_kernels_choose): benchmarks read
 * it to run their reference GEMMs on the same kernels. */
static void version(void) { printf("megadlm\nBLAS: %s\n", blas_kernels_line()); }

/* Denormals flushed to zero (or kept, MEGADLM_DENORMALS=keep) on this thread before any
 * computation, MPI or thread pool: no worker exists yet, and every thread made later (OpenMP's
 * pool, sized afterwards by threads_setup) copies these bits (core/util/denormals.h). A team
 * of one: no workers are started here that the rank's thread plan may not want. */
static int denormals_setup(void) {
    denormals_mode mode;
    char err[256];
    if (denormals_mode_from_env(&mode, err, sizeof err) != 0) {
        fprintf(stderr, "error: %s\n", err);
        return -1;
    }
    denormals_apply_team(mode, 1);
    return 0;
}

int main(int argc, char **argv) {
    blas_kernels_choose(argv); /* may re-execute this program: before MPI and threads */
    /* whole lines: under mpirun every rank's stdout is a pipe, and a fully buffered stream that
     * fills in the middle of a log line writes it in two pieces, between which another rank's
     * line can land in the merged output */
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (denormals_setup() != 0)
        return 2;
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        version();
        return 0;
    }
    for (int i = 0; i < NUM_COMMANDS; i++)
        if (!strcmp(argv[1], k_commands[i].name)) {
            /* under mpirun every rank runs the command; without it, a world of one */
            parallel_init(&argc, &argv);
            int status = k_commands[i].run(argc - 1, argv + 1);
            parallel_finalize();
            return status;
        }
    fprintf(stderr, "error: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
