#!/usr/bin/env bash
# The default build runs on every x86-64-v3 CPU (AVX2 + FMA): the binary holds no AVX-512
# instruction (no zmm register, none of registers 16-31, no opmask register), whatever the CPU
# it was built on. A build with -DMEGADLM_NATIVE=ON targets its own CPU and is skipped.
# A build made with -march=native on an AVX-512 machine fails this (measured: 3676 such
# instructions in megadlm).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [ "${MEGADLM_NATIVE:-OFF}" = ON ]; then echo "SKIPPED: a -DMEGADLM_NATIVE=ON build"; exit 0; fi
fail=0
for bin in "$MEGADLM" "$BUILD"/tests/test_kernels_gradcheck; do
  n=$(objdump -d --no-show-raw-insn "$bin" | grep -cE '%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|%k[0-7]\b' || true)
  if [ "$n" = 0 ]; then echo "ok $(basename "$bin"): no AVX-512 instruction"
  else
    echo "FAIL $(basename "$bin"): $n AVX-512 instructions, e.g.:"
    objdump -d --no-show-raw-insn "$bin" | grep -E '%zmm|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|%k[0-7]\b' | head -3
    fail=1
  fi
done
# the instructions it does use: AVX2 and FMA are expected (x86-64-v3)
n=$(objdump -d --no-show-raw-insn "$MEGADLM" | grep -cE '\bvfmadd|\bvpbroadcast|%ymm' || true)
[ "$n" -gt 0 ] && echo "ok megadlm: $n AVX2/FMA instructions (built for x86-64-v3)" ||
  { echo "FAIL: no AVX2 instruction at all: is the build targeting x86-64-v3?"; fail=1; }
exit $fail
