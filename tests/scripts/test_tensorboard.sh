#!/usr/bin/env bash
# --tensorboard-dir and Megatron's logging flags, checked by readers that share no code with
# megadlm (Debian's /usr/bin/python3 with python3-protobuf and NumPy):
#   1. event files (one process; PP 2 with the diffusion objective; TP 2; DP 2 with
#      --tensorboard-log-interval 2) read by tests/python/check_tensorboard.py: TFRecord framing
#      and CRC-32Cs, "brain.Event:2", one file on the last rank only, the arguments as text
#      summaries equal to the log's arguments block, and every scalar's tag, step and value
#      equal to the numbers of megadlm's log lines (Megatron's training_log tags); an --fp16
#      run's skipped iterations; a run killed with SIGKILL while training leaves a file whose
#      records all read back;
#   2. the log line's params norm against the checkpoint's tensors, its num zeros against the
#      first step's Adam moments (also --bf16 with the distributed optimizer), its throughput
#      against Megatron's num_floating_point_operations formula, progress.txt's lines against
#      Megatron's format and the operations and tokens of each saved iteration (also after a
#      resume);
#   3. the W&B flags: recorded in the checkpoint's arguments, a notice, Megatron's rules.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
if ! "$PY" -c 'import google.protobuf, numpy' 2>/dev/null; then
  echo "FAILED: $PY cannot import google.protobuf and numpy (scripts/install-deps.sh --test)"; exit 1
fi
CHECK_TB=("$PY" "$SRC/tests/python/check_tensorboard.py")
CHECK_NUM=("$PY" "$SRC/tests/python/check_logged_numbers.py")
fail=0
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --micro-batch-size 2 --lr 1e-3 --mock-data --vocab-size 50
       --log-interval 1 --eval-iters 1 --eval-interval 3)
all=(--log-params-norm --log-num-zeros-in-grad --log-throughput --log-progress
     --log-timers-to-tensorboard --log-validation-ppl-to-tensorboard --log-memory-to-tensorboard
     --log-world-size-to-tensorboard)
wandb=(--wandb-project dlm --wandb-exp-name run1 --wandb-run-id run1 --wandb-save-dir wandb
       --wandb-mode offline --wandb-tags dlm --wandb-notes training --wandb-resume allow)
# Megatron's num_floating_point_operations for this model (h 32, 2 layers, s 16, 4 heads, no
# GQA, ffn 4h, padded vocabulary 128), by hand: 12 gbs s L h^2 ((1 + 1 + s/h) + 4 + V/(2Lh))
flops() { awk -v b="$1" 'BEGIN { printf "%.1f", 12 * b * 16 * 2 * 32 * 32 * ((1 + 1 + 16/32) + 4 + 128 / (2 * 2 * 32)) }'; }
# run NAME NP ARGS...: the log in NAME.log; under mpirun the last rank's stdout alone (Open
# MPI's --output-filename: the ranks' lines mixed in one stream can be cut mid-line)
run() {
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then "$MEGADLM" train "$@" > "$name.log" 2>&1 ||
      { echo "FAILED: $name did not run"; tail -5 "$name.log"; fail=1; return 1; }
    return 0
  fi
  "${MPIRUN[@]}" -np "$np" --output-filename "$name.out" "$MEGADLM" train "$@" > "$name.all" 2>&1 ||
    { echo "FAILED: $name did not run"; tail -5 "$name.all"; fail=1; return 1; }
  cp "$name.out/1/rank.$((np - 1))/stdout" "$name.log"
}

# ---- 1. one process, every flag, checkpoints and progress.txt
if run one 1 "${model[@]}" --global-batch-size 4 --train-iters 6 --tensorboard-dir tb1 \
       "${all[@]}" "${wandb[@]}" --save ck --save-interval 3; then
  "${CHECK_TB[@]}" one.log tb1 --full || fail=1
  "${CHECK_NUM[@]}" params-norm one.log ck/iter_0000006 || fail=1
  "${CHECK_NUM[@]}" throughput one.log "$(flops 4)" 1 || fail=1
  grep -q "^> W&B: megadlm cannot reach W&B; project dlm, run run1, id run1 .*wandb sync --sync-tensorboard" one.log ||
    { echo "FAILED: no W&B notice"; fail=1; }
  "$PY" - ck/iter_0000006/state.json <<'PYEOF' || fail=1
import json, sys
a = json.load(open(sys.argv[1]))["args"]
want = dict(wandb_project="dlm", wandb_exp_name="run1", wandb_run_id="run1", wandb_save_dir="wandb",
            wandb_mode="offline", wandb_tags="dlm", wandb_notes="training", wandb_resume="allow",
            tensorboard_dir="tb1", log_params_norm=True, log_progress=True)
bad = {k: a.get(k) for k in want if a.get(k) != want[k]}
print("state.json: the W&B and logging flags recorded" if not bad else f"FAILED: state.json has {bad}")
sys.exit(1 if bad else 0)
PYEOF
  # resume to iteration 9: a second job in progress.txt, operations counted from iteration 0
  run resume 1 "${model[@]}" --global-batch-size 4 --train-iters 9 --tensorboard-dir tb1r \
      "${all[@]}" --load ck --save ck --save-interval 3 &&
    { "${CHECK_TB[@]}" resume.log tb1r --full --start-iteration 6 || fail=1; }
  [ "$(grep -c 'Starting job' ck/progress.txt)" = 2 ] ||
    { echo "FAILED: progress.txt does not hold two jobs"; cat ck/progress.txt; fail=1; }
  grep -q "Iteration: 9" ck/progress.txt || { echo "FAILED: no iteration 9 in progress.txt"; fail=1; }
  "${CHECK_NUM[@]}" progress ck/progress.txt "$(flops 4)" 16 4 1 || fail=1
