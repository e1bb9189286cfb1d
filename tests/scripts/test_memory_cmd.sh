#!/usr/bin/env bash
# `megadlm memory`:
#  - the paper's four configurations (Korthikanti et al. 2022, Table 3) print Megatron's line
#    "Theoretical memory footprints: weight and optimizer=X MB, activation=Y MB, total=Z MB",
#    instantly (no model memory); the 175B numbers equal an independent awk computation;
#  - --json is one object with the documented keys;
#  - invalid combinations are refused with the same words as `megadlm train`;
#  - `megadlm train --log-memory` prints predicted == measured for parameters, gradients,
#    optimizer state and saved activations in every recompute mode, both families, and under
#    tensor and sequence parallelism (mpirun -np 2), and memory's prediction is the same number;
#  - masked-diffusion training: the logits buffer of a store holds one chunk of 256 rows, not
#    b x s = 600 (4 x 256 x 128 = 131072 bytes against 4 x 600 x 128 = 307200, hand-computed:
#    vocabulary 100 padded to 128 per rank), predicted == measured alone, with TP 2 + SP and PP 2,
#    and with --difflm-full-logits all 600 rows.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }

# ---- the paper's configurations ----------------------------------------------------------------
paper=(--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --vocab-size 50256
       --tensor-model-parallel-size 8 --sequence-parallel --recompute-activations)
declare -A CFG=(
  [22B]="--num-layers 48 --hidden-size 6144 --num-attention-heads 64 --pipeline-model-parallel-size 1 --global-batch-size 4"
  [175B]="--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --pipeline-model-parallel-size 8 --global-batch-size 64"
  [530B]="--num-layers 105 --hidden-size 20480 --num-attention-heads 128 --pipeline-model-parallel-size 35 --global-batch-size 280"
  [1T]="--num-layers 128 --hidden-size 25600 --num-attention-heads 160 --pipeline-model-parallel-size 64 --global-batch-size 512"
)
line_re='^Theoretical memory footprints: weight and optimizer=[0-9]+\.[0-9]{2} MB, activation=[0-9]+\.[0-9]{2} MB, total=[0-9]+\.[0-9]{2} MB$'
for name in 22B 175B 530B 1T; do
  # shellcheck disable=SC2086
  out=$(/usr/bin/time -f 'max RSS %M KiB' -o rss.txt "$MEGADLM" memory "${paper[@]}" ${CFG[$name]} 2>&1) ||
    { say_fail "memory $name: $out"; continue; }
  first=$(head -1 <<<"$out")
  grep -Eq "$line_re" <<<"$first" || say_fail "memory $name: first line '$first'"
  # no model is built (the 1T model's parameters alone would be 4 TB in fp32): the process
  # stays below 64 MiB whatever the model's size (a time limit would fail on a busy machine)
  rss=$(grep -o '[0-9]*' rss.txt | tail -1)
  [ "${rss:-999999}" -lt 65536 ] || say_fail "memory $name: max RSS ${rss} KiB"
  for row in "no parallelism" "tensor parallel" "tensor + sequence parallel" \
             "tensor parallel + selective recompute" \
             "tensor + sequence parallel + selective recompute" "full recompute"; do
    grep -q "^  $row  " <<<"$out" || say_fail "memory $name: no Table 2 row '$row'"
  done
  grep -q "^  model     " <<<"$out" && grep -q "^  hardware  " <<<"$out" ||
    say_fail "memory $name: no FLOPs"
  echo "$name (max RSS $rss KiB): $first"
done

# 175B worked out independently (Megatron's formulas; MB = 2^20): parameters per layer
# 12h^2 + 4h, final LayerNorm 2h, embedding Vh; most loaded rank (block/p + Vh)/t x 18 bytes;
# activations 34sbh/t per layer x L (L/p layers x p micro-batches) + (8sb + sbh) p / t
want=$(awk 'BEGIN { L = 96; h = 12288; s = 2048; b = 1; V = 51200; t = 8; p = 8; MB = 1048576
  block = L * (12 * h * h + 4 * h) + 2 * h
  w = (block / p + V * h) / t * 18
  act = 34 * s * b * h / t * L + (8 * s * b + s * b * h) * p / t
  printf "Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, total=%.2f MB", w / MB, act / MB, (w + act) / MB }')
