#!/usr/bin/env bash
# --rerun-mode (Megatron's rerun state machine), with the test hook MEGADLM_RERUN_FAULT that
# turns one iteration's gradient norm into NaN:
#  - validate_results, a transient fault (first computation only): the iteration is re-run,
#    logged as a possible transient error, and the run ends with the same checkpoint bits as a
#    run without the fault (one process, and DP 2 with the distributed optimizer and overlap);
#  - validate_results, a persistent fault (every computation): the job stops with Megatron's
#    EXIT_CODE_FAILED_ON_RESULT_VALIDATION, 17, before that iteration's step;
#  - disabled: the same fault stops the job as --check-for-nan-in-loss-and-grad does (exit 1):
#    the hook does corrupt the result;
#  - report_stats: every iteration re-run; the same process gives the same bits, so the log
#    counts 0 differing re-runs and the checkpoint equals the plain run's.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 3e-3 --log-interval 1 --eval-iters 0 --seed 7)
fail=0
same() { # same DIR_A DIR_B: the saved parameters and optimizer state of iteration 5, bit for bit
  same_ckpt "$1" "$2" 5 || { echo "FAILED: $1 and $2 differ"; fail=1; }
}
"$MEGADLM" train "${common[@]}" --save clean > clean.log 2>&1 || { echo "FAILED: clean run"; tail -3 clean.log; exit 1; }

MEGADLM_RERUN_FAULT=3 "$MEGADLM" train "${common[@]}" --rerun-mode validate_results --save transient > transient.log 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAILED: transient fault: exit $rc"; tail -5 transient.log; fail=1; }
grep -q "Result validation enabled" transient.log || { echo "FAILED: no 'Result validation enabled'"; fail=1; }
grep -q "Unexpected result at iteration #3" transient.log || { echo "FAILED: the fault was not seen"; fail=1; }
grep -q "Need to rerun step to check reproducibility of initial result" transient.log || { echo "FAILED: no re-run"; fail=1; }
grep -q "not reproducible within the tolerance" transient.log || { echo "FAILED: not judged transient"; fail=1; }
grep -q "Possible transient error" transient.log || { echo "FAILED: no transient error line"; fail=1; }
same clean transient

MEGADLM_RERUN_FAULT=3:persistent "$MEGADLM" train "${common[@]}" --rerun-mode validate_results --save persistent > persistent.log 2>&1
rc=$?
[ $rc = 17 ] || { echo "FAILED: persistent fault: exit $rc, expected 17"; tail -5 persistent.log; fail=1; }
grep -q "reproducible within the tolerance (nan = nan)" persistent.log || { echo "FAILED: not judged persistent"; fail=1; }
grep -q "Possible persistent error" persistent.log || { echo "FAILED: no persistent error line"; fail=1; }
grep -q "iteration        3/" persistent.log && { echo "FAILED: iteration 3 was logged after a persistent error"; fail=1; }

MEGADLM_RERUN_FAULT=3 "$MEGADLM" train "${common[@]}" > disabled.log 2>&1
rc=$?
[ $rc = 1 ] && grep -q "iteration 3: grad norm is nan" disabled.log \
    || { echo "FAILED: without --rerun-mode the fault must stop the job (exit $rc)"; tail -3 disabled.log; fail=1; }

# --check-for-spiky-loss: a loss 10x the true one once is a transient spike (re-run, same
# checkpoint as the clean run); every time, a reproducible spike: no error, the run goes on
spiky=(--rerun-mode validate_results --check-for-spiky-loss)
MEGADLM_RERUN_FAULT=4:spike "$MEGADLM" train "${common[@]}" "${spiky[@]}" --save spike > spike.log 2>&1 \
    || { echo "FAILED: transient spike"; tail -3 spike.log; fail=1; }
grep -q "message='Spiky loss'" spike.log && grep -q "Possible transient error" spike.log \
    || { echo "FAILED: transient spike not re-run"; fail=1; }
same clean spike
MEGADLM_RERUN_FAULT=4:spike:persistent "$MEGADLM" train "${common[@]}" "${spiky[@]}" --save spikep > spikep.log 2>&1 \
    || { echo "FAILED: a reproducible spike stopped the job"; tail -3 spikep.log; fail=1; }
grep -q "a spiky loss, not an error" spikep.log || { echo "FAILED: reproducible spike not reported"; fail=1; }
same clean spikep
# the clean run's losses are no spikes (else the spike checks above would test nothing)
"$MEGADLM" train "${common[@]}" "${spiky[@]}" > nospike.log 2>&1
grep -q "Spiky loss" nospike.log && { echo "FAILED: the clean run has a spiky loss"; fail=1; }

# Megatron validates NaN only under --check-for-nan-in-loss-and-grad: without it the faulty
# iteration is skipped (counted), not re-run
MEGADLM_RERUN_FAULT=3 "$MEGADLM" train "${common[@]}" --rerun-mode validate_results \
    --no-check-for-nan-in-loss-and-grad > nocheck.log 2>&1 || { echo "FAILED: nocheck run"; fail=1; }
grep -q "Need to rerun" nocheck.log && { echo "FAILED: re-run without --check-for-nan-in-loss-and-grad"; fail=1; }
grep -q "iteration        3/.*number of skipped iterations:   1" nocheck.log \
    || { echo "FAILED: iteration 3 not skipped without the NaN check"; fail=1; }

MEGADLM_RERUN_FAULT=x "$MEGADLM" train "${common[@]}" --rerun-mode validate_results > badenv.log 2>&1 \
    && { echo "FAILED: MEGADLM_RERUN_FAULT=x accepted"; fail=1; }
grep -q "MEGADLM_RERUN_FAULT='x'" badenv.log || { echo "FAILED: bad hook value not named"; fail=1; }

"$MEGADLM" train "${common[@]}" --rerun-mode report_stats --save report > report.log 2>&1 \
    || { echo "FAILED: report_stats run"; tail -3 report.log; fail=1; }
[ "$(grep -c 'rerun stats at iteration [0-9]*: 0 of 1 iterations gave other bits' report.log)" = 5 ] \
    || { echo "FAILED: report_stats did not count 5 identical re-runs"; grep 'rerun stats' report.log; fail=1; }
same clean report

# DP 2, distributed optimizer, overlapped reductions and gathers: every rank re-runs together
dp=(--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather)
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${dp[@]}" --save dpclean > dpclean.log 2>&1 \
    || { echo "FAILED: DP 2 clean run"; tail -3 dpclean.log; fail=1; }
MEGADLM_RERUN_FAULT=2 "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${dp[@]}" \
    --rerun-mode validate_results --save dpfault > dpfault.log 2>&1 \
    || { echo "FAILED: DP 2 transient fault"; tail -5 dpfault.log; fail=1; }
[ "$(grep -c 'Possible transient error' dpfault.log)" = 2 ] || { echo "FAILED: DP 2: not both ranks re-ran"; fail=1; }
same dpclean dpfault
[ $fail = 0 ] && echo "rerun mode: transient re-run, persistent stop, report counts as expected"
exit $fail
