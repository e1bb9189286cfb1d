#!/usr/bin/env bash
# Pipeline parallelism (1F1B and interleaved) against the single-process run, under mpirun:
# PP 2 and 4, TP 2 x PP 2 with SP, PP 2 x DP 2, DP 4, TP 2 x DP 2, TP 2 x PP 2 x DP 2 (8 ranks),
# PP 2 with selective and full recompute, PP 4 with partial recompute (K = 2), DP 2 with full
# and TP 2 x DP 2 + SP with selective recompute; interleaved
# (virtual pipeline stages, v = 2): PP 2 with no, selective, full and partial recompute, TP 2 x
# PP 2 with SP, PP 2 x DP 2 with the distributed optimizer and overlapped reductions, and with 8
# layers PP 4 (no and partial recompute) against an 8-layer single-process run; 4 micro-batches
# per iteration, dropout 0.1, evaluation on: every logged loss (training, validation, test)
# within rel 1e-5 and the final unsharded parameters and optimizer state within rel 1e-4.
# Checkpoints cross layouts: PP 2 saves at iteration 3, TP 2 finishes; one process saves,
# PP 4 finishes; interleaved PP 2 saves, PP 4 (1F1B) finishes; TP 2 saves, interleaved PP 2
# finishes. The interleaved schedule's rule on micro-batches (a multiple of PP) is checked.
# FAMILY=gpt2|llama.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
FAMILY=${FAMILY:-gpt2}
export OMP_NUM_THREADS=1
common=(--num-layers 4 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8 --train-iters 6
        --lr 1e-3 --lr-decay-style cosine --log-interval 1 --eval-interval 3 --eval-iters 2
        "${DROPOUT[@]}" --seed 13)
if [ "$FAMILY" = llama ]; then
  common+=("${LLAMA[@]}" --ffn-hidden-size 64)
fi
# close REF.log OTHER.log COUNT: COUNT losses (training and evaluation), each within rel 1e-5
close() { close_losses "$1" "$2" 1e-5 "$3"; }
# Parameters and optimizer state against ref, rel RTOL per tensor. Without tensor parallelism
# the summation order of every GEMM is unchanged and the parameters agree to ~1e-6; with it the
# reductions run in another order, and Adam's normalised steps turn those last-bit differences
# on near-zero gradients into up to ~1e-4 of a tensor's scale after 6 steps: 3e-4 there.
compare() { # compare DIR RTOL [REF]
  local rc=0
  for f in model optimizer; do
    /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$1/iter_0000006/$f.safetensors" \
        "${3:-ref}/iter_0000006/$f.safetensors" "$2" 4 4 8 1.2e-2 | sed "s/^/  $f: /" || rc=1
  done
  return $rc
}
run() { # run NAME NP flags...
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" --save "$name" "$@" > "$name.log" 2>&1 ||
    { echo "FAILED: $name did not run"; tail -5 "$name.log"; return 1; }
}
fail=0
"$MEGADLM" train "${common[@]}" --make-vocab-size-divisible-by 128 --save ref > ref.log
n=$(losses ref.log | wc -l)
check() { # check NAME NP flags... (REF=ref8: against the 8-layer run)
  local name=$1 rtol=1e-4 ref=${REF:-ref}
  case " $* " in *" --tensor-model-parallel-size "*) rtol=3e-4 ;; esac
  run "$@" && { echo "$FAMILY $name"; close "$ref.log" "$name.log" "$n" &&
                compare "$name" "$rtol" "$ref"; } || fail=1
}
check pp2 2 --pipeline-model-parallel-size 2
check pp4 4 --pipeline-model-parallel-size 4
check tp2pp2sp 4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 \
    --make-vocab-size-divisible-by 64 --sequence-parallel
check pp2dp2 4 --pipeline-model-parallel-size 2
check dp4 4
check tp2dp2 4 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64
check tp2pp2dp2 8 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 \
    --pipeline-model-parallel-size 2 --sequence-parallel --recompute-granularity selective
check pp4part 4 --pipeline-model-parallel-size 4 --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1 \
    --num-microbatches-with-partial-activation-checkpoints 2
check pp2sel 2 --pipeline-model-parallel-size 2 --recompute-granularity selective
# data-parallel layouts under recomputation too
check dp2full 2 --recompute-granularity full --recompute-method block --recompute-num-layers 1
check tp2dp2sel 4 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 \
    --sequence-parallel --recompute-granularity selective
check pp2full 2 --pipeline-model-parallel-size 2 --recompute-granularity full \
    --recompute-method uniform --recompute-num-layers 1
# interleaved schedule: 2 model chunks of 1 layer per rank
VP=(--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1)
FULL=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
check pp2vp2 2 "${VP[@]}"
check pp2vp2sel 2 "${VP[@]}" --recompute-granularity selective
check pp2vp2full 2 "${VP[@]}" "${FULL[@]}"
check pp2vp2part 2 "${VP[@]}" "${FULL[@]}" --num-microbatches-with-partial-activation-checkpoints 2
check tp2pp2vp2sp 4 "${VP[@]}" --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 \
    --sequence-parallel
check pp2dp2vp2 4 "${VP[@]}" --use-distributed-optimizer --overlap-grad-reduce \
    --overlap-param-gather --ddp-bucket-size 2000
# PP 4 x 2 chunks needs 8 layers: against an 8-layer single-process run
"$MEGADLM" train "${common[@]}" --num-layers 8 --make-vocab-size-divisible-by 128 \
    --save ref8 > ref8.log
REF=ref8 check pp4vp2 4 --num-layers 8 --pipeline-model-parallel-size 4 \
    --virtual-pipeline-model-parallel-size 2
REF=ref8 check pp4vp2part 4 --num-layers 8 --pipeline-model-parallel-size 4 \
    --virtual-pipeline-model-parallel-size 2 "${FULL[@]}" \
    --num-microbatches-with-partial-activation-checkpoints 3
# Megatron's rule: the micro-batches of an iteration (3 here) in groups of PP
if "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${VP[@]}" --global-batch-size 6 \
    > vpbad.log 2>&1 || ! grep -q "number of micro-batches (3 = .*) is not divisible by --pipeline-model-parallel-size 2, as the interleaved schedule needs" vpbad.log; then
  echo "FAILED: 3 micro-batches with PP 2 interleaved were not refused as expected"; tail -3 vpbad.log; fail=1
fi
# checkpoints across layouts
run mixed 2 --pipeline-model-parallel-size 2 --exit-interval 3 || fail=1
run mixed-b 2 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --load mixed || fail=1
cat mixed.log mixed-b.log > mixed-all.log
close ref.log mixed-all.log "$n" || fail=1
"$MEGADLM" train "${common[@]}" --save single --exit-interval 3 > single.log
run single-b 4 --pipeline-model-parallel-size 4 --load single || fail=1
cat single.log single-b.log > single-all.log
close ref.log single-all.log "$n" || fail=1
# interleaved saves, 1F1B resumes; TP saves, interleaved resumes (losses and final state)
run vpsave 2 "${VP[@]}" --exit-interval 3 || fail=1
run vpsave-b 4 --pipeline-model-parallel-size 4 --load vpsave || fail=1
cat vpsave.log vpsave-b.log > vpsave-all.log
close ref.log vpsave-all.log "$n" && compare vpsave-b 1e-4 || fail=1
run vpload 2 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --exit-interval 3 || fail=1
run vpload-b 2 "${VP[@]}" --load vpload || fail=1
cat vpload.log vpload-b.log > vpload-all.log
close ref.log vpload-all.log "$n" && compare vpload-b 3e-4 || fail=1
exit $fail
