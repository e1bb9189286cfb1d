#!/usr/bin/env bash
# Data-parallel gradient reduction: DP 2 on this machine (mpirun, 1 thread per rank), a model
# whose gradient all-reduce costs something (8 layers, h=512, 8 heads, s=64, vocabulary 8k:
# ~29M parameters, ~116 MB of fp32 gradients per reduction), one micro-batch per rank, measured
# in one run per configuration:
#   allreduce            one bucket, all-reduced after backward (Megatron without overlap)
#   allreduce+overlap    --overlap-grad-reduce, 4M-parameter buckets started from backward
#   distopt              --use-distributed-optimizer (reduce-scatter + all-gather)
#   distopt+overlap      + --overlap-grad-reduce --overlap-param-gather
# For each: median time per iteration (iterations 2.., megadlm's own log), and from the DDP
# counters of --log-memory (iteration 1 excluded): the wait after backward (the communication
# left exposed: reductions still running, or all of them without overlap) and the time the
# backward hook spent (scaling, starting and progressing reductions). Ratios printed:
#   iteration time overlap / no overlap;
#   hidden = 1 - wait(overlap) / wait(no overlap): the share of the post-backward
#            communication moved off the critical path;
#   net    = (time(no overlap) - time(overlap)) / wait(no overlap): what the iteration gained,
#            as a share of that communication.
# Open MPI progresses nonblocking collectives only inside MPI calls (the hook calls
# MPI_Testsome after each layer), and on one machine its transport copies with the CPU that
# also computes, so expect partial hiding here; the counters say how much.
#
# usage: bash bench/bench_ddp.sh [BUILD=build]   (env ITERS=8)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$BUILD/bench; mkdir -p "$OUT"
ITERS=${ITERS:-8}
model=(--num-layers 8 --hidden-size 512 --num-attention-heads 8 --seq-length 64
       --max-position-embeddings 64 --micro-batch-size 1 --global-batch-size 2 --mock-data
       --vocab-size 8000 --lr 1e-4 --train-iters $ITERS --log-interval 1 --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0 --log-memory)
declare -A MODE=(
  [allreduce]=""
  [allreduce+overlap]="--overlap-grad-reduce --ddp-bucket-size 4000000"
  [distopt]="--use-distributed-optimizer"
  [distopt+overlap]="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 4000000"
)
ORDER=(allreduce allreduce+overlap distopt distopt+overlap)

echo "== data-parallel bench: DP 2, L=8 h=512 s=64 b=1 V=8000, $ITERS iterations ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
printf '%-18s %8s %12s %14s %10s\n' mode buckets "ms/iter" "wait after bw" "hook"
declare -A T W
for m in "${ORDER[@]}"; do
  log=$OUT/ddp_$m.log
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 "$BUILD/megadlm" train \
      "${model[@]}" ${MODE[$m]} > "$log" 2>&1 || { echo "bench: $m failed, see $log" >&2; exit 1; }
  t=$(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$log" | awk 'NR > 1 {print $NF}' |
      sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  # per-rank counters: after iteration 1 and over all iterations -> mean of iterations 2..
  read -r b w h < <(grep '\[Rank 0\] data-parallel communication over' "$log" | awk -F'|' -v n=$ITERS '
    { for (i = 1; i <= NF; i++) {
        if ($i ~ / buckets /) { split($i, x, " "); b = x[2] }
        if ($i ~ /hook/) { split($i, x, " "); h[NR] = x[2] }
        if ($i ~ /wait after backward/) { split($i, x, " "); w[NR] = x[4] } } }
    END { printf "%d %.3f %.3f\n", b, (w[2] * n - w[1]) / (n - 1), (h[2] * n - h[1]) / (n - 1) }')
  T[$m]=$t W[$m]=$w
  printf '%-18s %8d %12.1f %11.1f ms %7.1f ms\n' "$m" "$b" "$t" "$w" "$h"
done
echo
for pair in "allreduce allreduce+overlap" "distopt distopt+overlap"; do
  read -r a o <<<"$pair"
  awk -v a="$a" -v o="$o" -v ta=${T[$a]} -v to=${T[$o]} -v wa=${W[$a]} -v wo=${W[$o]} 'BEGIN {
    printf "%-18s -> %-18s iteration time x%.3f | hidden %.0f%% of the wait after backward | net %.0f%% of it gained\n",
           a, o, to / ta, 100 * (1 - wo / wa), 100 * (ta - to) / wa }'
done
# Optimizer state per rank (--log-memory's measured bytes, the tracked allocator's): with the
# distributed optimizer each rank holds its ceil(N/DP) elements of each moment, against the
# replicated figure / DP.
opt_bytes() { grep "\[Rank $2\] memory optimizer state" "$1" | head -1 | sed -E 's/.*measured ([0-9]+).*/\1/'; }
for r in 0 1; do
  rep=$(opt_bytes "$OUT/ddp_allreduce.log" $r) dist=$(opt_bytes "$OUT/ddp_distopt.log" $r)
  awk -v r=$r -v a="$rep" -v d="$dist" 'BEGIN {
    printf "optimizer state, rank %d: replicated %d bytes | distributed %d bytes | ratio %.4f (1/DP = 0.5000)\n", r, a, d, d / a }'
done
echo "logs: $OUT/ddp_*.log"
