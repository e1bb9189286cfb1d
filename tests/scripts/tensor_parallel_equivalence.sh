#!/usr/bin/env bash
# Tensor and sequence parallelism against the single-process run, under mpirun:
# for t in {2, 4}, without and with --sequence-parallel, with no / selective / full recompute,
# both model families, dropout 0.1, 5 iterations of 2 accumulated micro-batches:
#   every logged loss within rel 1e-5 of the single process, and the gathered (unsharded)
#   parameters and optimizer state after 5 steps within rel 1e-4.
# FAMILY=gpt2|llama selects the family (two CTest entries keep each under a minute).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
FAMILY=${FAMILY:-gpt2}
export OMP_NUM_THREADS=1

common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 3)
if [ "$FAMILY" = llama ]; then
  common+=("${LLAMA_ARCH[@]}" --ffn-hidden-size 64 --group-query-attention --num-query-groups 4
           --qk-layernorm)
fi
# Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by x t; keep the
# padded size (128) equal across layouts so the models are the same.
vocab_div() { echo $((128 / $1)); }
# close REF.log OTHER.log: the 5 losses, each within rel 1e-5
close() { close_losses "$1" "$2" 1e-5 5; }

declare -A RECOMPUTE=(
  [none]=""
  [selective]="--recompute-granularity selective"
  [full]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
)
fail=0
"$MEGADLM" train "${common[@]}" --make-vocab-size-divisible-by 128 --save ref > ref.log
for t in 2 4; do
  for sp in "" "--sequence-parallel"; do
    for rc in none selective full; do
      name="t$t${sp:+-sp}-$rc"
      # shellcheck disable=SC2086
      "${MPIRUN[@]}" -np $t "$MEGADLM" train "${common[@]}" --tensor-model-parallel-size $t \
          --make-vocab-size-divisible-by "$(vocab_div $t)" $sp ${RECOMPUTE[$rc]} --save "$name" \
          > "$name.log" 2>&1 || { echo "FAILED: $name did not run"; tail -5 "$name.log"; fail=1; continue; }
      echo "$FAMILY $name"
      close ref.log "$name.log" || fail=1
      for f in model optimizer; do
        # 4 heads, 4 groups (gpt2) or 4 query groups (llama, no biases), kv 8; 5 steps, lr <= 1e-3
        /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$name/iter_0000005/$f.safetensors" \
            "ref/iter_0000005/$f.safetensors" 1e-4 4 4 8 1e-2 | sed 's/^/  '"$f"': /' || fail=1
      done
    done
  done
done
# --distribute-saved-activations (full recompute, t > 1, no sequence parallelism)
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --tensor-model-parallel-size 2 \
    --make-vocab-size-divisible-by 64 --recompute-granularity full --recompute-method block \
    --recompute-num-layers 2 --distribute-saved-activations > dist.log 2>&1 || { echo "FAILED: distribute"; fail=1; }
echo "$FAMILY t2 distribute-saved-activations"; close ref.log dist.log || fail=1
exit $fail