# shellcheck disable=SC2086
got=$("$MEGADLM" memory "${paper[@]}" ${CFG[175B]}); got=${got%%$'\n'*}
[ "$got" = "$want" ] || say_fail "175B: got '$got', expected '$want'"

# ---- --json ------------------------------------------------------------------------------------
# shellcheck disable=SC2086
"$MEGADLM" memory "${paper[@]}" ${CFG[175B]} --json > 175B.json || say_fail "memory --json"
python3 - 175B.json <<'EOF' || fail=1
import json, sys
o = json.load(open(sys.argv[1]))
keys = ["weights_and_optimizer_bytes", "activation_bytes", "total_bytes", "parameters",
        "per_layer_activation_bytes", "per_layer_saved_bytes_megadlm",
        "model_flops_per_iteration", "hardware_flops_per_iteration"]
rows = ["no_parallelism", "tensor_parallel", "tensor_sequence_parallel",
        "tensor_parallel_selective", "tensor_sequence_parallel_selective", "full_recompute"]
bad = [k for k in keys if k not in o] + [r for r in rows if r not in o.get("per_layer_activation_bytes", {})]
if bad:
    print("FAILED: --json lacks", bad); sys.exit(1)
s, b, h, a, t = 2048, 1, 12288, 96, 8
if o["per_layer_activation_bytes"]["tensor_sequence_parallel_selective"] != 34 * s * b * h / t:
    print("FAILED: --json 34sbh/t"); sys.exit(1)
if abs(o["total_bytes"] - o["weights_and_optimizer_bytes"] - o["activation_bytes"]) > 1:
    print("FAILED: --json total"); sys.exit(1)
print("--json: %d keys" % len(o))
EOF

# ---- invalid combinations: the same words as train ---------------------------------------------
small=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --micro-batch-size 2 --vocab-size 50)
train_only=(--train-iters 1 --lr 1e-3 --mock-data --eval-iters 0)
invalid=(
  "--tensor-model-parallel-size 3"
  "--group-query-attention --num-query-groups 2 --tensor-model-parallel-size 4"
  "--ffn-hidden-size 30 --tensor-model-parallel-size 4"
  "--sequence-parallel --tensor-model-parallel-size 2 --seq-length 15"
  "--pipeline-model-parallel-size 3"
  "--num-layers 8 --num-layers-per-virtual-pipeline-stage 2"
  "--num-layers 6 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2"
  "--distribute-saved-activations --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "--distribute-saved-activations --recompute-activations --tensor-model-parallel-size 2"
  "--distribute-saved-activations --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --tensor-model-parallel-size 2 --sequence-parallel"
  "--recompute-granularity full"
  "--global-batch-size 3"
  "--num-attention-heads 5"
  "--fp16 --use-distributed-optimizer"
)
for flags in "${invalid[@]}"; do
  # shellcheck disable=SC2086
  m=$("$MEGADLM" memory "${small[@]}" $flags 2>&1 >/dev/null); mrc=$?
  # shellcheck disable=SC2086
  t=$("$MEGADLM" train "${small[@]}" "${train_only[@]}" $flags 2>&1 >/dev/null); trc=$?
  if [ $mrc -eq 0 ] || [ $trc -eq 0 ] || [ "$m" != "$t" ] || [ -z "$m" ]; then
    say_fail "'$flags': memory (rc $mrc) '$m' vs train (rc $trc) '$t'"
  fi
done
echo "invalid combinations: ${#invalid[@]} refused with train's words"
# --world-size is memory's (and plan's); train refuses it
out=$("$MEGADLM" memory "${small[@]}" --tensor-model-parallel-size 2 --world-size 3 2>&1)
grep -qF "world size (3) is not divisible by --tensor-model-parallel-size 2" <<<"$out" ||
  say_fail "memory --world-size 3: $out"
out=$("$MEGADLM" memory "${small[@]}" --tensor-model-parallel-size 2 --world-size 8 --json)
grep -qE '"data_parallel_size":[[:space:]]*4,' <<<"$out" || say_fail "memory --world-size 8: $out"
out=$("$MEGADLM" train "${small[@]}" "${train_only[@]}" --world-size 2 2>&1)
grep -qF -- "--world-size: only for \`megadlm memory\` and \`megadlm plan\` (train takes the world size from mpirun)" \
  <<<"$out" || say_fail "train --world-size: $out"

