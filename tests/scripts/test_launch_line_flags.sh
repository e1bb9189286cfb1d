#!/usr/bin/env bash
# The flags of MegaDLMs' examples/dlm_training/dlm_pretrain_1.7b.sh that are neither attention,
# logging, checkpoint-format nor tokenizer flags, as the script writes them (its commented-out
# stable-training block included), with the model shrunk: DP 2 trains the masked-diffusion
# objective with them, the arguments block shows each value given, and a run without the
# kernel-fusion switches, --rerun-mode and --data-cache-path gives the same losses.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
printf '{"text": "%s"}\n' "In the beginning God created the heaven and the earth." \
    "And the earth was without form, and void; and darkness was upon the face of the deep." \
    "And the Spirit of God moved upon the face of the waters." "And God said, Let there be light." > t.jsonl
"$MEGADLM" preprocess --input t.jsonl --output-prefix t --tokenizer-type ByteLevel --append-eod > /dev/null \
    || { echo "FAILED: preprocess"; exit 1; }
NUM_NODES=1
model=(--seq-length 32 --attention-softmax-in-fp32 --attention-dropout 0.0 --hidden-dropout 0.0
       --num-layers 2 --hidden-size 32 --num-attention-heads 4 --ffn-hidden-size 64 --swiglu
       --normalization RMSNorm --max-position-embeddings 32 --norm-epsilon 1e-6 --rotary-base 10000
       --disable-bias-linear --position-embedding-type rope --qk-layernorm
       --untie-embeddings-and-output-weights
       --model-running-mode difflm-noshift --mask-token 256 --attention-mask-type no_mask)
fusions=(--no-bias-gelu-fusion --no-bias-dropout-fusion --no-bias-swiglu-fusion)
training=(--micro-batch-size 2 --global-batch-size 8 --train-iters 4 --weight-decay 0.1
          --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.02 --clip-grad 1.0 --bf16
          --lr 0.0002 --min-lr 0.00002 --lr-decay-style WSD --lr-warmup-iters 1
          --lr-decay-iters 4 --lr-wsd-decay-style exponential --lr-wsd-decay-iters 1
          --use-distributed-optimizer --overlap-param-gather --overlap-grad-reduce
          --distributed-timeout-minutes 60)
launch=(--num-distributed-optimizer-instances $NUM_NODES --rerun-mode validate_results
        --accumulate-allreduce-grads-in-fp32 --use-precision-aware-optimizer
        --main-params-dtype=fp32 --main-grads-dtype=fp32 --exp-avg-dtype=fp32 --exp-avg-sq-dtype=fp32)
data=(--train-data-path t_text_document --valid-data-path t_text_document --tokenizer-type ByteLevel
      --log-interval 1 --eval-interval 2 --eval-iters 1)
run() { # run NAME ARGS...
  local name=$1; shift
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "$@" > "$name.log" 2>&1 \
      || { echo "FAILED: $name (exit $?)"; tail -3 "$name.log"; fail=1; }
}
run launch "${model[@]}" "${fusions[@]}" "${training[@]}" "${launch[@]}" "${data[@]}" --data-cache-path cache
run plain "${model[@]}" "${training[@]}" "${data[@]}"
for want in "num_distributed_optimizer_instances 1" "rerun_mode validate_results" \
            "use_precision_aware_optimizer True" "main_params_dtype fp32" "exp_avg_sq_dtype fp32" \
            "bias_dropout_fusion False" "bias_swiglu_fusion False" "data_cache_path cache" \
            "accumulate_allreduce_grads_in_fp32 True" "distributed_timeout_minutes 60.0"; do
  set -- $want
  grep -q "^  $1 \.* $2\$" launch.log || { echo "FAILED: the arguments block does not show $1 = $2"; fail=1; }
done
grep -q "Result validation enabled" launch.log || { echo "FAILED: no result validation"; fail=1; }
grep -q "GPTDataset train indices of t_text_document .*the cache" launch.log || { echo "FAILED: no index cache"; fail=1; }
n=$(grep -c 'lm loss: ' launch.log)
[ "$n" = 4 ] || { echo "FAILED: $n training log lines, expected 4"; fail=1; }
diff <(grep -o 'lm loss: [^ ]*\|lm loss value: [^ ]*' plain.log) \
     <(grep -o 'lm loss: [^ ]*\|lm loss value: [^ ]*' launch.log) > /dev/null \
    || { echo "FAILED: the launch line's flags changed the losses"; fail=1; }
[ $fail = 0 ] && echo "the launch line's flags train, recorded, with the plain run's losses"
exit $fail
