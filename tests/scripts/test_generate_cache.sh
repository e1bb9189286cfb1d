#!/usr/bin/env bash
# Cached and parallel decoding (generate --cache, --threshold, --factor, --input-file batches),
# on models trained on mock data (runs of consecutive ids):
# - the first round of every block with a cache is the uncached round itself: with one round a
#   block, --cache prefix and dual give the uncached text bit for bit (learned positions, and
#   RoPE with a --bf16-trained model);
# - --threshold 1 unmasks one token a round: the fixed schedule of one token a step, bit for
#   bit; a threshold below every confidence unmasks a whole block in its first round: the
#   schedule of one step a block; a threshold between runs fewer forwards than tokens;
# - the cached multi-round sampler still continues the run (mean distance <= 3) and runs one
#   full forward a block, the other rounds on the cache;
# - autoregressive: the key/value cache gives the greedy text of the uncached sampler, for GPT
#   and Llama-style models, also past the model's length (the window then slides uncached);
# - batches: prompts of different lengths, left-padded in one batch, give the text each gives
#   alone (both families, with and without a cache);
# - --bf16 runs the model in bf16 (named on stderr): greedy text still continues the runs, the
#   caches' and batches' identities hold in bf16;
# - bad flags are refused with their names.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --micro-batch-size 16
        --global-batch-size 16 --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 20
        --mock-data --vocab-size 50 --log-interval 500 --eval-iters 0 --hidden-dropout 0
        --attention-dropout 0)
dlm=("${common[@]}" --seq-length 33 --max-position-embeddings 33 --model-running-mode
     difflm-noshift --mask-token 100 --difflm-varilen-prob 0)
gpt=("${common[@]}" --seq-length 48 --max-position-embeddings 48)
train() { local out=$1; shift
  "$MEGADLM" train "$@" --save "$out" > "$out.log" 2>&1 || { echo "FAILED: training $out"; tail -3 "$out.log"; exit 1; }
}
train dlm "${dlm[@]}" --train-iters 3000 --micro-batch-size 32 --global-batch-size 32
train dlm_rope "${dlm[@]}" --train-iters 300 --position-embedding-type rope --bf16
train gpt "${gpt[@]}" --train-iters 300
train llama "${gpt[@]}" "${LLAMA[@]}" --train-iters 300
fail=0
bad() { echo "FAILED: $*"; fail=1; }
gen() { "$MEGADLM" generate "$@" 2>/dev/null; }
# forwards CKPT ARGS...: the model forwards the diffusion summary line counts
forwards() { "$MEGADLM" generate "$@" 2>&1 >/dev/null | sed -nE 's/.*; ([0-9]+) model forwards;.*/\1/p'; }

# ---- the first round of a block is the uncached one
for ck in dlm dlm_rope; do
  one=(--load "$ck" --prompt "3 4 5" --gen-length 16 --block-length 4 --steps 4)
  want=$(gen "${one[@]}")
  for c in prefix dual; do
    got=$(gen "${one[@]}" --cache $c)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad "$ck --cache $c, one round a block: '$got' vs uncached '$want'"
  done
done

# ---- the threshold's two ends, and between
base=(--load dlm --prompt "7 8 9" --gen-length 16 --block-length 8)
[ "$(gen "${base[@]}" --steps 16)" = "$(gen "${base[@]}" --steps 16 --threshold 1)" ] ||
  bad "--threshold 1 is not one token a round"
[ "$(gen "${base[@]}" --steps 2)" = "$(gen "${base[@]}" --steps 16 --threshold 1e-9)" ] ||
  bad "--threshold 1e-9 does not unmask a block in one round"
n1=$(forwards "${base[@]}" --threshold 1) nlow=$(forwards "${base[@]}" --threshold 1e-9)
nmid=$(forwards "${base[@]}" --threshold 0.5) nfac=$(forwards "${base[@]}" --factor 1)
echo "forwards: threshold 1: $n1, 0.5: $nmid, 1e-9: $nlow; factor 1: $nfac"
[ "$n1" = 16 ] && [ "$nlow" = 2 ] || bad "forwards of the threshold's ends: $n1 $nlow (want 16 2)"
[ "$nmid" -lt 16 ] && [ "$nmid" -ge 2 ] || bad "--threshold 0.5 ran $nmid forwards"
[ "$nfac" -lt 16 ] && [ "$nfac" -ge 2 ] || bad "--factor 1 ran $nfac forwards"

