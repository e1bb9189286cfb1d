#!/usr/bin/env bash
# HuggingFaceTokenizer on MegaDLMs' tokenizer directories (data/tokenizers/gpt2_tokenizer and
# gptneox_tokenizer, given as directories the way MegaDLMs' launch lines give them) against
# Hugging Face's own tokenizers library (the npm package `tokenizers`, tests/node/hf_encode.js,
# on each directory's tokenizer.json):
#   - identical ids for every line of ~5.5 MB of text (tests/python/tokenizer_text.py: generated
#     multilingual lines, emoji, code, whitespace runs, numbers, CJK, combining marks, and the
#     KJV corpus) and of lines dense in added tokens and runs of spaces; megadlm's --decode
#     equals the library's decode (the end-of-document id left out: megadlm drops it);
#   - text that is not UTF-8: GPT-NeoX (no tokens for C0, C1, F5..FF) equals the library on the
#     lossily decoded text (TextDecoder); GPT-2 keeps every byte (decode gives the input back);
#   - added tokens with single_word, lstrip, rstrip, normalized true and false;
#   - preprocess of data/kjv.jsonl equals the library document by document, plus the eod;
#   - the vocabulary size (the library's size with added tokens: Megatron's len(tokenizer)) and
#     eod/bos/pad/mask: the library's ids of the eos/bos/pad/mask tokens that
#     special_tokens_map.json / tokenizer_config.json name (read here by Python);
#   - GPT-2's directory without tokenizer.json (vocab.json + merges.txt) gives the same ids;
#   - a SentencePiece-style directory shaped like MegaDLMs' llama2_tokenizer (byte_fallback,
#     U+2581, add_bos_token; built by tests/python/hf_tokenizer_dirs.py, since Llama 2's files
#     are not in the repository): the library's ids with its BOS, and its decode;
#   - add_bos_token true on GPT-NeoX's directory starts every line with its bos (0);
#   - refusals: a byte_fallback tokenizer.json that is not shaped like Llama 2's, a directory
#     without model files, add_eos_token true.
# Needs `make test-deps` (npm ci in tests/node).
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
if [ ! -d "$SRC/tests/node/node_modules/tokenizers" ] || ! command -v node > /dev/null; then
  echo "FAILED: node and the npm package tokenizers are needed: run 'make test-deps'"
  exit 1
