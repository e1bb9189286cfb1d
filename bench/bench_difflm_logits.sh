#!/usr/bin/env bash
# Masked diffusion (difflm-noshift): the output layer and cross-entropy on the masked rows only
# (the default) against every row (--difflm-full-logits, MegaDLMs'), measured in one run.
#  1. training: GPT-2 124M shapes (12 layers, h=768, 12 heads, s=256, micro-batch 4, vocabulary
#     50257 padded to 50304, fp32, dropout 0), WARMUP + ITERS iterations per run, the two modes
#     alternating for ROUNDS rounds; per mode the best and the median of all timed iterations,
#     and the ratio masked / full of each. Target: <= 0.85x. Memory, from `--log-memory` (the
#     tracked allocator, after the first iteration): the logits buffer of the activation store
#     (masked: one chunk of 256 rows, the loss-weighted rows run in chunks with their backward
#     fused into forward; full: all b x s = 1024 rows) and all saved activations, masked / full.
#     Target (logits): <= 0.55x.
#  2. sampling (LLaDA's sampler): --gen-length 128 --block-length 32 --steps 128 from a model of
#     the demo's shape (scripts/demo.sh: 4 layers, h=128, 4 heads, GPT-2's padded vocabulary)
#     but --seq-length 160 (the demo's 64 cannot hold 128 generated tokens), trained one step on
#     mock data (the speed does not depend on the weights); the two modes alternating for
#     ROUNDS rounds, tokens per second = 128 / the wall time of `megadlm generate` (process
#     start and checkpoint load included); the texts must be identical. Target: >= 1.5x.
#
# usage: bash bench/bench_difflm_logits.sh [BUILD=build]
#        env: ROUNDS=3 ITERS=3 WARMUP=1 PARTS="train sample" (either or both)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ROUNDS=${ROUNDS:-3} ITERS=${ITERS:-3} WARMUP=${WARMUP:-1} PARTS=${PARTS:-"train sample"}
OUT=$BUILD/bench/difflm_logits
rm -rf "$OUT"; mkdir -p "$OUT"
M=$BUILD/megadlm
[ -x "$M" ] || { echo "bench: $M not built (make build)" >&2; exit 1; }
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$M"

dlm=(--model-running-mode difflm-noshift --mask-token 50257 --difflm-varilen-prob 0
     --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --lr 1e-4
     --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0 --log-memory)
gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
      --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 4
      --train-iters $((WARMUP + ITERS)))

# statistics of the numbers on stdin: "best median"
stats() { sort -g | awk '{v[NR]=$1} END {printf "%s %s\n", v[1], (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
iter_ms() { grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{print $NF}' | tail -n +$((WARMUP + 1)); }

echo "== difflm logits bench: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg) (shared machine)"

train() {
echo "-- training, GPT-2 124M shapes, s=256 b=4: $ROUNDS rounds x $ITERS timed iterations per mode"
for r in $(seq "$ROUNDS"); do
  for mode in masked full; do
    extra=(); [ $mode = full ] && extra=(--difflm-full-logits)
    "$M" train "${gpt2[@]}" "${dlm[@]}" "${extra[@]}" > "$OUT/train_${mode}_$r.log" 2>&1 ||
      { echo "bench: training ($mode) failed, see $OUT/train_${mode}_$r.log" >&2; exit 1; }
    iter_ms "$OUT/train_${mode}_$r.log" >> "$OUT/train_$mode.ms"
  done
done
grep -m1 '> BLAS:' "$OUT/train_masked_1.log" | sed 's/^/   /'
echo "   OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
read -r tb tm < <(stats < "$OUT/train_masked.ms"); read -r fb fm < <(stats < "$OUT/train_full.ms")
printf '   %-8s best %9.1f ms  median %9.1f ms\n' masked "$tb" "$tm" full "$fb" "$fm"
awk -v tb="$tb" -v tm="$tm" -v fb="$fb" -v fm="$fm" 'BEGIN {
  printf "   iteration time masked / full: best %.3fx, median %.3fx   (target <= 0.85x)\n", tb / fb, tm / fm }'
# measured bytes of a --log-memory row ("logits per store", "memory saved activations") of a log
measured() { grep -o "$2 (bytes) | predicted [0-9]* | measured [0-9]*" "$1" | awk '{print $NF}'; }
for what in "logits per store" "memory saved activations"; do
  mb_=$(measured "$OUT/train_masked_1.log" "$what"); fb_=$(measured "$OUT/train_full_1.log" "$what")
  [ -n "$mb_" ] && [ -n "$fb_" ] || { echo "bench: no '$what' row in the --log-memory output" >&2; exit 1; }
  target=""; [ "$what" = "logits per store" ] && target="   (target <= 0.55x)"
  awk -v m="$mb_" -v f="$fb_" -v w="$what" -v t="$target" 'BEGIN {
    printf "   %s: masked %.2f MB, full %.2f MB, masked / full %.3fx%s\n", w, m / 1048576, f / 1048576, m / f, t }'
done

}

sample() {
echo "-- sampling: --gen-length 128 --block-length 32 --steps 128, demo shape at s=160"
demo=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 160
      --max-position-embeddings 160 --micro-batch-size 1 --global-batch-size 1 --train-iters 1)
"$M" train "${demo[@]}" "${dlm[@]}" --save "$OUT/demo_dlm" > "$OUT/demo_train.log" 2>&1 ||
  { echo "bench: demo-shape training failed, see $OUT/demo_train.log" >&2; exit 1; }
gen=(generate --load "$OUT/demo_dlm" --prompt "17 18 19" --gen-length 128 --block-length 32
     --steps 128)
for r in $(seq "$ROUNDS"); do
  for mode in masked full; do
    extra=(); [ $mode = full ] && extra=(--difflm-full-logits)
    t0=$(date +%s.%N)
    "$M" "${gen[@]}" "${extra[@]}" > "$OUT/gen_${mode}_$r.txt" 2> "$OUT/gen_${mode}_$r.log"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f\n", 128 / (b - a)}' >> "$OUT/gen_$mode.tps"
    cmp -s "$OUT/gen_masked_1.txt" "$OUT/gen_${mode}_$r.txt" ||
      { echo "bench: the sampled text differs ($mode, round $r)" >&2; exit 1; }
  done
done
# tokens/s: higher is better, so "best" is the largest
read -r sw sm < <(stats < "$OUT/gen_masked.tps"); read -r gw gm < <(stats < "$OUT/gen_full.tps")
sb=$(sort -g "$OUT/gen_masked.tps" | tail -1); gb=$(sort -g "$OUT/gen_full.tps" | tail -1)
printf '   %-8s best %8.1f tok/s  median %8.1f tok/s\n' masked "$sb" "$sm" full "$gb" "$gm"
awk -v sb="$sb" -v sm="$sm" -v gb="$gb" -v gm="$gm" 'BEGIN {
  printf "   sampling speed masked / full: best %.2fx, median %.2fx   (target >= 1.5x)\n", sb / gb, sm / gm }'
echo "   the sampled texts are identical in every round"
}

for part in $PARTS; do "$part"; done
