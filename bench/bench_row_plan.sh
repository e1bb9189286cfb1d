#!/usr/bin/env bash
# Cost of sequence parallelism's row plan: with --sequence-parallel every GEMM over the gathered
# token rows runs once per piece of each rank's shard (--tp-comm-overlap-num-splits, default 2),
# with or without --tp-comm-overlap, so that the overlapped and the plain path make the same BLAS
# calls and get the same bits on any BLAS (docs/architecture/parallelism.md, "The row plan"). This times one rank's GEMMs of
# a GPT layer and the output layer as one call over all rows against the plan's calls, the two
# alternating in one run, under each OpenBLAS kernel set given.
#
# usage: bash bench/bench_row_plan.sh   env: CORETYPES="default Haswell SkylakeX" (what the CPU
#        runs) SECONDS_PER_CASE=1 THREADS=1 (a rank's threads) SHAPES="N H FFN VOCAB T PIECES;..."
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LIB=/usr/lib/x86_64-linux-gnu/openblas-openmp
gcc -O2 -std=c11 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp "$ROOT/bench/row_plan_bench.c" \
  -L"$LIB" -Wl,-rpath,"$LIB" -lopenblas -o "$OUT/row_plan_bench"
CORETYPES=${CORETYPES:-default Haswell}
# GPT-2 124M at b=4, s=256 (1024 tokens), TP 2; the TP overlap bench's layer (h 1024, s 512, b 2)
SHAPES=${SHAPES:-"1024 768 3072 50304 2 2;1024 1024 4096 32000 2 2;1024 768 3072 50304 2 4"}
echo "== row plan cost: one GEMM over all token rows vs one per piece of each shard"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| $(nproc) cores | load average $(cut -d' ' -f1-3 /proc/loadavg) | ${THREADS:-1} thread(s)"
IFS=';' read -r -a shapes <<< "$SHAPES"
for core in $CORETYPES; do
  for shape in "${shapes[@]}"; do
    # shellcheck disable=SC2086
    if [ "$core" = default ]; then
      env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=${THREADS:-1} "$OUT/row_plan_bench" $shape "${SECONDS_PER_CASE:-1}"
    else
      OPENBLAS_CORETYPE=$core OMP_NUM_THREADS=${THREADS:-1} "$OUT/row_plan_bench" $shape "${SECONDS_PER_CASE:-1}"
    fi | grep -E '^#|^all'
  done
done
