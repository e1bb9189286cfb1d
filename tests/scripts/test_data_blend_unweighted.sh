#!/usr/bin/env bash
# Several dataset prefixes without weights (`--data-path P1 P2`, and the per-split
# --train-data-path / --valid-data-path / --test-data-path lists), as Megatron reads them
# (get_blend_from_list): one epoch of each dataset, blended by their sample counts. Checked
# against tests/python/megatron_reference.py, a NumPy transcription of Megatron's builder:
#   1. `megadlm train --data-path P1 P2` trains; the blend sizes, weights and per-dataset
#      sample counts it logs and every GPTDataset index it caches (--data-cache-path) equal
#      Megatron's; the blending index and the samples of that configuration equal Megatron's
#      (dump_gpt_indices);
#   2. the same with per-split lists, one of them a single weighted prefix (one GPTDataset in
#      Megatron's blend_per_split branch, not a blend of one);
#   3. an odd count is prefixes only; mixed weights and prefixes, a split with fewer samples
#      than the run reads, and a dataset with no sample in a split are clear errors.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
REF="$SRC/tests/python/megatron_reference.py"
DUMP="$BUILD/tests/dump_gpt_indices"
"$PY" -c 'import numpy' 2>/dev/null || { echo "FAILED: $PY cannot import numpy"; exit 1; }
[ -x "$DUMP" ] || { echo "FAILED: $DUMP not built"; exit 1; }
fail=0

# two datasets of different sizes: KJV's first 300 lines and the next 150
head -300 "$SRC/data/kjv.jsonl" > p1.jsonl
sed -n 301,450p "$SRC/data/kjv.jsonl" > p2.jsonl
printf '{"text": "%s"}\n' "a short one." "and another." > tiny.jsonl
for f in p1 p2 tiny; do
  "$MEGADLM" preprocess --input $f.jsonl --output-prefix $f --tokenizer-type ByteLevel \
      --append-eod > /dev/null || { echo "FAILED: preprocess $f"; exit 1; }
done
P1=p1_text_document; P2=p2_text_document
SEQ=16; SEED=1234; ITERS=6; GBS=4; EI=1; EINT=3
common=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length $SEQ
        --max-position-embeddings $SEQ --micro-batch-size 2 --global-batch-size $GBS
        --train-iters $ITERS --lr 3e-3 --tokenizer-type ByteLevel --log-interval 1
        --eval-interval $EINT --eval-iters $EI --seed $SEED)
# the samples megadlm (and Megatron) ask of each split
N="$((ITERS * GBS)),$(((ITERS / EINT + 1) * EI * GBS)),$((EI * GBS))"

# 1. --data-path P1 P2
if "$MEGADLM" train "${common[@]}" --data-path $P1 $P2 --split 90,8,2 \
    --data-cache-path cache1 > data.log 2>&1; then
  grep -q "iteration *$ITERS/" data.log || { echo "FAILED: --data-path $P1 $P2 did not train"; fail=1; }
  "$PY" "$REF" train-check data.log cache1 $SEQ $SEED "$N" data 90,8,2 $P1 $P2 > check1.log 2>&1 \
    || { echo "FAILED: --data-path $P1 $P2 differs from Megatron's blend:"; cat check1.log; fail=1; }
  grep -q "^train: blend of 2 datasets" check1.log || { echo "FAILED: no train blend checked"; fail=1; }
else
  echo "FAILED: --data-path $P1 $P2 refused:"; tail -3 data.log; fail=1
fi
# the blending index and the first samples of the same blend, through gpt_data
if "$DUMP" indices dump1 90,8,2 $SEQ $SEED "$N" plain $P1 $P2 > dump1.log 2>&1; then
  "$PY" "$REF" indices dump1 90,8,2 $SEQ $SEED "$N" plain $P1 $P2 > idx1.log 2>&1 \
    || { echo "FAILED: the blending indices differ from Megatron's:"; head -20 idx1.log; fail=1; }
else
  echo "FAILED: dump_gpt_indices:"; cat dump1.log; fail=1
fi
echo "1. --data-path P1 P2: $(grep -c 'blend of' check1.log 2>/dev/null) blended splits equal Megatron's"

# 2. per-split lists: train unweighted, valid a single weighted prefix, test unweighted
if "$MEGADLM" train "${common[@]}" --train-data-path $P1 $P2 --valid-data-path 1.0 $P2 \
    --test-data-path $P2 $P1 --data-cache-path cache2 > split.log 2>&1; then
  "$PY" "$REF" train-check split.log cache2 $SEQ $SEED "$N" per-split "$P1 $P2" "1.0 $P2" \
      "$P2 $P1" > check2.log 2>&1 \
    || { echo "FAILED: per-split lists differ from Megatron's:"; cat check2.log; fail=1; }
  grep -q "test loss" split.log || { echo "FAILED: no test evaluation"; fail=1; }
else
  echo "FAILED: per-split lists without weights refused:"; tail -3 split.log; fail=1
fi
echo "2. per-split lists: $(grep -c 'blend of' check2.log 2>/dev/null) blended splits equal Megatron's"

# 3. errors
expect() { local want=$1; shift; expect_error "$want" "$MEGADLM" train "${common[@]}" "$@" || fail=1; }
# an odd count is prefixes only: 0.5 is a prefix, and its file is missing
expect "--data-path: 0.5.idx: cannot open" --data-path 0.5 $P1 $P2
expect "--data-path: '0.5' (word 1) is a weight but '$P2' (word 3) is not" \
    --data-path 0.5 $P1 $P2 $P1
expect "--valid-data-path: '1' (word 3) is a weight but '$P1' (word 1) is not" \
    --train-data-path $P1 --valid-data-path $P1 $P2 1 $P2
expect "--data-path: the train split holds" --data-path $P1 $P2 --split 90,8,2 --train-iters 40000
expect "--train-data-path: the train split holds" --train-data-path $P1 $P2 --train-iters 40000
expect "--data-path: the train split of tiny_text_document (sequences [0, 2), 26 tokens) holds no sample" \
    --data-path $P1 tiny_text_document --split 100,0,0 --seq-length 32 --max-position-embeddings 32
echo "3. errors are clear"

[ $fail -eq 0 ] && echo "PASSED" || echo "FAILED"
exit $fail
