#!/usr/bin/env bash
# Tensor-parallel communication overlap on a real bandwidth-limited network.
#
#   bash bench/bench_tp_comm_overlap.sh [BUILD_DIR]      (root: it builds network namespaces)
#
# Two test hosts built by bench/netcluster (network namespaces, links limited to RATE by tbf),
# one rank each, TP = 2 with sequence parallelism: tests/tools/tp_overlap_bench times training
# iterations (forward + backward of one micro-batch, TP gradient finalisation, AdamW) of one
# GPT model in every mode in one run, rounds interleaved, once per progress mode (test: MPI
# tested between GEMM tiles; thread: a communication thread). Printed last, the figure:
#   t_no_overlap, t_overlap, t_compute_only (communication replaced by local copies),
#   t_comm_only (the same collectives back to back, no compute), and
#   hidden fraction = (t_no_overlap - t_overlap) / (t_no_overlap - t_compute_only)
#   (target >= 0.7), then what each kind of overlap hides alone (ag, rs, bulk).
# Environment: RATE (tc syntax, default 1gbit), MTU (default 9000: jumbo frames, as HPC
# clusters run them; they also cut the kernel's per-packet work, which on this machine takes
# cycles from the GEMMs), ROUNDS (default 5), ITERS per round (2),
# LAYERS (2), HIDDEN (1024), HEADS (16), SEQ (512), MBS (2), SPLITS (pieces per shard, 2),
# THREADS (OpenMP threads per rank, 1: two ranks share this machine's two cores).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
RATE=${RATE:-1gbit} MTU=${MTU:-9000} ROUNDS=${ROUNDS:-5} ITERS=${ITERS:-2}
LAYERS=${LAYERS:-2} HIDDEN=${HIDDEN:-1024} HEADS=${HEADS:-16} SEQ=${SEQ:-512} MBS=${MBS:-2}
SPLITS=${SPLITS:-2} THREADS=${THREADS:-1}
BENCH="$BUILD/tests/tp_overlap_bench"
[ -x "$BENCH" ] || { echo "error: $BENCH not built (cmake --build $BUILD)" >&2; exit 2; }
# Open MPI's TCP defaults would handicap the plain collectives, not the overlapped ones: one
# TCP connection per pair of ranks carries both directions of a transfer at about half the
# link's rate each (measured here: 64 MB/s per direction at 1gbit, 116 with two connections),
# and reduce_scatter_block's default for two ranks is a reduce then a scatter (three times the
# bytes: 40 MB/s). Two connections and recursive halving bring every collective to ~107 MB/s.
export OMPI_MCA_btl_tcp_links=${OMPI_MCA_btl_tcp_links:-2}
export OMPI_MCA_coll_tuned_use_dynamic_rules=${OMPI_MCA_coll_tuned_use_dynamic_rules:-1}
export OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm=${OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm:-3}
MCA_ENV=(--env OMPI_MCA_btl_tcp_links --env OMPI_MCA_coll_tuned_use_dynamic_rules
         --env OMPI_MCA_coll_tuned_reduce_scatter_block_algorithm)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

flags=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS"
       --ffn-hidden-size $((4 * HIDDEN)) --seq-length "$SEQ" --max-position-embeddings "$SEQ"
       --micro-batch-size "$MBS" --global-batch-size "$MBS" --train-iters 1 --lr 1e-4
       --mock-data --vocab-size 1024 --make-vocab-size-divisible-by 64
       --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap
       --tp-comm-overlap-num-splits "$SPLITS")
echo "shape: L=$LAYERS h=$HIDDEN a=$HEADS ffn=$((4 * HIDDEN)) s=$SEQ b=$MBS, TP=2 + SP, 2 hosts at $RATE (MTU $MTU), $THREADS thread(s) per rank, $SPLITS pieces per shard"
for progress in test thread; do
  echo "--- progress: $progress ($ROUNDS rounds x $ITERS iterations per mode)"
  OMP_NUM_THREADS=$THREADS "$ROOT/bench/netcluster" --hosts 2 --rate "$RATE" --mtu "$MTU" "${MCA_ENV[@]}" -- \
      "$BENCH" "$ROUNDS" "$ITERS" "${flags[@]}" --tp-comm-overlap-progress "$progress" \
      2>&1 | grep -v 'setpgid' | tee "$OUT/$progress.txt"
done

figure() { # figure FILE PROGRESS
  awk -v p="$2" '$1 == "mode" { t[$2] = $4 }
    END {
      no = t["no_overlap"]; ov = t["overlap"]; co = t["compute_only"]; cm = t["comm_only"]
      exposed = no - co
      printf "%-7s no_overlap %8.1f ms | overlap %8.1f ms | compute_only %8.1f ms | comm_only %8.1f ms\n", p, no, ov, co, cm
      if (exposed <= 0) { printf "%-7s communication costs nothing measurable here: no hidden fraction\n", p; exit }
      printf "%-7s hidden fraction (no - overlap) / (no - compute_only) = %.2f  (target >= 0.7)\n", p, (no - ov) / exposed
      printf "%-7s alone: ag %.2f, rs %.2f, bulk dgrad+wgrad %.2f of the exposed %.1f ms\n", p,
             (no - t["ag_only"]) / exposed, (no - t["rs_only"]) / exposed, (no - t["bulk_only"]) / exposed, exposed
    }' "$1"
}
echo
echo "=== TP communication overlap, TP=2 + SP over 2 hosts at $RATE (median ms per iteration) ==="
figure "$OUT/test.txt" test
figure "$OUT/thread.txt" thread
