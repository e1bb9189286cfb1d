#!/usr/bin/env bash
# End to end through `megadlm train` flags: every recompute mode gives byte-identical parameters
# and optimizer state to no recomputation after 5 iterations (dropout 0.1, 2 accumulated
# micro-batches, both families), and a run resumed from a checkpoint under a recompute mode
# matches too.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1

common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 3)
llama=("${LLAMA[@]}")
modes=("--recompute-activations"
       "--recompute-granularity selective"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 3"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 2"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 3")

same() { same_ckpt "$1" "$2" 5; }

for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  "$MEGADLM" train "${common[@]}" "${extra[@]}" --save "$family-none" > "$family-none.log"
  i=0
  for mode in "${modes[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$MEGADLM" train "${common[@]}" "${extra[@]}" $mode --save "$family-$i" > "$family-$i.log"
    same "$family-none" "$family-$i" || { echo "FAILED: $family $mode differs from no recompute"; exit 1; }
    echo "$family $mode: identical to no recompute"
  done
  # resume under full recompute: 3 iterations, save, exit; resume to 5
  r=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${r[@]}" --save "$family-resume" \
      --exit-interval 3 > /dev/null
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${r[@]}" --save "$family-resume" \
      --load "$family-resume" > /dev/null
  same "$family-none" "$family-resume" || { echo "FAILED: $family resumed run differs"; exit 1; }
  echo "$family: resumed under full recompute, identical"
done
