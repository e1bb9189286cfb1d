#!/usr/bin/env bash
# MegaDLMs' running modes, masks and the rest of custom_args/difflm.py at the command line
# (the numbers against PyTorch are test_torch_parity's: the *_no_mask / *_causal_bottom_right
# families; --add-qkv-bias's: qwen2 there and test_gpt_model's finite differences):
#   (1) --core-attn-implementation x --attention-backend: the same losses, bit for bit (one CPU
#       kernel whatever the choice);
#   (2) MegaDLMs' vanilla_forward runs causal_bottom_right whatever --attention-mask-type says:
#       vanilla with no_mask / causal_bottom_right gives the bits of vanilla with causal;
#       test-forward runs the mask given: with causal the bits of vanilla, with no_mask others;
#   (3) difflm-noshift: causal_bottom_right and causal the same bits (one mask for
#       self-attention), no_mask others;
#   (4) --debug: --detect-anomaly checks (MegaDLMs' warning, the same losses; after a step of
#       lr 1e30 it stops in the next backward naming the tensor), and does nothing without
#       --debug; --turn-on-debugpy waits for a debugger (no iteration runs)
#       only under --debug;
#   (5) flags MegaDLMs reads nowhere (--non-special-vocab-size, --cut-off-varlen-to-seqlen
#       without packing) leave the losses alone, and so does --use-on-the-fly-eval (megadlm
#       completes it: the task scored at every evaluation, tests/scripts/test_eval.sh); the
#       refusals;
#   (6) --sequence-parallel / --tp-comm-overlap with variable-length batches = one process;
#   (7) --add-qkv-bias: parameter count, TP / SP, checkpoints across layouts.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
base=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 3
      --lr 1e-3 --mock-data --vocab-size 50 --log-interval 1 --eval-iters 0 --seed 5)
dlm=(--model-running-mode difflm-noshift --mask-token 50 --difflm-varilen-prob 0.5)
fail=0
run() { # run NAME args...: train, losses into NAME.losses
  local name=$1; shift
  "$MEGADLM" train "${base[@]}" "$@" > "$name.log" 2>&1 ||
    { echo "FAILED: $name did not run:"; tail -3 "$name.log"; fail=1; return; }
  losses "$name.log" > "$name.losses"
  [ "$(wc -l < "$name.losses")" = 3 ] || { echo "FAILED: $name logged no 3 losses"; fail=1; }
}
same() { # same A B what
  if cmp -s "$1.losses" "$2.losses"; then echo "same bits: $3"
  else echo "FAILED: $3: $(paste -d' ' "$1.losses" "$2.losses" | head -1)"; fail=1; fi
}
differ() {
  if cmp -s "$1.losses" "$2.losses"; then echo "FAILED: $3: the same losses"; fail=1
  else echo "different: $3"; fi
}

# (1)
run dlm_ref "${dlm[@]}"
for impl in TEDotProductAttention FlexAttention; do
  for backend in flash fused unfused local auto; do
    run "dlm_${impl}_$backend" "${dlm[@]}" --core-attn-implementation "$impl" \
        --attention-backend "$backend"
    same dlm_ref "dlm_${impl}_$backend" "--core-attn-implementation $impl --attention-backend $backend"
  done
done

# (2)
run ar_causal --attention-mask-type causal
run ar_nomask --attention-mask-type no_mask
run ar_cbr --attention-mask-type causal_bottom_right
run tf_causal --model-running-mode test-forward --attention-mask-type causal
run tf_nomask --model-running-mode test-forward --attention-mask-type no_mask
same ar_causal ar_nomask "vanilla: no_mask runs causal (MegaDLMs' vanilla_forward)"
same ar_causal ar_cbr "vanilla: causal_bottom_right"
same ar_causal tf_causal "test-forward with causal = vanilla"
differ ar_causal tf_nomask "test-forward with no_mask is bidirectional"

# (3)
run dlm_cbr "${dlm[@]}" --attention-mask-type causal_bottom_right
run dlm_causal "${dlm[@]}" --attention-mask-type causal
same dlm_cbr dlm_causal "difflm-noshift: causal_bottom_right = causal"
differ dlm_ref dlm_causal "difflm-noshift: no_mask differs from causal"

# (4)
run anomaly "${dlm[@]}" --debug --detect-anomaly
same dlm_ref anomaly "--debug --detect-anomaly"
grep -q "WARNING: Detecting anomaly is turned on" anomaly.log ||
  { echo "FAILED: --debug --detect-anomaly printed no warning"; fail=1; }
run anomaly_off "${dlm[@]}" --detect-anomaly --turn-on-debugpy
same dlm_ref anomaly_off "--detect-anomaly --turn-on-debugpy without --debug"
grep -q "Detecting anomaly\|Waiting for debugger" anomaly_off.log &&
  { echo "FAILED: --detect-anomaly / --turn-on-debugpy acted without --debug"; fail=1; }
