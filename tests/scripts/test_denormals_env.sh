#!/usr/bin/env bash
# MEGADLM_DENORMALS (core/util/denormals.h; docs/architecture/determinism.md, "Denormals"), through the
# binary: by default every compute thread of a run flushes denormals (the log's count, made by
# the threads themselves, one process and each of two ranks' log rank), `keep` keeps them in
# all, and any other value stops every subcommand with an error naming the variable.
# test_denormals (unit) checks the arithmetic of every kind of thread under each mode.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
flags=(--num-layers 1 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --train-iters 1 --eval-iters 0)
fail=0
expect_line() { # NAME LOG TEXT
  if grep -qF -- "$3" "$2"; then echo "ok $1: $(grep -m1 '> denormals:' "$2")"
  else echo "FAIL $1: expected '$3' in $2:"; grep '> denormals:' "$2" || tail -3 "$2"; fail=1; fi
}
env -u MEGADLM_DENORMALS OMP_NUM_THREADS=3 "$MEGADLM" train "${flags[@]}" > default.log 2>&1
expect_line "default flushes" default.log \
  "> denormals: flushed to zero (FTZ and DAZ) in 3 of 3 compute threads (MEGADLM_DENORMALS=keep keeps them)"
MEGADLM_DENORMALS=flush OMP_NUM_THREADS=2 "$MEGADLM" train "${flags[@]}" > flush.log 2>&1
expect_line "flush" flush.log "> denormals: flushed to zero (FTZ and DAZ) in 2 of 2 compute threads"
MEGADLM_DENORMALS=keep OMP_NUM_THREADS=3 "$MEGADLM" train "${flags[@]}" > keep.log 2>&1
expect_line "keep" keep.log "> denormals: kept (MEGADLM_DENORMALS=keep) in 3 of 3 compute threads"
# two ranks: each process sets itself up; the log rank's line
env -u MEGADLM_DENORMALS OMP_NUM_THREADS=1 "${MPIRUN[@]}" -np 2 -x OMP_NUM_THREADS "$MEGADLM" train \
  "${flags[@]}" --tensor-model-parallel-size 2 > tp2.log 2>&1
expect_line "2 ranks" tp2.log "> denormals: flushed to zero (FTZ and DAZ) in 1 of 1 compute threads"

for value in "" FLUSH off "keep "; do
  for cmd in train memory; do
    set +e
    MEGADLM_DENORMALS="$value" "$MEGADLM" $cmd "${flags[@]}" > bad.log 2>&1
    rc=$?
    set -e
    want="error: environment variable MEGADLM_DENORMALS='$value': expected flush (the default) or keep"
    if [ $rc -eq 2 ] && grep -qF -- "$want" bad.log; then echo "ok refused '$value' ($cmd)"
    else echo "FAIL '$value' ($cmd): rc $rc"; head -3 bad.log; fail=1; fi
  done
done
exit $fail
