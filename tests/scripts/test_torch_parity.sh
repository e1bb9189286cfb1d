#!/usr/bin/env bash
# Parity with PyTorch: for a small model of each family (gpt: GPT-2 style; llama: Llama/Qwen3
# style with GQA, qk-layernorm and kv_channels != hidden/heads; qwen2: Llama's with
# --add-qkv-bias; each also with MegaDLMs' no_mask and causal_bottom_right attention masks),
# the same weights (read from the megadlm checkpoint) and the same batch give the same loss and
# gradients in an independent
# PyTorch implementation (tests/python/torch_gpt.py), and the same parameters after 3 AdamW
# steps with gradient clipping and Megatron's cosine schedule; under --bf16 the first
# iteration's loss and gradients against PyTorch bf16 references, and under --fp16 against the
# fp16 emulation (tests/python/torch_bf16.py).
# tests/tools/parity_dump.c is the megadlm side. Builds nothing.
# Environment (set by CTest): SRC (source tree), BUILD (build tree), WORK (scratch directory).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-torch (the python3 first on PATH may lack it)
TOOL=$BUILD/tests/parity_dump
CHECK="$SRC/tests/python/torch_gpt.py"

[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built (cmake --build $BUILD --target parity_dump)"; exit 1; }
"$PY" -c 'import torch' || { echo "FAIL: $PY lacks torch (scripts/install-deps.sh: python3-torch)"; exit 1; }

rm -rf "$WORK"
mkdir -p "$WORK"

# qwen2: --add-qkv-bias (a QKV bias without the other biases); _no_mask /
# _causal_bottom_right: MegaDLMs' --attention-mask-type (as test-forward runs it), the torch
# side building each mask from its definition
# _packed: documents ended by eod tokens in the batch under --reset-position-ids
# --reset-attention-mask, against an explicit block-diagonal mask (causal GPT with learned
# positions restarting per document; bidirectional Llama with RoPE)
for family in gpt llama qwen2 gpt_no_mask llama_no_mask qwen2_no_mask gpt_causal_bottom_right \
              llama_causal_bottom_right gpt_packed llama_no_mask_packed; do
    echo "== $family"
    "$TOOL" "$family" "$WORK/$family"
    "$PY" "$CHECK" "$family" "$WORK/$family" || { echo "FAIL: $family differs from PyTorch"; exit 1; }
done

# --bf16: the first iteration against PyTorch references (tests/python/torch_bf16.py): an
# emulation of megadlm's rounding points (loss 1e-4, gradients 2e-2 of each tensor's norm) and
# PyTorch's bf16 autocast (loss 1e-2); --fp16: the same emulation in fp16
for family in gpt llama; do
  for fmt in bf16 fp16; do
    echo "== $family --$fmt"
    "$TOOL" "$family" "$WORK/$family-$fmt" "$fmt" > /dev/null
    "$PY" "$SRC/tests/python/torch_bf16.py" "$family" "$WORK/$family-$fmt" "$fmt" ||
        { echo "FAIL: $family --$fmt differs from the PyTorch $fmt references"; exit 1; }
  done
done

# the checker must reject a dump of the other family (config and tensor names differ)
if "$PY" "$CHECK" gpt "$WORK/llama" > "$WORK/cross.log" 2>&1; then
    echo "FAIL: the gpt checker accepted the llama dump"
    exit 1
fi

echo "PASS"
