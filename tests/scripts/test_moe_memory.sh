#!/usr/bin/env bash
# What a mixture-of-experts run keeps, predicted against the tracked allocator (train
# --log-memory): the parameters, gradients, optimizer state (the distributed optimizer's expert
# buckets sharded over the expert-data-parallel group) and the table's saved activations exactly;
# each MoE layer's routing-dependent state (router, dispatch, experts: moe_layer_saved_bytes)
# equal to the balanced prediction when the test hook routes every expert the same share
# (MEGADLM_MOE_BALANCED_ROUTING=1), and within the bound otherwise; `megadlm memory` prints the
# same numbers before the run.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 4 "${GPT_TINY[@]}" "${LLAMA_ARCH[@]}" --micro-batch-size 2
        --global-batch-size 8 --train-iters 2 --lr 1e-3 --log-interval 1 --eval-iters 0
        --seed 3 --make-vocab-size-divisible-by 64 --log-memory --num-experts 8
        --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-layer-freq "[1,0,1,1]")
fail=0
run() { # NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1
  else "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1; fi ||
    { echo "FAILED: $name exited non-zero"; tail -5 "$name.log"; fail=1; }
}
# exact: every category's difference 0, every layer's measured = analytic
exact() {
  local bad
  bad=$(grep "memory .* (bytes) | predicted" "$1.log" | grep -v "difference 0 |" || true)
  [ -z "$bad" ] || { echo "FAILED: $1: $bad"; fail=1; }
  bad=$(grep "saved activations layer" "$1.log" |
        awk -F'|' '{split($2, m, " "); split($3, a, " "); if (m[2] != a[2]) print}')
  [ -z "$bad" ] || { echo "FAILED: $1: $bad"; fail=1; }
}
# moe NAME balanced|bound: each MoE layer's line, measured = balanced, or <= bound
moe() {
  local lines bad
  lines=$(grep -c "moe layer .* kept per micro-batch" "$1.log" || true)
  [ "$lines" -gt 0 ] || { echo "FAILED: $1: no MoE memory lines"; fail=1; return; }
  bad=$(grep "moe layer .* kept per micro-batch" "$1.log" | awk -F'|' -v mode="$2" '
    { split($2, m, " "); split($3, b, " "); split($4, u, " ")
      if (mode == "balanced" ? m[2] != b[2] : (m[2] > u[2] || m[2] == 0)) print }')
  [ -z "$bad" ] || { echo "FAILED: $1 ($2): $bad"; fail=1; }
  echo "$1: $lines MoE layer lines, measured $(grep -m1 'moe layer' "$1.log" | cut -d'|' -f2-4)"
}
export MEGADLM_MOE_BALANCED_ROUTING=1
run one 1 --moe-shared-expert-intermediate-size 16 --moe-input-jitter-eps 0.01
exact one; moe one balanced
run ep2_a2a 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
exact ep2_a2a; moe ep2_a2a balanced
run tp2ep2_ag 4 --expert-model-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
exact tp2ep2_ag; moe tp2ep2_ag balanced
run ep2dp2_dopt 4 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --use-distributed-optimizer --moe-expert-capacity-factor 0.5 --moe-pad-expert-input-to-capacity
exact ep2dp2_dopt; moe ep2dp2_dopt balanced
run pp2ep2_recompute 4 --expert-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
exact pp2ep2_recompute; moe pp2ep2_recompute balanced
run fsdp 2 --use-custom-fsdp --data-parallel-sharding-strategy optim_grads_params
exact fsdp; moe fsdp balanced
unset MEGADLM_MOE_BALANCED_ROUTING
# the model's own routing: within the bound
run ep4_a2a 4 --expert-model-parallel-size 4 --moe-token-dispatcher-type alltoall
exact ep4_a2a; moe ep4_a2a bound
run ep2_cap 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --moe-expert-capacity-factor 1.0
exact ep2_cap; moe ep2_cap bound
# `megadlm memory` predicts the single process's numbers before it runs
"$MEGADLM" memory "${common[@]}" --moe-shared-expert-intermediate-size 16 \
    --moe-input-jitter-eps 0.01 --json > one.json
/usr/bin/python3 - one.json one.log <<'PY' || fail=1
import json, re, sys
o = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read()
bal = int(re.search(r"moe layer \d+ kept per micro-batch \(bytes\) \| measured \d+ \| balanced (\d+)", log).group(1))
ok = o["moe_layer_kept_bytes_balanced"] == bal and o["moe_layers_first_stage"] == 3
print("memory --json: MoE layers", o["moe_layers_first_stage"], "balanced", o["moe_layer_kept_bytes_balanced"], "train", bal)
sys.exit(0 if ok else 1)
PY
[ "$fail" = 0 ] && echo PASS
exit $fail
