#!/usr/bin/env bash
# `megadlm train --bf16` (one process; the parallel layouts: test_bf16_parallel):
#  - Megatron's validation: --bf16 sets --accumulate-allreduce-grads-in-fp32; the distributed
#    optimizer (not built yet with --bf16) is refused by name, by train and memory; memory takes
#    TP, PP and DP layouts with --bf16;
#  - the log says what is bf16 and which bf16 GEMM runs;
#  - --log-memory: predicted == measured per category, and the bytes per parameter are
#    Megatron's: parameters 2 (half the fp32 run's), gradients 4 (the fp32 run's), optimizer
#    state 12 (fp32 main parameters + Adam moments: 1.5x the fp32 run's);
#  - saved activations: per layer measured == analytic; every saved tensor but the norms'
#    statistics in bf16 (2 bytes), in every recompute mode;
#  - the loss stays close to the fp32 run's (first iteration within 1e-2 relative);
#  - every recompute mode gives byte-identical parameters and optimizer state to no
#    recomputation under --bf16, and so does a resumed run; every bf16 GEMM path that runs here
#    (auto, the fallback, oneDNN's matmul primitive), both families.
# The checkpoint files under --bf16, loads across precisions, convert and generate:
# test_bf16_checkpoint.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }

common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 3)
llama=("${LLAMA[@]}")

# ---- validation -------------------------------------------------------------------------------
# TP (+ SP), PP, DP and the distributed optimizer (its overlapped parameter all-gather too) take
# --bf16 (test_bf16_parallel runs them)
for flags in "--tensor-model-parallel-size 2 --sequence-parallel" "--pipeline-model-parallel-size 3" \
             "--world-size 2" "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 3 --world-size 12" \
             "--world-size 2 --use-distributed-optimizer" \
             "--world-size 2 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather"; do
  # shellcheck disable=SC2086
  out=$("$MEGADLM" memory "${common[@]}" --bf16 $flags 2>&1) || say_fail "memory --bf16 $flags: $out"
done
expect_error "--fp16 and --bf16 exclude each other" "$MEGADLM" train "${common[@]}" --bf16 --fp16 ||
  say_fail "--bf16 --fp16"
echo "validation: TP, PP, DP and the distributed optimizer accepted"

# ---- memory, loss, log ------------------------------------------------------------------------
row() { grep -o "memory $2 (bytes) | predicted [0-9]* | measured [0-9]* | difference -*[0-9]*" "$1"; }
measured() { row "$1" "$2" | awk '{print $(NF-3)}'; }
for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  "$MEGADLM" train "${common[@]}" "${extra[@]}" --log-memory > "$family-fp32.log" 2>&1 ||
    { say_fail "$family fp32 train"; continue; }
  "$MEGADLM" train "${common[@]}" "${extra[@]}" --log-memory --bf16 > "$family-bf16.log" 2>&1 ||
    { say_fail "$family bf16 train"; tail -3 "$family-bf16.log"; continue; }
  log=$family-bf16.log
  grep -Eq '^  accumulate_allreduce_grads_in_fp32 \.+ True$' "$log" ||
    say_fail "$family: --bf16 did not set accumulate_allreduce_grads_in_fp32"
  grep -q '^> bf16: ' "$log" || say_fail "$family: no '> bf16:' line"
  grep -q '^> bf16 GEMM: ' "$log" || say_fail "$family: no bf16 GEMM line"
  for cat in parameters gradients "optimizer state" "saved activations"; do
    r=$(row "$log" "$cat") || { say_fail "$family: no $cat row"; continue; }
    [ "${r##* }" = 0 ] || say_fail "$family: $r"
  done
  p32=$(measured "$family-fp32.log" parameters); p16=$(measured "$log" parameters)
  g32=$(measured "$family-fp32.log" gradients); g16=$(measured "$log" gradients)
  o32=$(measured "$family-fp32.log" "optimizer state"); o16=$(measured "$log" "optimizer state")
  [ $((2 * p16)) = "$p32" ] || say_fail "$family: bf16 parameters $p16 bytes, fp32 $p32"
  [ "$g16" = "$g32" ] || say_fail "$family: bf16 gradients $g16 bytes, fp32 $g32"
  [ $((2 * o16)) = $((3 * o32)) ] || say_fail "$family: bf16 optimizer $o16 bytes, fp32 $o32"
  # saved activations per layer: measured == analytic
  layer() { grep -o "saved activations layer 0 (bytes) | measured [0-9]* | analytic [0-9]*" "$1"; }
  s32=$(layer "$family-fp32.log" | awk '{print $(NF-3)}'); l16=$(layer "$log")
  s16=$(awk '{print $(NF-3)}' <<<"$l16"); a16=$(awk '{print $NF}' <<<"$l16")
  [ -n "$s16" ] && [ "$s16" = "$a16" ] || say_fail "$family: layer 0 saved: $l16"
  # memory predicts the same numbers
  "$MEGADLM" memory "${common[@]}" "${extra[@]}" --bf16 --json > "$family.json"
  read -r mp mo < <(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["megadlm_train_bytes"]; print(b["parameters"], b["optimizer"])' "$family.json")
  [ "${mp%.0}" = "$p16" ] && [ "${mo%.0}" = "$o16" ] ||
    say_fail "$family: memory predicts parameters $mp optimizer $mo, train measured $p16 $o16"
  l32=$(grep -o 'lm loss: [0-9.E+-]*' "$family-fp32.log" | head -1 | awk '{print $3}')
  l16=$(grep -o 'lm loss: [0-9.E+-]*' "$log" | head -1 | awk '{print $3}')
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b)<=1e-2*abs(a) else 1)' "$l32" "$l16" ||
    say_fail "$family: first loss fp32 $l32, bf16 $l16"
  echo "$family: memory rows equal, parameters $p16 (fp32 $p32) optimizer $o16 (fp32 $o32) layer saved $s16 (fp32 $s32) bytes; first loss $l16 (fp32 $l32)"
