#!/usr/bin/env bash
# Pipeline parallelism, measured in one run:
#  1. the bubble: for p = 2 and m = 2, 4, 8 micro-batches, each stage's time waiting for
#     transfers as a share of training time, beside the ideal share of the iteration: 1F1B's
#     (p - 1)/(m + p - 1) ((p - 1)/m of the ideal compute time) and, interleaved with v = 2 and
#     4 model chunks per rank, (p - 1)/(m v + p - 1) ((p - 1)/(m v));
#  2. peak saved activations on the first stage: p micro-batches' worth under 1F1B; with full
#     recompute, per-micro-batch partial recompute K = 0 .. p (K stores keep everything):
#     measured (the tracked allocator) vs predicted (activation_memory.c per store);
#  3. interleaved: the first stage's peak saved activations, measured (allocator bytes, and
#     the most chunk stores the schedule held at once, in micro-batches' worth = stores / v)
#     vs this schedule's count min(W + 1, m v)/v with W = (p - 1) 2 + (v - 1) p warm-up
#     forwards, vs the paper's p (1 + (p - 1)/(p v)) (Korthikanti et al. 2022, section 4.2.3),
#     and the bytes against 1F1B's.
# usage: bash bench/bench_pipeline.sh [BUILD=build]   (REPS=3: bubble runs per point, the least
# share kept: other load on the machine only adds waiting)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
OUT=$BUILD/bench; mkdir -p "$OUT"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
REPS=${REPS:-3}
model=(--num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 2 --mock-data --vocab-size 1000
       --lr 1e-3 --log-interval 1 --eval-iters 0)
echo "== pipeline bench ($(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, 1 thread per rank)"
echo
echo "-- bubble, p = 2 (share of training time waiting for transfers, the least of $REPS runs;"
echo "   v = 1: 1F1B)"
printf '%4s %2s %10s %10s %12s %10s %12s\n' m v stage0 stage1 "ideal" "stage0/1F1B" "ideal ratio"
for m in 2 4 8; do
  for v in 1 2 4; do
    s0=; s1=
    for rep in $(seq "$REPS"); do
      log=$OUT/pipeline_bubble_m${m}_v${v}_$rep.log
      vp=(); [ $v -gt 1 ] && vp=(--virtual-pipeline-model-parallel-size $v)
      OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$BUILD/megadlm" train "${model[@]}" "${vp[@]}" \
          --pipeline-model-parallel-size 2 --global-batch-size $((2 * m)) --train-iters 4 > "$log" 2>&1
      a=$(grep -o 'pipeline stage 0: .*training (\([0-9.]*\)%' "$log" | sed 's/.*(//; s/%//')
      b=$(grep -o 'pipeline stage 1: .*training (\([0-9.]*\)%' "$log" | sed 's/.*(//; s/%//')
      s0=$(awk -v x="$s0" -v y=$a 'BEGIN { print (x == "" || y < x) ? y : x }')
      s1=$(awk -v x="$s1" -v y=$b 'BEGIN { print (x == "" || y < x) ? y : x }')
    done
    [ $v = 1 ] && base=$s0
    awk -v m=$m -v v=$v -v a=$s0 -v b=$s1 -v base=$base 'BEGIN {
      printf "%4d %2d %9.1f%% %9.1f%% %11.1f%% %10.2f %12.2f\n", m, v, a, b, 100 / (m * v + 1),
             a / base, (m + 1) / (m * v + 1) }'
  done
