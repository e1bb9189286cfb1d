#!/usr/bin/env bash
# `megadlm convert` (Hugging Face interchange, docs/CHECKPOINT.md): tiny models of the GPT-2,
# Llama and Qwen3 families are trained for 3 iterations and exported with --to hf; then
#   (a) --from hf reads the export back into a megadlm checkpoint whose model.safetensors holds
#       the same tensors, bit for bit (compared by name: the headers may differ);
#   (b) an independent PyTorch forward written from the HF architectures' definitions
#       (tests/python/hf_forward.py) on the exported files gives megadlm's logits
#       (tests/tools/hf_logits.c) within rel 1e-5, and fails when one weight is perturbed;
#   (c) the imported checkpoint works with `megadlm generate --load` and `megadlm train --load`;
#   (d) models that no HF architecture fits are refused with a message naming what does not fit.
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

COMMON=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16
        --micro-batch-size 2 --global-batch-size 2 --lr 1e-2 --mock-data --vocab-size 50
        --hidden-dropout 0 --attention-dropout 0 --eval-iters 0 --log-interval 1
        --init-method-std 0.05)
GPT=(--max-position-embeddings 32)
LLAMA=(--max-position-embeddings 16 --normalization RMSNorm --norm-epsilon 1e-6
       --position-embedding-type rope --rotary-base 500000 --swiglu --ffn-hidden-size 96
       --disable-bias-linear --untie-embeddings-and-output-weights --group-query-attention
       --num-query-groups 2 --kv-channels 24)
QWEN3=(--max-position-embeddings 16 --normalization RMSNorm --norm-epsilon 1e-6
       --position-embedding-type rope --rotary-base 1000000 --swiglu --ffn-hidden-size 128
       --disable-bias-linear --qk-layernorm --group-query-attention --num-query-groups 2
       --kv-channels 32)

fail=0
for fam in gpt llama qwen3; do
    echo "== $fam"
    case $fam in
        gpt) flags=("${GPT[@]}"); arch=GPT2LMHeadModel ;;
        llama) flags=("${LLAMA[@]}"); arch=LlamaForCausalLM ;;
        qwen3) flags=("${QWEN3[@]}"); arch=Qwen3ForCausalLM ;;
    esac
    "$MEGADLM" train "${COMMON[@]}" "${flags[@]}" --train-iters 3 --save "$fam.ckpt" > "$fam.train.log"
    "$MEGADLM" convert --to hf "$fam.ckpt" "$fam.hf"
    grep -q "\"$arch\"" "$fam.hf/config.json" || { echo "FAIL: $fam: config.json lacks $arch"; fail=1; }

    # (a) round trip, bitwise
    "$MEGADLM" convert --from hf "$fam.hf" "$fam.back"
    "$PY" "$CHECK" same "$fam.ckpt/iter_0000003/model.safetensors" "$fam.back/iter_0000000/model.safetensors" \
        || { echo "FAIL: $fam: the round trip is not bitwise"; fail=1; }

    # (b) independent forward on the HF files vs megadlm's logits (of the original checkpoint)
    "$TOOL" "$fam.ckpt" "$fam.logits.safetensors"
    "$PY" "$CHECK" forward "$fam.hf" "$fam.logits.safetensors" \
        || { echo "FAIL: $fam: the HF forward differs from megadlm"; fail=1; }
    if "$PY" "$CHECK" forward "$fam.hf" "$fam.logits.safetensors" --perturb > "$fam.perturb.log" 2>&1; then
        echo "FAIL: $fam: a perturbed weight went undetected"; cat "$fam.perturb.log"; fail=1
    else echo "perturbed weight detected: $(tail -1 "$fam.perturb.log")"; fi
    # ... and the imported checkpoint gives the same logits, bit for bit
    "$TOOL" "$fam.back" "$fam.back.logits.safetensors"
    "$PY" - "$fam.logits.safetensors" "$fam.back.logits.safetensors" <<'EOF' || { echo "FAIL: $fam: imported logits differ"; fail=1; }
import sys, json, struct
def data(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); b = f.read()
    return {k: b[slice(*v["data_offsets"])] for k, v in h.items() if k != "__metadata__"}
a, b = data(sys.argv[1]), data(sys.argv[2])
sys.exit(0 if a == b else 1)
EOF

    # (c) the imported checkpoint generates and trains on
    "$MEGADLM" generate --load "$fam.back" --prompt "1 2 3" --max-new-tokens 4 --top-k 1 > "$fam.gen.txt" 2> "$fam.gen.log" \
        || { echo "FAIL: $fam: generate --load the imported checkpoint"; cat "$fam.gen.log"; fail=1; }
    "$MEGADLM" train "${COMMON[@]}" "${flags[@]}" --train-iters 2 --load "$fam.back" --save "$fam.more" > "$fam.more.log" 2>&1 \
        || { echo "FAIL: $fam: train --load the imported checkpoint"; tail -5 "$fam.more.log"; fail=1; }
    grep -q "successfully loaded checkpoint" "$fam.more.log" || { echo "FAIL: $fam: train did not load"; fail=1; }
done

# (d) refusals name what does not fit
refuse() { # refuse <substring> <dir>: convert --to hf must fail with the substring
    if expect_error "$1" "$MEGADLM" convert --to hf "$2" "$2.hf"; then
        echo "refused as expected: $ERR_OUT"
    else fail=1; fi
}
"$MEGADLM" train "${COMMON[@]}" "${LLAMA[@]}" --rotary-percent 0.5 --train-iters 1 --save partial > partial.log
refuse "--rotary-percent" partial
"$MEGADLM" train "${COMMON[@]}" "${GPT[@]}" --untie-embeddings-and-output-weights --train-iters 1 --save untied > untied.log
refuse "--untie-embeddings-and-output-weights" untied
"$MEGADLM" train "${COMMON[@]}" "${GPT[@]}" --position-embedding-type rope --train-iters 1 --save lnrope > lnrope.log
refuse "LayerNorm" lnrope
# --from hf refuses what megadlm lacks
mkdir -p scaled && cp qwen3.hf/model.safetensors scaled/
sed 's/"rope_scaling":[^,]*,/"rope_scaling": {"rope_type": "linear", "factor": 2.0},/' qwen3.hf/config.json > scaled/config.json
if out=$("$MEGADLM" convert --from hf scaled scaled.back 2>&1); then echo "FAIL: rope_scaling accepted"; fail=1
elif ! grep -qF rope_scaling <<<"$out"; then echo "FAIL: '$out' lacks rope_scaling"; fail=1
else echo "refused as expected: $out"; fi

[ $fail = 0 ] || exit 1
echo "PASS"
