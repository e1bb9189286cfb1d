#!/usr/bin/env bash
# Packed documents (--reset-position-ids --reset-attention-mask) in every parallel layout that
# supports them, against one process: short documents (4 .. 60 bytes, ByteLevel, --append-eod)
# so each 128-token sequence holds several, crossing the attention kernel's 64-row blocks and
# the 2 x CP chunks. For causal GPT (learned positions) and bidirectional difflm-noshift (with
# --cut-off-varlen-to-seqlen, variable lengths): TP 2 + SP, TP 2 + SP + --tp-comm-overlap,
# PP 2, CP 2 allgather, CP 2 a2a, CP 2 p2p (the ring), CP 2 x TP 2 + SP: every logged loss within rel 1e-5 of one process's;
# selective and full recompute: the same loss lines as none (bitwise). The packed run's losses
# differ from the unpacked run's (the flags act). --log-memory's saved activations and
# workspaces are the unpacked run's. Refused: difflm packing without
# --cut-off-varlen-to-seqlen (MegaDLMs refuses it too).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0

/usr/bin/python3 - <<'PY'
import json, random
r = random.Random(4)
with open("docs.jsonl", "w") as f:
    for i in range(400):
        n = r.randint(4, 60)
        f.write(json.dumps({"text": "".join(r.choice("abcdefgh ") for _ in range(n))}) + "\n")
PY
"$MEGADLM" preprocess --input docs.jsonl --output-prefix docs --tokenizer-type ByteLevel \
    --append-eod > /dev/null || { echo "FAILED: preprocess"; exit 1; }

# shellcheck disable=SC2054 # --split's commas are one argument
base=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --micro-batch-size 2
      --global-batch-size 4 --train-iters 3 --lr 1e-3 --log-interval 1 --eval-iters 1
      --eval-interval 3 --seed 5 --tokenizer-type ByteLevel --data-path docs_text_document
      --split 90,10,0 --hidden-dropout 0.1 --attention-dropout 0.1
      --make-vocab-size-divisible-by 130) # 257 ids padded to 260 in one process and at TP 2
PACK=(--reset-position-ids --reset-attention-mask --eod-mask-loss)
mode_flags() {
  if [ "$1" = gpt ]; then
    echo --seq-length 128 --max-position-embeddings 128
  else
    echo --seq-length 129 --max-position-embeddings 129 --model-running-mode difflm-noshift \
         --mask-token 256 --attention-mask-type no_mask --difflm-varilen-prob 0.5 \
         --cut-off-varlen-to-seqlen
  fi
}
train() { # train LOG NP FLAGS...
  local log=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "$@" > "$log" 2>&1 \
    || { echo "FAILED: $log"; tail -5 "$log"; fail=1; }
}
declare -A LAYOUT=(
  [tp2sp]="2 --tensor-model-parallel-size 2 --sequence-parallel"
  [tp2sp_overlap]="2 --tensor-model-parallel-size 2 --sequence-parallel --tp-comm-overlap"
  [pp2]="2 --pipeline-model-parallel-size 2"
  [cp2_allgather]="2 --context-parallel-size 2 --cp-comm-type allgather"
  [cp2_a2a]="2 --context-parallel-size 2 --cp-comm-type a2a"
  [cp2_p2p]="2 --context-parallel-size 2 --cp-comm-type p2p"
  [cp2_p2p_tp2sp]="4 --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel"
)
for mode in gpt difflm; do
  # shellcheck disable=SC2207
  m=($(mode_flags $mode))
  train $mode.one.log 1 "${base[@]}" "${m[@]}" "${PACK[@]}"
  train $mode.unpacked.log 1 "${base[@]}" "${m[@]}" --eod-mask-loss
  if diff -q <(losses $mode.one.log) <(losses $mode.unpacked.log) > /dev/null; then
    echo "FAILED: $mode: packing changed no loss"; fail=1
  fi
  for g in selective full; do
    extra=(--recompute-granularity "$g")
    [ "$g" = full ] && extra+=(--recompute-method uniform --recompute-num-layers 1)
    train $mode.$g.log 1 "${base[@]}" "${m[@]}" "${PACK[@]}" "${extra[@]}"
    diff <(losses $mode.one.log) <(losses $mode.$g.log) > /dev/null \
      || { echo "FAILED: $mode: --recompute-granularity $g changed the losses"; fail=1; }
  done
  for name in "${!LAYOUT[@]}"; do
    # shellcheck disable=SC2206
    spec=(${LAYOUT[$name]})
    train "$mode.$name.log" "${spec[0]}" "${base[@]}" "${m[@]}" "${PACK[@]}" "${spec[@]:1}"
    close_losses "$mode.one.log" "$mode.$name.log" 1e-5 5 || fail=1
  done
done

# --log-memory: packing changes compute, not saved activations nor workspaces (the document
# bounds are batch data, counted under "other" beside the tokens)
read -ra m <<< "$(mode_flags gpt)"
train mem.unpacked.log 1 "${base[@]}" "${m[@]}" --log-memory --train-iters 1
train mem.packed.log 1 "${base[@]}" "${m[@]}" "${PACK[@]}" --log-memory --train-iters 1
for cat in "saved activations" workspace; do
  a=$(grep "memory (bytes) | $cat " mem.unpacked.log); b=$(grep "memory (bytes) | $cat " mem.packed.log)
  if [ -z "$a" ] || [ "$a" != "$b" ]; then echo "FAILED: --log-memory $cat: '$a' vs '$b'"; fail=1; fi
done

expect_error "--cut-off-varlen-to-seqlen" "$MEGADLM" train "${base[@]}" --seq-length 129 \
  --max-position-embeddings 129 --model-running-mode difflm-noshift --mask-token 256 \
  --attention-mask-type no_mask "${PACK[@]}" || fail=1
expect_error "needs --reset-position-ids too" "$MEGADLM" train "${base[@]}" --seq-length 129 \
  --max-position-embeddings 129 --model-running-mode difflm-noshift --mask-token 256 \
  --reset-attention-mask --cut-off-varlen-to-seqlen || fail=1
exit $fail