# ---- train --log-memory: predicted == measured ----------------------------------------------------
common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 1
        --lr 1e-3 --eval-iters 0 --log-memory)
llama=("${LLAMA[@]}")
modes=(""
       "--recompute-activations"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 2")

# check_log LOG RANKS: every category on every rank has difference 0, every layer measured ==
# analytic
check_log() {
  local log=$1 ranks=$2 what=$3
  local n
  n=$(grep -cE '^\[Rank [0-9]+\] memory (parameters|gradients|optimizer state|saved activations) \(bytes\) \| predicted [0-9]+ \| measured [0-9]+ \| difference 0 \|$' "$log")
  [ "$n" -eq $((4 * ranks)) ] || { say_fail "$what: $n of $((4 * ranks)) categories predicted == measured"; grep -a 'predicted' "$log"; }
  awk '/saved activations layer/ { n++; if ($10 != $13) bad = 1 } END { exit (n == 0 || bad) }' "$log" ||
    say_fail "$what: a layer's measured != analytic"
}

for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  for mode in "${modes[@]}"; do
    what="$family ${mode:-no recompute}"
    # shellcheck disable=SC2086
    "$MEGADLM" train "${common[@]}" "${extra[@]}" $mode > train.log 2>&1 || { say_fail "$what: train"; tail -3 train.log; continue; }
    check_log train.log 1 "$what"
    # memory's prediction for the same flags is the same number
    # shellcheck disable=SC2086
    pred=$("$MEGADLM" memory "${common[@]}" "${extra[@]}" $mode --json |
           python3 -c 'import json,sys; print(json.load(sys.stdin)["megadlm_train_bytes"]["saved_activations"])')
    meas=$(grep -o 'memory saved activations (bytes) | predicted [0-9]* | measured [0-9]*' train.log | awk '{print $NF}')
    [ "${pred%.0}" = "$meas" ] || say_fail "$what: memory predicts $pred saved-activation bytes, train measured $meas"
    echo "$what: predicted == measured (saved activations $meas bytes)"
  done
done

# ---- masked diffusion: the logits at one chunk of rows ---------------------------------------------
dlm=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 300
     --max-position-embeddings 300 --micro-batch-size 2 --global-batch-size 4 --train-iters 1
     --lr 1e-3 --mock-data --vocab-size 100 --eval-iters 0 --log-memory
     --model-running-mode difflm-noshift --mask-token 101)
# check_logits LOG RANKS BYTES ROWS WHAT: the last stage's logits line
check_logits() {
  local n
  n=$(grep -cE "^\[Rank [0-9]+\] logits per store \(bytes\) \| predicted $3 \| measured $3 \| rows $4 of 600 \|" "$1")
  [ "$n" -eq "$2" ] || { say_fail "$5: $n of $2 logits lines at $3 bytes ($4 rows)"; grep -a 'logits' "$1"; }
}
for mode in rows full; do
  extra=(); bytes=131072 rows=256
  [ $mode = full ] && { extra=(--difflm-full-logits); bytes=307200 rows=600; }
  "$MEGADLM" train "${dlm[@]}" "${extra[@]}" > dlm.log 2>&1 || { say_fail "difflm $mode: train"; tail -3 dlm.log; continue; }
  check_log dlm.log 1 "difflm $mode"
  check_logits dlm.log 1 $bytes $rows "difflm $mode"
  out=$("$MEGADLM" memory "${dlm[@]}" "${extra[@]}" --json)
  got=$(python3 -c 'import json,sys; b=json.load(sys.stdin)["megadlm_train_bytes"]; print(int(b["logits"]), int(b["logits_rows"]), int(b["saved_activations"]))' <<<"$out")
  meas=$(grep -o 'memory saved activations (bytes) | predicted [0-9]* | measured [0-9]*' dlm.log | awk '{print $NF}')
  [ "$got" = "$bytes $rows $meas" ] || say_fail "difflm $mode: memory --json logits, rows, saved '$got', want '$bytes $rows $meas'"
  text=$("$MEGADLM" memory "${dlm[@]}" "${extra[@]}")
  grep -qE "of which logits 0\.[0-9]+ MB per micro-batch on the last stage: $rows of the 600 rows" <<<"$text" ||
    say_fail "difflm $mode: memory's text has no logits line at $rows rows"
  echo "difflm $mode: logits $bytes bytes ($rows rows), predicted == measured"
