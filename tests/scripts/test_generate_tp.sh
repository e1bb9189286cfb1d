#!/usr/bin/env bash
# generate under tensor parallelism: `mpirun -np 2 megadlm generate --tensor-model-parallel-size
# 2` prints the text one process prints, for a GPT-2-like and a Llama-like (GQA, QK layernorm,
# RoPE, SwiGLU, untied output) autoregressive model and a masked-diffusion model with learned
# and with rotary positions, fp32- and --bf16-trained, each trained in one process and under TP
# 2 (the saved layout must not matter): greedy and seeded draws for the autoregressive models
# (--top-k 1 at a small temperature, and temperature 1), argmax, Gumbel draws and random
# remasking for the diffusion models. The vocabulary (101 ids, padded to 128) spans both ranks'
# halves of the vocab-parallel output layer and the prompts continue across id 64, so the
# gathered logits of both halves are read. Only rank 0 prints (one text line, one summary
# line). Errors: a size that does not divide the heads or the padded vocabulary, a size that is
# not the number of ranks, a size below 1; pipeline and context parallelism are not flags.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0

train_flags=(--num-layers 2 --micro-batch-size 16 --global-batch-size 16 --lr 3e-3
             --lr-decay-style cosine --lr-warmup-iters 10 --hidden-dropout 0 --attention-dropout 0
             --log-interval 100 --eval-iters 0)
DLM=(--model-running-mode difflm-noshift --mask-token 101 --difflm-varilen-prob 0)
# train NAME ITERS FLAGS...: NAME-tp1 trained in one process, NAME-tp2 under TP 2 (the padded
# vocabulary kept at 128: --make-vocab-size-divisible-by 64 x 2)
train() {
  local name=$1 iters=$2; shift 2
  "$MEGADLM" train "${GPT_TINY[@]}" "${train_flags[@]}" --train-iters "$iters" "$@" \
      --save "$name-tp1" > "$name-tp1.log" 2>&1 ||
    { echo "FAILED: training $name-tp1"; tail -3 "$name-tp1.log"; return 1; }
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${GPT_TINY[@]}" "${train_flags[@]}" --train-iters "$iters" \
      "$@" --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 \
      --save "$name-tp2" > "$name-tp2.log" 2>&1 ||
    { echo "FAILED: training $name-tp2"; tail -3 "$name-tp2.log"; return 1; }
}
train gpt 200 || exit 1
train llama 200 "${LLAMA[@]}" || exit 1
train llama-bf16 200 "${LLAMA[@]}" --bf16 || exit 1
train dlm 300 "${DLM[@]}" || exit 1
train dlm-rope 300 "${DLM[@]}" "${LLAMA[@]}" || exit 1
train dlm-bf16 300 "${DLM[@]}" --bf16 || exit 1

# same CKPT PROMPT FLAGS...: one process and TP 2 print the same non-empty text (PROMPT "": the
# flags give --input-file); TP 2 prints as many lines, and summary lines only on rank 0
compared=0
printf '58 59 60\n30 31\n61 62 63 64\n' > prompts.txt
same() {
  local ck=$1 prompt=$2; shift 2
  local one two
  [ -n "$prompt" ] && set -- --prompt "$prompt" "$@" # else the flags give --input-file
  one=$("$MEGADLM" generate --load "$ck" "$@" 2> one.err) ||
    { echo "FAILED: generate --load $ck $*: $(tail -1 one.err)"; fail=1; return; }
  two=$("${MPIRUN[@]}" -np 2 "$MEGADLM" generate --load "$ck" "$@" \
        --tensor-model-parallel-size 2 2> two.err) ||
    { echo "FAILED: TP 2 generate --load $ck $*: $(tail -2 two.err)"; fail=1; return; }
  if [ -z "$one" ] || [ "$one" != "$two" ]; then
    echo "FAILED: --load $ck $*: one process '$one', TP 2 '$two'"; fail=1
  fi
  if [ "$(wc -l <<<"$two")" != "$(wc -l <<<"$one")" ] ||
     [ "$(grep -c '^\[' two.err)" != "$(grep -c '^\[' one.err)" ]; then
    echo "FAILED: TP 2 --load $ck $*: expected the text and summary lines of one process (rank 0's):"
    cat two.err; fail=1
  fi
  compared=$((compared + 1))
}
for ck in gpt llama llama-bf16; do
  for layout in tp1 tp2; do
    for prompt in "58 59 60" "20 21 22 23"; do
      same "$ck-$layout" "$prompt" --max-new-tokens 12 --temperature 0.01 --top-k 1
      same "$ck-$layout" "$prompt" --max-new-tokens 12 --temperature 1 --seed 7
    done
  done
  # the key/value cache; a batch of left-padded prompts
  same "$ck-tp2" "58 59 60" --max-new-tokens 12 --temperature 1 --seed 7 --cache prefix
  same "$ck-tp2" "" --input-file prompts.txt --max-new-tokens 6 --top-k 1 --cache prefix
