#!/usr/bin/env bash
# Hostile input and bad numerics (issue 13): every case ends with a clear message naming the
# file, flag or iteration at fault and a non-zero exit, on every rank; none crashes, hangs or
# leaves a checkpoint holding a non-finite value.
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMP_NUM_THREADS=1
fail=0
T=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
   --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
   --train-iters 2 --eval-iters 0)
MPI=(timeout 60 mpirun --allow-run-as-root --oversubscribe)

# expect NAME RANKS "message" command... : exits non-zero (not a timeout, not a signal) within
# 60 s, and the message appears RANKS times (once per rank; 1 for a single process).
expect() {
  local name=$1 ranks=$2 want=$3; shift 3
  local out rc n
  out=$("$@" 2>&1); rc=$?
  n=$(grep -cF -- "$want" <<<"$out")
  if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$n" -lt "$ranks" ]; then
    echo "FAILED: $name: rc $rc, expected '$want' from $ranks rank(s), seen $n times; got:"
    tail -5 <<<"$out"; fail=1
  else
    echo "ok: $name"
  fi
}

# mkidx PREFIX DTYPE_CODE ID COUNT: an MMIDIDX dataset of one document of COUNT copies of ID
# (dtype codes as Megatron: 4 int32, 8 uint16)
mkidx() {
  python3 - "$@" <<'PY'
import struct, sys
prefix, code, tok, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fmt = {4: "<i", 8: "<H"}[code]
with open(prefix + ".bin", "wb") as f:
    f.write(b"".join(struct.pack(fmt, tok) for _ in range(n)))
with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, 1, 2))
    f.write(struct.pack("<i", n) + struct.pack("<q", 0) + struct.pack("<qq", 0, 1))
PY
}

# ---- 1. token ids are checked against the vocabulary where a batch is read ----
printf '{"text": "%s"}\n' "$(yes 50256 | head -200 | tr '\n' ' ' | sed 's/ $//')" > gpt2ids.jsonl
"$MEGADLM" preprocess --input gpt2ids.jsonl --output-prefix gpt2ids --tokenizer-type NullTokenizer \
    --vocab-size 60000 > /dev/null || { echo "FAILED: preprocess of gpt2ids.jsonl"; fail=1; }
D=(--tokenizer-type ByteLevel --data-path)
expect "GPT-2 ids, ByteLevel vocabulary" 1 \
    "dataset gpt2ids_text_document holds id 50256 but the vocabulary has 257" \
    "$MEGADLM" train "${T[@]}" "${D[@]}" gpt2ids_text_document
mkidx u16 8 65535 200
expect "uint16 id 65535, padded vocabulary 384" 1 "dataset u16 holds id 65535 but the vocabulary has 257" \
    "$MEGADLM" train "${T[@]}" "${D[@]}" u16
mkidx neg 4 -1 200
expect "int32 id -1" 1 "dataset neg holds id -1 but the vocabulary has 257" \
    "$MEGADLM" train "${T[@]}" "${D[@]}" neg
mkidx big 4 2147483647 200
expect "int32 id 2^31-1 in a blend" 1 "dataset big holds id 2147483647 but the vocabulary has 257" \
    "$MEGADLM" train "${T[@]}" "${D[@]}" 0.5 big 0.5 big
# every layout: the check is where any rank reads a batch, and the job ends on every rank
expect "TP 2" 1 "holds id 65535" "${MPI[@]}" -np 2 "$MEGADLM" train "${T[@]}" \
    --tensor-model-parallel-size 2 "${D[@]}" u16
expect "PP 2" 1 "holds id 65535" "${MPI[@]}" -np 2 "$MEGADLM" train "${T[@]}" \
    --pipeline-model-parallel-size 2 "${D[@]}" u16
expect "DP 2" 1 "holds id 65535" "${MPI[@]}" -np 2 "$MEGADLM" train "${T[@]}" "${D[@]}" u16

# ---- 3. a startup error under pipeline parallelism ends cleanly (no segfault) ----
mkdir -p badtracker; echo "x" > badtracker/latest_checkpointed_iteration.txt
expect "PP 2 bad tracker" 2 "latest_checkpointed_iteration.txt" "${MPI[@]}" -np 2 "$MEGADLM" \
    train "${T[@]}" --pipeline-model-parallel-size 2 --mock-data --vocab-size 50 --load badtracker

[ $fail -eq 0 ] && echo "all hostile inputs refused"
exit $fail
