#!/usr/bin/env bash
# --tp-comm-overlap against the same run without it, under mpirun (TP 2 and 4, sequence
# parallelism, dropout 0.1, 3 iterations of 2 micro-batches):
#   t = 2, thread progress (the default): every overlap (all-gather, reduce-scatter, bulk
#     dgrad/wgrad, rs-dgrad, per-layer exclusions, recompute, 2 or 3 pieces per shard) gives
#     the same losses and bit-identical parameters and optimizer state on any BLAS as the plain
#     run with the same --tp-comm-overlap-num-splits: both run every GEMM over the gathered
#     token rows once per piece of sequence parallelism's row plan (comm_overlap.h), and a
#     two-rank sum is the same either way round. The counts of overlapped operations in the log
#     show that each switch turns on exactly its overlaps.
#   Within tolerance only (losses rel 1e-6; parameters 1e-3 of each tensor's scale, key-bias
#   rows within Adam's step bound 2 x 3 x lr: Adam turns float-noise differences of near-zero
#   gradients into steps of up to lr; measured 2.4e-4):
#     - against the plain run's default, one GEMM over all rows: a BLAS need not give a
#       product's rows the same bits when it is computed in row pieces (OpenBLAS's Haswell and
#       Zen kernels do not);
#     - test progress: GEMMs are cut into finer tiles so that MPI progresses between them;
#     - t = 4: the ring reduce-scatter adds the partial sums in ring order, not MPI's.
#   Flag rules: Megatron's (--tp-comm-overlap needs --sequence-parallel and t > 1); the switches
#     without --tp-comm-overlap are refused.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
L=2 M=2 ITERS=3
common=(--num-layers $L --hidden-size 128 --num-attention-heads 4 --ffn-hidden-size 512
        --seq-length 256 --max-position-embeddings 256 --micro-batch-size 2 --global-batch-size 4
        --train-iters $ITERS --lr 1e-3 --mock-data --vocab-size 1000 --log-interval 1
        --eval-iters 0 "${DROPOUT[@]}" --seed 3 --sequence-parallel)
llama=("${LLAMA[@]}")
fail=0
overlap_counts() { # "ring_ag ring_rs bulk_ag bulk_rs" from the log's last line about it
  grep 'TP communication overlapped' "$1" | sed -E 's/.*: ([0-9]+) ring all-gathers, ([0-9]+) ring reduce-scatters, ([0-9]+) bulk all-gathers, ([0-9]+) bulk.*/\1 \2 \3 \4/'
}
train() { # train NAME NP FLAGS...
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" --save "$name" \
      > "$name.log" 2>&1 || { echo "FAILED: $name did not run"; tail -5 "$name.log"; fail=1; return 1; }
}
same_as() { # same_as REF NAME EXPECTED_COUNTS: identical losses and checkpoints, overlap counts
  local ref=$1 name=$2 want=$3 bad=0
  if [ "$(losses "$ref.log")" != "$(losses "$name.log")" ] || [ "$(losses "$name.log" | wc -l)" != $ITERS ]; then
    echo "FAIL $name: losses differ from $ref"; paste <(losses "$ref.log") <(losses "$name.log"); bad=1
  fi
  for f in model optimizer; do
    /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$name/iter_000000$ITERS/$f.safetensors" \
        "$ref/iter_000000$ITERS/$f.safetensors" 0 > /dev/null || { echo "FAIL $name: $f differs from $ref"; bad=1; }
  done
  counts_are "$name" "$want" || bad=1
  if [ $bad = 0 ]; then echo "ok $name: identical to $ref; overlapped $(overlap_counts "$name.log")"; else fail=1; fi
}
counts_are() { # counts_are NAME EXPECTED_COUNTS
  local got; got=$(overlap_counts "$1.log")
  [ "$got" = "$2" ] || { echo "FAIL $1: overlapped (ring ag, ring rs, bulk ag, bulk rs) = '$got', expected '$2'"; return 1; }
}
losses_near() { # losses_near REF NAME LABEL: every logged loss within rel 1e-6
  rel_close "$3 losses" 1e-6 "$ITERS" <(losses "$1.log") <(losses "$2.log") || { echo "FAIL $3: losses"; return 1; }
}
near() { # near REF NAME EXPECTED_COUNTS [HEADS GROUPS KV]: losses rel 1e-6, parameters 1e-3 of scale
  local ref=$1 name=$2 want=$3 bad=0; shift 3
  local layout=("${@:-4 4 32}")
  losses_near "$ref" "$name" "$name" || bad=1
  # key-bias rows within Adam's step bound (2 x 3 x lr)
  /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$name/iter_000000$ITERS/model.safetensors" \
      "$ref/iter_000000$ITERS/model.safetensors" 1e-3 ${layout[*]} 6e-3 | sed "s/^/  $name model: /" || bad=1
  counts_are "$name" "$want" || bad=1
  if [ $bad = 0 ]; then echo "ok $name: within tolerance of $ref"; else fail=1; fi
}

