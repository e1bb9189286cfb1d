/* A small MPI program for bench/netcluster and tests/scripts/test_netcluster.sh:
 *
 *   net_probe [BYTES [REPS]]        (defaults: 8000000 bytes, 3 repetitions)
 *
 * Rank 0 prints one line per rank with the rank's network namespace (readlink
 * /proc/self/ns/net) and host name:
 *
 *   netns rank 0 net:[4026532301] host box
 *
 * then, when there are at least two ranks, times REPS one-way transfers of BYTES from rank 0
 * to rank 1 (each: a barrier, one MPI_Send of BYTES, a 1-byte acknowledgement back; the time
 * is taken on rank 0 from before the send to the acknowledgement) after a small warm-up
 * exchange that opens the connection, and prints each and the median:
 *
 *   transfer 1 8000000 bytes 0.6712 s 11.92 MB/s 95.35 Mbit/s
 *   bandwidth median 11.92 MB/s 95.35 Mbit/s
 *
 * MB = 10^6 bytes, Mbit = 10^6 bits, payload only (no protocol headers). Ranks other than 0
 * and 1 only take part in the barriers. Exit status 0, or 1 on a bad argument. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAME_LEN 64

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    long long bytes = argc > 1 ? atoll(argv[1]) : 8000000;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (bytes < 1 || bytes > 1LL << 30 || reps < 1 || reps > 1000) {
        if (rank == 0) fprintf(stderr, "usage: net_probe [BYTES (1..2^30) [REPS (1..1000)]]\n");
        MPI_Finalize();
        return 1;
    }

    /* Which network namespace and host each rank is in. */
    char me[2 * NAME_LEN];
    memset(me, 0, sizeof me);
    ssize_t n = readlink("/proc/self/ns/net", me, NAME_LEN - 1);
    if (n < 0) snprintf(me, NAME_LEN, "unknown");
    gethostname(me + NAME_LEN, NAME_LEN - 1);
    char *all = rank == 0 ? malloc((size_t)size * sizeof me) : NULL;
    MPI_Gather(me, (int)sizeof me, MPI_CHAR, all, (int)sizeof me, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        for (int r = 0; r < size; r++)
            printf("netns rank %d %s host %s\n", r, all + (size_t)r * sizeof me,
                   all + (size_t)r * sizeof me + NAME_LEN);
        fflush(stdout);
        free(all);
    }

    if (size >= 2) {
        char *buf = malloc((size_t)bytes);
        memset(buf, rank + 1, (size_t)bytes);
        char ack = 0;
        double *t = malloc((size_t)reps * sizeof *t);
        /* Warm-up: opens the TCP connection between ranks 0 and 1 both ways. */
        if (rank == 0) {
            MPI_Send(buf, 1024, MPI_CHAR, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, 1024, MPI_CHAR, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(buf, 1024, MPI_CHAR, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, 1024, MPI_CHAR, 0, 0, MPI_COMM_WORLD);
        }
        for (int i = 0; i < reps; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            if (rank == 0) {
                double t0 = MPI_Wtime();
                MPI_Send(buf, (int)bytes, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(&ack, 1, MPI_CHAR, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                t[i] = MPI_Wtime() - t0;
                printf("transfer %d %lld bytes %.4f s %.2f MB/s %.2f Mbit/s\n", i + 1, bytes, t[i],
                       bytes / t[i] / 1e6, 8.0 * bytes / t[i] / 1e6);
                fflush(stdout);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)bytes, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(&ack, 1, MPI_CHAR, 0, 2, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) {
            qsort(t, (size_t)reps, sizeof *t, cmp_double);
            double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
            printf("bandwidth median %.2f MB/s %.2f Mbit/s\n", bytes / med / 1e6,
                   8.0 * bytes / med / 1e6);
        }
        free(t);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
