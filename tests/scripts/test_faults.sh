#!/usr/bin/env bash
# Faults: a rank killed with SIGKILL ends the job on every rank (mpirun names it), a rank that
# stops answering ends the job after --distributed-timeout-minutes with a message from the ranks
# left waiting, nothing hangs, and the latest checkpoint still loads.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4
        --train-iters 100000 --lr 1e-3 --log-interval 1000 --eval-iters 0
        --save-interval 20 --distributed-timeout-minutes 0.1)
fail=0

# ranks: the megadlm processes under the mpirun this test started ($JOB), found by walking its
# process tree (never by name or command line: another job on the machine may look the same)
ranks() {
  local pids=$JOB all="" p
  while [ -n "$pids" ]; do
    local next=""
    for p in $pids; do next="$next $(pgrep -P "$p")"; done
    all="$all $next"; pids=$(echo $next)
  done
  for p in $all; do [ "$(cat /proc/$p/comm 2>/dev/null)" = megadlm ] && echo "$p"; done
}
# start NAME: a 2-rank TP job in the background that checkpoints every 20 iterations
start() {
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" \
      --tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --save "$1" > "$1.log" 2>&1 &
  JOB=$!
  for _ in $(seq 300); do [ -f "$1/latest_checkpointed_iteration.txt" ] && break; sleep 0.1; done
  [ -f "$1/latest_checkpointed_iteration.txt" ] || { echo "FAILED: $1 never checkpointed"; cat "$1.log"; kill -9 $(ranks) $JOB; exit 1; }
  sleep 0.5
}
# finish NAME LIMIT_S: the job must end by itself, non-zero, within LIMIT_S seconds
finish() {
  local t0=$SECONDS
  while kill -0 $JOB 2>/dev/null && [ $((SECONDS - t0)) -lt "$2" ]; do sleep 0.2; done
  if kill -0 $JOB 2>/dev/null; then
    echo "FAILED: $1 still running after $2 s"; kill -9 $(ranks) $JOB 2>/dev/null; fail=1; return
  fi
  wait $JOB; local rc=$?
  [ $rc -ne 0 ] || { echo "FAILED: $1 exited 0"; fail=1; }
  echo "$1: ended in $((SECONDS - t0)) s with status $rc"
}
# the latest checkpoint of NAME loads and trains one more iteration
loadable() {
  local it; it=$(cat "$1/latest_checkpointed_iteration.txt")
  "$MEGADLM" train "${common[@]/100000/$((it + 1))}" --load "$1" --save "$1-resumed" \
      --distributed-timeout-minutes 1 > "$1-resume.log" 2>&1 &&
    grep -q "successfully loaded checkpoint" "$1-resume.log" ||
    { echo "FAILED: $1's latest checkpoint (iteration $it) does not load"; tail -3 "$1-resume.log"; fail=1; }
}

start killed
victim=$(ranks | tail -1)
[ -n "$victim" ] || { echo "FAILED: no megadlm rank under mpirun $JOB"; kill -9 $JOB; exit 1; }
kill -9 "$victim"
finish killed 30
grep -qiE "signal 9|killed" killed.log || { echo "FAILED: no message naming the killed rank"; tail -5 killed.log; fail=1; }
loadable killed

start stopped
victim=$(ranks | tail -1)
[ -n "$victim" ] || { echo "FAILED: no megadlm rank under mpirun $JOB"; kill -9 $JOB; exit 1; }
kill -STOP "$victim"
finish stopped 40
grep -q "error: no progress for" stopped.log || { echo "FAILED: no timeout message"; tail -5 stopped.log; fail=1; }
kill -9 "$victim" 2>/dev/null
loadable stopped
exit $fail
