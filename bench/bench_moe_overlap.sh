#!/usr/bin/env bash
# Expert parallelism: how much of the dispatch's all-to-all the shared expert's compute hides
# (--moe-shared-expert-overlap), on two hosts of bench/netcluster (links limited to RATE), one
# rank each, EP = 2, the alltoall dispatcher.
#
#   bash bench/bench_moe_overlap.sh [BUILD_DIR]      (root: network namespaces)
#
# The same training run twice, without and with the overlap. From train's "> MoE all-to-all"
# counters (core/transformer/moe/token_dispatcher.h): without it every exchange blocks; with
# it the dispatch exchanges (forward, and the gradient's in backward) run under the shared
# expert and only the wait after it is exposed, the combine exchanges still block:
#   overlappable = blocking_without - blocking_with   (the dispatch exchanges' blocking time)
#   hidden fraction = 1 - wait_with / overlappable
# and the iteration times of both. Environment: RATE (default 1gbit), MTU (9000), HIDDEN (512),
# EXPERTS (8), SHARED (the shared expert's width, 2048), SEQ (512), LAYERS (2), ITERS (4).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
MEGADLM="$BUILD/megadlm"
RATE=${RATE:-1gbit} MTU=${MTU:-9000} HIDDEN=${HIDDEN:-512} EXPERTS=${EXPERTS:-8}
SHARED=${SHARED:-2048} SEQ=${SEQ:-512} LAYERS=${LAYERS:-2} ITERS=${ITERS:-4}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-default}"
echo "=== EP 2 over 2 hosts at $RATE (MTU $MTU): h=$HIDDEN E=$EXPERTS top-2 shared=$SHARED s=$SEQ L=$LAYERS b=1, $ITERS iterations"
net=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads 8 --seq-length "$SEQ"
     --max-position-embeddings "$SEQ" --micro-batch-size 1 --global-batch-size 2
     --train-iters "$ITERS" --lr 1e-4 --mock-data --vocab-size 1024 --eval-iters 0
     --log-interval 1 --swiglu --disable-bias-linear --num-experts "$EXPERTS" --moe-router-topk 2
     --moe-ffn-hidden-size $((HIDDEN * 2)) --moe-shared-expert-intermediate-size "$SHARED"
     --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall)
for mode in blocking overlap; do
  flag=$([ $mode = overlap ] && echo --moe-shared-expert-overlap || true)
  # shellcheck disable=SC2086
  "$ROOT/bench/netcluster" --hosts 2 --rate "$RATE" --mtu "$MTU" -- "$MEGADLM" train "${net[@]}" $flag \
      2>&1 | grep -v setpgid > "$OUT/$mode.log" || { tail -5 "$OUT/$mode.log"; exit 1; }
  grep '> MoE all-to-all' "$OUT/$mode.log" | sed "s/^/$mode: /"
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/$mode.log" | tail -1 | sed "s/^/$mode: /"
done
num() { grep -o "[0-9.]* s $2" "$OUT/$1.log" | awk '{print $1}'; }
awk -v bb="$(num blocking blocking)" -v ob="$(num overlap blocking)" -v ow="$(num overlap waiting)" \
    -v oc="$(num overlap 'of shared')" 'BEGIN {
  ov = bb - ob
  printf "dispatch exchanges: %.4f s blocking without the overlap; with it %.4f s of shared-expert compute in flight, %.4f s exposed: hidden fraction %.2f\n",
         ov, oc, ow, (ov > 0) ? 1 - ow / ov : 0 }'