# under 2 ranks: rank 0 waits (naming its PID), rank 1 with it; gdb releases it
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${base[@]}" --debug \
    --turn-on-debugpy > debugpy.log 2>&1 &
mp=$!
for _ in $(seq 1 300); do grep -q "Waiting for debugger" debugpy.log && break; sleep 0.1; done
sleep 2
pid=$(grep -o 'gdb -p [0-9]*' debugpy.log | awk '{print $3}')
if [ -z "$pid" ]; then
  echo "FAILED: --debug --turn-on-debugpy printed no wait naming a PID:"; tail -3 debugpy.log
  fail=1
elif ! kill -0 "$mp" 2> /dev/null || grep -q "iteration " debugpy.log; then
  echo "FAILED: --debug --turn-on-debugpy did not wait for a debugger"; fail=1
else
  echo "--debug --turn-on-debugpy: waiting for a debugger (PID $pid), no iteration run"
  timeout 120 gdb -p "$pid" -batch -ex 'set {int}&megadlm_debugger_go = 1' -ex detach \
      > gdb.log 2>&1 || { echo "FAILED: gdb did not run (scripts/install-deps.sh)"; fail=1; }
  if grep -q "ptrace: Operation not permitted" gdb.log; then # a container without ptrace
    echo "--turn-on-debugpy: ptrace is not permitted here, release by gdb not checked"
    kill "$mp"
  fi
fi
for _ in $(seq 1 600); do kill -0 "$mp" 2> /dev/null || break; sleep 0.1; done
if kill -0 "$mp" 2> /dev/null; then
  echo "FAILED: the job did not go on after gdb"; kill "$mp"; fail=1
elif ! grep -q "ptrace: Operation not permitted" gdb.log &&
     [ "$(grep -c 'iteration ' debugpy.log)" != 3 ]; then
  echo "FAILED: after gdb the job did not train:"; tail -3 debugpy.log; fail=1
elif ! grep -q "ptrace: Operation not permitted" gdb.log; then
  echo "--turn-on-debugpy: gdb released the wait, 3 iterations ran"
fi
wait "$mp" 2> /dev/null

# a step of lr 1e30 makes the next backward non-finite: --debug --detect-anomaly stops in that
# backward naming the tensor; without --debug the loss check stops after it, as before
blow=(--lr 1e30 --clip-grad 0)
out=$("$MEGADLM" train "${base[@]}" "${blow[@]}" --debug --detect-anomaly 2>&1) &&
  { echo "FAILED: --detect-anomaly ran through a NaN"; fail=1; }
grep -q -- "--detect-anomaly: iteration 2, micro-batch 0 .*the gradient of decoder\." <<<"$out" &&
  echo "--detect-anomaly: $(grep -o 'iteration 2.*' <<<"$out" | head -1)" ||
  { echo "FAILED: no anomaly report naming iteration 2 and a tensor: $(tail -2 <<<"$out")"; fail=1; }
out=$("$MEGADLM" train "${base[@]}" "${blow[@]}" --detect-anomaly 2>&1)
grep -q -- "--detect-anomaly:" <<<"$out" && { echo "FAILED: --detect-anomaly acted without --debug"; fail=1; }
grep -q "iteration 2: lm loss is -\?nan" <<<"$out" || { echo "FAILED: no NaN-loss stop without --debug"; fail=1; }

# (5)
printf '{"context": "1 2 3", "continuation": " 4 5"}\n' > otf.jsonl
run unread "${dlm[@]}" --non-special-vocab-size 40 --use-on-the-fly-eval --cut-off-varlen-to-seqlen \
    --base-model vanilla --on-the-fly-eval-task otf.jsonl --on-the-fly-eval-mc-num 4 --eval-interval 1
same dlm_ref unread "--non-special-vocab-size, --use-on-the-fly-eval, --cut-off-varlen-to-seqlen"
[ "$(grep -c " on-the-fly eval at iteration" unread.log)" = 3 ] ||
    { echo "FAILED: --use-on-the-fly-eval --eval-interval 1 did not score the task 3 times"; fail=1; }
expect() { # expect "message" args...
  local want=$1; shift
  expect_error "$want" "$MEGADLM" train "${base[@]}" "$@" || fail=1
}
expect "--attention-mask-type block_causal" --attention-mask-type block_causal
expect "--base-model Qwen_2: expected vanilla" --base-model Qwen_2
expect "--core-attn-implementation SDPA" --core-attn-implementation SDPA
expect "--attention-backend custom" --attention-backend custom
expect "--gpt-block-return-loss-and-logits" --gpt-block-return-loss-and-logits
expect "--model-running-mode difflm" --model-running-mode difflm
expect "--non-special-vocab-size" --non-special-vocab-size 0

