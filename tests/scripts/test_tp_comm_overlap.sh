#!/usr/bin/env bash
# --tp-comm-overlap against the same run without it, under mpirun (TP 2 and 4, sequence
# parallelism, dropout 0.1, 3 iterations of 2 micro-batches):
#   t = 2: every overlap (all-gather, reduce-scatter, bulk dgrad/wgrad, rs-dgrad, per-layer
#     exclusions, both progress modes, recompute) gives the same losses and bit-identical
#     parameters and optimizer state: each element is computed as without overlap, and a
#     two-rank sum is the same either way round. The counts of overlapped operations in the log
#     show that each switch turns on exactly its overlaps.
#   t = 4: the ring reduce-scatter adds the partial sums in ring order, not MPI's, so losses
#     agree within rel 1e-6 and parameters within 1e-3 of each tensor's scale (Adam turns
#     float-noise differences of near-zero gradients into steps of up to lr; measured 2.4e-4).
#   Flag rules: Megatron's (--tp-comm-overlap needs --sequence-parallel and t > 1); the switches
#     without --tp-comm-overlap are refused.
# The shape keeps every GEMM tile above the sizes where OpenBLAS switches to its small-matrix
# kernels, whose summation order differs from the large kernels' (docs/ARCHITECTURE.md).
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMP_NUM_THREADS=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
L=2 M=2 ITERS=3
common=(--num-layers $L --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 512
        --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 4
        --train-iters $ITERS --lr 1e-3 --mock-data --vocab-size 1000 --log-interval 1
        --eval-iters 0 --hidden-dropout 0.1 --attention-dropout 0.1 --seed 3 --sequence-parallel)
llama=(--normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention
       --num-query-groups 2 --qk-layernorm --disable-bias-linear --untie-embeddings-and-output-weights)
fail=0
losses() { grep -o 'lm loss: [^ ]*' "$1" | awk '{print $3}'; }
overlap_counts() { # "ring_ag ring_rs bulk_ag bulk_rs" from the log's last line about it
  grep 'TP communication overlapped' "$1" | sed -E 's/.*: ([0-9]+) ring all-gathers, ([0-9]+) ring reduce-scatters, ([0-9]+) bulk all-gathers, ([0-9]+) bulk.*/\1 \2 \3 \4/'
}
train() { # train NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$BUILD/megadlm" train "${common[@]}" "$@" --save "$name" \
      > "$name.log" 2>&1 || { echo "FAILED: $name did not run"; tail -5 "$name.log"; fail=1; return 1; }
}
same_as() { # same_as REF NAME EXPECTED_COUNTS: identical losses and checkpoints, overlap counts
  local ref=$1 name=$2 want=$3 before=$fail
  if [ "$(losses "$ref.log")" != "$(losses "$name.log")" ] || [ "$(losses "$name.log" | wc -l)" != $ITERS ]; then
    echo "FAIL $name: losses differ from $ref"; paste <(losses "$ref.log") <(losses "$name.log"); fail=1
  fi
  for f in model optimizer; do
    /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$name/iter_000000$ITERS/$f.safetensors" \
        "$ref/iter_000000$ITERS/$f.safetensors" 0 > /dev/null || { echo "FAIL $name: $f differs from $ref"; fail=1; }
  done
  local got; got=$(overlap_counts "$name.log")
  [ "$got" = "$want" ] || { echo "FAIL $name: overlapped (ring ag, ring rs, bulk ag, bulk rs) = '$got', expected '$want'"; fail=1; }
  [ "$fail" != "$before" ] || echo "ok $name: identical to $ref; overlapped $got"
}

# ---- t = 2 ----
per=$((L * M * ITERS)) # layer passes (forward, backward) in the run
h=$((M * ITERS))       # passes of the output layer (column-parallel, overlapped like linear_fc1)
full="$((4 * per + h)) $((2 * per)) $((2 * per + h)) $((2 * per + h))"
T2=(--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64)
train ref2 2 "${T2[@]}"
train overlap 2 "${T2[@]}" --tp-comm-overlap && same_as ref2 overlap "$full"
train test_progress 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-progress test --tp-comm-overlap-num-splits 4 &&
  same_as ref2 test_progress "$full"
train rs_dgrad 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-rs-dgrad --tp-comm-overlap-num-splits 3 &&
  same_as ref2 rs_dgrad "$((4 * per + h)) $((4 * per + h)) $((2 * per + h)) 0"
train ag_only 2 "${T2[@]}" --tp-comm-overlap --disable-tp-comm-overlap-rs --disable-tp-comm-bulk-dgrad \
    --disable-tp-comm-bulk-wgrad && same_as ref2 ag_only "$((4 * per + h)) 0 0 0"
train rs_only 2 "${T2[@]}" --tp-comm-overlap --disable-tp-comm-overlap-ag --disable-tp-comm-bulk-dgrad \
    --disable-tp-comm-bulk-wgrad && same_as ref2 rs_only "0 $((2 * per)) 0 0"
