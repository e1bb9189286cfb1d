#!/usr/bin/env bash
# bf16 / fp16 conversions (src/core/kernels/bf16.h) give PyTorch's bits: rounding to nearest
# even, ties, subnormals, overflow to infinity, NaNs (tests/python/check_bf16.py), and the same
# bits when bf16.c is compiled for the baseline x86-64 (SSE2), for x86-64-v3 (the project's
# flags) and for this machine's CPU (-march=native): tests/tools/bf16_convert.c built three
# times. Builds nothing.
# Environment (set by CTest): SRC (source tree), BUILD (build tree), WORK (scratch directory).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-torch (the python3 first on PATH may lack it)

tools=()
for t in bf16_convert bf16_convert_x86_64 bf16_convert_native; do
  [ -x "$BUILD/tests/$t" ] || { echo "FAIL: $BUILD/tests/$t not built (cmake --build $BUILD --target $t)"; exit 1; }
  tools+=("$BUILD/tests/$t")
done
"$PY" -c 'import numpy, torch' || { echo "FAIL: $PY lacks numpy/torch (scripts/install-deps.sh --test)"; exit 1; }

rm -rf "$WORK"
mkdir -p "$WORK"
"$PY" "$SRC/tests/python/check_bf16.py" "$WORK" "${tools[@]}"
