#!/usr/bin/env bash
# The routed experts' two schedules (src/core/transformer/moe/experts.h) on MoE shapes: the loop
# over experts (each GEMM on all threads) against --moe-grouped-gemm (one parallel region over
# the experts, each expert's GEMMs on one thread), for one MoE layer's forward + backward and for
# the experts alone (bench/moe_grouped_bench.c). The variants alternate within each round; the
# medians over ROUNDS and their ratio (speed-up = loop time / grouped time, > 1: grouped faster)
# per shape and thread count, the experts' GEMM rate, and whether both variants gave the same
# bits (output, input gradient, every weight gradient; memcmp), with the CPU and the BLAS kernels.
#
# usage: bash bench/bench_moe.sh [BUILD=build]
#   env: THREADS="2 1" (default: all CPUs, then 1), ROUNDS=5,
#        SHAPES="C:F:E:k:N[:skew] ..." (hidden, --moe-ffn-hidden-size, experts, top-k, tokens per
#        micro-batch, routing skew: 0 balanced, 1-2 some experts get several times the mean rows),
#        SWIGLU=1, OPENBLAS_CORETYPE (default: the kernel set megadlm runs, bench/blas_kernels.sh)
# About 2.5 minutes on 2 cores with the defaults; ROUNDS=9 or more shapes for a closer look.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" --target moe_grouped_bench megadlm -j "$(nproc)" > /dev/null
BIN=$BUILD/bench/moe_grouped_bench
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"
CPUS=$(env -u OMP_NUM_THREADS nproc) # nproc itself honours OMP_NUM_THREADS
THREADS=${THREADS:-$( [ "$CPUS" -gt 1 ] && echo "$CPUS 1" || echo 1 )}
ROUNDS=${ROUNDS:-5}
# coarse experts (Mixtral-like top-2 of 8 and 16), fine-grained ones (OLMoE / LLaDA-MoE-like: 64
# experts of small width, top-8) at 1024 and 4096 tokens, and two with skewed routing
SHAPES=${SHAPES:-"512:1024:8:2:2048 1024:1024:16:2:1024 1024:512:8:2:2048:1.0 1024:256:64:8:1024 512:256:64:8:4096 1024:256:64:8:1024:0.5"}
echo "== MoE experts: loop over experts vs --moe-grouped-gemm (speed-up = loop / grouped, median of $ROUNDS alternating rounds)"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| $CPUS cores | load average $(cut -d' ' -f1-3 /proc/loadavg)" \
  "| OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} | SwiGLU ${SWIGLU:-1}"
for threads in $THREADS; do
  first=1
  for shape in $SHAPES; do
    IFS=: read -r C F E k N skew <<< "$shape"
    OMP_NUM_THREADS=$threads "$BIN" header=$first C="$C" F="$F" E="$E" k="$k" N="$N" \
      skew="${skew:-0}" swiglu="${SWIGLU:-1}" rounds="$ROUNDS"
    first=0
  done
done
echo "(rows/e: the fewest and most rows an expert got; experts x: loop / grouped time of the experts'"
echo " forward and backward alone; GFLOP/s: the experts' GEMM FLOPs (3 x 2 R C (FC1 + F)) per second)"
