#!/usr/bin/env bash
# What -march=native buys over the default x86-64-v3 build: builds megadlm both ways (into
# temporary build directories) and trains the same model with each, the two alternating round
# by round, then prints the median time per iteration of each and the ratio. BLAS is the same
# library in both (only megadlm's own kernels change), so the ratio is bounded by the share of
# the step outside GEMMs. It also says whether the two builds trained to the same bits (they
# should: no FMA contraction, fixed-lane sums, so vector width changes no result).
#
# usage: bash bench/bench_native.sh   env: ROUNDS=3 ITERS=4 THREADS=$(nproc)
#        MODEL="--num-layers 4 --hidden-size 768 --num-attention-heads 12 --seq-length 256 ..."
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-4} THREADS=${THREADS:-$(nproc)}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for kind in v3 native; do
  opt=OFF; [ $kind = native ] && opt=ON
  cmake -S "$ROOT" -B "$OUT/$kind" -DCMAKE_BUILD_TYPE=Release -DMEGADLM_NATIVE=$opt > /dev/null
  cmake --build "$OUT/$kind" -j "$(nproc)" --target megadlm > /dev/null
done
# GPT-2 124M's layer shapes, 4 layers (s=256, b=4, V=50257), dropout 0.1 (our kernels' share)
read -r -a model <<< "${MODEL:---num-layers 4 --hidden-size 768 --num-attention-heads 12 --seq-length 256 --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 4 --vocab-size 50256 --hidden-dropout 0.1 --attention-dropout 0.1}"
flags=("${model[@]}" --train-iters $((ITERS + 1)) --lr 1e-4 --mock-data --log-interval 1 --eval-iters 0)
ms() { for f in "$@"; do grep -o 'elapsed time per iteration (ms): [0-9.]*' "$f" | awk 'NR > 1 { print $NF }'; done; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "== -march=native vs x86-64-v3: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')," \
  "$THREADS threads, $ROUNDS rounds x $ITERS iterations | $(date -u '+%Y-%m-%d %H:%M UTC') | load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for kind in v3 native; do
    save=(); [ "$r" = 1 ] && save=(--save "$OUT/ckpt-$kind")
    OMP_NUM_THREADS=$THREADS "$OUT/$kind/megadlm" train "${flags[@]}" "${save[@]}" > "$OUT/$kind.$r.log" 2>&1
  done
done
last=$(printf 'iter_%07d' $((ITERS + 1)))
if cmp -s "$OUT/ckpt-v3/$last/model.safetensors" "$OUT/ckpt-native/$last/model.safetensors" &&
   cmp -s "$OUT/ckpt-v3/$last/optimizer.safetensors" "$OUT/ckpt-native/$last/optimizer.safetensors"; then
  echo "same bits: parameters and optimizer state of both builds are identical after $((ITERS + 1)) iterations"
else
  echo "NOT the same bits: the two builds' checkpoints differ after $((ITERS + 1)) iterations"
fi
grep -m1 '> BLAS' "$OUT/v3.1.log"
v=$(ms "$OUT"/v3.*.log | median); n=$(ms "$OUT"/native.*.log | median)
printf "x86-64-v3        %8.1f ms/iteration (median)\n-march=native    %8.1f ms/iteration (median)\n" "$v" "$n"
awk -v v="$v" -v n="$n" 'BEGIN { printf "speed-up of -march=native: %.3fx\n", v / n }'
