#!/usr/bin/env bash
# Every subcommand refuses an integer flag's bad word the way `train` does, in the same words:
# a fraction (2.5), trailing text (12abc) and a value beyond a 32-bit int (99999999999) each
# end the command with a non-zero status and "FLAG: expected an integer, found 'WORD'" or
# "FLAG: 'WORD' is out of range (a 32-bit integer: ...)". And die(), the internal-error exit,
# says where it gave up: "error: MESSAGE (at src/FILE.c:LINE)".
set -uo pipefail
# shellcheck source=tests/scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
bad() { echo "FAILED: $*"; fail=1; }

RANGE="is out of range (a 32-bit integer: from -2147483648 to 2147483647)"
# refused WORD FLAG SUBCOMMAND ARGS...: `megadlm SUBCOMMAND ARGS... FLAG WORD` exits non-zero
# with an "error:" line that holds train's message for WORD
refused() {
  local word=$1 flag=$2 want out rc
  shift 2
  if [ "$word" = 99999999999 ]; then want="$flag: '$word' $RANGE"
  else want="$flag: expected an integer, found '$word'"; fi
  out=$("$MEGADLM" "$@" "$flag" "$word" 2>&1 < /dev/null); rc=$?
  if [ $rc -eq 0 ]; then
    bad "megadlm $* $flag $word: accepted (exit 0)"
  elif ! grep "error:" <<<"$out" | grep -qF -- "$want"; then
    bad "megadlm $* $flag $word: expected an error line with \"$want\", got: $(head -3 <<<"$out")"
  fi
}

tok=(--tokenizer-type NullTokenizer --vocab-size 100)
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4)
printf '{"text": "a"}\n' > in.jsonl
mkdir -p hf out
for w in 2.5 12abc 99999999999; do
  refused $w --num-layers train "${model[@]}" --train-iters 1 --lr 1e-3 --mock-data
  refused $w --vocab-size train "${model[@]}" --train-iters 1 --lr 1e-3 --mock-data
  refused $w --top-k generate --load ck
  refused $w --seq-length convert --from hf hf out
  refused $w --make-vocab-size-divisible-by convert --from hf hf out
  refused $w --num-output-shards convert --to hf ck out
  refused $w --vocab-size convert --from hf --tokenizer-type NullTokenizer hf out
  refused $w --vocab-size tokenize --tokenizer-type NullTokenizer
  refused $w --vocab-size preprocess --input in.jsonl --output-prefix p --tokenizer-type NullTokenizer
  refused $w --workers preprocess --input in.jsonl --output-prefix p "${tok[@]}"
  refused $w --log-interval preprocess --input in.jsonl --output-prefix p "${tok[@]}"
  refused $w --num-layers memory "${model[@]}"
  refused $w --micro-batch-size memory "${model[@]}"
  refused $w --num-layers plan "${model[@]}" --world-size 2 --device A100-80GB
  refused $w --top plan "${model[@]}" --world-size 2 --device A100-80GB
done
# a word below a flag's range names what the flag takes, as train's does
out=$("$MEGADLM" convert --from hf --seq-length 0 hf out 2>&1)
grep -qF -- "--seq-length: expected a positive integer, found '0'" <<<"$out" ||
  bad "convert --seq-length 0: $out"
out=$("$MEGADLM" plan "${model[@]}" --world-size 2 --device A100-80GB --top -1 2>&1)
grep -qF -- "--top: expected a non-negative integer, found '-1'" <<<"$out" || bad "plan --top -1: $out"

# die(): a progress.txt that cannot be opened for appending (a directory) ends train in die()
mkdir -p sv/progress.txt
out=$("$MEGADLM" train "${model[@]}" --train-iters 1 --lr 1e-3 --mock-data --vocab-size 100 \
      --eval-iters 0 --log-progress --save sv 2>&1); rc=$?
if [ $rc -eq 0 ]; then
  bad "train --log-progress with progress.txt a directory: accepted"
elif ! grep -qE "error: --log-progress: .* \(at src/training/monitor\.c:[0-9]+\)$" <<<"$out"; then
  bad "die() without its place: $(grep error: <<<"$out" | head -3)"
fi

[ $fail -eq 0 ] && echo "PASSED"
exit $fail
