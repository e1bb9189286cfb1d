#!/usr/bin/env bash
# Fully sharded data parallelism: DP 2 on this machine (mpirun, 1 thread per rank), 4 layers,
# h=512, 8 heads, s=64, vocabulary 8k (~17M parameters, fp32), one micro-batch per rank, one run
# per strategy:
#   no_shard             plain data parallelism
#   optim                the distributed optimizer (ZeRO-1)
#   optim_grads          + the gradients sharded (ZeRO-2)
#   optim_grads_params   + the parameters sharded, each unit gathered when needed (ZeRO-3)
#   ogp+prefetch         the same with --overlap-param-gather: the next unit's all-gather
#                        started before the current one computes
# Printed per strategy: parameters + gradients + optimizer state per rank as --log-memory
# measures it after iteration 1, beside the analytic figure for P parameters (fp32: 4 bytes of
# parameters, 4 of gradients, 8 of Adam moments; a sharded part counts ceil(P/DP) elements), and
# under optim_grads_params the most bytes of gathered units held at once (one layer; two with
# prefetch: counted apart, they are freed by the end of the step); the median time per
# iteration (iterations 2..). Then the hidden fraction of the parameter all-gathers:
#   hidden = 1 - exposed(prefetch) / exposed(at need)
# where exposed is the time params_needed spent gathering or waiting (all ranks' mean, all
# iterations), the at-need run's being the whole cost of the gathers on the critical path.
# Open MPI progresses a nonblocking all-gather only inside MPI calls (FSDP tests it when a
# unit is released), and on one machine its copies use the cores that compute.
#
# usage: bash bench/bench_fsdp.sh [BUILD=build]   (env ITERS=6)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$BUILD/bench; mkdir -p "$OUT"
ITERS=${ITERS:-6}
DP=2
model=(--num-layers 4 --hidden-size 512 --num-attention-heads 8 --seq-length 64
       --max-position-embeddings 64 --micro-batch-size 1 --global-batch-size 2 --mock-data
       --vocab-size 8000 --lr 1e-4 --train-iters $ITERS --log-interval 1 --eval-iters 0
       --hidden-dropout 0 --attention-dropout 0 --log-memory)
F="--use-megatron-fsdp --data-parallel-sharding-strategy"
declare -A MODE=(
  [no_shard]="$F no_shard"
  [optim]="$F optim"
  [optim_grads]="$F optim_grads"
  [optim_grads_params]="$F optim_grads_params"
  [ogp+prefetch]="$F optim_grads_params --overlap-grad-reduce --overlap-param-gather"
)
ORDER=(no_shard optim optim_grads optim_grads_params ogp+prefetch)

echo "== FSDP bench: DP $DP, L=4 h=512 s=64 b=1 V=8000, $ITERS iterations ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores)"
printf '%-20s %14s %14s %8s %16s %10s\n' strategy "measured B" "analytic B" ratio "gathered at most" "ms/iter"
declare -A EXPOSED
for m in "${ORDER[@]}"; do
  log=$OUT/fsdp_$m.log
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np $DP "$BUILD/megadlm" train \
      "${model[@]}" ${MODE[$m]} > "$log" 2>&1 || { echo "bench: $m failed, see $log" >&2; exit 1; }
  P=$(grep -o 'model parallel rank (0, 0): [0-9]*' "$log" | head -1 | awk '{print $NF}')
  shard=$(( (P + DP - 1) / DP ))
  case $m in
    no_shard) analytic=$((16 * P)) ;;
    optim) analytic=$((8 * P + 8 * shard)) ;;
    optim_grads) analytic=$((4 * P + 12 * shard)) ;;
    *) analytic=$((16 * shard)) ;;
  esac
  measured=$(grep '\[Rank 0\] memory \(parameters\|gradients\|optimizer state\) (bytes)' "$log" |
             head -3 | sed -E 's/.*measured ([0-9]+).*/\1/' | awk '{s += $1} END {print s}')
  peak=$({ grep -o 'gathered at most [0-9]* bytes' "$log" || true; } | head -1 | awk '{print $4}')
  t=$(grep -o 'elapsed time per iteration (ms): [0-9.]*' "$log" | awk 'NR > 1 {print $NF}' |
      sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
  # the end-of-run FSDP lines (the last one of each rank): exposed seconds, mean over ranks
  EXPOSED[$m]=$({ grep 'FSDP parameter all-gathers' "$log" || true; } | awk -F'|' '
      { for (i = 1; i <= NF; i++) if ($i ~ /exposed/) { split($i, x, " "); e[$1] = x[2] } }
      END { for (r in e) { s += e[r]; n++ } printf "%.6f", n ? s / n : 0 }')
  awk -v m="$m" -v a="$analytic" -v b="$measured" -v p="${peak:--}" -v t="$t" 'BEGIN {
    printf "%-20s %14d %14d %8.4f %16s %10.1f\n", m, b, a, b / a, p, t }'
done
echo
awk -v a="${EXPOSED[optim_grads_params]}" -v o="${EXPOSED[ogp+prefetch]}" 'BEGIN {
  printf "parameter all-gathers exposed: at need %.1f ms, prefetched %.1f ms over the run -> hidden %.0f%%\n",
         a * 1e3, o * 1e3, (a > 0 ? 100 * (1 - o / a) : 0) }'
echo "logs: $OUT/fsdp_*.log"