# ---- the cached sampler's text still continues the run; one full forward a block
for c in none prefix dual; do
  tot=0
  for p in "10 11 12" "20 21 22"; do
    out=$(gen --load dlm --prompt "$p" --gen-length 16 --block-length 4 --steps 16 --cache $c)
    read -r -a pp <<<"$p"
    d=$(awk -v f="${pp[-1]}" -v n=${#pp[@]} '{ s = 0; for (i = n + 1; i <= NF; i++) { e = f + i - n; s += ($i > e ? $i - e : e - $i) } print (NF > n ? s / (NF - n) : 99) }' <<<"$out")
    tot=$(awk -v a="$tot" -v b="$d" 'BEGIN { print a + b }')
  done
  mean=$(awk -v t="$tot" 'BEGIN { printf "%.2f", t / 2 }')
  echo "cache $c: mean distance $mean"
  awk -v m="$mean" 'BEGIN { exit !(m <= 3) }' || bad "--cache $c: mean distance $mean > 3"
done
line=$("$MEGADLM" generate --load dlm --prompt "3 4 5" --gen-length 16 --block-length 4 --steps 16 --cache dual 2>&1 >/dev/null | grep '^\[cache')
# 4 blocks: a full forward of the prompt and all 16 tokens each, then 3 rounds of the block's 4 rows
[ "$line" = "[cache dual: 4 full forwards, 12 on the cache, $((4 * 19 + 12 * 4)) positions run]" ] ||
  bad "cache dual's forwards: '$line'"

# ---- autoregressive: the key/value cache gives the uncached greedy text
for ck in gpt llama; do
  for p in "10 11 12 13" "$(seq -s ' ' 1 40)"; do
    want=$(gen --load $ck --prompt "$p" --max-new-tokens 20 --top-k 1)
    got=$(gen --load $ck --prompt "$p" --max-new-tokens 20 --top-k 1 --cache prefix)
    [ -n "$want" ] && [ "$got" = "$want" ] || bad "$ck key/value cache: '$got' vs '$want'"
  done
done

# ---- batches: each prompt's text alone
printf '3 4\n10 11 12 13 14\n20 21 22\n' > prompts.txt
for args in "--load dlm --gen-length 8 --block-length 4 --steps 8" \
            "--load dlm --gen-length 8 --block-length 4 --steps 8 --cache dual" \
            "--load dlm_rope --gen-length 8 --block-length 4 --steps 8 --cache prefix" \
            "--load gpt --max-new-tokens 8 --top-k 1" \
            "--load llama --max-new-tokens 8 --top-k 1 --cache prefix"; do
  # shellcheck disable=SC2086
  single=$(gen $args --input-file prompts.txt --inference-max-batch-size 1)
  # shellcheck disable=SC2086
  three=$(gen $args --input-file prompts.txt --inference-max-batch-size 3)
  [ "$(wc -l <<<"$single")" = 3 ] && [ "$single" = "$three" ] || bad "$args: batch of 3 '$three' vs one by one '$single'"
done
grep -q '^{"context": "10 11 12 13 14", "continuation": " 15 16' <<<"$three" || bad "the JSON line of a prompt: $three"

# ---- --bf16: the model in bf16 (the bf16 GEMM named on stderr); a run learned by a --bf16 model
# still continues, the caches' identities hold in bf16 too, and batches give each prompt's text
said=$("$MEGADLM" generate --load gpt --prompt "3 4 5" --max-new-tokens 4 --top-k 1 --bf16 2>&1 >/dev/null)
grep -q '^> --bf16: bf16 GEMM: ' <<<"$said" || bad "generate --bf16 names no bf16 GEMM: $said"
one=(--load dlm_rope --prompt "3 4 5" --gen-length 16 --block-length 4 --steps 4 --bf16)
want=$(gen "${one[@]}")
for c in prefix dual; do
  got=$(gen "${one[@]}" --cache $c)
  [ -n "$want" ] && [ "$got" = "$want" ] || bad "dlm_rope --bf16 --cache $c, one round a block: '$got' vs uncached '$want'"
done
for ck in gpt llama; do
  want=$(gen --load $ck --prompt "10 11 12" --max-new-tokens 20 --top-k 1 --bf16)
  got=$(gen --load $ck --prompt "10 11 12" --max-new-tokens 20 --top-k 1 --bf16 --cache prefix)
  [ "$want" = "$(seq -s ' ' 10 32)" ] || bad "$ck --bf16: greedy '$want' does not continue the run"
  [ "$got" = "$want" ] || bad "$ck --bf16 --cache prefix: '$got' vs uncached '$want'"
done
single=$(gen --load llama --max-new-tokens 8 --top-k 1 --bf16 --input-file prompts.txt --inference-max-batch-size 1)
three=$(gen --load llama --max-new-tokens 8 --top-k 1 --bf16 --input-file prompts.txt --inference-max-batch-size 3)
[ "$single" = "$three" ] || bad "--bf16 batch of 3 '$three' vs one by one '$single'"

# ---- bad flags
expect() { local want=$1; shift; expect_error "$want" "$MEGADLM" generate "$@" || fail=1; }
expect "--cache 'both': expected none, prefix or dual" --load dlm --cache both
expect "--cache dual: --load gpt holds an autoregressive model" --load gpt --cache dual
expect "--threshold 1.5: expected a probability" --load dlm --threshold 1.5
expect "--threshold and --factor" --load dlm --threshold 0.9 --factor 1
expect "--threshold compares the predicted token's probability" --load dlm --threshold 0.9 --remasking random
expect "--threshold: --load gpt holds an autoregressive model" --load gpt --threshold 0.9
expect "--input-file nope.txt: No such file" --load dlm --input-file nope.txt
expect "--input-file and --prompt" --load dlm --input-file prompts.txt --prompt "1"
expect "--inference-max-batch-size: expected an integer >= 1" --load dlm --inference-max-batch-size 0
printf '%s\n' "$(seq -s ' ' 1 40)" "1 2" > long.txt
expect "prompts that outgrow the model run one at a time" --load gpt --input-file long.txt --max-new-tokens 20
exit $fail
