/* Tensor-parallel communication overlapped with the GEMMs that need it (--tp-comm-overlap):
 * what Transformer Engine's userbuffers do for Megatron, here over MPI point-to-point and
 * nonblocking collectives on a duplicate of the TP communicator.
 *
 *   ring all-gather + compute: the sequence-sharded input travels around the TP ring in pieces;
 *     the caller's GEMM runs on each piece as soon as it is here, while the next pieces travel
 *     (linear_qkv / linear_fc1 forward, linear_proj / linear_fc2 input-gradient).
 *   compute + ring reduce-scatter: the caller computes its partial output piece by piece, each
 *     piece leaves as soon as it is computed and partial sums accumulate around the ring
 *     (linear_proj / linear_fc2 forward, --tp-comm-overlap-rs-dgrad).
 *   bulk: a nonblocking all-gather or reduce-scatter started before an unrelated GEMM and
 *     finished after it (the input all-gather under the dgrad GEMM, the dgrad reduce-scatter
 *     under the wgrad GEMM).
 *
 * Progress. Open MPI's TCP transport moves bytes only inside MPI calls, so something must call
 * MPI while the GEMMs run. Two ways, chosen by tp_overlap_init:
 *   TP_PROGRESS_TEST: the computing thread tests the outstanding requests between GEMM tiles
 *     (tp_overlap_poll; tp_overlap_tile_rows says how many rows a tile has).
 *   TP_PROGRESS_THREAD: a communication thread posts and tests the requests, sleeping briefly
 *     when nothing moved; GEMMs run untiled. MPI calls never overlap between the two threads
 *     (the computing thread calls no MPI while transfers are outstanding), so MPI needs only
 *     MPI_THREAD_SERIALIZED.
 * docs/architecture/parallelism.md ("TP communication hides under the GEMMs") has the measurements behind the default.
 *
 * Under --bf16 the all-gathers (ring and bulk, the _bf16 forms) move bf16 values: the gathered
 * tensors are GEMM operands that their readers round to bf16, so nothing changes but the bytes.
 *
 * All ranks of a TP group must call the same functions in the same order. Each call returns
 * when its transfers are complete, so nothing is outstanding between calls except a bulk
 * operation until its tp_bulk_wait. */
#ifndef MEGADLM_CORE_TENSOR_PARALLEL_COMM_OVERLAP_H
#define MEGADLM_CORE_TENSOR_PARALLEL_COMM_OVERLAP_H

#include <stddef.h>

#include "core/kernels/bf16.h"

typedef enum { TP_PROGRESS_TEST = 0, TP_PROGRESS_THREAD } tp_progress_mode;

/* Sets up the engine on the TP group (collective over it; call after the groups exist). Returns
 * 0, or -1 with a message (thread mode without MPI_THREAD_SERIALIZED). */
int tp_overlap_init(tp_progress_mode mode, char *err, size_t errlen);
void tp_overlap_finalize(void);
int tp_overlap_ready(void);

/* Between GEMM tiles: advances outstanding transfers (test mode; nothing in thread mode). */
void tp_overlap_poll(void);
/* Rows per GEMM tile when `rows` rows (a piece) are computed under communication: the whole
 * piece in thread mode and without the engine; tiles in test mode, so progress runs between
 * them (a finer decomposition than the plan's: not bit-identical to it, docs/architecture/parallelism.md, "The row plan"). */
int tp_overlap_tile_rows(int rows);

/* Called on rows [row0, row0 + rows) of the whole [t * Ns, C] matrix. */
typedef void (*tp_rows_fn)(void *user, int row0, int rows);

/* The row plan of sequence parallelism: each rank's shard of Ns token rows is cut into
 * tp_pieces(Ns, pieces) pieces, piece i being rows [lo, lo + n) of the shard. Every GEMM over
 * the gathered token rows runs once per piece, with or without overlap (parallel_linear.c), so
 * both paths make the same BLAS calls on the same data and get the same bits from any BLAS. */
int tp_pieces(int Ns, int pieces);
void tp_piece_rows(int Ns, int pieces, int i, int *lo, int *n);
/* fn on every piece of every one of t shards, in row order (the plan without communication) */
void tp_for_each_piece(int t, int Ns, int pieces, tp_rows_fn fn, void *user);

/* gathered[t * Ns, C] = every rank's local[Ns, C] (rank q's at rows q * Ns), sent around the
 * ring in `pieces` pieces per shard; fn runs on the own shard's pieces first, then on each
 * piece as it arrives. */
void tp_ring_allgather_compute(float *gathered, const float *local, int Ns, int C, int pieces,
                               tp_rows_fn fn, void *user);
/* The same with the shards moved in the 16-bit format `kind` (--bf16, --fp16: half the bytes):
 * gathered then holds every other rank's rows rounded to it (exact for a GEMM operand that its
 * readers round anyway). The pieces travel through a 16-bit staging buffer of t * Ns * C
 * (category workspace). */
void tp_ring_allgather_compute_half(half_kind kind, float *gathered, const float *local, int Ns,
                                    int C, int pieces, tp_rows_fn fn, void *user);
/* fn writes rows [row0, row0 + rows) of this rank's partial[t * Ns, C]; out_local[Ns, C] = the
 * sum over ranks of their partial's rows r * Ns .. of this rank r. Chunks are computed in ring
 * order (the chunk of rank r - 1 first, this rank's own last), each piece sent when computed.
 * recv is scratch of (t - 1) * Ns * C floats. */
void tp_compute_ring_reduce_scatter(float *out_local, float *partial, float *recv, int Ns, int C,
                                    int pieces, tp_rows_fn fn, void *user);

/* Bulk operations: start, compute something else (calling tp_overlap_poll between tiles),
 * wait; the buffers must stay untouched until then. shard_n floats per rank. The
 * reduce-scatter's partials arrive in recv ((t - 1) * shard_n floats of scratch) and are summed
 * into local by tp_bulk_wait. */
int tp_bulk_allgather_start(float *gathered, const float *local, size_t shard_n);
/* ... with bf16 or fp16 (kind) on the wire, staged in gathered's upper half and widened by
 * tp_bulk_wait */
int tp_bulk_allgather_start_half(half_kind kind, float *gathered, const float *local,
                                 size_t shard_n);
int tp_bulk_reduce_scatter_start(float *local, const float *full, float *recv, size_t shard_n);
void tp_bulk_wait(int handle);

/* Overlapped operations run since tp_overlap_init (tests check the overlap really ran). */
typedef struct {
    unsigned long ring_all_gathers, ring_reduce_scatters, bulk_all_gathers, bulk_reduce_scatters;
} tp_overlap_stats;
const tp_overlap_stats *tp_overlap_get_stats(void);

#endif
