#!/usr/bin/env bash
# Every rejected input gives a non-zero exit and a message naming the flag or file at fault, and
# starts no training.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
base=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
      --max-position-embeddings 16 --micro-batch-size 2 --train-iters 2 --lr 1e-3
      --mock-data --vocab-size 50 --eval-iters 0)

# refused "<substring>" args... : must exit non-zero, print the substring, and not train.
refused() {
  local want=$1; shift
  if ! expect_error "$want" "$MEGADLM" "$@" || grep -q "iteration " <<<"$ERR_OUT"; then
    echo "FAILED: megadlm $* -> rc=$ERR_RC, expected an error containing '$want'; got:"
    echo "$ERR_OUT" | head -5
    fail=1
  fi
}

refused "--num-attention-heads" train "${base[@]}" --num-attention-heads 5
refused "--num-query-groups" train "${base[@]}" --group-query-attention --num-query-groups 3
refused "--global-batch-size" train "${base[@]}" --global-batch-size 3
refused "--max-position-embeddings" train "${base[@]}" --seq-length 32
refused "--data-path" train "${base[@]/--mock-data/}"
refused "unknown flag '--no-such-flag'" train "${base[@]}" --no-such-flag
# Megatron's rules of the overlap flags: each message names both flags
refused "--overlap-param-gather needs --use-distributed-optimizer" train "${base[@]}" \
    --overlap-param-gather --overlap-grad-reduce
refused "--overlap-param-gather needs --overlap-grad-reduce" train "${base[@]}" \
    --overlap-param-gather --use-distributed-optimizer
refused "--pipeline-model-parallel-size" train "${base[@]}" --pipeline-model-parallel-size 2
# the interleaved schedule (Megatron's rules): layers divisible by PP x chunks, chunks a divisor of
# a stage's layers, PP > 1, --recompute-num-layers within a chunk (the micro-batch rule needs
# ranks: tests/scripts/pipeline_parallel_equivalence.sh)
refused "--num-layers 6 is not divisible by --pipeline-model-parallel-size 2 x 2 model chunks" \
    train "${base[@]}" --num-layers 6 --pipeline-model-parallel-size 2 \
    --virtual-pipeline-model-parallel-size 2
refused "--num-layers-per-virtual-pipeline-stage 3 does not divide the 4 layers" \
    train "${base[@]}" --num-layers 8 --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 3
refused "needs --pipeline-model-parallel-size > 1" train "${base[@]}" --num-layers 4 \
    --virtual-pipeline-model-parallel-size 2
refused "give one of --num-layers-per-virtual-pipeline-stage" train "${base[@]}" \
    --num-layers 8 --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 \
    --virtual-pipeline-model-parallel-size 4
refused "between 1 and the 1 layers of a model chunk" train "${base[@]}" --num-layers 4 \
    --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
refused "--world-size: only for \`megadlm memory\`" train "${base[@]}" --world-size 2
refused "--recompute-granularity" train "${base[@]}" --recompute-granularity full
refused "--fp16 with --use-distributed-optimizer: not supported yet" train "${base[@]}" \
    --fp16 --use-distributed-optimizer
refused "--tensor-model-parallel-size" train "${base[@]}" --tensor-model-parallel-size 2
refused "--lr" train "${base[@]}" --lr abc
refused "unknown command" frobnicate

# data files: missing, not MMIDIDX, truncated
base_nodata=("${base[@]/--mock-data/}")
refused "missing.idx" train "${base_nodata[@]}" --tokenizer-type ByteLevel --data-path missing
printf 'NOTANIDX\0\0\0\0\0\0\0\0\0\0\0\0' > bad.idx; : > bad.bin
refused "bad.idx" train "${base_nodata[@]}" --tokenizer-type ByteLevel --data-path bad
printf '{"text": "hello world"}\n{"text": "second document"}\n' > tiny.jsonl
"$MEGADLM" preprocess --input tiny.jsonl --output-prefix tiny --tokenizer-type ByteLevel \
    --append-eod > /dev/null || { echo "FAILED: preprocess"; fail=1; }
head -c 30 tiny_text_document.idx > trunc.idx; cp tiny_text_document.bin trunc.bin
refused "trunc.idx" train "${base_nodata[@]}" --tokenizer-type ByteLevel --data-path trunc
refused "tiny.jsonl" preprocess --strict --input tiny.jsonl --output-prefix t2 --json-keys nokey \
    --tokenizer-type ByteLevel
printf '{"text": "ok"}\nnot json\n' > broken.jsonl
refused "broken.jsonl:2" preprocess --strict --input broken.jsonl --output-prefix t3 \
    --tokenizer-type ByteLevel

# --help lists flags with defaults and exits 0. The output is read whole before grep looks at it:
# stdout is line-buffered, so `megadlm --help | grep -q` under pipefail would race grep's early exit
# against megadlm's next write (SIGPIPE).
out=$("$MEGADLM" train --help) && grep -q -- "--make-vocab-size-divisible-by" <<<"$out" ||
  { echo "FAILED: train --help (rc $?)"; fail=1; }
out=$("$MEGADLM" --help) && grep -q "generate" <<<"$out" || { echo "FAILED: --help (rc $?)"; fail=1; }

[ $fail -eq 0 ] && echo "all validation errors reported"
exit $fail
