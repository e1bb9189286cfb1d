#!/usr/bin/env bash
# `megadlm convert` of mixture-of-experts models (docs/CHECKPOINT.md, "Hugging Face
# interchange"): tiny MoE models of the Qwen3 family are trained for 3 iterations and exported
# as Qwen3MoeForCausalLM; then, as test_hf_convert.sh does for the dense families,
#   (a) --from hf reads the export back into a checkpoint whose model.safetensors holds the same
#       tensors, bit for bit;
#   (b) the PyTorch forward written from modeling_qwen3_moe.py (tests/python/hf_forward.py,
#       float64) on the exported files gives megadlm's logits within rel 1e-5, and fails when
#       the attention, the router or one expert is perturbed;
#   (c) the imported checkpoint generates and trains on;
#   (d) Qwen3-MoE's layer rule: decoder_sparse_step 2 reads as the list the export wrote; a
#       checkpoint saved under --expert-model-parallel-size 2 converts as one process's;
#   (e) what does not map is refused, naming it (both directions).
# The two models: post-softmax top-2 (norm_topk_prob true) with MoE layers 0 and 2 and a dense
# layer 1 (mlp_only_layers [1]), untied; pre-softmax top-2 (norm_topk_prob false) on layer 1 of
# 2, tied, grouped GEMM.
# Environment (set by CTest): MEGADLM, SRC, BUILD, WORK.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-torch (the python3 first on PATH may lack it)
TOOL=$BUILD/tests/hf_logits
CHECK="$SRC/tests/python/hf_forward.py"

