#!/usr/bin/env bash
# gemm_bf16 against fp32 sgemm on GPT-2 124M training shapes (bench/bf16_gemm_bench.c): the time
# ratio gemm_bf16 / sgemm per shape for each implementation that runs here (oneDNN, the fp32
# fallback), which one auto picks, the CPU and OpenBLAS's kernel set.
#
# usage: bash bench/bench_bf16_gemm.sh [BUILD=build]
#   env: THREADS (default: all CPUs), SECONDS_PER_CASE=1, OPENBLAS_CORETYPE (default: the kernel
#        set megadlm runs, bench/blas_kernels.sh), EMULATE=1 also runs the shapes with oneDNN limited to AVX-512
#        without bf16 units (DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI: a Cascade Lake / Ice Lake class
#        CPU), to show why auto takes the fallback there.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$BUILD" --target bf16_gemm_bench megadlm -j "$(nproc)" > /dev/null
BIN=$BUILD/bench/bf16_gemm_bench
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"
CPUS=$(env -u OMP_NUM_THREADS nproc) # nproc itself honours OMP_NUM_THREADS
export OMP_NUM_THREADS=${THREADS:-$CPUS}
echo "== gemm_bf16 / sgemm on GPT-2 124M shapes"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| $CPUS cores, $OMP_NUM_THREADS threads | load average $(cut -d' ' -f1-3 /proc/loadavg)" \
  "| bf16 units: $([[ $flags == *" avx512_bf16 "* ]] && echo AVX512_BF16 || echo none)$([[ $flags == *" amx_bf16 "* ]] && echo " AMX" || true)" \
  "| OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
"$BIN" "${SECONDS_PER_CASE:-1}"
if [ "${EMULATE:-0}" = 1 ]; then
  echo "== the same with oneDNN limited to AVX-512 without bf16 units (DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI)"
  DNNL_MAX_CPU_ISA=AVX512_CORE_VNNI "$BIN" "${SECONDS_PER_CASE:-1}"
fi
