#!/usr/bin/env bash
# Packed documents (--reset-attention-mask): the attention time of a sequence of S = 2048 tokens
# holding 16 documents of 128 against the same S unpacked, causal and bidirectional, as a ratio
# beside the FLOP ratio (1/16) and the ratio of what the kernel's 64-row query blocks compute
# (bench/attention_packing_bench.c). One thread, the BLAS kernel set megadlm runs.
#
# usage: bash bench/bench_packing.sh [BUILD=build]   env: S=2048 DOCS=16 HEADS=4 HS=64 REPS=5
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
[ -x "$BUILD/megadlm" ] || { echo "bench: $BUILD/megadlm not built (make build)" >&2; exit 1; }
cmake --build "$BUILD" --target attention_packing_bench -j "$(nproc)" > /dev/null
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); BLAS kernels: $OPENBLAS_CORETYPE"
OMP_NUM_THREADS=1 "$BUILD/bench/attention_packing_bench" "${S:-2048}" "${DOCS:-16}" \
  "${HEADS:-4}" "${HS:-64}" "${REPS:-5}"