done
echo "(the stages are not equal: the last one also runs the output layer and the loss, so the"
echo " first waits for it; a measured share above the ideal is that imbalance plus transfer time;"
echo " stage0/1F1B: the first stage's measured share over 1F1B's at the same m, beside the ideal"
echo " ratio (m + p - 1)/(m v + p - 1))"
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
echo
echo "-- interleaved: first-stage saved activations, m = 8, no recompute"
echo "   (worth: micro-batches' worth of the stage's layers = chunk stores / v; schedule:"
echo "    min(W + 1, m v)/v; paper: p (1 + (p - 1)/(p v)); bytes/1F1B vs the paper's 1 + (p - 1)/(p v))"
printf '%3s %2s %11s %11s %7s %7s %9s %7s %11s %9s\n' p v measured predicted stores worth schedule paper bytes/1F1B paper
for p in 2 4; do
  for v in 1 2 $([ $p = 2 ] && echo 4); do
    vp=(); [ $v -gt 1 ] && vp=(--virtual-pipeline-model-parallel-size $v)
    log=$OUT/pipeline_vmem_p${p}_v$v.log
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np $p "$BUILD/megadlm" train "${model[@]}" "${vp[@]}" \
        --pipeline-model-parallel-size $p --global-batch-size 16 --train-iters 1 --log-memory \
        > "$log" 2>&1
    line=$(grep '\[Rank 0\] memory saved activations' "$log")
    meas=$(sed 's/.*measured \([0-9]*\).*/\1/' <<<"$line"); pred=$(sed 's/.*predicted \([0-9]*\).*/\1/' <<<"$line")
    st=$(grep '\[Rank 0\] pipeline stage 0 activation stores' "$log")
    used=$(sed 's/.*at most \([0-9]*\) in use.*/\1/' <<<"$st")
    sched=$(sed 's/.*min(W + 1, M v) \/ v = \([0-9.]*\).*/\1/' <<<"$st")
    [ $v = 1 ] && base=$meas
    awk -v p=$p -v v=$v -v me=$meas -v pr=$pred -v u=$used -v sc=$sched -v base=$base 'BEGIN {
      printf "%3d %2d %11d %11d %7d %7.3f %9.3f %7.3f %11.3f %9.3f\n", p, v, me, pr, u, u / v, sc,
             (v == 1 ? p : p * (1 + (p - 1) / (p * v))), me / base, (v == 1 ? 1 : 1 + (p - 1) / (p * v)) }'
  done
done
echo "(a chunk store also keeps the chunk's output, one hidden state, so the bytes' ratio is a"
echo " little above the layers' factor; v = 1 is 1F1B: p micro-batches)"
echo
echo "-- interleaved with partial recompute: p = 2, v = 2, m = 8, full recompute (uniform, 1 layer)"
echo "   (virtual micro-batch k keeps everything iff k mod (W + 1) < K; the stores of each kind"
echo "    are the schedule's two pools)"
printf '%4s %14s %14s %8s %16s %8s\n' K measured predicted stores "keep everything" "in use"
for K in 0 1 2 3 5; do
  log=$OUT/pipeline_vmem_K$K.log
  OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 "$BUILD/megadlm" train "${model[@]}" \
      --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
      --global-batch-size 16 --train-iters 1 --log-memory --recompute-granularity full \
      --recompute-method uniform --recompute-num-layers 1 \
      --num-microbatches-with-partial-activation-checkpoints "$K" > "$log" 2>&1
  line=$(grep '\[Rank 0\] memory saved activations' "$log")
  meas=$(sed 's/.*measured \([0-9]*\).*/\1/' <<<"$line"); pred=$(sed 's/.*predicted \([0-9]*\).*/\1/' <<<"$line")
  st=$(grep '\[Rank 0\] pipeline stage 0 activation stores' "$log")
  alloc=$(sed 's/.*allocated \([0-9]*\) (\([0-9]*\) keep.*/\1 \2/' <<<"$st")
  used=$(sed 's/.*at most \([0-9]*\) in use.*/\1/' <<<"$st")
  printf '%4d %14d %14d %8d %16d %8d\n' "$K" "$meas" "$pred" ${alloc% *} ${alloc#* } "$used"
done
echo "(K = 0: every chunk store checkpointed; K = W + 1 = 5: all keep everything; in between the"
echo " two pools together may hold more stores than are in use at once)"
