#!/usr/bin/env bash
# The demo: preprocess the bundled King James Bible (data/kjv.jsonl), train a small GPT on it for
# about two minutes on 2 cores, save a checkpoint and sample from it.
set -euo pipefail
BUILD=${1:-build}
OUT=${DEMO_OUT:-demo_out}
MEGADLM=$BUILD/megadlm
mkdir -p "$OUT"

echo "== preprocess data/kjv.jsonl (ByteLevel tokenizer) =="
"$MEGADLM" preprocess --input data/kjv.jsonl --json-keys text --output-prefix "$OUT/kjv" \
    --tokenizer-type ByteLevel --append-eod --workers 2

echo "== train =="
rm -rf "$OUT/checkpoints"
"$MEGADLM" train \
    --num-layers 4 --hidden-size 192 --num-attention-heads 6 \
    --seq-length 128 --max-position-embeddings 128 \
    --micro-batch-size 16 --global-batch-size 16 \
    --train-iters ${DEMO_ITERS:-500} --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine \
    --lr-warmup-iters 20 --weight-decay 0.1 --clip-grad 1.0 \
    --hidden-dropout 0.0 --attention-dropout 0.0 \
    --tokenizer-type ByteLevel --data-path "$OUT/kjv_text_document" --split 969,30,1 \
    --log-interval 25 --eval-interval 250 --eval-iters 10 --log-memory \
    --save "$OUT/checkpoints" --save-interval 250

echo "== generate =="
"$MEGADLM" generate --load "$OUT/checkpoints" --prompt "And God said" \
    --max-new-tokens 200 --temperature 0.8 --top-k 20 --seed 7
