#!/usr/bin/env bash
# Activation recomputation: time and memory per mode, measured in one run.
# For GPT-2 124M shapes at s=1024, b=1 and a Llama-style shape, each mode trains WARMUP + ITERS
# iterations; printed per mode: iteration time relative to no recomputation, the largest saved
# activation bytes of any layer (the tracked allocator's measurement), and that figure divided by
# the paper's per-layer count at 4-byte values (Korthikanti et al. 2022, doubled):
#   none 2*sbh(34 + 5as/h)   selective 2*34sbh   full 2*2sbh.
# Targets (bench, not test): selective <= 1.04x, full <= 1.33x the time of none; memory <= 1.
# A shared machine's speed drifts by tens of percent over minutes: the modes run alternating for
# ROUNDS rounds, and each mode's time is the median of all its timed iterations.
#
# usage: bash bench/bench_recompute.sh [BUILD=build]
#   env: ITERS=3 WARMUP=1 ROUNDS=2 SHAPES="gpt2 llama" OPENBLAS_CORETYPE (default: the kernels
#        megadlm runs)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ITERS=${ITERS:-3}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
SHAPES=${SHAPES:-"gpt2 llama"}
OUT=$BUILD/bench
mkdir -p "$OUT"
[ -x "$BUILD/megadlm" ] || { echo "bench: $BUILD/megadlm not built (make build)" >&2; exit 1; }
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"

S=1024 B=1
gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12)
# Llama/Qwen3-style at a similar size: RMSNorm, RoPE, SwiGLU, GQA (4 groups), qk-layernorm,
# no biases, untied output layer.
llama=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --normalization RMSNorm
       --position-embedding-type rope --swiglu --group-query-attention --num-query-groups 4
       --qk-layernorm --disable-bias-linear --untie-embeddings-and-output-weights)
common=(--seq-length $S --max-position-embeddings $S --micro-batch-size $B --global-batch-size $B
        --mock-data --tokenizer-type NullTokenizer --vocab-size 50256 --lr 1e-4
        --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-iters 0 --log-memory
        --train-iters $((WARMUP + ITERS)))
declare -A MODE=(
  [none]=""
  [selective]="--recompute-granularity selective"
  [full]="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
)
ORDER=(none selective full)

# the per-iteration times after the warm-up
iter_times() { grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{print $NF}' |
  tail -n +$((WARMUP + 1)); }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
max_layer_bytes() { grep -o 'saved activations layer [0-9]* (bytes) | measured [0-9]*' "$1" |
  awk '{print $NF}' | sort -g | tail -1; }

echo "== recompute bench: s=$S b=$B, fp32, $ROUNDS rounds x $ITERS timed iterations per mode (after $WARMUP), $(nproc) cores"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC'), OpenBLAS kernels $OPENBLAS_CORETYPE, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for shape in $SHAPES; do
  declare -n ARGS=$shape
  h=768 a=12
  printf '\n%-6s %-10s %10s %8s %16s %14s %8s\n' shape mode ms/iter "x none" "saved B/layer" "paper B/layer" ratio
  for mode in "${ORDER[@]}"; do : > "$OUT/recompute_${shape}_${mode}.ms"; done
  for r in $(seq "$ROUNDS"); do
    for mode in "${ORDER[@]}"; do
      log=$OUT/recompute_${shape}_${mode}.log
      # shellcheck disable=SC2086
      "$BUILD/megadlm" train "${ARGS[@]}" "${common[@]}" ${MODE[$mode]} > "$log" 2>&1 ||
        { echo "bench: $mode failed, see $log" >&2; exit 1; }
      iter_times "$log" >> "$OUT/recompute_${shape}_${mode}.ms"
    done
  done
  base_ms=""
  for mode in "${ORDER[@]}"; do
    log=$OUT/recompute_${shape}_${mode}.log
    ms=$(median < "$OUT/recompute_${shape}_${mode}.ms"); bytes=$(max_layer_bytes "$log")
    [ -z "$base_ms" ] && base_ms=$ms
    paper=$(awk -v s=$S -v b=$B -v h=$h -v a=$a -v m=$mode 'BEGIN {
      sbh = s * b * h
      if (m == "none") x = 2 * sbh * (34 + 5 * a * s / h); else if (m == "selective") x = 2 * 34 * sbh; else x = 2 * 2 * sbh
      printf "%.0f", x }')
    awk -v sh=$shape -v m=$mode -v ms=$ms -v base=$base_ms -v by=$bytes -v p=$paper 'BEGIN {
      printf "%-6s %-10s %10.1f %7.3fx %16d %14d %8.3f\n", sh, m, ms, ms / base, by, p, by / p }'
  done
  unset -n ARGS
done
echo
echo "targets: selective <= 1.04x, full <= 1.33x the time of none; saved/paper <= 1 for every mode"
echo "(the Llama-style row is compared with the paper's GPT formula at the same s, h, a)"
