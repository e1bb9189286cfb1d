#!/usr/bin/env bash
# safetensors interoperability: files written by megadlm are read bit for bit by an
# independent Python reader (struct + json + numpy + torch, tests/python/check_safetensors.py),
# F32 tensors and BF16 / F16 ones converted from floats by the writer (PyTorch's rounding);
# files written by Python are read identically by megadlm (tests/tools/write_safetensors.c),
# as F32 and as BF16 and F16 (st_read_as),
# and a checkpoint directory written by ckpt_save passes the Python checks (tracker,
# state.json, tensor names, values, crc32 metadata).
# Environment (set by CTest): SRC (source tree), BUILD (build tree), WORK (scratch directory).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-numpy and python3-torch
TOOL=$BUILD/tests/write_safetensors
CHECK="$SRC/tests/python/check_safetensors.py"

[ -x "$TOOL" ] || { echo "FAIL: $TOOL not built (cmake --build $BUILD --target write_safetensors)"; exit 1; }
"$PY" -c 'import numpy, torch' || { echo "FAIL: $PY lacks numpy/torch (scripts/install-deps.sh)"; exit 1; }

rm -rf "$WORK"
mkdir -p "$WORK"

echo "== megadlm writes, Python reads"
"$TOOL" write "$WORK/c.safetensors"
"$PY" "$CHECK" read-c "$WORK/c.safetensors"
"$TOOL" dump "$WORK/c.safetensors" > "$WORK/c_dump.json" # and megadlm reads its own file

echo "== megadlm writes BF16 and F16 (converted from floats), Python reads"
"$TOOL" write16 "$WORK/c16.safetensors"
"$PY" "$CHECK" read-c16 "$WORK/c16.safetensors"
"$TOOL" dump "$WORK/c16.safetensors" > "$WORK/c16_dump.json"

echo "== Python writes, megadlm reads (as F32, BF16 and F16)"
"$PY" "$CHECK" write-py "$WORK/py.safetensors" "$WORK/py_expect.json"
"$TOOL" dump "$WORK/py.safetensors" > "$WORK/py_dump.json"
"$PY" "$CHECK" compare "$WORK/py_dump.json" "$WORK/py_expect.json"

echo "== checkpoint directory"
"$TOOL" ckpt "$WORK/ckpt"
"$PY" "$CHECK" check-ckpt "$WORK/ckpt"

echo "PASS"
