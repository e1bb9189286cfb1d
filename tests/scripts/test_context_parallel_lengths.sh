#!/usr/bin/env bash
# Context parallelism with the masked-diffusion objective (--model-running-mode difflm-noshift)
# at the sequence lengths people pick: the model sees seq-length - 1 tokens (63 at
# --seq-length 64, 2047 at MegaDLMs' 2048), which 2 x CP chunks do not divide; each micro-batch
# is padded to the next length that they do (and that sequence parallelism splits), the
# padding's keys masked, its loss weight 0 and its rows without a learned position. Against the
# single process (which never pads), under mpirun:
#   - --seq-length 64, both model families (gpt: learned positions from 1, so the padding's
#     position 64 is past a 64-row table; llama: RoPE, grouped queries), variable lengths and
#     hidden and attention dropout on, CP 2 and CP 4 with each --cp-comm-type (p2p, allgather,
#     a2a): every logged loss within rel 1e-5, and (gpt, CP 4) the saved weights within rel 1e-4;
#   - --seq-length 2048 (a tiny model, 2 iterations), CP 2 and CP 4, each exchange: the losses;
#   - --seq-length 50 at CP 4, whose 49 tokens pad to 56 > 50 (the model holds 56 positions, 14
#     per rank): the losses for both families, --log-memory's predicted == measured on every
#     rank, the logits store at 2 x 56 / 4 = 28 rows (hand-computed), and `megadlm memory`'s
#     saved activations equal to what train measured;
#   - CP 2 x TP 2 with --sequence-parallel and TP 2 + SP alone, micro-batch 1 (63 tokens do not
#     split over 2 ranks either): the losses;
#   - difflm-noshift with --attention-mask-type causal, CP 2, the ring: the losses;
#   - `megadlm plan` lists CP 2 and CP 4 layouts for a difflm-noshift model at --seq-length 50
#     and refuses none of them;
#   - the autoregressive mode keeps Megatron's rule: --seq-length 62 at CP 2 is refused with its
#     words ("seq-length should be a multiple of 2 * context-parallel-size").
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

common=("${CP_TINY[@]}" --train-iters 3 --eval-interval 3)
base=("${common[@]}" --model-running-mode difflm-noshift --mask-token 100
      --attention-mask-type no_mask --difflm-varilen-prob 0.5)
llama=("${CP_LLAMA[@]}")
len() { echo --seq-length "$1" --max-position-embeddings "$1"; }
COMMS=(p2p allgather a2a)

run() { # run NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then
    "$MEGADLM" train "$@" --save "$name" > "$name.log" 2>&1
  else
    "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "$@" --save "$name" > "$name.log" 2>&1
  fi || { echo "FAILED: $name did not run"; tail -3 "$name.log"; return 1; }
}
fail=0
# against_ref REF MIN NAME NP FLAGS...: run NAME and compare its losses with REF's
against_ref() {
  local ref=$1 min=$2 name=$3 np=$4; shift 4
  run "$name" "$np" "$@" || { fail=1; return 1; }
  echo "$name"
  close_losses "$ref.log" "$name.log" 1e-5 "$min+" || { fail=1; return 1; }
}

# --seq-length 64: 63 tokens, padded to 64 at CP 2 and CP 4
for family in gpt llama; do
  # shellcheck disable=SC2207
  flags=("${base[@]}" $(len 64))
  [ $family = llama ] && flags+=("${llama[@]}")
  run "$family-64-ref" 1 "${flags[@]}" || { fail=1; continue; }
  for cp in 2 4; do
    for comm in "${COMMS[@]}"; do
      name="$family-64-cp$cp-$comm"
      against_ref "$family-64-ref" 5 "$name" "$cp" "${flags[@]}" --context-parallel-size "$cp" \
          --cp-comm-type "$comm" || continue
      if [ $family = gpt ] && [ $cp = 4 ]; then # 4 heads, 4 groups of 8 channels, key biases
        $PY "$SRC/tests/python/compare_checkpoints.py" "$name/iter_0000003/model.safetensors" \
            "$family-64-ref/iter_0000003/model.safetensors" 1e-4 4 4 8 1e-2 |
            sed 's/^/  model: /' || fail=1
      fi
    done
  done
done

# --seq-length 2048 (MegaDLMs' length): 2047 tokens, padded to 2048; a tiny model, 2 iterations
# shellcheck disable=SC2207
big=("${base[@]}" $(len 2048) --num-layers 1 --hidden-size 16 --micro-batch-size 1
     --global-batch-size 1 --train-iters 2 --eval-interval 2 --difflm-varilen-prob 0)
if run big-ref 1 "${big[@]}"; then
  for cp in 2 4; do
    for comm in "${COMMS[@]}"; do
      against_ref big-ref 4 "big-cp$cp-$comm" "$cp" "${big[@]}" --context-parallel-size "$cp" \
          --cp-comm-type "$comm" || true
    done
  done
