#!/usr/bin/env bash
# Layouts that cannot work are refused on every rank, each rank saying why, and every rank exits
# non-zero within seconds (never a hang). Sequence parallelism at t = 1 is turned off with a note,
# as Megatron does.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
base=(--num-layers 2 --hidden-size 48 --num-attention-heads 4 --seq-length 16
      --max-position-embeddings 16 --micro-batch-size 2 --train-iters 2 --lr 1e-3 --mock-data
      --vocab-size 100 --eval-iters 0)
fail=0
expect() { # expect NP "message" flags...
  local np=$1 want=$2; shift 2
  local start out rc n
  start=$(date +%s)
  out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$MEGADLM" train \
        "${base[@]}" "$@" 2>&1); rc=$?
  n=$(grep -cF -- "$want" <<<"$out")
  if [ $rc -eq 0 ] || [ $rc -eq 124 ] || [ "$n" -ne "$np" ] || [ $(( $(date +%s) - start )) -gt 30 ]; then
    echo "FAILED: -np $np $* -> rc $rc, '$want' on $n of $np ranks"; echo "$out" | head -4; fail=1
  else
    echo "ok: -np $np $*: refused on all $np ranks"
  fi
}
expect 3 "is not divisible by --tensor-model-parallel-size 2" --tensor-model-parallel-size 2
expect 2 "--num-attention-heads 3" --tensor-model-parallel-size 2 --num-attention-heads 3
expect 2 "--num-query-groups 1" --tensor-model-parallel-size 2 --group-query-attention --num-query-groups 1
expect 4 "--ffn-hidden-size 50" --tensor-model-parallel-size 4 --ffn-hidden-size 50
expect 2 "--seq-length 15" --tensor-model-parallel-size 2 --sequence-parallel --seq-length 15 --max-position-embeddings 15
expect 2 "--distribute-saved-activations" --tensor-model-parallel-size 2 --sequence-parallel \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --distribute-saved-activations
# TP 2 x DP 2: a global batch the 2 replicas cannot share
expect 4 "--global-batch-size 3" --tensor-model-parallel-size 2 --global-batch-size 3
expect 2 "--num-layers 3" --pipeline-model-parallel-size 2 --num-layers 3
# a checkpoint that does not exist on a rank: every rank fails to load, none hangs
mkdir -p broken && echo 7 > broken/latest_checkpointed_iteration.txt
expect 2 "error: loading checkpoint" --tensor-model-parallel-size 2 --load broken

out=$("$MEGADLM" train "${base[@]}" --sequence-parallel 2>&1) || { echo "FAILED: SP at t=1 should train"; fail=1; }
grep -q "sequence parallelism" <<<"$out" || { echo "FAILED: no note that SP is off at t=1"; fail=1; }
exit $fail
