/* Corpus replay without libFuzzer: the main() that the sanitizer build (MEGADLM_SANITIZE,
 * scripts/sanitize.sh) links each tests/fuzz/fuzz_*.c target with. Arguments are files or
 * directories (every regular file in them, in name order). Each input runs once in a child
 * process of its own, so a sanitizer report, a leak (checked at the child's exit), a crash or
 * a hang (FUZZ_REPLAY_TIMEOUT seconds, default 30) fails that input only and the others still
 * run. Prints every failing input and a summary; exits 1 if any failed. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_one(const char *path, int timeout) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("replay: fork");
        return -1;
    }
    if (pid == 0) {
        alarm((unsigned)timeout); /* default action: the child dies of SIGALRM */
        FILE *f = fopen(path, "rb");
        if (!f) {
            fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
            _exit(2);
        }
        size_t cap = 4096, n = 0;
        uint8_t *buf = malloc(cap);
        for (;;) {
            n += fread(buf + n, 1, cap - n, f);
            if (n < cap) break;
            buf = realloc(buf, cap *= 2);
        }
        fclose(f);
        /* a copy of exactly n bytes, so reading past the input is caught as libFuzzer would */
        uint8_t *in = malloc(n ? n : 1);
        memcpy(in, buf, n);
        free(buf);
        LLVMFuzzerTestOneInput(in, n);
        free(in);
        exit(0); /* exit, not _exit: LeakSanitizer checks at exit */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 0;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        fprintf(stderr, "replay: %s: TIMEOUT (over %d s)\n", path, timeout);
    else if (WIFSIGNALED(st))
        fprintf(stderr, "replay: %s: killed by signal %d\n", path, WTERMSIG(st));
    else
        fprintf(stderr, "replay: %s: exit status %d\n", path, WEXITSTATUS(st));
    return 1;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    const char *t = getenv("FUZZ_REPLAY_TIMEOUT");
    int timeout = t && atoi(t) > 0 ? atoi(t) : 30;
    int total = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 2;
        }
        char **files = NULL;
        size_t nf = 0;
        if (S_ISDIR(sb.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *e;
            while (d && (e = readdir(d))) {
                char *p;
                if (asprintf(&p, "%s/%s", argv[i], e->d_name) < 0) return 2;
                struct stat fs;
                if (e->d_name[0] != '.' && stat(p, &fs) == 0 && S_ISREG(fs.st_mode)) {
                    files = realloc(files, (nf + 1) * sizeof *files);
                    files[nf++] = p;
                } else {
                    free(p);
                }
            }
            if (d) closedir(d);
            qsort(files, nf, sizeof *files, cmp_str);
        } else {
            files = malloc(sizeof *files);
            files[nf++] = strdup(argv[i]);
        }
        for (size_t k = 0; k < nf; k++) {
            int r = run_one(files[k], timeout);
            if (r < 0) return 2;
            total++;
            failed += r;
            free(files[k]);
        }
        free(files);
    }
    printf("replay %s: %d inputs, %d failed\n", argv[0], total, failed);
    return failed ? 1 : 0;
}
