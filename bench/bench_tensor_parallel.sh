#!/usr/bin/env bash
# Tensor/sequence parallelism: saved activations per layer on one rank and TP communication,
# measured in one run (1 iteration per configuration, --log-memory), for 4 layers, h=1024, a=16,
# s=512, b=1 at t=4, against Korthikanti et al. 2022, Table 2, at 4-byte activations (doubled):
#   TP only              sbh(10 + 24/t + 5as/(ht)) x2     TP+SP       (sbh/t)(34 + 5as/h) x2
#   TP + selective       sbh(10 + 24/t) x2                TP+SP+sel   34sbh/t x2
#   full (uniform, N=1)  2sbh x2
# Communication: payload bytes per iteration by kind, measured (the regions' counters) beside
# the analytic count of what the layers, embedding and output layer move.
#
# usage: bash bench/bench_tensor_parallel.sh [BUILD=build]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$BUILD/bench; mkdir -p "$OUT"
T=4 L=4 H=1024 A=16 S=512 B=1
model=(--num-layers $L --hidden-size $H --num-attention-heads $A --seq-length $S
       --max-position-embeddings $S --micro-batch-size $B --global-batch-size $B --mock-data
       --vocab-size 50256 --lr 1e-4 --train-iters 1 --eval-iters 0 --log-memory
       --tensor-model-parallel-size $T)
declare -A MODE=(
  [tp]="" [tp_sp]="--sequence-parallel" [tp_sel]="--recompute-granularity selective"
  [tp_sp_sel]="--sequence-parallel --recompute-granularity selective"
  [full]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
)
ORDER=(tp tp_sp tp_sel tp_sp_sel full)
paper() { awk -v m=$1 -v s=$S -v b=$B -v h=$H -v a=$A -v t=$T 'BEGIN { sbh = s * b * h
  if (m == "tp") x = sbh * (10 + 24 / t + 5 * a * s / (h * t))
  else if (m == "tp_sp") x = sbh / t * (34 + 5 * a * s / h)
  else if (m == "tp_sel") x = sbh * (10 + 24 / t)
  else if (m == "tp_sp_sel") x = 34 * sbh / t
  else x = 2 * sbh
  printf "%.0f", 2 * x }'; }

echo "== tensor-parallel memory bench: L=$L h=$H a=$A s=$S b=$B t=$T ($(date -u '+%Y-%m-%d %H:%M UTC'))"
printf '%-10s %16s %16s %8s\n' mode "saved B/layer" "paper B/layer" ratio
declare -A BYTES
for m in "${ORDER[@]}"; do
  log=$OUT/tp_$m.log
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np $T "$BUILD/megadlm" train \
      "${model[@]}" ${MODE[$m]} > "$log" 2>&1 || { echo "bench: $m failed, see $log" >&2; exit 1; }
  b=$(grep -o '\[Rank 0\] saved activations layer [0-9]* (bytes) | measured [0-9]*' "$log" |
      awk '{print $NF}' | sort -g | tail -1)
  BYTES[$m]=$b
  p=$(paper $m)
  awk -v m=$m -v b=$b -v p=$p 'BEGIN { printf "%-10s %16d %16d %8.3f\n", m, b, p, b / p }'
done
awk -v a=${BYTES[tp]} -v b=${BYTES[tp_sp_sel]} -v pa=$(paper tp) -v pb=$(paper tp_sp_sel) 'BEGIN {
  printf "\nreduction TP only -> TP+SP+selective: measured %.2fx, paper %.2fx (measured/paper %.2f)\n",
         a / b, pa / pb, (a / b) / (pa / pb) }'

# communication, analytic payload per iteration (N = s*b tokens, NC = N*h*4 bytes):
#   no SP: per layer 2 all-reduces forward + 2 backward; embedding 1, output layer 1 (backward);
#          cross-entropy 3 all-reduces of N floats
#   SP:    per layer forward 2 all-gathers + 2 reduce-scatters, backward 2 all-gathers of the
#          gradient + 2 re-gathers of the inputs (wgrad) + 2 reduce-scatters; embedding 1 RS + 1 AG;
#          output layer 2 AG + 1 RS; cross-entropy 3 all-reduces of N floats; plus the all-reduce
#          of the partial norm/bias gradients
echo
printf '%-10s %-15s %14s %14s\n' mode collective measured analytic
for m in tp tp_sp; do
  line=$(grep -o '\[Rank 0\] tensor-parallel communication.*' "$OUT/tp_$m.log")
  ar=$(sed 's/.*all-reduce \([0-9]*\).*/\1/' <<<"$line"); ag=$(sed 's/.*all-gather \([0-9]*\).*/\1/' <<<"$line")
  rs=$(sed 's/.*reduce-scatter \([0-9]*\).*/\1/' <<<"$line")
  awk -v m=$m -v ar=$ar -v ag=$ag -v rs=$rs -v L=$L -v N=$((S * B)) -v h=$H 'BEGIN {
    nc = N * h * 4; ce = 3 * N * 4
    if (m == "tp") { war = L * 4 * nc + 2 * nc + ce; wag = 0; wrs = 0 }
    else { war = -1; wag = L * 6 * nc + 3 * nc; wrs = L * 4 * nc + 2 * nc }
    printf "%-10s %-15s %14d %14s\n", m, "all-reduce", ar, war < 0 ? "CE + grads" : sprintf("%d", war)
    printf "%-10s %-15s %14d %14d\n", m, "all-gather", ag, wag
    printf "%-10s %-15s %14d %14d\n", m, "reduce-scatter", rs, wrs
    if (m == "tp") printf "  per layer: %d bytes all-reduced (4 x %d)\n", 4 * nc, nc
    else printf "  per layer: %d bytes all-gathered, %d reduce-scattered (ring volume of AG + RS = one all-reduce each; the 2 extra gathers re-gather inputs for wgrad)\n", 6 * nc, 4 * nc }'
done
