#!/usr/bin/env bash
# Context parallelism (--context-parallel-size; --cp-comm-type p2p, the ring, allgather and a2a)
# against the single process, under mpirun (at most 4 ranks), for each exchange:
#   for both model families (gpt: learned positions, LayerNorm, biases; llama: RoPE, RMSNorm,
#   SwiGLU, 8 heads in 4 query groups, no biases) and both attention masks (vanilla: causal;
#   difflm-noshift: no_mask, variable lengths padded to 2 CP chunks, hidden and attention
#   dropout on), the layouts CP 2, CP 4, CP 2 x TP 2 (sequence parallel; and with
#   --tp-comm-overlap), CP 2 x PP 2 and
#   CP 2 x DP 2 (and with the distributed optimizer, sharded over DP x CP): every logged
#   training and validation loss within rel 1e-5 of the single process's, and the saved
#   weights within rel 1e-4 (compare_checkpoints.py);
#   --bf16 with allgather and a2a at CP 2 (losses within rel 1e-5);
#   CP 2 with selective and with full recompute: the saved weights bitwise those of CP 2
#   without recompute (RTOL 0), the losses the same lines;
#   --log-memory: a layer's saved activations per rank 1/CP of one process's (the same layout
#   without CP) with allgather and a2a; with p2p 1/CP of one process's without the probabilities
#   (selective recompute's) plus the ring's log-sum-exp, 4 B NH T/CP bytes; predicted ==
#   measured on every rank; a CP 2 checkpoint resumes under CP 2 and in one process with the
#   uninterrupted run's losses.
# The single process is the independent reference: it never splits a sequence, so a wrong
# split, position, dropout key, mask or reduction moves the losses by far more than 1e-5.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3

base=("${CP_TINY[@]}" --train-iters 4 --eval-interval 4)
family_flags() {
  if [ "$1" = llama ]; then
    echo "${CP_LLAMA[@]}"
  fi
}
mode_flags() {
  if [ "$1" = causal ]; then
    echo --seq-length 16 --max-position-embeddings 16
  else # the model sees seq-length - 1 = 16 tokens
    echo --seq-length 17 --max-position-embeddings 17 --model-running-mode difflm-noshift \
         --mask-token 100 --attention-mask-type no_mask --difflm-varilen-prob 0.6
  fi
}
COMMS=(p2p allgather a2a)
declare -A LAYOUT=(
  [cp2]="2 --context-parallel-size 2"
  [cp4]="4 --context-parallel-size 4"
  [cp2-tp2]="4 --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
  [cp2-tp2-overlap]="4 --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  [cp2-pp2]="4 --context-parallel-size 2 --pipeline-model-parallel-size 2"
  [cp2-dp2]="4 --context-parallel-size 2"
  [cp2-dp2-distopt]="4 --context-parallel-size 2 --use-distributed-optimizer"
)
declare -A RECOMPUTE=(
  [sel]="--recompute-granularity selective"
  [full]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
)

# close REF.log OTHER.log: the same losses (training and validation, 5 at least) within rel 1e-5
close() { close_losses "$1" "$2" 1e-5 5+; }
run() { # run NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then
    "$MEGADLM" train "$@" --save "$name" > "$name.log" 2>&1
  else
    "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "$@" --save "$name" > "$name.log" 2>&1
  fi || { echo "FAILED: $name did not run"; tail -5 "$name.log"; return 1; }
}

fail=0
for family in gpt llama; do
  for mode in causal no_mask; do
    # shellcheck disable=SC2207
    flags=("${base[@]}" $(family_flags $family) $(mode_flags $mode))
    ref="$family-$mode-ref"
    run "$ref" 1 "${flags[@]}" || { fail=1; continue; }
    for comm in "${COMMS[@]}"; do
    CP=(--cp-comm-type "$comm")
    for layout in cp2 cp4 cp2-tp2 cp2-tp2-overlap cp2-pp2 cp2-dp2 cp2-dp2-distopt; do
      read -r np extra <<< "${LAYOUT[$layout]}"
      name="$family-$mode-$comm-$layout"
      # shellcheck disable=SC2086
      run "$name" "$np" "${flags[@]}" "${CP[@]}" $extra || { fail=1; continue; }
      echo "$name"
      close "$ref.log" "$name.log" || fail=1
      # 4 heads; gpt: 4 groups with key biases (a key bias's gradient is rounding noise)
      $PY "$SRC/tests/python/compare_checkpoints.py" "$name/iter_0000004/model.safetensors" \
          "$ref/iter_0000004/model.safetensors" 1e-4 4 4 8 1e-2 | sed 's/^/  model: /' || fail=1
    done
    for rc in sel full; do
      name="$family-$mode-$comm-cp2-$rc"
      # shellcheck disable=SC2086
      run "$name" 2 "${flags[@]}" "${CP[@]}" --context-parallel-size 2 ${RECOMPUTE[$rc]} || { fail=1; continue; }
      echo "$name (bitwise against cp2 without recompute)"
      if ! cmp -s <(losses "$family-$mode-$comm-cp2.log") <(losses "$name.log"); then
        echo "  losses differ from cp2's"; fail=1
      fi
      $PY "$SRC/tests/python/compare_checkpoints.py" "$name/iter_0000004/model.safetensors" \
          "$family-$mode-$comm-cp2/iter_0000004/model.safetensors" 0 | sed 's/^/  model: /' || fail=1
    done
    done
  done
