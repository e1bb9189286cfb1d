#!/usr/bin/env bash
# --async-save: the checkpoints are byte for byte those of synchronous saves (one process, and
# 4 ranks with TP 2 x DP 2 and the distributed optimizer, whose moments each rank writes from
# its own copy), training is not changed by them (the same losses), and a job killed while a
# background write is in flight leaves the previous checkpoint as the latest, loadable, with
# the resumed run bitwise equal to an uninterrupted one.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8
        --lr 1e-3 --make-vocab-size-divisible-by 64 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 5)
fail=0
# same_files A B ITERATIONS...: the tensor files of both directories are identical
same_files() {
  local a=$1 b=$2; shift 2
  for it in "$@"; do
    same_ckpt "$a" "$b" "$it" ||
      { echo "FAILED: $b iteration $it: the files differ from the synchronous save's"; fail=1; }
  done
}
mpi() { "${MPIRUN[@]}" -np "$@"; }

# 1. one process: every save async, the same bytes and losses as synchronous saves
"$MEGADLM" train "${common[@]}" --train-iters 6 --save sync --save-interval 2 > sync.log 2>&1 ||
  { echo "FAILED: synchronous run"; tail -5 sync.log; exit 1; }
"$MEGADLM" train "${common[@]}" --train-iters 6 --save async --save-interval 2 --async-save \
  > async.log 2>&1 || { echo "FAILED: async run"; tail -5 async.log; exit 1; }
grep -q "saving checkpoint from iteration       2 to async in the background" async.log ||
  { echo "FAILED: no background save logged"; fail=1; }
same_files sync async 2 4 6
diff <(losses -n sync.log) <(losses -n async.log) > /dev/null ||
  { echo "FAILED: --async-save changed the losses"; fail=1; }
[ "$(cat async/latest_checkpointed_iteration.txt)" = 6 ] ||
  { echo "FAILED: the async run's tracker is not 6"; fail=1; }
ls async | grep -q tmp- && { echo "FAILED: temporary directories left"; fail=1; }

# 2. TP 2 x DP 2 with the distributed optimizer: each rank's slices and moment pieces
par=(--tensor-model-parallel-size 2 --use-distributed-optimizer --train-iters 4 --save-interval 2)
mpi 4 "$MEGADLM" train "${common[@]}" "${par[@]}" --save psync > psync.log 2>&1 ||
  { echo "FAILED: parallel synchronous run"; tail -5 psync.log; exit 1; }
mpi 4 "$MEGADLM" train "${common[@]}" "${par[@]}" --save pasync --async-save > pasync.log 2>&1 ||
  { echo "FAILED: parallel async run"; tail -5 pasync.log; exit 1; }
same_files psync pasync 2 4

# 3. killed mid-write: the save of iteration 4 is held (test hook) after its slices are
# written, training goes on past it (and waits for it at the last save), then every rank is
# killed; compared with an uninterrupted run of the same layout
tp=(--tensor-model-parallel-size 2 --train-iters 6 --save-interval 2)
mpi 2 "$MEGADLM" train "${common[@]}" "${tp[@]}" --save tsync > tsync.log 2>&1 ||
  { echo "FAILED: TP 2 synchronous run"; tail -5 tsync.log; exit 1; }
release="$WORK/release-never"
MEGADLM_TEST_ASYNC_SAVE_HOLD="4:$release" mpi 2 "$MEGADLM" train "${common[@]}" "${tp[@]}" \
  --save killed --async-save > killed.log 2>&1 &
JOB=$!
for _ in $(seq 600); do grep -q "iteration        5/" killed.log && break; sleep 0.1; done
grep -q "iteration        5/" killed.log || { echo "FAILED: training did not go on during the save"; fail=1; }
# the megadlm processes under this test's mpirun, by its process tree
ranks() {
  local pids=$JOB all="" p
  while [ -n "$pids" ]; do
    local next=""
    for p in $pids; do next="$next $(pgrep -P "$p")"; done
    all="$all $next"; pids=$(echo $next)
  done
  for p in $all; do [ "$(cat /proc/$p/comm 2>/dev/null)" = megadlm ] && echo "$p"; done
}
tracker_then=$(cat killed/latest_checkpointed_iteration.txt 2>/dev/null)
victims=$(ranks)
[ -n "$victims" ] && kill -9 $victims
kill -9 $JOB 2>/dev/null; wait $JOB 2>/dev/null
[ "$tracker_then" = 2 ] && [ "$(cat killed/latest_checkpointed_iteration.txt)" = 2 ] ||
  { echo "FAILED: the tracker moved past 2 while the save of 4 was held"; fail=1; }
[ -d killed/iter_0000004 ] && { echo "FAILED: iter_0000004 in place before its save finished"; fail=1; }
ls killed | grep -q 'iter_0000004.tmp-' || { echo "FAILED: no partial save of iteration 4 found"; fail=1; }
same_files tsync killed 2
mpi 2 "$MEGADLM" train "${common[@]}" "${tp[@]}" --load killed --save killed-resumed \
  > resumed.log 2>&1 ||
  { echo "FAILED: the latest checkpoint after the kill does not load"; tail -5 resumed.log; fail=1; }
grep -q "successfully loaded checkpoint from killed .* at iteration 2" resumed.log ||
  { echo "FAILED: the resume did not start from iteration 2"; fail=1; }
diff <(losses -n tsync.log | tail -4) <(losses -n resumed.log) > /dev/null ||
  { echo "FAILED: the resumed run differs from the uninterrupted one"; fail=1; }
same_files tsync killed-resumed 6
[ $fail = 0 ] && echo "async save: same bytes as synchronous saves, atomic when killed"
exit $fail
