#!/usr/bin/env bash
# Threads per rank (src/core/threads.h): more MPI ranks than cores on a node. Trains the same
# TP 2 x PP 2 + SP model on 4 ranks with megadlm's default thread count (OMP_NUM_THREADS
# unset: each rank takes its share of the cores, at least 1) and with OMP_NUM_THREADS=1, the
# runs alternating, and prints the median time per iteration of each and the ratio
# (target: default <= 1.5 x OMP_NUM_THREADS=1). Before threads.c, every rank started one thread
# per core: on 2 cores this run had not finished 2 iterations after 10 minutes.
#
# usage: bash bench/bench_threads.sh [BUILD=build]   env: RANKS=4 ROUNDS=3 ITERS=6
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
RANKS=${RANKS:-4} ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-6}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
MPIRUN=(mpirun --oversubscribe)
[ "$(id -u)" = 0 ] && MPIRUN+=(--allow-run-as-root)
flags=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 64
       --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 --lr 1e-3
       --train-iters "$ITERS" --mock-data --vocab-size 1000 --tensor-model-parallel-size 2
       --pipeline-model-parallel-size 2 --sequence-parallel --log-interval 1 --eval-iters 0)
# median of the per-iteration times after the first (warm-up) iteration
ms() { for f in "$@"; do grep -o 'elapsed time per iteration (ms): [0-9.]*' "$f" | awk 'NR > 1 { print $NF }'; done; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "== threads per rank: $RANKS ranks (TP 2 x PP 2 + SP, 4 layers, h 64) on $(nproc) cores," \
  "$ROUNDS rounds x $ITERS iterations | $(date -u '+%Y-%m-%d %H:%M UTC') | load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  env -u OMP_NUM_THREADS "${MPIRUN[@]}" -np "$RANKS" "$BUILD/megadlm" train "${flags[@]}" > "$OUT/default.$r.log" 2>&1
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np "$RANKS" "$BUILD/megadlm" train "${flags[@]}" > "$OUT/one.$r.log" 2>&1
done
grep -m1 'threads per rank' "$OUT/default.1.log"
d=$(ms "$OUT"/default.*.log | median)
o=$(ms "$OUT"/one.*.log | median)
printf "default threads      %8.1f ms/iteration (median)\nOMP_NUM_THREADS=1    %8.1f ms/iteration (median)\n" "$d" "$o"
awk -v d="$d" -v o="$o" 'BEGIN { printf "ratio default / OMP_NUM_THREADS=1: %.2f (target <= 1.5)\n", d / o }'
