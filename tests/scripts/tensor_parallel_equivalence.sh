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

common=(--num-layers 3 --hidden-size 32 --num-attention-heads 4 --seq-length 16
        --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --mock-data --vocab-size 100
        --log-interval 1 --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 --seed 3)
if [ "$FAMILY" = llama ]; then
  common+=(--normalization RMSNorm --position-embedding-type rope --swiglu --ffn-hidden-size 64
           --group-query-attention --num-query-groups 4 --qk-layernorm --disable-bias-linear
           --untie-embeddings-and-output-weights)
fi
# Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by x t; keep the
# padded size (128) equal across layouts so the models are the same.
vocab_div() { echo $((128 / $1)); }
losses() { grep -o 'lm loss: [^ ]*' "$1" | awk '{print $3}'; }

close_losses() { # close_losses ref.log other.log
  paste <(losses "$1") <(losses "$2") | awk -v what="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r
      if (r > 1e-5) { printf "%s: iteration %d loss %s vs %s (rel %.3g)\n", what, n, $2, $1, r; bad = 1 } }
    END { if (n != 5) { print what ": expected 5 losses, found " n; bad = 1 }
          printf "  losses: worst rel %.3g\n", worst; exit bad }'
}

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
      close_losses ref.log "$name.log" || fail=1
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
echo "$FAMILY t2 distribute-saved-activations"; close_losses ref.log dist.log || fail=1
exit $fail