train bulk_wgrad 2 "${T2[@]}" --tp-comm-overlap --disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs \
    --disable-tp-comm-bulk-dgrad && same_as ref2 bulk_wgrad "0 0 0 $((2 * per + h))"
# per-layer switches: linear_qkv / linear_fc1 lose their forward all-gather overlap
train no_qkv 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-disable-qkv &&
  same_as ref2 no_qkv "$((3 * per + h)) $((2 * per)) $((2 * per + h)) $((2 * per + h))"
train no_qkv_fc1 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-disable-qkv --tp-comm-overlap-disable-fc1 &&
  same_as ref2 no_qkv_fc1 "$((2 * per + h)) $((2 * per)) $((2 * per + h)) $((2 * per + h))"
# full recompute: each layer's forward runs twice
R=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
train ref2_full 2 "${T2[@]}" "${R[@]}"
train overlap_full 2 "${T2[@]}" "${R[@]}" --tp-comm-overlap &&
  same_as ref2_full overlap_full "$((6 * per + h)) $((4 * per)) $((2 * per + h)) $((2 * per + h))"
# the Llama family (RMSNorm, SwiGLU, GQA, q/k norm, RoPE, no biases)
train ref2_llama 2 "${T2[@]}" "${llama[@]}"
train overlap_llama 2 "${T2[@]}" "${llama[@]}" --tp-comm-overlap --tp-comm-overlap-progress test &&
  same_as ref2_llama overlap_llama "$full"

# ---- t = 4: ring order of the reduce-scatter sums ----
T4=(--tensor-model-parallel-size 4 --make-vocab-size-divisible-by 32)
train ref4 4 "${T4[@]}"
train overlap4 4 "${T4[@]}" --tp-comm-overlap --tp-comm-overlap-rs-dgrad
if [ -f overlap4.log ]; then
  paste <(losses ref4.log) <(losses overlap4.log) | awk '
    { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > w) w = r
      if (r > 1e-6) { printf "FAIL t4: iteration %d loss %s vs %s (rel %.3g)\n", n, $2, $1, r; bad = 1 } }
    END { if (n != '$ITERS') { print "FAIL t4: expected '$ITERS' losses, found " n; bad = 1 }
          printf "ok t4 losses: worst rel %.3g\n", w; exit bad }' || fail=1
  # 4 heads, 4 groups, kv 32; key-bias rows within Adam's step bound (2 x 3 x lr)
  /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" overlap4/iter_000000$ITERS/model.safetensors \
      ref4/iter_000000$ITERS/model.safetensors 1e-3 4 4 32 6e-3 | sed 's/^/  t4 model: /' || fail=1
fi

# ---- flag rules ----
expect_error() { # expect_error NP PATTERN FLAGS...
  local np=$1 pattern=$2; shift 2
  local out
  if [ "$np" = 1 ]; then
    out=$("$BUILD/megadlm" train "${common[@]}" "$@" 2>&1) && { echo "FAIL: accepted $*"; fail=1; return; }
  else
    out=$("${MPIRUN[@]}" -np "$np" "$BUILD/megadlm" train "${common[@]}" "$@" 2>&1) &&
      { echo "FAIL: accepted $*"; fail=1; return; }
  fi
  grep -q -- "$pattern" <<< "$out" || { echo "FAIL: '$*' did not say '$pattern':"; echo "$out" | tail -3; fail=1; return; }
  echo "ok refused: $*"
}
NOSP=()
for x in "${common[@]}"; do [ "$x" = --sequence-parallel ] || NOSP+=("$x"); done
out=$("${MPIRUN[@]}" -np 2 "$BUILD/megadlm" train "${NOSP[@]}" "${T2[@]}" --tp-comm-overlap 2>&1) &&
  { echo "FAIL: --tp-comm-overlap accepted without --sequence-parallel"; fail=1; }
grep -q -- "--tp-comm-overlap needs --sequence-parallel and --tensor-model-parallel-size > 1" <<< "$out" &&
  echo "ok refused: --tp-comm-overlap without --sequence-parallel" ||
  { echo "FAIL: no message for --tp-comm-overlap without --sequence-parallel"; fail=1; }
expect_error 1 "--tp-comm-overlap needs --sequence-parallel and --tensor-model-parallel-size > 1" --tp-comm-overlap
expect_error 2 "--disable-tp-comm-overlap-ag has no effect without --tp-comm-overlap" "${T2[@]}" --disable-tp-comm-overlap-ag
expect_error 2 "--tp-comm-overlap-rs-dgrad has no effect without --tp-comm-overlap" "${T2[@]}" --tp-comm-overlap-rs-dgrad
expect_error 2 "--tp-comm-overlap-progress poll: expected test or thread" "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-progress poll
exit $fail
