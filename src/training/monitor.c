#include "training/monitor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "core/util/die.h"
#include "core/util/io.h"
#include "training/model_provider.h"

static double wall_seconds(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

double monitor_flops(const megadlm_args *a, int iterations) {
    return model_flops_per_iteration(a, a->global_batch_size) * iterations;
}

/* Megatron's append_to_progress_log: "<local time>\tJob ID: <SLURM_JOB_ID>\t# GPUs: <world>\t"
 * then the message. */
static void progress_append(const monitor *m, const char *msg) {
    char path[1100], stamp[32];
    snprintf(path, sizeof path, "%s/progress.txt", m->a->save);
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
    const char *job = getenv("SLURM_JOB_ID");
    FILE *f = fopen(path, "a");
    if (!f) die(1, "--log-progress: cannot open %s for appending", path);
    fprintf(f, "%s\tJob ID: %s\t# GPUs: %d\t%s\n", stamp, job ? job : "", m->a->world_size, msg);
    if (fclose(f) != 0) die(1, "--log-progress: writing %s failed", path);
}

/* The field after ": " of a progress.txt column (Megatron's _get_field). */
static const char *field(const char *col) {
    const char *p = strstr(col, ": ");
    return p ? p + 2 : "";
}

/* Megatron's get_start_time_from_progress_log: the start of the earliest job of this world size
 * since the world size last changed, and the operations done when it started (those of the
 * last checkpoint saved before it). 0, or -1 when there is no such job. */
static int progress_start(const monitor *m, time_t *start, double *start_flops) {
    char path[1100], line[2048];
    snprintf(path, sizeof path, "%s/progress.txt", m->a->save);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int found = 0;
    double latest = 0.0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *cols[9] = {0};
        int n = 0;
        for (char *s = line, *tab; n < 9; s = tab + 1) {
            cols[n++] = s;
            if (!(tab = strchr(s, '\t'))) break;
            *tab = '\0';
        }
        if (n < 4) continue;
        if (!strcmp(cols[3], "Saved checkpoint") && n > 7) latest = atof(field(cols[7]));
        if (atoi(field(cols[2])) != m->a->world_size) {
            found = 0; /* restart the search after a job of another world size */
            continue;
        }
        struct tm tm = {0};
        if (!strcmp(cols[3], "Starting job") && !found &&
            strptime(cols[0], "%Y-%m-%d %H:%M:%S", &tm)) {
            tm.tm_isdst = -1;
            *start = mktime(&tm);
            *start_flops = latest;
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}

void monitor_progress_saved(monitor *m, int iteration, uint64_t consumed_samples) {
    if (!m->progress) return;
    const megadlm_args *a = m->a;
    double flops = monitor_flops(a, iteration), now = wall_seconds();
    double job = (flops - m->flops_at_start) / ((now - m->job_start) * 1e12 * a->world_size);
    time_t start = (time_t)m->job_start;
    double start_flops = m->flops_at_start;
    progress_start(m, &start, &start_flops); /* this job's own line at least */
    /* the log's time stamps have whole seconds: a job younger than one counts one */
    double elapsed = now - (double)start;
    if (elapsed < 1.0) elapsed = 1.0;
    double cumulative = (flops - start_flops) / (elapsed * 1e12 * a->world_size);
    char msg[512];
    snprintf(msg, sizeof msg,
             "Saved checkpoint\tIteration: %d\tJob throughput: %.1f TFLOP/s/GPU\tCumulative "
             "throughput: %.1f TFLOP/s/GPU\tFloating-point operations: %.2e\tTokens (in "
             "billions): %.2f",
             iteration, job, cumulative, flops,
             (double)consumed_samples * a->seq_length / 1e9);
    progress_append(m, msg);
}

/* What the log rank says once at the start about the flags of this module. */
static void notices(const megadlm_args *a, int writes_tb) {
    if (writes_tb) printf("> setting tensorboard ...\n");
    if (a->wandb_project[0])
        printf("> W&B: megadlm cannot reach W&B; project %s, run %s%s%s are recorded in the "
               "checkpoint's arguments (state.json) and the scalars go to the TensorBoard event "
               "files%s%s (upload them with: wandb sync --sync-tensorboard DIR)\n",
               a->wandb_project, a->wandb_exp_name, a->wandb_run_id[0] ? ", id " : "",
               a->wandb_run_id, a->tensorboard_dir[0] ? " of " : " (none: no --tensorboard-dir)",
               a->tensorboard_dir);
    else if (a->wandb_exp_name[0] || a->wandb_run_id[0] || a->wandb_save_dir[0] ||
             a->wandb_tags[0] || a->wandb_group[0] || a->wandb_notes[0] ||
             a->wandb_resume_from[0] || ARGS_CHOICE(a, wandb_mode) != ARGS_WANDB_ONLINE ||
             ARGS_CHOICE(a, wandb_resume) != ARGS_WANDB_RESUME_AUTO)
        printf("> W&B: --wandb-* flags without --wandb-project are recorded in the checkpoint's "
               "arguments only (Megatron starts no W&B run without a project)\n");
    if (!a->tensorboard_dir[0] &&
        (a->log_timers_to_tensorboard || a->log_validation_ppl_to_tensorboard ||
         a->log_memory_to_tensorboard || a->log_world_size_to_tensorboard))
        printf(" WARNING: --log-*-to-tensorboard without --tensorboard-dir: nothing is written "
               "to TensorBoard (as Megatron)\n");
    if (a->log_progress && !a->save[0])
        printf(" WARNING: --log-progress without --save: no progress.txt is written (as "
               "Megatron)\n");
}

/* Megatron's write_args_to_tensorboard: every argument as a text at the starting iteration,
 * its value as str() gives it, which is what the arguments block prints (args_print: lines
 * "  name ..... value"). */
static void tensorboard_args(monitor *m, int iteration) {
    char *buf = NULL, err[1200];
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem) die(1, "--tensorboard-dir: out of memory");
    args_print(m->a, mem);
    fclose(mem);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        char name[256];
        int end = 0;
        if (strncmp(line, "  ", 2) || sscanf(line + 2, "%255s%n", name, &end) != 1) continue;
        const char *v = line + 2 + end;
        if (strncmp(v, " .", 2)) continue;
        v += strspn(v, " .");
        if (tb_add_text(m->tb, name, v, iteration, err, sizeof err) != 0) die(1, "%s", err);
    }
    free(buf);
    monitor_flush(m);
}