done
if command -v mpirun > /dev/null; then
  for layout in "--tensor-model-parallel-size 2 --sequence-parallel" "--pipeline-model-parallel-size 2"; do
    rm -rf ranks
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 --output-filename ranks \
        "$MEGADLM" train "${dlm[@]}" $layout > dlm.log 2>&1 || { say_fail "difflm $layout: train"; tail -3 dlm.log; continue; }
    cat ranks/1/rank.*/stdout > dlm.log
    check_log dlm.log 2 "difflm $layout"
    last=2; [ "${layout#--pipe}" != "$layout" ] && last=1 # PP: the last stage only
    check_logits dlm.log $last 131072 256 "difflm $layout"
    echo "difflm $layout: logits 131072 bytes (256 rows), predicted == measured on both ranks"
  done
fi

# tensor and sequence parallelism (two ranks)
# each rank's stdout in a file of its own (ranks/1/rank.N/stdout): the launcher's merged stream
# may cut a line of one rank with another's when it reads more than a pipe's atomic write
MPI2=("${MPIRUN[@]}" -np 2 --output-filename ranks)
if command -v mpirun > /dev/null; then
  for layout in "--tensor-model-parallel-size 2" "--tensor-model-parallel-size 2 --sequence-parallel" \
                "--tensor-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --distribute-saved-activations"; do
    for family in gpt2 llama; do
      extra=()
      [ "$family" = llama ] && extra=("${llama[@]}")
      rm -rf ranks
      # shellcheck disable=SC2086
      OMP_NUM_THREADS=1 "${MPI2[@]}" "$MEGADLM" train "${common[@]}" "${extra[@]}" $layout \
          > tp.log 2>&1 || { say_fail "$family $layout: train"; tail -3 tp.log; continue; }
      cat ranks/1/rank.*/stdout > tp.log
      check_log tp.log 2 "$family $layout"
      echo "$family $layout: predicted == measured on both ranks"
    done
  done
  # pipelines: 1F1B, and interleaved (a store per model chunk in flight, partial recompute
  # from the schedule's two store pools)
  for layout in "--pipeline-model-parallel-size 2" \
                "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2" \
                "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --num-microbatches-with-partial-activation-checkpoints 1"; do
    rm -rf ranks
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "${MPI2[@]}" "$MEGADLM" train "${common[@]}" --num-layers 4 $layout \
        > pp.log 2>&1 || { say_fail "$layout: train"; tail -3 pp.log; continue; }
    cat ranks/1/rank.*/stdout > pp.log
    check_log pp.log 2 "$layout"
    echo "$layout: predicted == measured on both ranks"
  done
  # DP 2 with the distributed optimizer, fp32 and --bf16 (Megatron's 6 + 12/DP): train's rows,
  # and memory's prediction for the same flags is the same bytes
  for layout in "--use-distributed-optimizer" "--use-distributed-optimizer --bf16"; do
    rm -rf ranks
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 "${MPI2[@]}" "$MEGADLM" train "${common[@]}" $layout \
        > dp.log 2>&1 || { say_fail "$layout: train"; tail -3 dp.log; continue; }
    cat ranks/1/rank.*/stdout > dp.log
    check_log dp.log 2 "DP 2 $layout"
    # shellcheck disable=SC2086
    pred=$("$MEGADLM" memory "${common[@]}" $layout --world-size 2 --json |
           python3 -c 'import json,sys; b=json.load(sys.stdin)["megadlm_train_bytes"]; print(*(int(b[k]) for k in ("parameters", "gradients", "optimizer")))')
    meas=$(for c in parameters gradients "optimizer state"; do
             grep -o "\[Rank 0\] memory $c (bytes) | predicted [0-9]* | measured [0-9]*" dp.log | awk '{print $NF}'; done | xargs)
    [ -n "$pred" ] && [ "$pred" = "$meas" ] ||
      say_fail "DP 2 $layout: memory predicts '$pred' (parameters, gradients, optimizer), train measured '$meas'"
    echo "DP 2 $layout: predicted == measured on both ranks, memory's bytes $pred"
  done
else
  echo "mpirun not found: tensor-parallel and pipeline layouts not checked"
fi

[ $fail -eq 0 ] && echo "megadlm memory: all checks passed"
exit $fail