done
for ck in dlm dlm-rope dlm-bf16; do
  for layout in tp1 tp2; do
    for prompt in "58 59 60" "30 31"; do
      same "$ck-$layout" "$prompt" --gen-length 8 --steps 8 --block-length 4
      same "$ck-$layout" "$prompt" --gen-length 8 --steps 4 --block-length 8 --temperature 0.7 --seed 5
      same "$ck-$layout" "$prompt" --gen-length 8 --steps 8 --remasking random --seed 9
    done
  done
  # Fast-dLLM's caches and threshold; a batch of left-padded prompts
  same "$ck-tp2" "58 59 60" --gen-length 8 --steps 8 --block-length 4 --cache dual --threshold 0.5
  same "$ck-tp2" "58 59 60" --gen-length 8 --steps 8 --block-length 4 --cache prefix --temperature 0.7
  same "$ck-tp2" "" --input-file prompts.txt --gen-length 8 --steps 8 --block-length 4 --cache dual
done
echo "one process and TP 2: the same text in $compared comparisons"

# ---- errors
# a padded vocabulary of 101 (--make-vocab-size-divisible-by 1), 4 heads
"$MEGADLM" train "${GPT_TINY[@]}" "${train_flags[@]}" --train-iters 1 --lr-warmup-iters 0 \
    --make-vocab-size-divisible-by 1 --save odd-vocab > odd-vocab.log 2>&1 ||
  { echo "FAILED: training odd-vocab"; exit 1; }
expect() { local want=$1; shift; expect_error "$want" "$@" || fail=1; }
expect "--tensor-model-parallel-size 2: the checkpoint's padded vocabulary (101) is not divisible" \
  "${MPIRUN[@]}" -np 2 "$MEGADLM" generate --load odd-vocab --tensor-model-parallel-size 2
expect "--tensor-model-parallel-size 3: the checkpoint's --num-attention-heads (4) is not divisible" \
  "${MPIRUN[@]}" -np 3 "$MEGADLM" generate --load gpt-tp1 --tensor-model-parallel-size 3
# a NaN in rank 1's half of a split tensor only (crc32 updated): rank 0's slices are finite, and
# every rank must still stop (with rank 1's message, printed by rank 0) instead of sampling
cp -r gpt-tp1 poison
/usr/bin/python3 - <<'PY'
import json, struct, zlib
p = "poison/iter_0000200/model.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
name = "decoder.layers.1.mlp.linear_fc1.bias"  # [128]: rank 1 holds 64 .. 127
lo, hi = h[name]["data_offsets"]
b[8 + n + hi - 4:8 + n + hi] = struct.pack("<f", float("nan"))
h["__metadata__"]["crc32." + name] = "%08x" % zlib.crc32(bytes(b[8 + n + lo:8 + n + hi]))
hdr = json.dumps(h, separators=(",", ":")).encode()
hdr += b" " * (n - len(hdr))
assert len(hdr) == n
open(p, "wb").write(bytes(b[:8]) + hdr + bytes(b[8 + n:]))
PY
expect "parameter decoder.layers.1.mlp.linear_fc1.bias holds a non-finite value" \
  timeout 60 "${MPIRUN[@]}" -np 2 "$MEGADLM" generate --load poison --tensor-model-parallel-size 2
expect "--tensor-model-parallel-size 2: expected the number of ranks, 1" \
  "$MEGADLM" generate --load gpt-tp1 --tensor-model-parallel-size 2
expect "--tensor-model-parallel-size 1: expected the number of ranks, 2" \
  "${MPIRUN[@]}" -np 2 "$MEGADLM" generate --load gpt-tp1
expect "--tensor-model-parallel-size: expected an integer >= 1, found '0'" \
  "$MEGADLM" generate --load gpt-tp1 --tensor-model-parallel-size 0
expect "unknown flag '--pipeline-model-parallel-size'" \
  "$MEGADLM" generate --load gpt-tp1 --pipeline-model-parallel-size 2
expect "unknown flag '--context-parallel-size'" \
  "$MEGADLM" generate --load gpt-tp1 --context-parallel-size 2
out=$("$MEGADLM" generate --help) && grep -q -- "--tensor-model-parallel-size" <<<"$out" ||
  { echo "FAILED: generate --help does not list --tensor-model-parallel-size"; fail=1; }
exit $fail