else fail=1; fi

# --seq-length 50 at CP 4: 49 tokens padded to 56, past --seq-length and the position table
logits_rows() { grep -o 'logits per store (bytes) | predicted [0-9]* | measured [0-9]* | rows [0-9]*' "$1" |
                awk '{print $NF}' | sort -u | tr '\n' ' '; }
for family in gpt llama; do
  # shellcheck disable=SC2207
  flags=("${base[@]}" $(len 50))
  [ $family = llama ] && flags+=("${llama[@]}")
  run "$family-50-ref" 1 "${flags[@]}" || { fail=1; continue; }
  flags+=(--log-memory)
  comms=("${COMMS[@]}"); [ $family = llama ] && comms=(p2p)
  for comm in "${comms[@]}"; do
    name="$family-50-cp4-$comm"
    against_ref "$family-50-ref" 5 "$name" 4 "${flags[@]}" --context-parallel-size 4 \
        --cp-comm-type "$comm" || continue
    # (the ranks' lines may interleave in the log: each is checked where it is whole)
    if ! grep -q 'memory saved activations (bytes) | predicted' "$name.log" ||
       grep 'memory [a-z ]* (bytes) | predicted' "$name.log" | grep -qv 'difference 0 |'; then
      echo "  FAILED: predicted != measured"; grep 'memory [a-z ]* (bytes) | predicted' "$name.log"; fail=1
    fi
    rows=$(logits_rows "$name.log")
    echo "  logits store rows per rank: $rows(expected 28 = 2 x 56 / 4)"
    [ "$rows" = "28 " ] || fail=1
    # `megadlm memory` on the same layout: train's measured saved activations
    measured=$(grep -o 'memory saved activations (bytes) | predicted [0-9]* | measured [0-9]*' "$name.log" |
               awk '{print $NF}' | sort -u | tr '\n' ' ')
    predicted=$("$MEGADLM" memory "${flags[@]:0:${#flags[@]}-1}" --context-parallel-size 4 \
                    --cp-comm-type "$comm" --world-size 4 --json |
                $PY -c 'import json,sys; b=json.load(sys.stdin)["megadlm_train_bytes"]; print(b["saved_activations"], b["logits_rows"])')
    echo "  megadlm memory: saved activations, logits rows $predicted; train measured $measured"
    [ "$predicted" = "${measured}28" ] || { echo "  FAILED"; fail=1; }
  done
done

# sequence parallelism, micro-batch 1: 63 tokens do not split over TP 2 either
# shellcheck disable=SC2207
sp=("${base[@]}" $(len 64) --micro-batch-size 1 --global-batch-size 2)
if run sp-ref 1 "${sp[@]}"; then
  against_ref sp-ref 5 sp-cp2-tp2 4 "${sp[@]}" --context-parallel-size 2 --cp-comm-type allgather \
      --tensor-model-parallel-size 2 --sequence-parallel || true
  against_ref sp-ref 5 sp-tp2 2 "${sp[@]}" --tensor-model-parallel-size 2 --sequence-parallel || true
else fail=1; fi

# masked diffusion with causal attention: the ring skips and masks by global position
# shellcheck disable=SC2207
causal=("${base[@]}" $(len 64) --attention-mask-type causal)
if run causal-ref 1 "${causal[@]}"; then
  against_ref causal-ref 5 causal-cp2-p2p 2 "${causal[@]}" --context-parallel-size 2 || true
else fail=1; fi

# plan: CP layouts of a difflm-noshift model at --seq-length 50 (50 is not a multiple of 4 or 8)
# shellcheck disable=SC2207
plan=("${base[@]}" $(len 50) --micro-batch-size 1)
if ! "$MEGADLM" plan "${plan[@]}" --world-size 4 --device A100-80GB --all --top 0 --json > plan.json; then
  echo "FAILED: plan"; fail=1
else
  $PY - plan.json <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
cps = sorted({c["context_parallel_size"] for c in d["configurations"]})
print(f"plan: context-parallel sizes listed {cps}, refused {d['refused']}")
sys.exit(0 if cps == [1, 2, 4] and d["refused"] == 0 else 1)
EOF
fi

# the autoregressive mode keeps Megatron's rule
# shellcheck disable=SC2046
if "$MEGADLM" train "${common[@]}" $(len 62) --context-parallel-size 2 > refused.log 2>&1; then
  echo "FAILED: --seq-length 62 at CP 2 was accepted in the autoregressive mode"; fail=1
elif ! grep -q -- "--seq-length 62 is not divisible by 2 x 2.*seq-length should be a multiple of 2 \* context-parallel-size" refused.log; then
  echo "FAILED: the refusal of --seq-length 62 at CP 2:"; cat refused.log; fail=1
else
  echo "autoregressive --seq-length 62 at CP 2: refused as Megatron does"
fi
exit $fail
