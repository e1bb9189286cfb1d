#!/usr/bin/env bash
# megadlm preprocess: JSONL and TXT inputs with ByteLevel --append-eod give the expected
# document / token counts and decode back to the input text; NullTokenizer; --workers does
# not change the output; a progress line on stderr every --log-interval documents; malformed
# JSONL lines are reported with FILE:LINE and skipped (fatal with --strict); --help lists every
# flag; bad inputs exit 1 with a clear message and leave no output behind.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
fail=0
die() { echo "FAILED: $*"; fail=1; }

# decode PREFIX EOD: prints every document as bytes (eod ids dropped), documents separated by
# a line "=====" ; uses only the Python standard library to parse MMIDIDX
cat > decode.py <<'PYEOF'
import struct, sys
prefix, eod = sys.argv[1], int(sys.argv[2])
idx = open(prefix + ".idx", "rb").read(); data = open(prefix + ".bin", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00" and struct.unpack_from("<Q", idx, 9)[0] == 1
code = idx[17]; size, fmt = {1: (1, "B"), 4: (4, "i"), 8: (2, "H")}[code]
S, D = struct.unpack_from("<QQ", idx, 18)
lens = struct.unpack_from("<%di" % S, idx, 34)
ptrs = struct.unpack_from("<%dq" % S, idx, 34 + 4 * S)
docs = struct.unpack_from("<%dq" % D, idx, 34 + 12 * S)
out = sys.stdout.buffer
ntok = 0; neod = 0
for d in range(D - 1):
    if d: out.write(b"\n=====\n")
    for s in range(docs[d], docs[d + 1]):
        toks = struct.unpack_from("<%d%s" % (lens[s], fmt), data, ptrs[s])
        ntok += len(toks); neod += sum(1 for t in toks if t == eod)
        out.write(bytes(t for t in toks if t != eod and t < 256))
sys.stderr.write("%d %d %d %d\n" % (D - 1, S, ntok, neod))
PYEOF

# ---- JSONL, ByteLevel, --append-eod
printf '%s\n' '{"text": "First document.\nWith two lines."}' \
  '{"text": "Second: h\u00e9llo \u2603"}' '' '{"text": ""}' '{"text": "last", "other": 1}' > in.jsonl
out=$("$MEGADLM" preprocess --input in.jsonl --output-prefix j --tokenizer-type ByteLevel --append-eod 2>&1)
rc=$?
[ $rc -eq 0 ] || die "jsonl preprocess exited $rc: $out"
# 4 documents (blank line skipped), the empty one adds no sequence: 3 sequences;
# tokens: 31 + 18 (é 2 bytes, ☃ 3 bytes) + 4 bytes + 3 eod = 56
grep -q "key 'text': 4 documents, 3 sequences, 56 tokens -> j_text_document.bin, j_text_document.idx (dtype uint16)" <<<"$out" \
  || die "jsonl summary: $out"
[ -f j_text_document.bin ] && [ -f j_text_document.idx ] || die "jsonl outputs missing"
ls j_* | grep -q tmp && die "temporary files left: $(ls j_*)"
"$PY" decode.py j_text_document 256 > j.decoded 2> j.counts || die "decode failed"
printf 'First document.\nWith two lines.\n=====\nSecond: h\xc3\xa9llo \xe2\x98\x83\n=====\n\n=====\nlast' > j.expected
cmp -s j.decoded j.expected || die "jsonl decode differs: $(od -c j.decoded | head -5)"
[ "$(cat j.counts)" = "4 3 56 3" ] || die "jsonl counts (docs seqs tokens eods): $(cat j.counts)"

# ---- TXT: documents separated by blank lines
printf 'Paragraph one,\nline two.\n\n\n  \nParagraph two.\n\nThree\n' > in.txt
out=$("$MEGADLM" preprocess --input in.txt --output-prefix t --tokenizer-type ByteLevel --append-eod 2>&1) \
  || die "txt preprocess failed: $out"
grep -q "key 'text': 3 documents, 3 sequences, 46 tokens -> t_text_document.bin" <<<"$out" || die "txt summary: $out"
"$PY" decode.py t_text_document 256 > t.decoded 2> t.counts
printf 'Paragraph one,\nline two.\n=====\nParagraph two.\n=====\nThree' > t.expected
cmp -s t.decoded t.expected || die "txt decode differs: $(cat t.decoded)"
[ "$(cat t.counts)" = "3 3 46 3" ] || die "txt counts: $(cat t.counts)"

# ---- several keys, --workers does not change the output, KJV
printf '%s\n' '{"text": "a", "title": "T1"}' '{"text": "bb", "title": ["x", "yz"]}' > keys.jsonl
"$MEGADLM" preprocess --input keys.jsonl --output-prefix k --tokenizer-type ByteLevel --json-keys text,title > /dev/null \
  || die "two keys failed"
[ -f k_text_document.idx ] && [ -f k_title_document.idx ] || die "per-key outputs missing"
"$PY" decode.py k_title_document 256 > k.decoded 2> k.counts
[ "$(cat k.counts)" = "2 3 5 0" ] || die "title counts: $(cat k.counts)"
"$MEGADLM" preprocess --input "$SRC/data/kjv.jsonl" --output-prefix w1 --tokenizer-type ByteLevel --append-eod --workers 1 > /dev/null
"$MEGADLM" preprocess --input "$SRC/data/kjv.jsonl" --output-prefix w2 --tokenizer-type ByteLevel --append-eod --workers 2 > /dev/null
cmp -s w1_text_document.bin w2_text_document.bin && cmp -s w1_text_document.idx w2_text_document.idx \
  || die "--workers changes the output"

# ---- progress on stderr: Megatron's "Processed N documents (X docs/s, Y MB/s)." plus an ETA
"$MEGADLM" preprocess --input "$SRC/data/kjv.jsonl" --output-prefix p --tokenizer-type ByteLevel \
  --log-interval 1000 > p.out 2> p.err || die "--log-interval run failed: $(cat p.err)"
grep -Eq '^preprocess: processed 1189 documents \([0-9]+ docs/s, [0-9.]+ MB/s, 100\.0% of [0-9.]+ MB, ETA [0-9]+:[0-9]{2}:[0-9]{2}\)\.$' p.err \
  || die "progress line: $(cat p.err)"
grep -q "processed" p.out && die "progress went to stdout"
"$MEGADLM" preprocess --input "$SRC/data/kjv.jsonl" --output-prefix p --tokenizer-type ByteLevel \
  --log-interval 0 > /dev/null 2> p.err
[ -s p.err ] && die "--log-interval 0 still prints: $(cat p.err)"

# ---- malformed JSONL lines: reported with FILE:LINE and skipped (the whole line, every key)
printf '%s\n' '{"text": "ok", "title": "A"}' '{"text": "ok"' '{"title": "no text key"}' \
  '{"text": 5, "title": "B"}' '[1, 2]' '{"text": "fine", "title": "C"}' '{"text": "x"} junk' > mixed.jsonl
out=$("$MEGADLM" preprocess --input mixed.jsonl --output-prefix m --tokenizer-type ByteLevel \
      --json-keys text,title 2> m.err) || die "default run on malformed lines failed: $(cat m.err)"
for want in "mixed.jsonl:2: not valid JSON" "mixed.jsonl:3: key 'text' missing" \
            "mixed.jsonl:4: key 'text': expected a string or a list of strings" \
            "mixed.jsonl:5: expected a JSON object" "mixed.jsonl:7: not valid JSON (unexpected text"; do
  grep -F -- "$want" m.err | grep -q "warning: .*line skipped" || die "no skip warning '$want': $(cat m.err)"
done
grep -q "key 'text': 2 documents, 2 sequences, 6 tokens" <<<"$out" || die "skip summary (text): $out"
grep -q "key 'title': 2 documents, 2 sequences, 2 tokens" <<<"$out" || die "skip summary (title): $out"
grep -q "2 documents read, 5 malformed lines skipped" <<<"$out" || die "skip count: $out"
"$PY" decode.py m_title_document 256 > m.decoded 2> /dev/null
[ "$(cat m.decoded)" = "$(printf 'A\n=====\nC')" ] || die "skipped line left a trace: $(cat m.decoded)"
# a tokenizer error is not a malformed line: still fatal without --strict (see below)

# ---- NullTokenizer
printf '%s\n' '{"text": "1 2 3"}' '{"text": " 99\t0 "}' > null.jsonl
out=$("$MEGADLM" preprocess --input null.jsonl --output-prefix n --tokenizer-type NullTokenizer --vocab-size 100 --append-eod 2>&1) \
  || die "NullTokenizer failed: $out"
grep -q "2 documents, 2 sequences, 7 tokens" <<<"$out" || die "NullTokenizer summary: $out"
grep -q "eod 100" <<<"$out" || die "NullTokenizer eod: $out"

# ---- --help lists every flag with its default
help=$("$MEGADLM" preprocess --help) || die "--help exit status"
for flag in --input --output-prefix --tokenizer-type --vocab-size --json-keys --append-eod --workers \
            --log-interval --strict --help; do
  grep -q -- "$flag" <<<"$help" || die "--help does not list $flag"
done
grep -q "default: text" <<<"$help" || die "--help lacks the --json-keys default"

# ---- bad inputs: exit 1, message, no outputs
refused() {  # refused "<message substring>" args...
  local want=$1; shift
  rm -f bad_*
  if ! expect_error "$want" "$MEGADLM" preprocess "$@" || [ "$ERR_RC" -ne 1 ]; then
    die "preprocess $* -> rc=$ERR_RC, expected 1 and '$want'; got: $(head -3 <<<"$ERR_OUT")"
  fi
  if ls bad_* > /dev/null 2>&1; then die "preprocess $* left files: $(ls bad_*)"; fi
}
printf '%s\n' '{"text": "ok"}' '{"text": "ok"' > badjson.jsonl
printf '%s\n' '{"text": "ok"}' '{"body": "no text key"}' > nokey.jsonl
printf '%s\n' '{"text": 5}' > notstring.jsonl
printf '%s\n' '[1, 2]' > notobject.jsonl
printf '%s\n' '{"text": "1 two 3"}' > nullbad.jsonl
B=(--output-prefix bad --tokenizer-type ByteLevel)
refused "unknown option '--no-such-flag'" --input in.jsonl "${B[@]}" --no-such-flag
refused "--input: missing" "${B[@]}"
refused "nonexistent.jsonl: cannot open: No such file or directory" --input nonexistent.jsonl "${B[@]}"
refused "badjson.jsonl:2: not valid JSON" --input badjson.jsonl "${B[@]}" --strict
refused "nokey.jsonl:2: key 'text' missing" --input nokey.jsonl "${B[@]}" --strict
refused "notstring.jsonl:1: key 'text': expected a string or a list of strings" --input notstring.jsonl "${B[@]}" --strict
refused "notobject.jsonl:1: expected a JSON object" --input notobject.jsonl "${B[@]}" --strict
refused "mixed.jsonl:2: not valid JSON" --input mixed.jsonl "${B[@]}" --strict
refused "--log-interval: expected a non-negative integer, found '-1'" --input in.jsonl "${B[@]}" --log-interval -1
refused "--tokenizer-type: expected ByteLevel, NullTokenizer, GPT2BPETokenizer or HuggingFaceTokenizer, found 'Llama2Tokenizer'" \
  --input in.jsonl --output-prefix bad --tokenizer-type Llama2Tokenizer
refused "--tokenizer-type GPT2BPETokenizer needs --vocab-file (vocab.json) and --merge-file (merges.txt)" \
  --input in.jsonl --output-prefix bad --tokenizer-type GPT2BPETokenizer
refused "--tokenizer-model nonexistent.json: No such file or directory" \
  --input in.jsonl --output-prefix bad --tokenizer-type HuggingFaceTokenizer --tokenizer-model nonexistent.json
refused "--tokenizer-type: missing" --input in.jsonl --output-prefix bad
refused "--vocab-size" --input in.jsonl --output-prefix bad --tokenizer-type NullTokenizer
refused "--vocab-size: expected an integer, found 'x'" --input in.jsonl --output-prefix bad \
  --tokenizer-type NullTokenizer --vocab-size x
refused "nullbad.jsonl:1: key 'text': token 'two' at byte 2 is not an integer" --input nullbad.jsonl \
  --output-prefix bad --tokenizer-type NullTokenizer --vocab-size 10
refused "--workers: expected a positive integer, found '0'" --input in.jsonl "${B[@]}" --workers 0
refused "--output-prefix: missing" --input in.jsonl --tokenizer-type ByteLevel
refused "--output-prefix: no_such_dir/bad_text_document.bin.tmp: cannot create" --input in.jsonl \
  --output-prefix no_such_dir/bad --tokenizer-type ByteLevel
refused "--input: missing value" "${B[@]}" --input

[ $fail -eq 0 ] && echo "PASSED" || echo "FAILED"
exit $fail
