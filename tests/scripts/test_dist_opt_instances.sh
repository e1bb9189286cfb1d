#!/usr/bin/env bash
# --num-distributed-optimizer-instances N (Megatron's partial data-parallel groups): DP 4 with
# N = 2 and N = 4 trains as N = 1 (losses within rel 1e-5, parameters within rel 1e-4: the
# gradient sums only change order), with and without the overlapped reductions and gathers;
# each rank holds ceil(P / (DP / N)) elements of each Adam moment (measured by --log-memory,
# against the count computed here by hand); a checkpoint saved under N = 2 resumes under N = 1
# and under N = 2 (its crc32s verified on load: instance 1 must not write or count what
# instance 0 wrote); --bf16 with N = 2 against N = 1 within rel 1e-3.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
MPI4=("${MPIRUN[@]}" -np 4)
PY=/usr/bin/python3
CMP="$SRC/tests/python/compare_checkpoints.py"
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 1 --global-batch-size 8 --train-iters 6
        --lr 3e-3 --log-interval 1 --eval-iters 0 --seed 3 --use-distributed-optimizer)
fail=0
close() { close_losses "$1" "$2" "$3" 6 || fail=1; } # close REF.log OTHER.log RTOL: the 6 losses
run() { # run NAME ARGS...
  local name=$1; shift
  "${MPI4[@]}" "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1 \
      || { echo "FAILED: $name (exit $?)"; tail -3 "$name.log"; fail=1; }
}
same_params() { # same_params DIR_A DIR_B
  $PY "$CMP" "$1/iter_0000006/model.safetensors" "$2/iter_0000006/model.safetensors" 1e-4 4 4 8 1.2e-2 || fail=1
}
run n1 --save n1
for n in 2 4; do
  run n$n --num-distributed-optimizer-instances $n --save n$n --log-memory
  grep -q "> distributed optimizer: $n instances of $((4 / n)) data-parallel ranks" n$n.log \
      || { echo "FAILED: n$n: no instances line"; fail=1; }
  close n1.log n$n.log 1e-5
  same_params n$n n1
  # 30080 parameters (this model, the arguments block's count); two fp32 moments per element
  want=$(( (30080 + 4 / n - 1) / (4 / n) * 8 ))
  [ "$(grep -c "memory optimizer state (bytes) | predicted $want | measured $want | difference 0" n$n.log)" = 4 ] \
      || { echo "FAILED: n$n: optimizer state is not $want bytes on every rank"; grep "optimizer state (bytes)" n$n.log; fail=1; }
done
grep -q "number of parameters on (tensor, pipeline) model parallel rank (0, 0): 30080" n1.log \
    || { echo "FAILED: the model is not the 30080 parameters the counts assume"; fail=1; }
ov=(--overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 5000)
run ov1 "${ov[@]}" --save ov1
run ov2 "${ov[@]}" --num-distributed-optimizer-instances 2 --save ov2
close ov1.log ov2.log 1e-5
same_params ov2 n1
# resume: N = 2 saves at 3; N = 1 (and N = 2) finish
run ra --num-distributed-optimizer-instances 2 --save r1 --exit-interval 3
cp -r r1 r2
run rb1 --save r1 --load r1
run rb2 --num-distributed-optimizer-instances 2 --save r2 --load r2
for r in rb1 rb2; do
  grep -q "successfully loaded checkpoint from r. .* at iteration 3" $r.log || { echo "FAILED: $r did not load"; fail=1; }
  cat ra.log $r.log > $r-all.log
  close n1.log $r-all.log 1e-5
done
same_params r1 n1
same_params r2 n1
# --bf16: fp32 main parameters sharded within each instance
run b1 --bf16
run b2 --bf16 --num-distributed-optimizer-instances 2
close b1.log b2.log 1e-3
expect_error "does not divide the data-parallel size 4" \
  "${MPI4[@]}" "$MEGADLM" train "${common[@]}" --num-distributed-optimizer-instances 3 || fail=1
[ $fail = 0 ] && echo "distributed optimizer instances: as one instance, sharded within each"
exit $fail
