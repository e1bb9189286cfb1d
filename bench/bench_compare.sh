#!/usr/bin/env bash
# Two builds on the same training step, measured in one run: a refactor that claims "no change
# in speed" shows it here. Each round runs both builds in turn (A, B, then B, A: alternating
# the order cancels a machine that speeds up or slows down during the run) on GPT-2 124M
# shapes with each recompute mode, and the per-iteration times' median per build and mode is
# printed with the ratio B/A.
#
# usage: bash bench/bench_compare.sh BUILD_A BUILD_B
# env:   ROUNDS=2 ITERS=3 WARMUP=1 S=256 B=2 MODES="none selective full"
#        OPENBLAS_CORETYPE (as for every bench: say which kernels; the log names them)
set -euo pipefail
A=$(cd "${1:?usage: bench_compare.sh BUILD_A BUILD_B}" && pwd)
Bd=$(cd "${2:?usage: bench_compare.sh BUILD_A BUILD_B}" && pwd)
ROUNDS=${ROUNDS:-2} ITERS=${ITERS:-3} WARMUP=${WARMUP:-1} S=${S:-256} B=${B:-2}
MODES=${MODES:-"none selective full"}
for d in "$A" "$Bd"; do [ -x "$d/megadlm" ] || { echo "bench: $d/megadlm not built" >&2; exit 1; }; done
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

args=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length "$S"
      --max-position-embeddings "$S" --micro-batch-size "$B" --global-batch-size "$B"
      --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --lr 1e-4
      --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0
      --train-iters $((WARMUP + ITERS)))
declare -A MODE=([none]="" [selective]="--recompute-granularity selective"
                 [full]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")

run() { # BUILD MODE: appends this run's timed iterations to $OUT/<which>_<mode>
  local which=$1 dir=$2 mode=$3 log=$OUT/log
  # shellcheck disable=SC2086
  "$dir/megadlm" train "${args[@]}" ${MODE[$mode]} > "$log" 2>&1 || { echo "bench: $dir $mode failed:" >&2; tail -3 "$log" >&2; exit 1; }
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$log" | awk '{print $NF}' |
    tail -n +$((WARMUP + 1)) >> "$OUT/${which}_$mode"
  [ -s "$OUT/kernels" ] || grep -m1 -o 'kernels [A-Za-z0-9]*' "$log" > "$OUT/kernels" || true
}
median() { sort -g "$1" | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "== compare: A=$A"
echo "             B=$Bd"
echo "   GPT-2 124M shapes, s=$S b=$B, $ROUNDS rounds x $ITERS timed iterations per build and mode"
echo "   $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for mode in $MODES; do
    if [ $((r % 2)) -eq 1 ]; then run a "$A" "$mode"; run b "$Bd" "$mode"
    else run b "$Bd" "$mode"; run a "$A" "$mode"; fi
  done
done
echo "   BLAS $(cat "$OUT/kernels" 2>/dev/null)"
printf '%-10s %12s %12s %8s\n' mode "A ms/iter" "B ms/iter" "B/A"
for mode in $MODES; do
  ma=$(median "$OUT/a_$mode"); mb=$(median "$OUT/b_$mode")
  awk -v m="$mode" -v a="$ma" -v b="$mb" 'BEGIN { printf "%-10s %12.1f %12.1f %7.3fx\n", m, a, b, b / a }'
done