# (6) --sequence-parallel (and --tp-comm-overlap) with variable lengths: a micro-batch of
#     3 x L tokens with L odd is padded to L + 1 for the 2 ranks, the padding's keys masked:
#     the losses of one process (rel 1e-5; dropout off: its masks follow the padded layout).
#     --difflm-varilen-prob 1 cuts every micro-batch; with seed 3, 2 of the 12 get odd lengths.
sp=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 17
    --max-position-embeddings 17 --micro-batch-size 3 --global-batch-size 6 --train-iters 6
    --lr 1e-3 --mock-data --vocab-size 50 --log-interval 1 --eval-iters 1 --eval-interval 6
    --hidden-dropout 0 --attention-dropout 0 --seed 3 --model-running-mode difflm-noshift
    --mask-token 60 --difflm-varilen-prob 1)
"$MEGADLM" train "${sp[@]}" --make-vocab-size-divisible-by 128 > sp_ref.log 2>&1 ||
  { echo "FAILED: one-process reference"; tail -3 sp_ref.log; fail=1; }
for extra in "--sequence-parallel" "--sequence-parallel --tp-comm-overlap" \
             "--sequence-parallel --tp-comm-overlap --tp-comm-overlap-num-splits 3"; do
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${sp[@]}" \
      --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 $extra > sp.log 2>&1 ||
    { echo "FAILED: TP 2 $extra did not run"; tail -3 sp.log; fail=1; continue; }
  # the training and validation losses: as many as one process's (7 at least), within rel 1e-5
  want=$(losses sp_ref.log | wc -l)
  [ "$want" -ge 7 ] && close_losses sp_ref.log sp.log 1e-5 "$want" || fail=1
done

# (7) --add-qkv-bias (Qwen2's QKV bias, here with --disable-bias-linear): the parameter count
#     (hand-computed for base's model: 128 x 32 word + 16 x 32 position embeddings, per layer
#     2 LayerNorms (128), linear_qkv 96 x 32 + its bias 96, linear_proj 32 x 32, fc1 128 x 32,
#     fc2 32 x 128, then the final LayerNorm (64): 29696; 29504 without the bias), the losses
#     of one process under TP 2 and TP 2 + SP (the bias split with linear_qkv's rows), and a
#     checkpoint saved under TP 2 resumed by one process (the bias saved whole) continues as
#     one process does; resuming it without --add-qkv-bias is refused
count() { grep -o 'model parallel rank (0, 0): [0-9]*' "$1" | awk '{print $NF}'; }
run qkvb --disable-bias-linear --add-qkv-bias
run nob --disable-bias-linear
[ "$(count qkvb.log)" = 29696 ] && [ "$(count nob.log)" = 29504 ] &&
  echo "--add-qkv-bias: 29696 parameters (29504 without)" ||
  { echo "FAILED: parameter counts $(count qkvb.log) / $(count nob.log), expected 29696 / 29504"; fail=1; }
qb=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention
    --num-query-groups 2 --swiglu --normalization RMSNorm --position-embedding-type rope
    --disable-bias-linear --add-qkv-bias --seq-length 16 --max-position-embeddings 16
    --micro-batch-size 2 --global-batch-size 4 --lr 3e-3 --lr-decay-iters 4 --mock-data
    --vocab-size 50 --log-interval 1 --eval-iters 0 --hidden-dropout 0 --attention-dropout 0
    --seed 9)
compare() { # compare NAME REF OTHER [first line]
  rel_close "$1" 1e-5 2+ <(losses "$2" | tail -n +"${4:-1}") <(losses "$3") || fail=1
}
"$MEGADLM" train "${qb[@]}" --train-iters 4 --make-vocab-size-divisible-by 128 > qb_ref.log 2>&1 ||
  { echo "FAILED: --add-qkv-bias one process"; tail -3 qb_ref.log; fail=1; }
for extra in "" "--sequence-parallel"; do
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${qb[@]}" --train-iters 4 \
      --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 $extra > qb_tp.log 2>&1 ||
    { echo "FAILED: --add-qkv-bias TP 2 $extra"; tail -3 qb_tp.log; fail=1; }
  compare "--add-qkv-bias TP 2 $extra" qb_ref.log qb_tp.log
done
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${qb[@]}" --train-iters 2 \
    --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --save qb_ckpt > qb_save.log 2>&1 ||
  { echo "FAILED: --add-qkv-bias TP 2 save"; tail -3 qb_save.log; fail=1; }
"$MEGADLM" train "${qb[@]}" --train-iters 4 --make-vocab-size-divisible-by 128 --load qb_ckpt \
    > qb_load.log 2>&1 || { echo "FAILED: --add-qkv-bias resume"; tail -3 qb_load.log; fail=1; }
[ "$(losses qb_load.log | wc -l)" = 2 ] || { echo "FAILED: the resumed run logged no 2 losses"; fail=1; }
compare "--add-qkv-bias saved under TP 2, resumed by one process" qb_ref.log qb_load.log 3
expect_error "add_qkv_bias" "$MEGADLM" train "${qb[@]/--add-qkv-bias/}" --train-iters 4 \
    --make-vocab-size-divisible-by 128 --load qb_ckpt || fail=1

[ $fail = 0 ] && echo PASS || { echo FAIL; exit 1; }
