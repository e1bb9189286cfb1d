#!/usr/bin/env bash
# Diffusion sampling (LLaDA's sampler) from a masked-diffusion model trained on mock data (runs of
# consecutive ids): the prompt stays as given, the generated tokens continue the run closely
# (mean distance to the true continuation <= 3) where an untrained model's do not (>= 6), the
# same seed gives the same text, --top-p (MegaDLMs' filter) with a mass so small that only the
# most likely token is kept turns a hot draw into the argmax, logits for the block's
# still-masked positions only give the tokens of logits for every position
# (--difflm-full-logits), and flags of the other model
# family are refused.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
train=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 17
       --max-position-embeddings 17 --micro-batch-size 32 --global-batch-size 32 --lr 3e-3
       --lr-decay-style cosine --lr-warmup-iters 20 --mock-data --vocab-size 50 --log-interval 500
       --eval-iters 0 --hidden-dropout 0 --attention-dropout 0 --model-running-mode difflm-noshift
       --mask-token 100 --difflm-varilen-prob 0)
"$MEGADLM" train "${train[@]}" --train-iters 2000 --save trained > trained.log 2>&1 ||
  { echo "FAILED: training"; tail -3 trained.log; exit 1; }
"$MEGADLM" train "${train[@]}" --train-iters 1 --lr-warmup-iters 0 --lr 1e-9 --save untrained > untrained.log 2>&1 ||
  { echo "FAILED: training"; exit 1; }
fail=0
# distance CKPT: mean |generated - true continuation| over three prompts, 8 tokens each
distance() {
  local total=0 count=0
  for prompt in "10 11 12 13 14" "30 31 32" "3 4 5 6 7 8"; do
    out=$("$MEGADLM" generate --load "$1" --prompt "$prompt" --gen-length 8 --steps 8 \
          --block-length 1 2>/dev/null) || { echo "FAILED: generate $1"; return 1; }
    [ "${out:0:${#prompt}}" = "$prompt" ] || { echo "FAILED: prompt changed: $out"; fail=1; }
    read -r -a p <<<"$prompt"; read -r -a o <<<"$out"
    local last=${p[-1]} n=${#p[@]}
    for i in $(seq 0 7); do
      local want=$(( (last + 1 + i) % 50 )) got=${o[$((n + i))]:-999} # eod is not printed
      local d=$(( got > want ? got - want : want - got ))
      total=$((total + d)); count=$((count + 1))
    done
  done
  echo "$total $count" | awk '{printf "%.2f", $1 / $2}'
}
dt=$(distance trained); du=$(distance untrained)
echo "mean distance to the true continuation: trained $dt, untrained $du"
awk -v t="$dt" -v u="$du" 'BEGIN { exit !(t <= 3 && u >= 6) }' || { echo "FAILED: distances"; fail=1; }

a=$("$MEGADLM" generate --load trained --prompt "7 8" --gen-length 8 --steps 4 --block-length 4 --temperature 0.7 --seed 5 2>/dev/null)
b=$("$MEGADLM" generate --load trained --prompt "7 8" --gen-length 8 --steps 4 --block-length 4 --temperature 0.7 --seed 5 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAILED: same seed, different text: '$a' vs '$b'"; fail=1; }

# a draw at temperature 5 strays from the argmax; keeping only the top token brings it back
gen() { "$MEGADLM" generate --load trained --prompt "10 11 12" --gen-length 8 --steps 8 \
          --block-length 1 "$@" 2>/dev/null; }
argmax=$(gen); hot=$(gen --temperature 5 --seed 3); top=$(gen --temperature 5 --top-p 1e-6 --seed 3)
[ -n "$argmax" ] && [ "$top" = "$argmax" ] && [ "$hot" != "$argmax" ] ||
  { echo "FAILED: --top-p 1e-6: argmax '$argmax', hot '$hot', top-p '$top'"; fail=1; }
# logits for the block's still-masked positions only (the default) against every position
# (--difflm-full-logits, LLaDA's): the same tokens, argmax and Gumbel, both remasking modes
for opts in "--gen-length 8 --steps 8 --block-length 1" "--gen-length 12 --steps 6 --block-length 4" \
            "--gen-length 12 --steps 12 --block-length 6 --temperature 0.7 --seed 5" \
            "--gen-length 12 --steps 4 --block-length 12 --remasking random --seed 9"; do
  for ck in trained untrained; do
    # shellcheck disable=SC2086
    a=$("$MEGADLM" generate --load $ck --prompt "3 4 5" $opts 2>/dev/null)
    # shellcheck disable=SC2086
    b=$("$MEGADLM" generate --load $ck --prompt "3 4 5" $opts --difflm-full-logits 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] ||
      { echo "FAILED: $ck $opts: masked-row logits '$a' vs every row '$b'"; fail=1; }
  done
done
echo "masked-row logits: the same tokens as --difflm-full-logits"

expect() { local want=$1; shift; expect_error "$want" "$MEGADLM" generate "$@" || fail=1; }
expect "--top-k" --load trained --top-k 5
expect "--top-p" --load trained --top-p 0.9
expect "--steps" --load trained --gen-length 8 --steps 3 --block-length 4
expect "--gen-length" --load trained --gen-length 20
expect "--remasking" --load trained --remasking sometimes
exit $fail
