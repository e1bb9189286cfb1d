#!/usr/bin/env bash
# Threads per rank (src/core/threads.h) and the BLAS kernel matrix (tests/CMakeLists.txt):
#   - OMP_NUM_THREADS set: that number, and the log says it came from there;
#   - unset, one process: the CPUs it may run on (`nproc` reads the same affinity mask);
#   - unset, 2 unbound ranks: half of them each (at least 1); 2 ranks bound to one core each: 1;
#   - unset, more ranks than CPUs: 1 thread each, said once in the log;
#   - every kernel set of the matrix (MEGADLM_BLAS_CORETYPES) really runs: under
#     OPENBLAS_CORETYPE=X the log names kernels X (an unknown name would silently run others);
#   - OPENBLAS_CORETYPE unset, on a CPU with AVX2 and FMA (read from /proc/cpuinfo): never
#     OpenBLAS's SSE-only kernels (its fallback for CPUs it does not know), one process or two
#     ranks; where megadlm restarted itself for that, the set it chose follows the CPU's flags.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
flags=(--num-layers 1 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --lr 1e-3
       --train-iters 1 --eval-iters 0)
fail=0
cpus=$(nproc)
kernels_of() { grep -m1 '> BLAS:' "$1" | sed 's/.*; kernels \([A-Za-z0-9]*\).*/\1/'; }
threads_line() { grep -m1 '> threads per rank:' "$1" || true; }
expect() { # expect NAME LOG PATTERN
  if grep -q -- "$3" <<< "$(threads_line "$2")"; then echo "ok $1: $(threads_line "$2")"
  else echo "FAIL $1: expected '$3' in: $(threads_line "$2")"; tail -3 "$2"; fail=1; fi
}
OMP_NUM_THREADS=3 "$MEGADLM" train "${flags[@]}" > env.log 2>&1
expect "OMP_NUM_THREADS wins" env.log "threads per rank: 3 (OpenMP and OpenBLAS; from OMP_NUM_THREADS)"

env -u OMP_NUM_THREADS "$MEGADLM" train "${flags[@]}" > one.log 2>&1
expect "one process" one.log "threads per rank: $cpus (OpenMP and OpenBLAS; $cpus CPUs"

half=$((cpus / 2)); [ $half -ge 1 ] || half=1
env -u OMP_NUM_THREADS "${MPIRUN[@]}" --bind-to none -np 2 "$MEGADLM" train "${flags[@]}" \
  --global-batch-size 4 > unbound.log 2>&1
if [ "$cpus" -ge 2 ]; then
  expect "2 unbound ranks" unbound.log "threads per rank: $half (OpenMP and OpenBLAS; $cpus CPUs in this rank's affinity mask, shared by 2 processes)"
else
  expect "2 unbound ranks on 1 CPU" unbound.log "threads per rank: 1 (OpenMP and OpenBLAS): more processes than CPUs"
fi
if [ "$cpus" -ge 2 ]; then
  env -u OMP_NUM_THREADS "${MPIRUN[@]}" --bind-to core --map-by core -np 2 "$MEGADLM" train "${flags[@]}" > bound.log 2>&1
  expect "2 ranks bound to a core each" bound.log "threads per rank: 1 (OpenMP and OpenBLAS; 1 CPU in this rank's affinity mask, shared by 1 process)"
fi
over=$((2 * cpus))
env -u OMP_NUM_THREADS "${MPIRUN[@]}" --bind-to none -np $over "$MEGADLM" train "${flags[@]}" \
  --global-batch-size $((2 * over)) > over.log 2>&1
expect "$over ranks on $cpus CPUs" over.log "threads per rank: 1 (OpenMP and OpenBLAS): more processes than CPUs on a node ($over processes share $cpus CPUs), 1 thread each"
n=$(grep -c 'more processes than CPUs' over.log || true)
[ "$n" = 1 ] && echo "ok said once" || { echo "FAIL: the oversubscription line appears $n times"; fail=1; }

for core in ${MEGADLM_BLAS_CORETYPES:-}; do
  OPENBLAS_CORETYPE=$core OMP_NUM_THREADS=1 "$MEGADLM" train "${flags[@]}" > "kernels-$core.log" 2>&1
  got=$(kernels_of "kernels-$core.log")
  if [ "$got" = "$core" ]; then echo "ok OPENBLAS_CORETYPE=$core runs kernels $got"
  else echo "FAIL OPENBLAS_CORETYPE=$core runs kernels '$got'"; fail=1; fi
done
OPENBLAS_CORETYPE=Prescott OMP_NUM_THREADS=1 "$MEGADLM" train "${flags[@]}" > prescott.log 2>&1
got=$(kernels_of prescott.log)
[ "$got" = Prescott ] && echo "ok OPENBLAS_CORETYPE=Prescott is kept" ||
  { echo "FAIL OPENBLAS_CORETYPE=Prescott runs kernels '$got'"; fail=1; }

flags_line=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { [[ " $flags_line " == *" $1 "* ]]; }
sse_only=" Prescott Core2 Penryn Dunnington Nehalem Atom Katmai Coppermine Northwood Banias "
if has avx2 && has fma; then
  want=Haswell
  if has avx512f && has avx512bw && has avx512dq && has avx512vl; then want=SkylakeX; fi
  if [ $want = SkylakeX ] && has avx512_bf16; then want=Cooperlake; fi
  for log in one.log unbound.log; do
    got=$(kernels_of $log)
    if [[ "$sse_only" == *" $got "* ]]; then echo "FAIL $log: SSE-only kernels $got on an AVX2 CPU"; fail=1
    elif grep -q 'megadlm restarted itself' $log && [ "$got" != "$want" ]; then
      echo "FAIL $log: restarted with kernels $got, the CPU's flags ask for $want"; fail=1
    else echo "ok $log: kernels $got$(grep -q 'megadlm restarted itself' $log && echo ' (restarted)')"; fi
  done
fi
# a restarted process keeps its name (tools and tests find ranks by /proc/PID/comm)
env -u OPENBLAS_CORETYPE OMP_NUM_THREADS=1 "$MEGADLM" train "${flags[@]}" --train-iters 1000000 \
  > name.log 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q 'iteration' name.log && break; sleep 0.1; done
name=$(cat /proc/$pid/comm 2>/dev/null || true)
kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true
[ "$name" = megadlm ] && echo "ok the process is still named megadlm" ||
  { echo "FAIL the process is named '$name', not megadlm"; fail=1; }
exit $fail
