#!/usr/bin/env bash
# difflm-noshift computes the output layer and the cross-entropy on the masked (loss-weighted)
# rows only, in chunks of 256 rows with their backward fused into forward; --difflm-full-logits
# computes every row, as MegaDLMs does. Micro-batches of 2 x 288 tokens: about 288 masked rows,
# a chunk and a part (fewer than 256 when variable lengths cut a micro-batch). In every layout
# (one process, TP 2, TP 2 + SP (and --tp-comm-overlap), PP 2 1F1B and interleaved with 4
# micro-batches, recompute selective and full (uniform, block), --bf16, --fp16 (loss scaling: the seed includes the scale), TP 2 + SP
# --bf16, DP 2 with the distributed optimizer and overlapped reductions, --detect-anomaly) the
# two runs must give the same training and validation losses (rel 1e-5; --bf16 / --fp16 2e-5),
# the same grad norms (rel 1e-4) and the same parameters after 5 steps (compare_checkpoints.py,
# rel 1e-4 of each tensor's scale, 1e-3 for the 16-bit parameters of --bf16 / --fp16
# checkpoints, where any fp32 difference flips the rounding of the elements near a boundary by
# an ulp; key biases, and at most 0.1% of a tensor's elements (less than a row), within Adam's
# step bound: elements whose gradient cancels to rounding noise, which Adam turns into steps of
# up to lr). With dropout and variable lengths on. The autoregressive objective ignores the flag: bitwise the same log.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 289
        --max-position-embeddings 289 --micro-batch-size 2 --global-batch-size 8 --train-iters 5
        --lr 1e-3 --mock-data --vocab-size 100 --make-vocab-size-divisible-by 64
        --log-interval 1 --eval-iters 1 --eval-interval 5 "${DROPOUT[@]}"
        --seed 3 --model-running-mode difflm-noshift --mask-token 120
        --difflm-varilen-prob 0.3)
gnorms() { grep -o 'grad norm: [^ ]*' "$1" | awk '{print $NF}'; }
# close A B RTOL WHAT: the columns of A and B (5 values at least) agree within RTOL
close() { rel_close "$4" "$3" 5+ "$1" "$2" || { echo "FAILED: $4"; return 1; }; }
fail=0
for layout in "1" "1 --recompute-granularity selective" \
              "1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
              "1 --bf16" "2 --tensor-model-parallel-size 2" \
              "2 --tensor-model-parallel-size 2 --sequence-parallel" \
              "2 --tensor-model-parallel-size 2 --sequence-parallel --bf16" \
              "2 --pipeline-model-parallel-size 2" \
              "2 --pipeline-model-parallel-size 2 --num-layers 4 --virtual-pipeline-model-parallel-size 2" \
              "1 --recompute-granularity full --recompute-method block --recompute-num-layers 1" \
              "2 --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap" \
              "1 --fp16 --initial-loss-scale 4096" \
              "2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather" \
              "1 --debug --detect-anomaly"; do
  set -- $layout; np=$1; shift
  name="np$np${*// /}"
  tol=1e-5 ptol=1e-4; case "$*" in *--bf16*|*--fp16*) tol=2e-5 ptol=1e-3;; esac
  ok=1
  for mode in rows full; do
    extra=(); [ "$mode" = full ] && extra=(--difflm-full-logits)
    "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" "${extra[@]}" \
        --save "$name-$mode" > "$name-$mode.log" 2>&1 ||
      { echo "FAILED: $name $mode did not run"; tail -3 "$name-$mode.log"; fail=1; ok=0; }
  done
  [ $ok = 1 ] || continue
  echo "$name"
  close <(losses "$name-full.log") <(losses "$name-rows.log") "$tol" "losses" || fail=1
  close <(gnorms "$name-full.log") <(gnorms "$name-rows.log") 1e-4 "grad norms" || fail=1
  for f in "$name-rows"/iter_0000005/model*.safetensors; do
    /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$f" \
        "$name-full/iter_0000005/$(basename "$f")" "$ptol" 4 4 16 1e-2 0.001 | sed 's/^/  params: /' ||
      fail=1
  done
done

# the flag means nothing to the autoregressive objective: the same log, bitwise
ar=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
    --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 3
    --lr 1e-3 --mock-data --vocab-size 100 --log-interval 1 --eval-iters 0 --seed 3)
"$MEGADLM" train "${ar[@]}" > ar.log 2>&1 && "$MEGADLM" train "${ar[@]}" --difflm-full-logits \
    > ar-full.log 2>&1 || { echo "FAILED: autoregressive runs"; fail=1; }
diff <(losses ar.log; gnorms ar.log) <(losses ar-full.log; gnorms ar-full.log) > /dev/null &&
  echo "autoregressive: the same losses and grad norms with --difflm-full-logits" ||
  { echo "FAILED: --difflm-full-logits changed the autoregressive run"; fail=1; }
exit $fail
