#!/usr/bin/env bash
# The sanitizer step of CI (`make sanitize`; README "Sanitizers and fuzzing"):
#
#   scripts/sanitize.sh [BUILD_DIR]     (default build-asan)
#
# Configures and builds BUILD_DIR with -DMEGADLM_SANITIZE=$SANITIZE (default
# address,undefined,float-cast-overflow: GCC's "undefined" leaves out float-cast-overflow,
# which clang's includes), then runs under AddressSanitizer + UndefinedBehaviorSanitizer:
#   - every unit test (tests/unit),
#   - the script tests in SINGLE (one process each) and MULTI (mpirun -np 2 and more),
#   - the corpus replay of every fuzz target (tests/fuzz/corpus/NAME: each input once), and
#     when clang is installed the same replay with the libFuzzer build (scripts/fuzz.sh
#     --replay; `make sanitize` installs clang with scripts/install-deps.sh --fuzz).
# Any sanitizer report fails the step, even one from a process whose failure a test expected:
# ASan and LeakSanitizer reports go to files (ASAN_OPTIONS log_path), one directory per test,
# and are printed at the end. UBSan's do not: with GCC's separate libubsan next to libasan they
# ignore log_path and go to stderr; they stop the process (-fno-sanitize-recover=all, exit
# status 1) before it prints its own error, so a test that checks the message fails, and the
# step also fails a test whose output (ctest -V, kept in the test's directory) holds
# "runtime error:" (a test that discards a failing process's stderr unchecked can hide one).
# Leak checking is on for single processes. Under mpirun it is off: Open MPI leaks at
# MPI_Finalize from components it has already unloaded (frames "<unknown module>"), which a
# suppression file by library cannot match; so `mpirun` is a wrapper here that adds
# detect_leaks=0 for the ranks it starts. OpenBLAS, libgomp and Open MPI are not instrumented;
# they work with ASan as they are (no extra ASAN_OPTIONS needed). JOBS: build parallelism
# (default: the number of cores).
set -uo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${1:-build-asan}
SANITIZE=${SANITIZE:-address,undefined,float-cast-overflow}
NICE=${SANITIZE_NICE:-10}
# single-process script tests
SINGLE=(test_generate test_train_resume test_validation test_preprocess test_split_data_paths
        test_hf_convert test_hf_tokenizer test_gpt2_tokenizer test_megatron_format
        test_safetensors_python test_difflm_torch test_moe_torch)
# script tests under mpirun
MULTI=(test_tensor_parallel_checkpoint test_tensor_parallel_errors test_data_parallel
       test_difflm_train test_checkpoint_layouts test_checkpoint_flags test_async_save
       test_hf_convert_difflm test_fsdp test_context_parallel test_context_parallel_lengths
       test_moe_memory)

t0=$(date +%s)
mkdir -p "$BUILD"
{ nice -n "$NICE" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMEGADLM_SANITIZE="$SANITIZE" &&
  nice -n "$NICE" cmake --build "$BUILD" -j "${JOBS:-$(nproc)}"; } > "$BUILD/sanitize-build.log" 2>&1 ||
  { tail -40 "$BUILD/sanitize-build.log" >&2; echo "sanitize: build failed" >&2; exit 1; }
echo "sanitize: built $BUILD with -fsanitize=$SANITIZE in $(( $(date +%s) - t0 )) s"

BUILD=$(cd "$BUILD" && pwd)
REPORTS=$BUILD/sanitizer-reports
rm -rf "$REPORTS"
mkdir -p "$REPORTS/bin"
real_mpirun=$(command -v mpirun || true)
if [ -n "$real_mpirun" ]; then
  cat > "$REPORTS/bin/mpirun" <<WRAP
#!/usr/bin/env bash
# leak checking off for the ranks (see scripts/sanitize.sh)
export ASAN_OPTIONS="\${ASAN_OPTIONS}:detect_leaks=0"
exec "$real_mpirun" "\$@"
WRAP
  chmod +x "$REPORTS/bin/mpirun"
fi
export PATH=$REPORTS/bin:$PATH
# OpenMP threads that sleep instead of spinning while they wait: on a machine whose cores are
# busy with other work, libgomp's spinning made single tests 10 to 70 times slower under ASan.
export OMP_WAIT_POLICY=PASSIVE

units=$(cd "$BUILD" && ctest -N | sed -n 's/^ *Test *#[0-9]*: \(test_[a-z0-9_]*\)$/\1/p' |
        while read -r t; do [ -f "$SRC/tests/unit/$t.c" ] && echo "$t"; done)
replays=$(cd "$BUILD" && ctest -N | sed -n 's/^ *Test *#[0-9]*: \(fuzz_replay_[a-z0-9_]*\)$/\1/p')
failed=()
for t in $units "${SINGLE[@]}" "${MULTI[@]}" $replays; do
  d=$REPORTS/$t
  mkdir -p "$d"
  s=$(date +%s)
  ASAN_OPTIONS="detect_leaks=1:log_path=$d/asan" \
  UBSAN_OPTIONS="print_stacktrace=1" \
    nice -n "$NICE" ctest --test-dir "$BUILD" -R "^$t\$" -V > "$d/ctest.log" 2>&1
  rc=$?
  grep -q "tests passed, 0 tests failed out of 1" "$d/ctest.log" || { [ $rc -ne 0 ] || rc=1; }
  nrep=$(find "$d" -name 'asan.*' | wc -l)
  nrep=$((nrep + $(grep -c "runtime error:" "$d/ctest.log")))
  took=$(( $(date +%s) - s ))
  if [ $rc -ne 0 ] || [ "$nrep" -gt 0 ]; then
    failed+=("$t")
    echo "sanitize: FAILED $t (${took} s, ctest rc $rc, $nrep sanitizer report(s) in $d)"
  else
    echo "sanitize: ok     $t (${took} s)"
  fi
done

# The same corpora through the libFuzzer build (clang; keeps scripts/fuzz.sh's build working).
if command -v clang-14 > /dev/null || command -v clang > /dev/null; then
  s=$(date +%s)
  if FUZZ_NICE=$NICE FUZZ_JOBS=${JOBS:-$(nproc)} bash scripts/fuzz.sh --replay \
      > "$REPORTS/libfuzzer_replay.log" 2>&1; then
    echo "sanitize: ok     libfuzzer_replay ($(( $(date +%s) - s )) s)"
  else
    failed+=(libfuzzer_replay)
    echo "sanitize: FAILED libfuzzer_replay ($(( $(date +%s) - s )) s, $REPORTS/libfuzzer_replay.log)"
  fi
else
  echo "sanitize: clang not installed, libFuzzer replay skipped (scripts/install-deps.sh --fuzz)"
fi

for t in "${failed[@]}"; do
  if [ "$t" = libfuzzer_replay ]; then
    echo "================ $t"
    grep -E "inputs, [1-9][0-9]* failed|FAILED" "$REPORTS/libfuzzer_replay.log" | head -20
    continue
  fi
  d=$REPORTS/$t
  echo "================ $t"
  for r in $(find "$d" -name 'asan.*' | sort); do
    echo "---- $r"
    grep -E "ERROR: |runtime error|SUMMARY|^ *#[0-9]+ .* in " "$r" | grep -v -E "libsanitizer|__libc_start" | head -14
  done
  grep -E "runtime error:|FAILED|replay: |Failed|Timeout" "$d/ctest.log" | head -10
done
echo "sanitize: ${#failed[@]} failed: ${failed[*]:-none} ($(( $(date +%s) - t0 )) s in all)"
[ ${#failed[@]} -eq 0 ]
