#!/usr/bin/env bash
# --data-cache-path (Megatron's dataset index cache): the first run builds the document, sample
# and shuffle indices and writes them as .npy files, which NumPy reads back equal to Megatron's
# (tests/python/megatron_reference.py, a NumPy transcription); a second run reads them (the log
# says so) and trains to the same bits as a run without the cache; a truncated or
# out-of-range cached file is reported by name and rebuilt; a dataset rewritten under the same
# prefix is not matched; a cache path that is a file is a clear error. Also with DP 2 (both
# ranks reading and writing the same directory).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
REF="$SRC/tests/python/megatron_reference.py"
fail=0
printf '{"text": "%s"}\n' "In the beginning God created the heaven and the earth." \
    "And the earth was without form, and void; and darkness was upon the face of the deep." \
    "And God said, Let there be light: and there was light." "And God saw the light, that it was good." \
    "And God called the light Day, and the darkness he called Night." > a.jsonl
"$MEGADLM" preprocess --input a.jsonl --output-prefix a --tokenizer-type ByteLevel --append-eod > /dev/null \
    || { echo "FAILED: preprocess"; exit 1; }
common=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
        --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --train-iters 6
        --lr 3e-3 --tokenizer-type ByteLevel --data-path a_text_document --split 80,20,0
        --log-interval 1 --eval-interval 3 --eval-iters 1 --seed 11)
numbers() { grep -o 'lm loss: [^ ]*\|lm loss value: [^ ]*\|grad norm: [^ ]*' "$1"; }
same_numbers() { # same_numbers REF.log OTHER.log
  [ "$(numbers "$2" | wc -l)" -gt 10 ] && diff <(numbers "$1") <(numbers "$2") > /dev/null \
      || { echo "FAILED: $2: losses differ from $1"; fail=1; }
}
"$MEGADLM" train "${common[@]}" > plain.log 2>&1 || { echo "FAILED: plain run"; tail -3 plain.log; exit 1; }

"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > first.log 2>&1 || { echo "FAILED: first cached run"; tail -3 first.log; fail=1; }
[ "$(grep -c 'built the GPTDataset .* indices of a_text_document and saved them to the cache' first.log)" = 2 ] \
    || { echo "FAILED: the first run did not build and save train and valid"; fail=1; }
grep -q "loaded the GPTDataset" first.log && { echo "FAILED: the first run loaded from an empty cache"; fail=1; }
same_numbers plain.log first.log
# samples wanted: train 6 x 4; valid (6 / 3 + 1) x 1 x 4; test none (split 0)
$PY "$REF" cache-check cache/sub a_text_document 80,20,0 16 11 24,12,4 || fail=1

"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > second.log 2>&1 || { echo "FAILED: second cached run"; tail -3 second.log; fail=1; }
[ "$(grep -c 'loaded the GPTDataset .* indices of a_text_document from the cache' second.log)" = 2 ] \
    || { echo "FAILED: the second run did not read the cache"; grep cache second.log; fail=1; }
grep -q "built the GPTDataset" second.log && { echo "FAILED: the second run rebuilt"; fail=1; }
same_numbers plain.log second.log

# a truncated file: named, rebuilt, same numbers; then read again
f=$(ls cache/sub/*-GPTDataset-train-sample_index.npy)
head -c 140 "$f" > t && mv t "$f"
"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > truncated.log 2>&1 || { echo "FAILED: run on a truncated cache"; tail -3 truncated.log; fail=1; }
grep -q "warning: --data-cache-path: $f: expected .* bytes of data after the header; rebuilding" truncated.log \
    || { echo "FAILED: the truncated file was not reported"; grep -i cache truncated.log; fail=1; }
grep -q "built the GPTDataset train indices" truncated.log || { echo "FAILED: not rebuilt"; fail=1; }
same_numbers plain.log truncated.log
$PY "$REF" cache-check cache/sub a_text_document 80,20,0 16 11 24,12,4 > /dev/null || { echo "FAILED: the rebuilt cache is wrong"; fail=1; }
# out-of-range values of the right size: the shuffle index's first entry set to 2^40
g=$(ls cache/sub/*-GPTDataset-train-shuffle_index.npy)
$PY -c "import numpy, sys; a = numpy.load(sys.argv[1]); a[0] = 2**40; numpy.save(sys.argv[1], a)" "$g"
"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > badvalue.log 2>&1 || { echo "FAILED: run on a bad value"; fail=1; }
grep -q "$g: entry 0 is 1099511627776, not a sample id; rebuilding" badvalue.log \
    || { echo "FAILED: the bad value was not reported"; grep -i cache badvalue.log; fail=1; }
same_numbers plain.log badvalue.log
"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > third.log 2>&1
[ "$(grep -c 'loaded the GPTDataset' third.log)" = 2 ] || { echo "FAILED: the repaired cache is not read"; fail=1; }

# the same prefix with other documents: not matched (built anew, next to the old files)
printf '{"text": "%s"}\n' "Other text entirely, one." "Other text entirely, two, longer than that." \
    "Three." "Four: the fourth document of the new file." "Five, and the last one of them." > a.jsonl
"$MEGADLM" preprocess --input a.jsonl --output-prefix a --tokenizer-type ByteLevel --append-eod > /dev/null
"$MEGADLM" train "${common[@]}" --data-cache-path cache/sub > changed.log 2>&1 || { echo "FAILED: run on changed data"; fail=1; }
grep -q "loaded the GPTDataset" changed.log && { echo "FAILED: indices of the old data reused"; fail=1; }
[ "$(ls cache/sub/*-GPTDataset-train-description.txt | wc -l)" = 2 ] || { echo "FAILED: expected two train descriptions"; fail=1; }

# DP 2 writing and reading one directory
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --data-cache-path dpcache > dp1.log 2>&1 \
    || { echo "FAILED: DP 2 cached run"; tail -3 dp1.log; fail=1; }
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --data-cache-path dpcache > dp2.log 2>&1 \
    || { echo "FAILED: DP 2 second run"; tail -3 dp2.log; fail=1; }
grep -q "loaded the GPTDataset train" dp2.log || { echo "FAILED: DP 2 did not read the cache"; fail=1; }
diff <(numbers dp1.log) <(numbers dp2.log) > /dev/null || { echo "FAILED: DP 2 numbers differ with the cache read"; fail=1; }
ls dpcache | grep -q tmp && { echo "FAILED: temporary files left in the cache"; fail=1; }

# a file where the directory should be
touch notadir
"$MEGADLM" train "${common[@]}" --data-cache-path notadir > notadir.log 2>&1 && { echo "FAILED: a file accepted as cache directory"; fail=1; }
grep -q "error: --data-cache-path" notadir.log && grep -q "notadir" notadir.log \
    || { echo "FAILED: no clear error for a file as cache directory"; cat notadir.log | tail -2; fail=1; }
[ $fail = 0 ] && echo "--data-cache-path: built, read back equal to Megatron's, reused, repaired"
exit $fail
