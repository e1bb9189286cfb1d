#!/usr/bin/env bash
# The masked-diffusion objective end to end: (1) the same losses (training and validation,
# rel 1e-5) in one process and under TP 2, PP 2, DP 2 and TP 2 x PP 2, with dropout and
# variable lengths on (its draws are keyed by sample, not by rank); (2) a small model learns
# (validation loss falls); (3) the flag rules; (4) generate samples from the diffusion checkpoint
# and refuses a generation longer than the model was trained on.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 17
        --max-position-embeddings 17 --micro-batch-size 2 --global-batch-size 8 --train-iters 5
        --lr 1e-3 --mock-data --vocab-size 50 --log-interval 1 --eval-iters 1 --eval-interval 5
        "${DROPOUT[@]}" --seed 3
        --model-running-mode difflm-noshift --mask-token 100 --difflm-varilen-prob 0.3)
fail=0
"$MEGADLM" train "${common[@]}" > ref.log 2>&1 || { echo "FAILED: reference run"; fail=1; }
n=$(losses ref.log | wc -l)
for layout in "2 --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64" \
              "2 --pipeline-model-parallel-size 2" "2" \
              "4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --make-vocab-size-divisible-by 64"; do
  set -- $layout; np=$1; shift
  name="np$np${*// /}"
  "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1 ||
    { echo "FAILED: $name did not run"; tail -3 "$name.log"; fail=1; continue; }
  # the training and validation losses: as many as one process's (8 at least), within rel 1e-5
  [ "$n" -ge 8 ] && close_losses ref.log "$name.log" 1e-5 "$n" || fail=1
done

# every recompute mode gives the same numbers (bitwise in the logged losses)
for rc in "--recompute-granularity selective" \
          "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"; do
  "$MEGADLM" train "${common[@]}" $rc > rc.log 2>&1 || { echo "FAILED: $rc"; fail=1; continue; }
  diff <(losses ref.log) <(losses rc.log) > /dev/null && echo "recompute ($rc): same losses" ||
    { echo "FAILED: $rc changed the losses"; fail=1; }
done

# learning: 200 iterations on mock data (runs of consecutive ids) must lower the loss by a fifth
"$MEGADLM" train "${common[@]}" --train-iters 200 --eval-interval 200 \
    --eval-iters 4 --lr 3e-3 --hidden-dropout 0 --attention-dropout 0 --save dlm > learn.log 2>&1
first=$(losses learn.log | head -1); last=$(grep -o 'validation loss.*lm loss value: [^ ]*' learn.log | tail -1 | awk '{print $NF}')
awk -v a="$first" -v b="$last" 'BEGIN { printf "learning: first training loss %s, final validation loss %s\n", a, b; exit !(b < 0.8 * a) }' || fail=1

expect() { # expect "message" args...
  local want=$1; shift
  expect_error "$want" "$MEGADLM" "$@" || fail=1
}
base=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --max-position-embeddings 16 --micro-batch-size 2 --train-iters 2 --lr 1e-3 --mock-data
      --vocab-size 50 --eval-iters 0)
expect "--mask-token" train "${base[@]}" --model-running-mode difflm-noshift
expect "--attention-mask-type block_causal" train "${base[@]}" --attention-mask-type block_causal
expect "--mask-token 500" train "${base[@]}" --model-running-mode difflm-noshift --mask-token 500
expect "--model-running-mode diffusion" train "${base[@]}" --model-running-mode diffusion
expect "exceed the 16 tokens" generate --load dlm --prompt "1 2"
"$MEGADLM" generate --load dlm --prompt "1 2" --gen-length 8 --steps 8 > /dev/null 2>&1 ||
  { echo "FAILED: diffusion sampling from the trained checkpoint"; fail=1; }
exit $fail
