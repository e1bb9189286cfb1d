#!/usr/bin/env bash
# Megatron's kernel-fusion switches (--no-bias-dropout-fusion, --no-bias-swiglu-fusion,
# --no-masked-softmax-fusion, --no-rope-fusion, --no-gradient-accumulation-fusion,
# --no-persist-layer-norm) choose CUDA kernels; megadlm has one implementation, so a run with
# all of them gives the same bits as a run without: every
# logged loss and grad norm, and the saved parameters and optimizer state. Checked for a
# GPT-2-like model (biases, GeLU, LayerNorm, learned positions, dropout on) and a Qwen3-like one
# (no biases, SwiGLU, RMSNorm, RoPE, q/k norm), the latter as the DLM launch line trains it
# (masked diffusion, no_mask), where --no-bias-gelu-fusion is on too (it changes no number
# there: no biases, SwiGLU). With GeLU it does change the numbers, in Megatron too: its fused
# bias-GeLU kernel computes the tanh approximation, the unfused path the erf GeLU; so the
# GPT-2-like run without it must differ (test: the flag is used). The arguments block shows
# the switches off (they are recorded).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
base=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 4
      --lr 3e-3 --log-interval 1 --eval-iters 0 --seed 5)
gpt2=("${DROPOUT[@]}")
qwen=(--disable-bias-linear --swiglu --normalization RMSNorm --position-embedding-type rope
      --qk-layernorm --untie-embeddings-and-output-weights --hidden-dropout 0 --attention-dropout 0
      --model-running-mode difflm-noshift --mask-token 99 --attention-mask-type no_mask)
off=(--no-bias-dropout-fusion --no-bias-swiglu-fusion --no-masked-softmax-fusion --no-rope-fusion
     --no-gradient-accumulation-fusion --no-persist-layer-norm)
qwen+=(--no-bias-gelu-fusion)
numbers() { grep -o 'lm loss: [^ ]*\|grad norm: [^ ]*' "$1"; }
for model in gpt2 qwen; do
  declare -n extra=$model
  on=("${extra[@]}")
  [ $model = qwen ] && on=("${extra[@]:0:${#extra[@]}-1}") # without --no-bias-gelu-fusion
  "$MEGADLM" train "${base[@]}" "${on[@]}" --save "$model-on" > "$model-on.log" 2>&1 \
      || { echo "FAILED: $model run"; tail -3 "$model-on.log"; fail=1; continue; }
  "$MEGADLM" train "${base[@]}" "${extra[@]}" "${off[@]}" --save "$model-off" > "$model-off.log" 2>&1 \
      || { echo "FAILED: $model run with the fusions off"; tail -3 "$model-off.log"; fail=1; continue; }
  [ "$(numbers "$model-on.log" | wc -l)" = 8 ] || { echo "FAILED: $model: expected 4 losses and norms"; fail=1; }
  diff <(numbers "$model-on.log") <(numbers "$model-off.log") > /dev/null \
      || { echo "FAILED: $model: losses or norms differ with the fusions off"; fail=1; }
  same_ckpt "$model-on" "$model-off" 4 || { echo "FAILED: $model: the checkpoint differs with the fusions off"; fail=1; }
  for field in bias_dropout_fusion bias_swiglu_fusion masked_softmax_fusion apply_rope_fusion gradient_accumulation_fusion; do
    grep -q "^  $field \.* False" "$model-off.log" || { echo "FAILED: $model: $field not shown False"; fail=1; }
    grep -q "^  $field \.* True" "$model-on.log" || { echo "FAILED: $model: $field not shown True"; fail=1; }
  done
done
"$MEGADLM" train "${base[@]}" "${gpt2[@]}" --no-bias-gelu-fusion > gelu-erf.log 2>&1 \
    || { echo "FAILED: --no-bias-gelu-fusion run"; fail=1; }
diff <(numbers gpt2-on.log) <(numbers gelu-erf.log) > /dev/null \
    && { echo "FAILED: --no-bias-gelu-fusion (erf GeLU) gave the tanh GeLU's numbers"; fail=1; }
[ $fail = 0 ] && echo "kernel-fusion switches: the same bits with and without"
exit $fail
