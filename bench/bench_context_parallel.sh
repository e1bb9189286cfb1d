#!/usr/bin/env bash
# Context parallelism: memory per rank against the analytic figure, and the ring's hidden
# communication.
#
#   bash bench/bench_context_parallel.sh [BUILD_DIR]      (root for part 2: network namespaces)
#
# 1. Memory (this machine, mpirun): `megadlm train --log-memory` at CP = 1, 2, 4 for each
#    --cp-comm-type: the saved activations per rank the allocator measured, what `megadlm
#    memory` predicts for that rank (training/theoretical_memory.c) and the ratio to CP 1
#    (allgather and a2a: 1/CP; p2p: 1/CP without the probabilities, plus the log-sum-exp).
# 2. The ring (--cp-comm-type p2p) on two hosts of bench/netcluster (links limited to RATE),
#    one rank each, CP = 2: the same training run twice, the ring's transfers overlapped (the
#    default) and blocking (MEGADLM_CP_RING_BLOCKING=1: each step's transfers finish before its
#    compute). From the ring's own counters (train's "> CP ring" line):
#      hidden fraction = 1 - exposed_overlapped / (blocking + exposed_blocking)
#    where exposed is the time spent waiting for transfers after a step's compute.
# Environment: RATE (default 1gbit), MTU (9000), SEQ (4096), HIDDEN (256), HEADS (8),
# LAYERS (2), ITERS (3), SKIP_NET=1 to run part 1 only.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
MEGADLM="$BUILD/megadlm"
RATE=${RATE:-1gbit} MTU=${MTU:-9000} SEQ=${SEQ:-4096} HIDDEN=${HIDDEN:-256} HEADS=${HEADS:-8}
LAYERS=${LAYERS:-2} ITERS=${ITERS:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1

echo "=== 1. saved activations per rank (bytes), measured vs predicted, s=1024 h=128 a=8 b=1 L=2"
mem=(--num-layers 2 --hidden-size 128 --num-attention-heads 8 --seq-length 1024
     --max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 4 --train-iters 2
     --lr 1e-4 --mock-data --vocab-size 1024 --log-memory --eval-iters 0)
saved() { grep -o 'memory saved activations (bytes) | predicted [0-9]* | measured [0-9]*' "$1" | head -1 |
          awk '{print $7, $10}'; }
"$MEGADLM" train "${mem[@]}" > "$OUT/cp1.log" 2>&1
read -r pred1 meas1 <<< "$(saved "$OUT/cp1.log")"
printf "%-10s CP 1: measured %10d predicted %10d\n" "-" "$meas1" "$pred1"
for comm in allgather a2a p2p; do
  for cp in 2 4; do
    mpirun --allow-run-as-root --oversubscribe -np "$cp" "$MEGADLM" train "${mem[@]}" \
        --context-parallel-size "$cp" --cp-comm-type "$comm" > "$OUT/$comm$cp.log" 2>&1
    read -r pred meas <<< "$(saved "$OUT/$comm$cp.log")"
    awk -v c="$comm" -v p="$cp" -v m="$meas" -v q="$pred" -v one="$meas1" 'BEGIN {
      printf "%-10s CP %d: measured %10d predicted %10d (%s) | x CP / CP 1 = %.3f\n", c, p, m, q,
             m == q ? "equal" : "DIFFERENT", m * p / one }'
  done
done

[ "${SKIP_NET:-0}" = 1 ] && exit 0
echo
echo "=== 2. the ring (p2p), CP = 2 over 2 hosts at $RATE (MTU $MTU): s=$SEQ h=$HIDDEN a=$HEADS L=$LAYERS b=1, $ITERS iterations"
net=(--num-layers "$LAYERS" --hidden-size "$HIDDEN" --num-attention-heads "$HEADS"
     --seq-length "$SEQ" --max-position-embeddings "$SEQ" --micro-batch-size 1
     --global-batch-size 1 --train-iters "$ITERS" --lr 1e-4 --mock-data --vocab-size 1024
     --eval-iters 0 --log-interval 1 --context-parallel-size 2 --cp-comm-type p2p)
for mode in overlap blocking; do
  blocking=$([ $mode = blocking ] && echo 1 || echo 0)
  MEGADLM_CP_RING_BLOCKING=$blocking "$ROOT/bench/netcluster" --hosts 2 --rate "$RATE" --mtu "$MTU" \
      --env MEGADLM_CP_RING_BLOCKING -- "$MEGADLM" train "${net[@]}" 2>&1 | grep -v setpgid \
      > "$OUT/ring-$mode.log" || { tail -5 "$OUT/ring-$mode.log"; exit 1; }
  grep '> CP ring' "$OUT/ring-$mode.log" | sed "s/^/$mode: /"
  grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/ring-$mode.log" | tail -1 | sed "s/^/$mode: /"
done
ov_wait=$(grep -o '[0-9.]* s waiting' "$OUT/ring-overlap.log" | awk '{print $1}')
bl_wait=$(grep -o '[0-9.]* s waiting' "$OUT/ring-blocking.log" | awk '{print $1}')
bl_block=$(grep -o '[0-9.]* s of blocking' "$OUT/ring-blocking.log" | awk '{print $1}')
awk -v o="$ov_wait" -v w="$bl_wait" -v b="$bl_block" 'BEGIN {
  printf "ring: exposed %.4f s overlapped vs %.4f s blocking (%.4f + %.4f): hidden fraction %.2f\n",
         o, b + w, b, w, (b + w > 0) ? 1 - o / (b + w) : 0 }'
