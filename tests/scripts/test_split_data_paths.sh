#!/usr/bin/env bash
# --train-data-path / --valid-data-path / --test-data-path: each split reads its own datasets.
# Validation on a second dataset gives a different loss from validation on the training data
# (the path is used), a run with the same data for both matches --data-path with the documents
# of one file, and the flag rules are refused.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
printf '{"text": "%s"}\n' "In the beginning God created the heaven and the earth." \
    "And the earth was without form, and void." "And God said, Let there be light." \
    "And God saw the light, that it was good." > a.jsonl
printf '{"text": "%s"}\n' "0123456789 9876543210 0123456789" "zzzz yyyy xxxx wwww vvvv" \
    "QWERTY ASDFGH ZXCVBN" "!!!! ???? .... ,,,," > b.jsonl
for f in a b; do
  "$MEGADLM" preprocess --input $f.jsonl --output-prefix $f --tokenizer-type ByteLevel \
      --append-eod > /dev/null || { echo "FAILED: preprocess $f"; exit 1; }
done
common=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
        --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 2 --train-iters 20
        --lr 3e-3 --tokenizer-type ByteLevel --log-interval 10 --eval-interval 10 --eval-iters 2
        --hidden-dropout 0 --attention-dropout 0)
val() { grep -o 'validation loss at iteration 20 | lm loss value: [^ ]*' "$1" | head -1 | awk '{print $NF}'; }
"$MEGADLM" train "${common[@]}" --train-data-path a_text_document --valid-data-path a_text_document > aa.log 2>&1
"$MEGADLM" train "${common[@]}" --train-data-path a_text_document --valid-data-path b_text_document \
    --test-data-path b_text_document > ab.log 2>&1
va=$(val aa.log); vb=$(val ab.log)
echo "validation loss on the training text: $va, on another text: $vb"
[ -n "$va" ] && [ -n "$vb" ] && [ "$va" != "$vb" ] || { echo "FAILED: --valid-data-path not used"; tail -3 ab.log; fail=1; }
grep -q "test loss" ab.log || { echo "FAILED: no test evaluation from --test-data-path"; fail=1; }
grep -q "test loss" aa.log && { echo "FAILED: a test evaluation without --test-data-path"; fail=1; }
# training losses do not depend on where validation data comes from
diff <(grep -o 'lm loss: [^ ]*' aa.log) <(grep -o 'lm loss: [^ ]*' ab.log) > /dev/null ||
  { echo "FAILED: training changed with the validation data"; fail=1; }
expect() { local want=$1; shift; expect_error "$want" "$MEGADLM" train "${common[@]}" "$@" || fail=1; }
expect "--train-data-path" --valid-data-path b_text_document
expect "exclude --data-path" --train-data-path a_text_document --data-path b_text_document
# three words are three prefixes (Megatron's get_blend_from_list), the first one missing
expect "--valid-data-path: x.idx: cannot open" --train-data-path a_text_document --valid-data-path x y z
expect "missing" --train-data-path missing
exit $fail
