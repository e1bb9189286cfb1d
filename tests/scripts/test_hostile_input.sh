#!/usr/bin/env bash
# Hostile input and bad numerics (issue 13): every case ends with a clear message naming the
# file, flag or iteration at fault and a non-zero exit, on every rank; none crashes, hangs or
# leaves a checkpoint holding a non-finite value.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
T=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
   --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
   --train-iters 2 --eval-iters 0)
MPI=(timeout 60 "${MPIRUN[@]}")

# expect NAME RANKS "message" command... : exits non-zero (not a timeout, not a signal) within
# 60 s, and the message appears RANKS times (once per rank; 1 for a single process).
expect() {
  local name=$1 ranks=$2 want=$3; shift 3
  local out rc n
  out=$("$@" 2>&1 < /dev/null); rc=$?
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

# ---- 2. NaN policy (Megatron's --check-for-nan-in-loss-and-grad) ----
N=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
   --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --mock-data
   --vocab-size 50 --eval-iters 0)
# on (the default): stop before the step of iteration 1, saving nothing
expect "NaN grad norm stops" 1 "iteration 1: grad norm is" "$MEGADLM" train "${N[@]}" --lr 1e-3 \
    --train-iters 3 --init-method-std 1e30 --save nan1 --save-interval 1
[ ! -e nan1/latest_checkpointed_iteration.txt ] || { echo "FAILED: nan1: a checkpoint was saved"; fail=1; }
# ... on every rank, naming the first rank that saw it
expect "NaN on every TP rank" 2 "(first seen on rank 0)" \
    "${MPI[@]}" -np 2 "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 3 \
    --init-method-std 1e30 --tensor-model-parallel-size 2
# a run that diverges at iteration 3 keeps the checkpoint of iteration 2 as the latest
expect "divergence stops" 1 "iteration 3: grad norm is" "$MEGADLM" train "${N[@]}" --lr 1e6 \
    --train-iters 10 --save div --save-interval 1
[ "$(cat div/latest_checkpointed_iteration.txt 2>/dev/null)" = 2 ] && [ ! -e div/iter_0000003 ] ||
    { echo "FAILED: div: the tracker should still name iteration 2"; fail=1; }
