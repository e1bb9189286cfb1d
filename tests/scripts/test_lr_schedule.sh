#!/usr/bin/env bash
# Every iteration's logged learning rate against Megatron's schedule computed independently
# (tests/python/megatron_lr.py, written from OptimizerParamScheduler's formulas): a warmup
# fraction kept in samples (not rounded to iterations) with each decay style and
# --lr-warmup-init, inverse-square-root, WSD with each annealing style, sample-based training
# (--train-samples, --lr-decay-samples, --lr-warmup-samples, --lr-wsd-decay-samples), and a
# resume in the middle of the warmup-fraction schedule.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
model=(--num-layers 1 --hidden-size 8 --num-attention-heads 2 --seq-length 8
       --max-position-embeddings 8 --micro-batch-size 1 --mock-data --vocab-size 50
       --log-interval 1 --eval-iters 0 --eval-interval 1000)
fail=0
ref() { /usr/bin/python3 "$SRC/tests/python/megatron_lr.py" "$@"; }
run() { # NAME FLAGS...: train, then check every iteration's lr
  local name=$1; shift
  if ! "$MEGADLM" train "${model[@]}" "$@" > "$name.log" 2>&1; then
    echo "FAILED: $name: train exited non-zero:"; tail -5 "$name.log"; fail=1; return
  fi
  ref check "$name.log" "$@" || { echo "FAILED: $name"; fail=1; }
}

# the issue's run: warmup 0.07 x 80 x 3 = 16.8 samples, so iteration 1 (3 samples) is at
# 2.5e-4 x 3 / 16.8 = 4.464286E-05 (rounded to 5 iterations it would be 5.000000E-05)
issue=(--train-iters 40 --global-batch-size 3 --lr 2.5e-4 --min-lr 1e-6 --lr-decay-style cosine
       --lr-warmup-fraction 0.07 --lr-decay-iters 80)
run cosine "${issue[@]}"
grep -q "iteration        1/      40 |.* learning rate: 4.464286E-05 |" cosine.log \
    || { echo "FAILED: iteration 1 does not log 4.464286E-05"; fail=1; }
run linear --train-iters 30 --global-batch-size 5 --lr 3e-4 --min-lr 3e-5 --lr-decay-style linear \
    --lr-warmup-fraction 0.13 --lr-warmup-init 1e-5 --lr-decay-iters 25
run constant --train-iters 12 --global-batch-size 3 --lr 1e-3 --lr-decay-style constant \
    --lr-warmup-fraction 0.41 --lr-warmup-init 2e-4
for s in exponential linear cosine minus_sqrt; do
  run "wsd-$s" --train-iters 24 --global-batch-size 3 --lr 6e-4 --min-lr 6e-5 \
      --lr-decay-style WSD --lr-wsd-decay-style "$s" --lr-wsd-decay-iters 9 \
      --lr-warmup-fraction 0.11 --lr-decay-iters 22
done
# inverse square root: sqrt(warmup / samples) x lr down to the floor (from iteration 18 here),
# min-lr past the decay; without warmup Megatron takes a warmup of 1 sample
run isqrt --train-iters 30 --global-batch-size 4 --lr 1e-3 --min-lr 4e-4 \
    --lr-decay-style inverse-square-root --lr-warmup-fraction 0.1 --lr-decay-iters 28
run isqrt-nowarmup --train-iters 10 --global-batch-size 2 --lr 1e-3 \
    --lr-decay-style inverse-square-root
run isqrt-iters --train-iters 10 --global-batch-size 2 --lr 1e-3 --min-lr 1e-5 \
    --lr-decay-style inverse-square-root --lr-warmup-iters 3 --lr-warmup-init 1e-4
# sample-based training: 61 // 4 = 15 iterations (the partial last batch is not trained)
run samples --train-samples 61 --global-batch-size 4 --lr 5e-4 --min-lr 5e-5 \
    --lr-decay-style cosine --lr-decay-samples 50 --lr-warmup-samples 7
grep -q "^setting training iterations to 15$" samples.log \
    || { echo "FAILED: no 'setting training iterations to 15'"; fail=1; }
run samples-wsd --train-samples 45 --global-batch-size 3 --lr 5e-4 --min-lr 5e-5 \
    --lr-decay-style WSD --lr-wsd-decay-style cosine --lr-wsd-decay-samples 10 \
    --lr-warmup-fraction 0.2
# a resume inside the schedule: the loaded samples continue it
"$MEGADLM" train "${model[@]}" "${issue[@]}" --save ck --save-interval 7 --exit-interval 7 \
    > first.log 2>&1
"$MEGADLM" train "${model[@]}" "${issue[@]}" --save ck --load ck > second.log 2>&1 \
    || { echo "FAILED: resume exited non-zero"; tail -5 second.log; fail=1; }
grep -q "iteration        8/" first.log && { echo "FAILED: first half ran past 7"; fail=1; }
cat first.log second.log > resumed.log
ref check resumed.log "${issue[@]}" || { echo "FAILED: resumed"; fail=1; }
[ "$fail" = 0 ] && echo "PASS: learning rates as Megatron's schedule"
exit "$fail"
