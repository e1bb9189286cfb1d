#!/usr/bin/env bash
# Pipeline parallelism, measured in one run:
#  1. the bubble: for p = 2 and m = 2, 4, 8 micro-batches, each stage's time waiting for
#     transfers as a share of training time, beside 1F1B's ideal (p - 1)/(m + p - 1) of the
#     iteration ((p - 1)/m of the ideal compute time);
#  2. peak saved activations on the first stage: p micro-batches' worth under 1F1B; with full
#     recompute, per-micro-batch partial recompute K = 0 .. p (K stores keep everything):
#     measured (the tracked allocator) vs predicted (activation_memory.c per store).
# usage: bash bench/bench_pipeline.sh [BUILD=build]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$BUILD/bench; mkdir -p "$OUT"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
model=(--num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 2 --mock-data --vocab-size 1000
       --lr 1e-3 --log-interval 1 --eval-iters 0)
echo "== pipeline bench ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, 1 thread per rank)"
echo
echo "-- bubble, p = 2 (share of training time waiting for transfers)"
printf '%4s %10s %10s %12s\n' m stage0 stage1 "1F1B ideal"
for m in 2 4 8; do
  log=$OUT/pipeline_bubble_m$m.log
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$BUILD/megadlm" train "${model[@]}" \
      --pipeline-model-parallel-size 2 --global-batch-size $((2 * m)) --train-iters 4 > "$log" 2>&1
  s0=$(grep -o 'pipeline stage 0: .*training (\([0-9.]*\)%' "$log" | sed 's/.*(//; s/%//')
  s1=$(grep -o 'pipeline stage 1: .*training (\([0-9.]*\)%' "$log" | sed 's/.*(//; s/%//')
  awk -v m=$m -v a=$s0 -v b=$s1 'BEGIN { printf "%4d %9.1f%% %9.1f%% %11.1f%%\n", m, a, b, 100 / (m + 1) }'
done
echo "(the stages are not equal: the last one also runs the output layer and the loss, so the"
echo " first waits for it; a measured share above the ideal is that imbalance plus transfer time)"
echo
echo "-- first-stage saved activations, m = 8, full recompute (uniform, 1 layer per chunk)"
printf '%4s %4s %14s %14s %10s\n' p K measured predicted stores
for p in 2 4; do
  for K in none $(seq 0 $p); do
    extra=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
    [ "$K" = none ] && extra=() || extra+=(--num-microbatches-with-partial-activation-checkpoints "$K")
    log=$OUT/pipeline_mem_p${p}_K$K.log
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np $p "$BUILD/megadlm" train "${model[@]}" \
        --pipeline-model-parallel-size $p --global-batch-size 16 --train-iters 1 --log-memory \
        "${extra[@]}" > "$log" 2>&1
    line=$(grep '\[Rank 0\] memory saved activations' "$log")
    meas=$(sed 's/.*measured \([0-9]*\).*/\1/' <<<"$line"); pred=$(sed 's/.*predicted \([0-9]*\).*/\1/' <<<"$line")
    printf '%4d %4s %14d %14d %10d\n' $p "$K" "$meas" "$pred" $p
  done
done
echo "(K = none: no recompute, p micro-batches of full activations on the first stage; K = 0:"
echo " all checkpointed; each K keeps K of the p micro-batches whole)"