# ---- t = 2 ----
per=$((L * M * ITERS)) # layer passes (forward, backward) in the run
h=$((M * ITERS))       # passes of the output layer (column-parallel, overlapped like linear_fc1)
full="$((4 * per + h)) $((2 * per)) $((2 * per + h)) $((2 * per + h))"
T2=(--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64)
# the plain runs with the overlap's row plan (2 pieces per shard, the overlap's default)
P2=(--tp-comm-overlap-num-splits 2)
train ref2 2 "${T2[@]}" "${P2[@]}"
train overlap 2 "${T2[@]}" --tp-comm-overlap && same_as ref2 overlap "$full"
# the plain default: one GEMM over all rows
train whole2 2 "${T2[@]}"
near whole2 overlap "$full"
train test_progress 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-progress test &&
  near ref2 test_progress "$full"
# another row plan: 3 pieces per shard, with and without overlap
train ref2_s3 2 "${T2[@]}" --tp-comm-overlap-num-splits 3
train rs_dgrad 2 "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-rs-dgrad --tp-comm-overlap-num-splits 3 &&
  same_as ref2_s3 rs_dgrad "$((4 * per + h)) $((4 * per + h)) $((2 * per + h)) 0"
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
train ref2_full 2 "${T2[@]}" "${P2[@]}" "${R[@]}"
train overlap_full 2 "${T2[@]}" "${R[@]}" --tp-comm-overlap &&
  same_as ref2_full overlap_full "$((6 * per + h)) $((4 * per)) $((2 * per + h)) $((2 * per + h))"
# the Llama family (RMSNorm, SwiGLU, GQA, q/k norm, RoPE, no biases)
train ref2_llama 2 "${T2[@]}" "${P2[@]}" "${llama[@]}"
train overlap_llama 2 "${T2[@]}" "${llama[@]}" --tp-comm-overlap &&
  same_as ref2_llama overlap_llama "$full"
train test_progress_llama 2 "${T2[@]}" "${llama[@]}" --tp-comm-overlap --tp-comm-overlap-progress test &&
  near ref2_llama test_progress_llama "$full" 4 2 32

# ---- t = 4: ring order of the reduce-scatter sums ----
T4=(--tensor-model-parallel-size 4 --make-vocab-size-divisible-by 32)
train ref4 4 "${T4[@]}"
train overlap4 4 "${T4[@]}" --tp-comm-overlap --tp-comm-overlap-rs-dgrad
[ -f overlap4.log ] && near ref4 overlap4 "$((4 * per + h)) $((4 * per + h)) $((2 * per + h)) 0"

# ---- flag rules ----
refused() { # refused NP MESSAGE FLAGS...
  local np=$1 want=$2; shift 2
  if [ "$np" = 1 ]; then
    expect_error "$want" "$MEGADLM" train "${common[@]}" "$@" || { fail=1; return; }
  else
    expect_error "$want" "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" || { fail=1; return; }
  fi
  echo "ok refused: $*"
}
NOSP=()
for x in "${common[@]}"; do [ "$x" = --sequence-parallel ] || NOSP+=("$x"); done
if expect_error "--tp-comm-overlap needs --sequence-parallel and --tensor-model-parallel-size > 1" \
     "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${NOSP[@]}" "${T2[@]}" --tp-comm-overlap; then
  echo "ok refused: --tp-comm-overlap without --sequence-parallel"
else fail=1; fi
refused 1 "--tp-comm-overlap needs --sequence-parallel and --tensor-model-parallel-size > 1" --tp-comm-overlap
refused 2 "--disable-tp-comm-overlap-ag has no effect without --tp-comm-overlap" "${T2[@]}" --disable-tp-comm-overlap-ag
refused 2 "--tp-comm-overlap-rs-dgrad has no effect without --tp-comm-overlap" "${T2[@]}" --tp-comm-overlap-rs-dgrad
refused 2 "--tp-comm-overlap-progress poll: expected test or thread" "${T2[@]}" --tp-comm-overlap --tp-comm-overlap-progress poll
refused 1 "--tp-comm-overlap-num-splits has no effect without --sequence-parallel" --tp-comm-overlap-num-splits 3
exit $fail