int monitor_open(monitor *m, const megadlm_args *a, int log_rank, int world_rank, char *err,
                 size_t errlen) {
    *m = (monitor){.a = a, .job_start = wall_seconds()};
    if (log_rank) notices(a, a->tensorboard_dir[0] != 0);
    if (a->log_progress && a->save[0] && world_rank == 0) {
        char why[1024];
        if (io_mkdir_p(a->save, 0, why, sizeof why) != 0) {
            snprintf(err, errlen, "--log-progress: %s", why);
            return -1;
        }
        m->progress = 1;
        progress_append(m, "Starting job");
    }
    return 0;
}

int monitor_start(monitor *m, int tb_rank, int start_iteration, char *err, size_t errlen) {
    const megadlm_args *a = m->a;
    m->flops_at_start = monitor_flops(a, start_iteration);
    if (!tb_rank || !a->tensorboard_dir[0]) return 0;
    m->tb = tb_writer_open(a->tensorboard_dir, a->tensorboard_queue_size, err, errlen);
    if (!m->tb) return -1;
    tensorboard_args(m, start_iteration);
    return 0;
}

void monitor_scalar(monitor *m, const char *tag, double value, int64_t step) {
    if (!m->tb) return;
    char err[1200];
    if (tb_add_scalar(m->tb, tag, value, step, err, sizeof err) != 0) die(1, "%s", err);
}

void monitor_scalar_pair(monitor *m, const char *tag, double value, int64_t iteration,
                         int64_t samples) {
    char vs[160];
    snprintf(vs, sizeof vs, "%s vs samples", tag);
    monitor_scalar(m, tag, value, iteration);
    monitor_scalar(m, vs, value, samples);
}

void monitor_flush(monitor *m) {
    char err[1200];
    if (m->tb && tb_flush(m->tb, err, sizeof err) != 0) die(1, "%s", err);
}

void monitor_close(monitor *m) {
    char err[1200] = "";
    if (m->tb && tb_writer_close(m->tb, err, sizeof err) != 0)
        fprintf(stderr, "error: %s\n", err);
    m->tb = NULL;
}