[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built (cmake --build $BUILD --target hf_logits)"; exit 1; }
"$PY" -c 'import torch' || { echo "FAIL: $PY lacks torch (scripts/install-deps.sh: python3-torch)"; exit 1; }

fresh_work

COMMON=(--hidden-size 64 --num-attention-heads 4 --seq-length 16 --max-position-embeddings 16
        --micro-batch-size 2 --global-batch-size 2 --lr 1e-2 --mock-data --vocab-size 50
        --hidden-dropout 0 --attention-dropout 0 --eval-iters 0 --log-interval 1
        --init-method-std 0.05 --normalization RMSNorm --norm-epsilon 1e-6
        --position-embedding-type rope --rotary-base 1000000 --swiglu --ffn-hidden-size 128
        --disable-bias-linear --qk-layernorm --group-query-attention --num-query-groups 2
        --kv-channels 32 --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48)
POST=(--num-layers 3 --moe-layer-freq "[1,0,1]" --untie-embeddings-and-output-weights
      --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001)
PRE=(--num-layers 2 --moe-layer-freq "[0,1]" --moe-router-pre-softmax
     --moe-router-load-balancing-type none --moe-aux-loss-coeff 0 --moe-grouped-gemm)

# cfg DIR EXPR: the Python expression EXPR on config.json (as c) is true
cfg() { "$PY" -c "import json, sys; c = json.load(open('$1/config.json')); sys.exit(0 if ($2) else 1)"; }

fail=0
for m in post pre; do
    echo "== $m"
    if [ $m = post ]; then flags=("${POST[@]}"); else flags=("${PRE[@]}"); fi
    "$MEGADLM" train "${COMMON[@]}" "${flags[@]}" --train-iters 3 --save "$m.ckpt" > "$m.train.log"
    "$MEGADLM" convert --to hf "$m.ckpt" "$m.hf"
    if [ $m = post ]; then
        want='c["norm_topk_prob"] and c["mlp_only_layers"] == [1] and not c["tie_word_embeddings"] and c["router_aux_loss_coef"] == 0.01'
    else
        want='not c["norm_topk_prob"] and c["mlp_only_layers"] == [0] and c["tie_word_embeddings"] and c["router_aux_loss_coef"] == 0'
    fi
    cfg "$m.hf" 'c["architectures"] == ["Qwen3MoeForCausalLM"] and c["model_type"] == "qwen3_moe" and c["num_experts"] == 4 and c["num_experts_per_tok"] == 2 and c["moe_intermediate_size"] == 48 and c["intermediate_size"] == 128 and c["decoder_sparse_step"] == 1' \
        || { echo "FAIL: $m: config.json's MoE keys"; cat "$m.hf/config.json"; fail=1; }
    cfg "$m.hf" "$want" || { echo "FAIL: $m: config.json: not $want"; cat "$m.hf/config.json"; fail=1; }

    # (a) round trip, bitwise
    "$MEGADLM" convert --from hf "$m.hf" "$m.back"
    "$PY" "$CHECK" same "$m.ckpt/iter_0000003/model.safetensors" "$m.back/iter_0000000/model.safetensors" \
        || { echo "FAIL: $m: the round trip is not bitwise"; fail=1; }

    # (b) independent forward on the HF files vs megadlm's logits
    "$TOOL" "$m.ckpt" "$m.logits.safetensors"
    "$PY" "$CHECK" forward "$m.hf" "$m.logits.safetensors" \
        || { echo "FAIL: $m: the HF forward differs from megadlm"; fail=1; }
    # an MoE layer whose experts 1 and 3 both get tokens (a post-softmax gate row of an expert
    # that no token chooses changes nothing: the softmax is over the chosen k)
    moe_layer=$([ $m = post ] && echo 0 || echo 1)
    for what in "" "=model.layers.$moe_layer.mlp.gate.weight" \
                "=model.layers.$moe_layer.mlp.experts.3.down_proj.weight"; do
        if "$PY" "$CHECK" forward "$m.hf" "$m.logits.safetensors" "--perturb$what" > "$m.perturb.log" 2>&1; then
            echo "FAIL: $m: a perturbed weight ($what) went undetected"; cat "$m.perturb.log"; fail=1
        else echo "perturbed weight detected: $(head -1 "$m.perturb.log"); $(tail -1 "$m.perturb.log")"; fi
    done
    "$TOOL" "$m.back" "$m.back.logits.safetensors"
    cmp -s "$m.logits.safetensors" "$m.back.logits.safetensors" \
        || { echo "FAIL: $m: the imported checkpoint's logits differ"; fail=1; }

    # (c) the imported checkpoint generates and trains on
    "$MEGADLM" generate --load "$m.back" --prompt "1 2 3" --max-new-tokens 4 --top-k 1 > "$m.gen.txt" 2> "$m.gen.log" \
        || { echo "FAIL: $m: generate --load the imported checkpoint"; cat "$m.gen.log"; fail=1; }
    "$MEGADLM" train "${COMMON[@]}" "${flags[@]}" --train-iters 2 --load "$m.back" --save "$m.more" > "$m.more.log" 2>&1 \
        || { echo "FAIL: $m: train --load the imported checkpoint"; tail -5 "$m.more.log"; fail=1; }
    grep -q "successfully loaded checkpoint" "$m.more.log" || { echo "FAIL: $m: train did not load"; fail=1; }
done

# (d) HF's rule (l + 1) % decoder_sparse_step == 0: step 2 of 2 layers is the MoE layer 1 the
# export listed as mlp_only_layers [0]
mkdir -p step && cp pre.hf/model.safetensors step/
"$PY" -c "import json; c = json.load(open('pre.hf/config.json')); c.update(decoder_sparse_step=2, mlp_only_layers=[]); json.dump(c, open('step/config.json', 'w'))"
"$MEGADLM" convert --from hf step step.back
"$PY" "$CHECK" same "pre.back/iter_0000000/model.safetensors" "step.back/iter_0000000/model.safetensors" \
    || { echo "FAIL: decoder_sparse_step 2 did not read as layer 1 sparse"; fail=1; }

# a checkpoint saved under expert parallelism (each expert under its global index) converts
# as one process's: the forward matches, the round trip is bitwise
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${COMMON[@]}" "${PRE[@]}" --global-batch-size 4 --train-iters 2 \
    --expert-model-parallel-size 2 --save ep2.ckpt > ep2.train.log 2>&1 \
    || { echo "FAIL: training under EP 2"; tail -5 ep2.train.log; fail=1; }
"$MEGADLM" convert --to hf ep2.ckpt ep2.hf && "$MEGADLM" convert --from hf ep2.hf ep2.back
"$PY" "$CHECK" same "ep2.ckpt/iter_0000002/model.safetensors" "ep2.back/iter_0000000/model.safetensors" \
    || { echo "FAIL: ep2: the round trip is not bitwise"; fail=1; }
"$TOOL" ep2.ckpt ep2.logits.safetensors
"$PY" "$CHECK" forward ep2.hf ep2.logits.safetensors || { echo "FAIL: ep2: the HF forward differs"; fail=1; }

# (e) refusals name what does not fit
refuse_to() { # refuse_to <substring> <name> <train flags...>: convert --to hf must fail
    local want=$1 name=$2; shift 2
    "$MEGADLM" train "$@" --train-iters 1 --save "$name" > "$name.log" 2>&1 \
        || { echo "FAIL: training $name"; tail -3 "$name.log"; fail=1; return; }
    if expect_error "$want" "$MEGADLM" convert --to hf "$name" "$name.hf"; then
        echo "refused as expected: $ERR_OUT"
    else fail=1; fi
}
base=("${COMMON[@]}" "${PRE[@]}")
refuse_to "--moe-shared-expert-intermediate-size" shared "${base[@]}" --moe-shared-expert-intermediate-size 32
refuse_to "--moe-expert-capacity-factor" capacity "${base[@]}" --moe-token-dispatcher-type alltoall \
    --moe-expert-capacity-factor 1.0
noqk=()
for x in "${COMMON[@]}"; do [ "$x" = --qk-layernorm ] || noqk+=("$x"); done
refuse_to "without --qk-layernorm" noqk "${noqk[@]}" "${PRE[@]}"
refuse_to "--moe-input-jitter-eps" jitter "${base[@]}" --moe-input-jitter-eps 0.01
refuse_to "MoE layers" difflm "${base[@]}" --model-running-mode difflm-noshift --mask-token 49 \
    --attention-mask-type no_mask

refuse_from() { # refuse_from <substring> <python edit of c>: --from hf of pre.hf so edited fails
    local dir
    dir=from$((++nfrom))
    mkdir -p "$dir" && cp pre.hf/model.safetensors "$dir/"
    "$PY" -c "import json; c = json.load(open('pre.hf/config.json')); $2; json.dump(c, open('$dir/config.json', 'w'))"
    if expect_error "$1" "$MEGADLM" convert --from hf "$dir" "$dir.back"; then
        echo "refused as expected: $ERR_OUT"
    else fail=1; fi
}
nfrom=0
refuse_from "OLMoE's q_norm / k_norm" 'c.update(model_type="olmoe", architectures=["OlmoeForCausalLM"])'
refuse_from "shared_expert_gate" 'c.update(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"])'
refuse_from "norm_topk_prob true" 'c.update(num_experts_per_tok=1, norm_topk_prob=True)'
refuse_from "shared_expert_intermediate_size" 'c.update(shared_expert_intermediate_size=32)'
refuse_from "decoder_sparse_step 0" 'c.update(decoder_sparse_step=0)'
# a config that does not match the tensors: the first tensor that differs is named
refuse_from "model.layers.1.mlp.gate.weight" 'c.update(num_experts=5)'

[ $fail = 0 ] || exit 1
echo "PASS"