fi

# --fp16 from a loss scale of 2^32: the first iterations overflow and are skipped (no grad norm
# and no num zeros then, "skipped-iterations" written)
if run fp16 1 "${model[@]}" --global-batch-size 4 --train-iters 6 --fp16 --tensorboard-dir tbfp16 \
       "${all[@]}"; then
  grep -q "number of skipped iterations:   1" fp16.log || { echo "FAILED: no skipped iteration"; fail=1; }
  "${CHECK_TB[@]}" fp16.log tbfp16 --full || fail=1
fi

# a run killed (SIGKILL) while it trains: every record flushed at its log lines is readable
"$MEGADLM" train "${model[@]}" --global-batch-size 4 --train-iters 1000000 --eval-iters 0 \
    --tensorboard-dir tbkill > kill.log 2>&1 &
pid=$!
for _ in $(seq 1 600); do # until the file holds the arguments and a few iterations (60 s at most)
  [ "$(cat tbkill/events.out.tfevents.* 2>/dev/null | wc -c)" -gt 16000 ] && break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
"${CHECK_TB[@]}" kill.log tbkill --killed || fail=1

# ---- 2. two ranks: PP 2 with the diffusion objective (its "real input length"), TP 2
if run pp 2 "${model[@]}" --global-batch-size 8 --train-iters 4 --pipeline-model-parallel-size 2 \
       --model-running-mode difflm-noshift --mask-token 100 --difflm-varilen-prob 0.5 \
       --tensorboard-dir tbpp "${all[@]}" --save ckpp --save-interval 1; then
  "${CHECK_TB[@]}" pp.log tbpp --full --difflm --world-size 2 || fail=1
  "${CHECK_NUM[@]}" params-norm pp.log ckpp/iter_0000004 || fail=1
  "${CHECK_NUM[@]}" num-zeros pp.log ckpp || fail=1
  "${CHECK_NUM[@]}" throughput pp.log "$(flops 8)" 2 || fail=1
  "${CHECK_NUM[@]}" progress ckpp/progress.txt "$(flops 8)" 16 8 2 || fail=1
fi
# untied embeddings: the rows of the ids a batch lacks get no gradient (zeros to count)
if run tp 2 "${model[@]}" --global-batch-size 4 --train-iters 4 --tensorboard-dir tbtp \
       "${all[@]}" --tensorboard-queue-size 1 --untie-embeddings-and-output-weights \
       --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --save cktp \
       --save-interval 1; then
  "${CHECK_TB[@]}" tp.log tbtp --full --world-size 2 || fail=1
  "${CHECK_NUM[@]}" params-norm tp.log cktp/iter_0000004 || fail=1
  "${CHECK_NUM[@]}" num-zeros tp.log cktp || fail=1
fi
# the distributed optimizer under --bf16 (zeros of each rank's pieces; the norm of the
# gathered bf16 parameters)
if run dopt 2 "${model[@]}" --global-batch-size 8 --train-iters 1 --bf16 \
       --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
       --untie-embeddings-and-output-weights --log-params-norm --log-num-zeros-in-grad \
       --save ckdopt; then
  "${CHECK_NUM[@]}" params-norm dopt.log ckdopt/iter_0000001 || fail=1
  "${CHECK_NUM[@]}" num-zeros dopt.log ckdopt || fail=1
fi
# DP 2, the defaults but a TensorBoard interval of 2 and no loss scale
if run dp 2 "${model[@]}" --global-batch-size 8 --train-iters 4 --tensorboard-dir tbdp \
       --tensorboard-log-interval 2 --no-log-loss-scale-to-tensorboard; then
  "${CHECK_TB[@]}" dp.log tbdp --tb-interval 2 --no-loss-scale || fail=1
  ! grep -q "^ \[[^]]*\] iteration .*\(num zeros\|params norm\|throughput\)" dp.log ||
    { echo "FAILED: optional fields in the log line without their flags"; fail=1; }
fi

# ---- 3. rules and notices
expect() { # expect "message" args...
  local want=$1; shift
  expect_error "$want" "$MEGADLM" train "${model[@]}" --global-batch-size 4 --train-iters 1 "$@" || fail=1
}
expect "--wandb-project dlm needs --wandb-exp-name" --wandb-project dlm
expect "--wandb-mode online2: expected online, offline, disabled or shared" --wandb-mode online2
expect "--wandb-resume yes: expected allow, must, never or auto" --wandb-resume yes
expect "--tensorboard-log-interval" --tensorboard-log-interval 0
touch notadir
expect "notadir" --tensorboard-dir notadir/tb
run warn 1 "${model[@]}" --global-batch-size 4 --train-iters 1 --log-progress \
    --log-validation-ppl-to-tensorboard &&
  { grep -q "WARNING: --log-progress without --save" warn.log &&
    grep -q "WARNING: --log-\*-to-tensorboard without --tensorboard-dir" warn.log ||
    { echo "FAILED: no warning for flags without effect"; fail=1; }; }
run wandb 1 "${model[@]}" --global-batch-size 4 --train-iters 1 --wandb-exp-name x &&
  { grep -q "^> W&B: --wandb-\* flags without --wandb-project are recorded" wandb.log ||
    { echo "FAILED: no notice for W&B flags without a project"; fail=1; }; }
[ "$fail" = 0 ] && echo "PASSED"
exit "$fail"