done

# --bf16 (allgather and a2a: the single process's 16-bit roundings; p2p refuses it, below)
bf=("${base[@]}" --seq-length 16 --max-position-embeddings 16 --bf16)
run bf16-ref 1 "${bf[@]}" || fail=1
for comm in allgather a2a; do
  run "bf16-$comm" 2 "${bf[@]}" --context-parallel-size 2 --cp-comm-type "$comm" || { fail=1; continue; }
  echo "bf16 $comm cp2"
  close bf16-ref.log "bf16-$comm.log" || fail=1
done

# memory (--log-memory): every layer's saved activations per rank are exactly 1/CP of one
# process's (each tensor holds T/CP positions; the probabilities T/CP query rows of T x T), and
# on every rank the predicted saved activations (`megadlm memory`'s code) equal the measured
mem_flags=("${base[@]}" --seq-length 16 --max-position-embeddings 16 --train-iters 2 --log-memory)
layer_bytes() { grep -o 'saved activations layer 0 (bytes) | measured [0-9]*' "$1" | head -1 | awk '{print $NF}'; }
run mem-ref 1 "${mem_flags[@]}" || fail=1
one=$(layer_bytes mem-ref.log)
CP=(--cp-comm-type allgather)
for layout in "2 2" "4 4" "4 2 --tensor-model-parallel-size 2 --sequence-parallel" \
              "2 2 --recompute-granularity selective" "2 2 --cp-comm-type a2a"; do
  read -r np cp extra <<< "$layout"
  name="mem-cp$cp-np$np${extra:+-x}"
  # shellcheck disable=SC2086
  run "$name" "$np" "${mem_flags[@]}" "${CP[@]}" --context-parallel-size "$cp" $extra || { fail=1; continue; }
  got=$(layer_bytes "$name.log")
  # the reference at the same recompute / TP layout: one process, or TP 2 alone
  if [ -n "$extra" ]; then
    # shellcheck disable=SC2086
    run "$name-ref" "$((np / cp))" "${mem_flags[@]}" $extra || { fail=1; continue; }
    want=$(( $(layer_bytes "$name-ref.log") / cp ))
  else
    want=$((one / cp))
  fi
  echo "memory CP $cp ${extra:-}: layer 0 saved $got bytes per rank, one process / $cp = $want"
  [ "$got" = "$want" ] || { echo "  FAILED: not 1/$cp"; fail=1; }
  if grep 'memory saved activations (bytes) | predicted' "$name.log" | grep -qv 'difference 0 |'; then
    echo "  FAILED: predicted != measured"; grep 'memory saved activations' "$name.log"; fail=1
  fi
done

# p2p: no probabilities; the log-sum-exp of B=2 x NH=4 x T/CP rows in fp32
run mem-ref-sel 1 "${mem_flags[@]}" --recompute-granularity selective || fail=1
sel=$(layer_bytes mem-ref-sel.log)
for cp in 2 4; do
  name="mem-p2p-cp$cp"
  run "$name" "$cp" "${mem_flags[@]}" --context-parallel-size "$cp" || { fail=1; continue; }
  got=$(layer_bytes "$name.log") want=$((sel / cp + 4 * 2 * 4 * 16 / cp))
  echo "memory p2p CP $cp: layer 0 saved $got bytes per rank, expected $want"
  [ "$got" = "$want" ] || { echo "  FAILED"; fail=1; }
  if grep 'memory saved activations (bytes) | predicted' "$name.log" | grep -qv 'difference 0 |'; then
    echo "  FAILED: predicted != measured"; grep 'memory saved activations' "$name.log"; fail=1
  fi
done

# a CP checkpoint resumes under CP and in one process: the losses after the resume are the
# uninterrupted run's
res_flags=("${base[@]}" --seq-length 16 --max-position-embeddings 16 --eval-iters 0)
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${res_flags[@]}" --context-parallel-size 2 --save ck \
    --save-interval 2 > ck-full.log 2>&1 || { echo "FAILED: ck-full"; fail=1; }
rm -rf ck/iter_0000004; echo 2 > ck/latest_checkpointed_iteration.txt
for np in 2 1; do
  if [ $np = 2 ]; then
    "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${res_flags[@]}" --context-parallel-size 2 --load ck \
        > "ck-res$np.log" 2>&1 || { echo "FAILED: resume np $np"; fail=1; }
  else
    "$MEGADLM" train "${res_flags[@]}" --load ck > "ck-res$np.log" 2>&1 || { echo "FAILED: resume np $np"; fail=1; }
  fi
  echo "resume of a CP 2 checkpoint on $np rank(s)"
  rel_close "ck-res$np.log" 1e-5 2 <(losses ck-full.log | tail -2) <(losses "ck-res$np.log") ||
    { echo "  FAILED: losses after the resume differ"; fail=1; }
done

# refused layouts name the flag
for refused in "--cp-comm-type a2a+p2p:--cp-comm-type a2a+p2p: not built yet" \
               "--cp-comm-type a2a --num-query-groups 1 --group-query-attention:not divisible by --context-parallel-size 2" \
               "--bf16:--cp-comm-type p2p with --bf16: not built yet"; do
  # shellcheck disable=SC2086
  expect_error "${refused#*:}" "$MEGADLM" train "${base[@]}" --seq-length 16 \
      --max-position-embeddings 16 --context-parallel-size 2 ${refused%%:*} || fail=1
done
exit $fail