done

# ---- saved activations per layer: half the fp32 run's in every recompute mode ------------------
# Everything a layer keeps is bf16 under --bf16 but the norms' statistics (fp32, as Megatron's):
# a layer that keeps everything saves (fp32 - stats) / 2 + stats bytes, a checkpointed chunk's
# first layer (its input only) half, the chunk's other layers nothing. stats, for N = 32 tokens:
# GPT-2 (LayerNorm): mean and rstd of both norms, 4N floats; Llama (RMSNorm, --qk-layernorm with
# 4 heads and 2 groups): the rstd of both norms and of the q/k norm, (2 + 4 + 2)N floats.
N=32
for family in gpt2 llama; do
  extra=(); stats=$((4 * 4 * N))
  [ "$family" = llama ] && { extra=("${llama[@]}"); stats=$((4 * 8 * N)); }
  for mode in "none:" "selective:--recompute-activations" \
              "uniform:--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
              "block:--recompute-granularity full --recompute-method block --recompute-num-layers 1"; do
    name=${mode%%:*}; flags=${mode#*:}
    for p in fp32 bf16; do
      pf=(); [ $p = bf16 ] && pf=(--bf16)
      # shellcheck disable=SC2086
      "$MEGADLM" train "${common[@]}" "${extra[@]}" "${pf[@]}" $flags --log-memory --exit-interval 1 \
        > "saved-$family-$name-$p.log" 2>&1 || say_fail "$family $name $p train"
    done
    for l in 0 1 2; do
      pat="saved activations layer $l (bytes) | measured [0-9]*"
      s32=$(grep -o "$pat" "saved-$family-$name-fp32.log" | awk '{print $NF}')
      s16=$(grep -o "$pat" "saved-$family-$name-bf16.log" | awk '{print $NF}')
      if [ "$name" = uniform ] || { [ "$name" = block ] && [ "$l" = 0 ]; }; then
        want=$((s32 / 2))
      else
        want=$(((s32 - stats) / 2 + stats))
      fi
      [ -n "$s32" ] && [ "$s16" = "$want" ] ||
        say_fail "$family $name layer $l: saved bf16 ${s16:-?} bytes, fp32 ${s32:-?}, expected $want"
    done
  done
  echo "$family: saved activations per layer under --bf16 half the fp32 run's (but the fp32 statistics) in every recompute mode"
done

# ---- recompute and resume: bitwise identical under --bf16 ------------------------------------
modes=("--recompute-activations"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 3"
       # not a recompute mode: Megatron's flag asks for what the softmax does anyway
       "--attention-softmax-in-fp32")
same() { same_ckpt "$1" "$2" 5; }
paths=(auto)
MEGADLM_BF16_GEMM=fallback "$MEGADLM" train "${common[@]}" --bf16 --exit-interval 1 > probe.log 2>&1 &&
  paths+=(fallback)
# oneDNN's matmul primitive where it runs (auto's choice on AMX CPUs)
if MEGADLM_BF16_GEMM=onednn-matmul "$MEGADLM" train "${common[@]}" --bf16 --exit-interval 1 > probe.log 2>&1; then
  grep -q 'bf16 GEMM: oneDNN .* matmul primitive' probe.log || say_fail "onednn-matmul: the log names another GEMM"
  paths+=(onednn-matmul)
elif ! grep -q 'does not run on this CPU\|without oneDNN' probe.log; then
  say_fail "MEGADLM_BF16_GEMM=onednn-matmul failed: $(tail -1 probe.log)"
fi
for path in "${paths[@]}"; do
  for family in gpt2 llama; do
    extra=()
    [ "$family" = llama ] && extra=("${llama[@]}")
    export MEGADLM_BF16_GEMM=$path
    [ "$path" = auto ] && unset MEGADLM_BF16_GEMM
    base=$path-$family
    "$MEGADLM" train "${common[@]}" "${extra[@]}" --bf16 --save "$base-none" > "$base-none.log" 2>&1 ||
      { say_fail "$base: train"; continue; }
    i=0
    for mode in "${modes[@]}"; do
      i=$((i + 1))
      # shellcheck disable=SC2086
      "$MEGADLM" train "${common[@]}" "${extra[@]}" --bf16 $mode --save "$base-$i" > "$base-$i.log" 2>&1
      same "$base-none" "$base-$i" || say_fail "$base: --bf16 $mode differs from no recompute"
    done
    r=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
    "$MEGADLM" train "${common[@]}" "${extra[@]}" --bf16 "${r[@]}" --save "$base-resume" \
        --exit-interval 3 > /dev/null 2>&1
    "$MEGADLM" train "${common[@]}" "${extra[@]}" --bf16 "${r[@]}" --save "$base-resume" \
        --load "$base-resume" > /dev/null 2>&1
    same "$base-none" "$base-resume" || say_fail "$base: resumed --bf16 run differs"
    # and --bf16 changes the result (the bf16 GEMMs are used)
    "$MEGADLM" train "${common[@]}" "${extra[@]}" --save "$base-fp32" > /dev/null 2>&1
    same "$base-none" "$base-fp32" && say_fail "$base: --bf16 gives the fp32 run's bits"
    echo "$base: recompute modes and resume identical to no recompute under --bf16 ($(grep -o 'bf16 GEMM: [^(]*' "$base-none.log"))"
  done
done
unset MEGADLM_BF16_GEMM

exit $fail