# off: every step is skipped and counted, the parameters and the optimizer state stay as they were
out=$("$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 3 --init-method-std 1e30 --log-interval 3 \
      --save skip --save-interval 1 --no-check-for-nan-in-loss-and-grad 2>&1); rc=$?
if [ $rc -ne 0 ] || ! grep -q "number of skipped iterations:   3 |" <<<"$out" ||
   ! cmp -s skip/iter_0000001/model.safetensors skip/iter_0000003/model.safetensors ||
   ! grep -q '"optimizer_step":	0' skip/iter_0000003/state.json ||
   ! python3 -c "
import json, struct, sys
b = open('skip/iter_0000003/optimizer.safetensors', 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
sys.exit(b[8 + n:].count(0) != len(b) - 8 - n)"; then
  echo "FAILED: --no-check-for-nan-in-loss-and-grad: rc $rc; expected 3 skipped iterations, the"
  echo "  parameters of iteration 1 unchanged at 3, optimizer_step 0 and zero moments"; tail -3 <<<"$out"; fail=1
fi
# a checkpoint is never written with a non-finite value: load one whose parameter holds a NaN
# (crc32 updated), skip the step, and the save refuses; the tracker stays
"$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 1 --save poison > /dev/null 2>&1
python3 - <<'PY'
import json, struct, zlib
p = "poison/iter_0000001/model.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = "decoder.final_layernorm.weight"
lo, hi = h[name]["data_offsets"]
b[8 + n + lo:8 + n + lo + 4] = struct.pack("<f", float("nan"))
h["__metadata__"]["crc32." + name] = "%08x" % zlib.crc32(bytes(b[8 + n + lo:8 + n + hi]))
hdr = json.dumps(h, separators=(",", ":")).encode()
hdr += b" " * (n - len(hdr))
assert len(hdr) == n
open(p, "wb").write(bytes(b[:8]) + hdr + bytes(b[8 + n:]))
PY
expect "no checkpoint with a NaN" 1 "parameter decoder.final_layernorm.weight holds a non-finite value" \
    "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 2 --load poison --save poison \
    --no-check-for-nan-in-loss-and-grad
[ "$(cat poison/latest_checkpointed_iteration.txt)" = 1 ] && [ ! -e poison/iter_0000002 ] ||
    { echo "FAILED: poison: the refused save changed the tracker or left iter_0000002"; fail=1; }

# ---- 3. a startup error under pipeline parallelism ends cleanly (no segfault) ----
mkdir -p badtracker; echo "x" > badtracker/latest_checkpointed_iteration.txt
expect "PP 2 bad tracker" 2 "latest_checkpointed_iteration.txt" "${MPI[@]}" -np 2 "$MEGADLM" \
    train "${T[@]}" --pipeline-model-parallel-size 2 --mock-data --vocab-size 50 --load badtracker

# ---- 4. a token id >= 2^30 in vocab.json or tokenizer.json is refused, no hang ----
printf '{"a": 0, "b": 1073741824}' > big_vocab.json; printf '#version: 0.2\n' > merges.txt
expect "vocab.json id 2^30" 1 "token 'b' has id 1073741824, above the largest supported id" \
    timeout 20 "$MEGADLM" tokenize --tokenizer-type GPT2BPETokenizer --vocab-file big_vocab.json \
    --merge-file merges.txt
tj() { # tj VOCAB ADDED_ID: a byte-level BPE tokenizer.json
  printf '{"version": "1.0", "added_tokens": [{"id": %s, "content": "<|x|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}, "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": %s, "merges": []}}' "$2" "$1"
}
tj '{"a": 0, "b": 1073741825}' 1 > big_tok.json
expect "tokenizer.json id 2^30" 1 "token 'b' has id 1073741825, above the largest supported id" \
    timeout 20 "$MEGADLM" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model big_tok.json
# an added token's own id is not used (Hugging Face numbers new added tokens after the
# vocabulary): 2^31-1 sizes nothing, the file is refused for its vocabulary only
tj '{"a": 0}' 2147483647 > big_added.json
expect "added token id 2^31-1" 1 "big_added.json: model.vocab: the vocabulary has no token for byte 0x00" \
    timeout 20 "$MEGADLM" tokenize --tokenizer-type HuggingFaceTokenizer --tokenizer-model big_added.json

# ---- 5. model sizes from state.json and config.json are validated before allocation ----
"$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 1 --save small > /dev/null 2>&1 &&
"$MEGADLM" convert --to hf small small_hf > /dev/null 2>&1 || { echo "FAILED: small checkpoint"; fail=1; }
for v in -2 100000000; do
  rm -rf "layers$v"; cp -r small "layers$v"
  sed -i "s/\"num_layers\":\t2,/\"num_layers\":\t$v,/" "layers$v/iter_0000001/state.json"
done
expect "convert --to hf, num_layers -2" 1 "state.json of iteration 1: --num-layers is -2: expected a positive size" \
    timeout 20 "$MEGADLM" convert --to hf layers-2 out_neg
expect "convert --to hf, num_layers 1e8" 1 "too few for the 4998400012416 parameters" \
    timeout 20 "$MEGADLM" convert --to hf layers100000000 out_big
expect "generate, num_layers 1e8" 1 "too few for the 4998400012416 parameters" \
    timeout 20 "$MEGADLM" generate --load layers100000000 --prompt "1 2"
rm -rf big_hf; cp -r small_hf big_hf
sed -i 's/"n_layer":\t2,/"n_layer":\t100000000,/' big_hf/config.json
expect "convert --from hf, n_layer 1e8" 1 "config.json: the weight files hold 452176 bytes, too few" \
    timeout 20 "$MEGADLM" convert --from hf big_hf out_hf
expect "--micro-batch-size 2e9 (B x T overflows an int)" 1 \
    "--micro-batch-size 2000000000 x --seq-length 64 (tokens per micro-batch) is 128000000000" \
    "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 1 --micro-batch-size 2000000000 \
    --global-batch-size 2000000000
expect "--kv-channels 2^31-1" 1 "--kv-channels 2147483647 (the QKV width)" \
    "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 1 --kv-channels 2147483647

# ---- 7. convert --from hf with a tokenizer other than NullTokenizer ----
"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
    --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 4 --mock-data \
    --tokenizer-type ByteLevel --eval-iters 0 --lr 1e-3 --train-iters 1 --save bl > /dev/null 2>&1 &&
"$MEGADLM" convert --to hf bl bl_hf > /dev/null 2>&1 || { echo "FAILED: ByteLevel checkpoint"; fail=1; }
out=$("$MEGADLM" convert --from hf bl_hf bl_back --tokenizer-type ByteLevel 2>&1) &&
  "$MEGADLM" generate --load bl_back --prompt "In" --max-new-tokens 2 > /dev/null 2>&1
if [ $? -ne 0 ]; then
  echo "FAILED: convert --from hf --tokenizer-type ByteLevel (then generate from it):"; tail -2 <<<"$out"; fail=1
else
  echo "ok: convert --from hf --tokenizer-type ByteLevel"
fi

# ---- 9. NaN weights or a NaN temperature in generate ----
expect "generate --temperature nan" 1 "--temperature: expected a finite number, found 'nan'" \
    "$MEGADLM" generate --load small --prompt "1 2" --temperature nan
expect "generate --top-p nan" 1 "--top-p: expected a finite number, found 'nan'" \
    "$MEGADLM" generate --load small --prompt "1 2" --top-p nan
expect "generate with a NaN weight" 1 "parameter decoder.final_layernorm.weight holds a non-finite value" \
    "$MEGADLM" generate --load poison --prompt "1 2"

# ---- 6. a NUL in a JSONL string is kept (Megatron's json.loads keeps it); ByteLevel id = byte ----
# ids u16 PREFIX: the ids of PREFIX_text_document.bin, space-separated
ids() { python3 -c "
import struct, sys
b = open(sys.argv[1] + '_text_document.bin', 'rb').read()
print(*struct.unpack('<%dH' % (len(b) // 2), b))" "$1"; }
printf '{"text": "ab\\u0000cd"}\n{"text": "x\\\\u0000y"}\n' > nul.jsonl
printf '{"text": "ab\0cd"}\n' > rawnul.jsonl
for f in nul rawnul; do
  "$MEGADLM" preprocess --strict --input $f.jsonl --output-prefix $f --tokenizer-type ByteLevel > /dev/null 2>&1 ||
    { echo "FAILED: preprocess --strict $f.jsonl"; fail=1; }
done
# a b NUL c d; then x \ u 0 0 0 0 y (an escaped backslash is not a NUL)
[ "$(ids nul)" = "97 98 0 99 100 120 92 117 48 48 48 48 121" ] && [ "$(ids rawnul)" = "97 98 0 99 100" ] &&
  echo "ok: NUL kept in JSONL strings" ||
  { echo "FAILED: NUL in JSONL: got '$(ids nul)' and '$(ids rawnul)'"; fail=1; }

# ---- 10. clear messages ----
printf 'line one\r\nline two\r\n\r\nsecond\r\n' > crlf.txt
"$MEGADLM" preprocess --input crlf.txt --output-prefix crlf --tokenizer-type ByteLevel > /dev/null 2>&1
# "line one\nline two" then "second": no carriage return (13) kept
[ "$(ids crlf)" = "108 105 110 101 32 111 110 101 10 108 105 110 101 32 116 119 111 115 101 99 111 110 100" ] &&
  echo "ok: CRLF .txt read as LF" || { echo "FAILED: CRLF .txt: got '$(ids crlf)'"; fail=1; }
expect "overflowing --data-path weights" 1 "--data-path: the weights sum to inf: expected a finite sum" \
    "$MEGADLM" train "${T[@]}" "${D[@]}" 1e308 nul_text_document 1e308 nul_text_document
mkdir -p nultracker; printf '4\0junk' > nultracker/latest_checkpointed_iteration.txt
expect "tracker holding a NUL" 1 'found "4?junk" (it holds a NUL byte)' \
    "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 1 --load nultracker
mkdir -p no_type; cp small_hf/model.safetensors no_type/
printf '{"n_layer": 2,\n "n_embd": 64' > no_type/config.json
expect "config.json cut short" 1 "no_type/config.json: not valid JSON (parsing stopped at byte" \
    "$MEGADLM" convert --from hf no_type no_type_out
printf '{"n_layer": 2}' > no_type/config.json
expect "config.json without model_type" 1 "no_type/config.json: model_type missing" \
    "$MEGADLM" convert --from hf no_type no_type_out
# Megatron's line shows the logging rank's coordinates (1-based); megadlm logs on the last rank
out=$("${MPI[@]}" -np 2 "$MEGADLM" train "${N[@]}" --lr 1e-3 --train-iters 2 --load small \
      --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 2>&1)
grep -qF "successfully loaded checkpoint from small [ t 2/2, p 1/1 ] at iteration 1" <<<"$out" &&
  echo "ok: loaded-checkpoint line under TP 2" ||
  { echo "FAILED: expected '[ t 2/2, p 1/1 ]' in the loaded-checkpoint line under TP 2:"; grep -m2 "loaded\|error" <<<"$out"; fail=1; }
# ---- 8. a huge global batch x iterations on a small dataset: an error, no spinning ----
expect "epochs beyond the document index" 1 "the document index would exceed 2^31 - 1 entries" \
    timeout 20 "$MEGADLM" train "${T[@]/--global-batch-size/--log-interval}" --global-batch-size 2147483646 \
    --train-iters 1000000 "${D[@]}" crlf_text_document
expect "tokens beyond 2^63" 1 "more tokens than 2^63" \
    timeout 20 "$MEGADLM" train "${T[@]/--global-batch-size/--log-interval}" --global-batch-size 2147483646 \
    --train-iters 2147483647 "${D[@]}" crlf_text_document

# ---- 12. tests end only the processes they started: no kill by name anywhere ----
# (the pattern spells the two commands with a bracket so that this line does not name them)
if grep -nE '(^|[^[:alnum:]_-])(p[k]ill|k[i]llall)([^[:alnum:]_-]|$)' "$SRC"/tests/scripts/*.sh "$SRC"/scripts/*.sh \
     "$SRC"/bench/*.sh 2>/dev/null | grep -v "^$SRC/tests/scripts/test_hostile_input.sh:"; then
  echo "FAILED: the lines above kill by name: kill only PIDs the test started"; fail=1
else
  echo "ok: no kill by name in the test and bench scripts"
fi

[ $fail -eq 0 ] && echo "all hostile inputs refused"
exit $fail
