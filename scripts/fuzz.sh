#!/usr/bin/env bash
# Fuzzing with libFuzzer (clang) the readers of user files: tests/fuzz/fuzz_NAME.c, seed
# corpus tests/fuzz/corpus/NAME/ (README "Sanitizers and fuzzing").
#
#   scripts/fuzz.sh SECONDS [NAME...]   fuzz each target (all by default) for SECONDS, one after
#                                       the other, one process; prints executions and findings
#   scripts/fuzz.sh --merge SECONDS [NAME...]   the same, then merges what adds coverage into
#                                       tests/fuzz/corpus/NAME/ (libFuzzer -merge=1)
#   scripts/fuzz.sh --replay [NAME...]  runs every corpus input once (sanitizers on); exit 1 if
#                                       any fails
#
# Targets: indexed_dataset safetensors checkpoint_state gpt2_tokenizer hf_tokenizer
# hf_tokenizer_dir preprocess_jsonl hf_config. Builds them in $FUZZ_BUILD (default build-fuzz) with clang-14,
# -DMEGADLM_FUZZ=ON -DMEGADLM_SANITIZE=address,undefined (scripts/install-deps.sh --fuzz installs
# clang). New corpus entries and crash artifacts go to $FUZZ_OUT/NAME/ (default
# ${TMPDIR:-/tmp}/megadlm-fuzz-out), never into the source tree unless --merge. A crash, leak,
# timeout (10 s) or out-of-memory (2 GB) is recorded and fuzzing goes on (-fork=1
# -ignore_crashes=1 ...); keep a finding in the corpus as tests/fuzz/corpus/NAME/crash-*.
# FUZZ_NICE (default 10) is the nice level; FUZZ_JOBS (default 1) the build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BUILD=${FUZZ_BUILD:-build-fuzz}
OUT=${FUZZ_OUT:-${TMPDIR:-/tmp}/megadlm-fuzz-out}
NICE=${FUZZ_NICE:-10}
ALL=(indexed_dataset safetensors checkpoint_state gpt2_tokenizer hf_tokenizer hf_tokenizer_dir
     preprocess_jsonl hf_config)

mode=fuzz
case "${1:-}" in
  --merge) mode=merge; shift ;;
  --replay) mode=replay; shift ;;
  -h|--help|"") sed -n '2,21p' "$0"; [ -n "${1:-}" ]; exit $? ;;
esac
secs=0
if [ "$mode" != replay ]; then
  secs=${1:-}
  [[ "$secs" =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || { echo "fuzz.sh: SECONDS: expected a positive integer, found '$secs'" >&2; exit 2; }
  shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL[@]}")
for i in "${!targets[@]}"; do
  t=${targets[$i]#fuzz_}
  targets[$i]=$t
  [ -f "tests/fuzz/fuzz_$t.c" ] || { echo "fuzz.sh: unknown target '$t' (${ALL[*]})" >&2; exit 2; }
done

CC=${FUZZ_CC:-$(command -v clang-14 || command -v clang || true)}
if [ -z "$CC" ]; then
  bash scripts/install-deps.sh --fuzz
  CC=$(command -v clang-14 || command -v clang)
fi
mkdir -p "$BUILD"
{ nice -n "$NICE" cmake -S . -B "$BUILD" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=Release \
    -DMEGADLM_FUZZ=ON -DMEGADLM_SANITIZE=address,undefined &&
  nice -n "$NICE" cmake --build "$BUILD" -j "${FUZZ_JOBS:-1}" --target fuzz_targets; } \
  > "$BUILD/fuzz-build.log" 2>&1 || { tail -40 "$BUILD/fuzz-build.log" >&2; exit 1; }

export OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
FLAGS=(-timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -close_fd_mask=3 -print_final_stats=1)

rc=0
summary=()
for t in "${targets[@]}"; do
  bin=$BUILD/fuzz/fuzz_$t
  corpus=tests/fuzz/corpus/$t
  if [ "$mode" = replay ]; then
    n=$(ls "$corpus" | wc -l); bad=0
    # all inputs in one process; only if one fails, each in its own to name every failing one
    if nice -n "$NICE" "$bin" -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$BUILD/replay-" \
        "$corpus"/* > "$BUILD/replay.log" 2>&1; then
      summary+=("$(printf '%-17s %4d inputs, 0 failed' "$t" "$n")")
      continue
    fi
    for f in "$corpus"/*; do
      if ! nice -n "$NICE" "$bin" -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$BUILD/replay-" \
          "$f" > "$BUILD/replay.log" 2>&1; then
        bad=$((bad + 1))
        echo "== $t: $f FAILED:" >&2
        grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x.* in .*/(src|tests)/" "$BUILD/replay.log" |
          head -8 >&2 || true
      fi
    done
    summary+=("$(printf '%-17s %4d inputs, %d failed' "$t" "$n" "$bad")")
    [ "$bad" -eq 0 ] || rc=1
    continue
  fi
  mkdir -p "$OUT/$t/corpus" "$OUT/$t/artifacts"
  log=$OUT/$t/fuzz.log
  before=$(ls "$OUT/$t/artifacts" | wc -l)
  start=$(date +%s)
  # The first directory receives the new entries; the seed corpus is only read.
  nice -n "$NICE" "$bin" "${FLAGS[@]}" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 \
    -ignore_ooms=1 -max_total_time="$secs" -artifact_prefix="$OUT/$t/artifacts/" \
    "$OUT/$t/corpus" "$corpus" > "$log" 2>&1 || true
  took=$(( $(date +%s) - start ))
  execs=$(grep -oE '^#[0-9]+:' "$log" | tail -1 | tr -dc 0-9)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | tr -dc 0-9)
  found=$(( $(ls "$OUT/$t/artifacts" | wc -l) - before ))
  summary+=("$(printf '%-17s %10s executions in %4ds, coverage %5s edges, %d new findings in %s' \
    "$t" "${execs:-?}" "$took" "${cov:-?}" "$found" "$OUT/$t/artifacts/")")
  if [ "$mode" = merge ]; then
    nice -n "$NICE" "$bin" -merge=1 -close_fd_mask=3 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$OUT/$t/artifacts/" "$corpus" "$OUT/$t/corpus" > "$OUT/$t/merge.log" 2>&1
    echo "fuzz.sh: $t: corpus now $(ls "$corpus" | wc -l) inputs ($OUT/$t/merge.log)"
  fi
done
printf '%s\n' "${summary[@]}"
exit $rc