fi
fail=0
die() { echo "FAILED: $*"; fail=1; }
NODE="node $SRC/tests/node/hf_encode.js"
H="$PY $SRC/tests/python/hf_tokenizer_dirs.py"
TD=$SRC/data/tokenizers
hf() { "$MEGADLM" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$@"; }
same() {  # what reference got
  if cmp -s "$2" "$3"; then echo "$1: identical ($(wc -l < "$2") lines)"; else
    die "$1: $2 and $3 differ"; diff "$2" "$3" | head -6; fi
}

"$PY" "$SRC/tests/python/tokenizer_text.py" 4 1000000 "$SRC/data/kjv.jsonl" > text.txt || die "text"
$H special-text 5 4000 "$TD/gpt2_tokenizer" "$TD/gptneox_tokenizer" > special.txt || die "special text"
cat special.txt >> text.txt
echo "text: $(wc -l < text.txt) lines, $(wc -c < text.txt) bytes"

for name in gpt2 gptneox; do
  dir=$TD/${name}_tokenizer
  $NODE encode "$dir/tokenizer.json" text.txt > $name.ref || die "$name: node encode"
  hf "$dir" < text.txt > $name.ids || die "$name: megadlm tokenize"
  same "$name encode" $name.ref $name.ids
  # the special ids, as transformers reads the directory
  mapfile -t toks < <($H specials "$dir")
  $NODE info "$dir/tokenizer.json" "${toks[@]}" | tr '\n' ' ' |
    awk '{print "vocab " $2 " eod " $3 " bos " $4 " pad " $5 " mask " $6}' > $name.special.ref
  hf "$dir" --special-ids > $name.special
  same "$name vocab, eod, bos, pad, mask ($(cat $name.special))" $name.special.ref $name.special
  eod=$(awk '{print $4}' $name.special)
  $NODE decode "$dir/tokenizer.json" $name.ids "$eod" > $name.dec.ref || die "$name: node decode"
  hf "$dir" --decode < $name.ids > $name.dec
  same "$name decode" $name.dec.ref $name.dec
done
# decode(encode(x)) == x where nothing is normalized and the eod is not in the text
grep -v -F '<|endoftext|>' text.txt > noeod.txt
hf "$TD/gpt2_tokenizer" < noeod.txt | hf "$TD/gpt2_tokenizer" --decode | cmp -s - noeod.txt \
  || die "gpt2: decode(encode(x)) != x"

# ---- text that is not UTF-8
$H invalid-utf8 6 3000 > bad.txt
$NODE encode "$TD/gptneox_tokenizer/tokenizer.json" bad.txt > bad.ref || die "node bad"
hf "$TD/gptneox_tokenizer" < bad.txt > bad.ids || die "gptneox: invalid UTF-8 refused"
same "gptneox invalid UTF-8 (U+FFFD per maximal ill-formed subsequence)" bad.ref bad.ids
hf "$TD/gpt2_tokenizer" < bad.txt | hf "$TD/gpt2_tokenizer" --decode > bad.dec
LC_ALL=C sed 's/<|endoftext|>//g' bad.txt | cmp -s - bad.dec \
  || die "gpt2: invalid bytes not kept by encode/decode (the eod is dropped)"

# ---- added tokens: single_word, lstrip, rstrip, normalized
$H flags "$TD/gptneox_tokenizer/tokenizer.json" > flags.json
$H flags-text 7 20000 > flags.txt
$NODE encode flags.json flags.txt > flags.ref || die "node flags"
hf flags.json < flags.txt > flags.ids || die "flags.json refused"
same "added-token flags" flags.ref flags.ids

# ---- preprocess: per document, with the eod appended
"$MEGADLM" preprocess --input "$SRC/data/kjv.jsonl" --output-prefix kjv --workers 2 \
  --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TD/gptneox_tokenizer" --append-eod \
  > pre.log 2>&1 || { die "preprocess failed"; cat pre.log; }
$NODE jsonl "$TD/gptneox_tokenizer/tokenizer.json" "$SRC/data/kjv.jsonl" | sed 's/$/ 0/; s/^ 0$/0/' > kjv.ref
"$PY" "$SRC/tests/python/hf_tokenizer_json.py" read kjv_text_document > kjv.ids
same "gptneox preprocess of kjv.jsonl" kjv.ref kjv.ids

# ---- GPT-2's directory from vocab.json + merges.txt only
mkdir -p gpt2_nojson
cp "$TD/gpt2_tokenizer"/{vocab.json,merges.txt,tokenizer_config.json,special_tokens_map.json,added_tokens.json} gpt2_nojson/
head -20000 text.txt > part.txt
head -20000 gpt2.ids > part.ref
hf gpt2_nojson < part.txt > part.ids || die "gpt2 vocab.json + merges.txt refused"
same "gpt2 from vocab.json + merges.txt" part.ref part.ids

# ---- SentencePiece style (Llama 2's shape): BOS first, as the library's post-processor adds it
$H sp-dir "$SRC/data/kjv.jsonl" spdir || die "sp-dir"
head -30000 text.txt > sptext.txt; cat bad.txt >> sptext.txt
$NODE encode spdir/tokenizer.json sptext.txt | sed 's/^/1 /; s/ $//' > sp.ref || die "node sp"
hf spdir < sptext.txt > sp.ids || die "megadlm sp"
same "SentencePiece-style directory (byte fallback, BOS)" sp.ref sp.ids
$NODE decode spdir/tokenizer.json sp.ids 2 > sp.dec.ref || die "node sp decode"
hf spdir --decode < sp.ids > sp.dec
same "SentencePiece-style decode" sp.dec.ref sp.dec
hf spdir --special-ids > sp.special
grep -qx "vocab [0-9]* eod 2 bos 1 pad [0-9]* mask [0-9]*" sp.special || die "sp special ids: $(cat sp.special)"

# ---- add_bos_token true: bos (GPT-NeoX: <|endoftext|>, 0) first
mkdir -p bos && cp "$TD/gptneox_tokenizer"/* bos/
sed -i 's/"add_bos_token": false/"add_bos_token": true/' bos/tokenizer_config.json
head -2000 text.txt > bostext.txt
sed 's/^/0 /; s/ $//' <(head -2000 gptneox.ids) > bos.ref
hf bos < bostext.txt > bos.ids || die "add_bos_token true refused"
same "add_bos_token true" bos.ref bos.ids

# ---- refusals
# shellcheck disable=SC2317 # (run by expect_error)
hf_x() { echo x | hf "$@"; }
refused() {  # path message
  if expect_error "$2" hf_x "$1"; then echo "refused: $ERR_OUT"; else die "$1"; fi
}
$H byte-fallback "$TD/gptneox_tokenizer/tokenizer.json" > sp.json
refused sp.json "sp.json: decoder: with model.byte_fallback true (SentencePiece-style BPE) only Llama 2's is supported"
mkdir -p empty
refused empty "--tokenizer-model empty: a Hugging Face tokenizer directory needs tokenizer.json, or vocab.json and merges.txt"
mkdir -p eos && cp "$TD/gptneox_tokenizer"/* eos/
sed -i 's/"add_eos_token": false/"add_eos_token": true/' eos/tokenizer_config.json
refused eos "--tokenizer-model eos/tokenizer_config.json: add_eos_token true is not supported"

[ $fail -eq 0 ] && echo "test_hf_tokenizer_dirs: all checks passed"
exit $fail
