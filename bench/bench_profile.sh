#!/usr/bin/env bash
# Where a training step's time goes: the share of the GPT-2 124M step (the shape of
# bench_gpt2.sh) spent in GEMMs and, within the rest, per kind of operation.
#   1. GEMMs: bench/gemm_profile.c wraps cblas_sgemm (LD_PRELOAD) and times every call, per
#      product shape: total seconds / the iterations' time = the GEMM share, and each shape's
#      mean and best rate in the step against the best rate of the same layout alone
#      (bench/sgemm_bench.c, hot caches, 1 s per case).
#   2. Everything (when `perf` runs here): a cpu-clock sample profile of the timed iterations,
#      symbols grouped into kinds (GEMM kernel, GEMM packing, waiting threads, optimizer,
#      cross-entropy, ...), as shares of all samples (both threads).
# Shares are ratios within one run, so they hold on a shared machine better than times do.
# PRECISION=bf16 profiles the --bf16 step instead: part 1 is skipped (its GEMMs are oneDNN's JIT
# code, which no sgemm wrapper sees) and part 2 counts the JIT code as GEMM kernel and the
# bf16 conversions as their own kind.
#
# usage: bash bench/bench_profile.sh [BUILD=build]
#   env: ITERS=3 WARMUP=1 THREADS=$(nproc) PRECISION=fp32|bf16 OPENBLAS_CORETYPE (default: the
#        kernels megadlm runs)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ITERS=${ITERS:-3} WARMUP=${WARMUP:-1}
THREADS=${THREADS:-$(env -u OMP_NUM_THREADS nproc)}
OUT=$BUILD/bench/profile
OMP_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
mkdir -p "$OUT"
die() { echo "bench_profile: $*" >&2; exit 1; }
[ -x "$BUILD/megadlm" ] || die "$BUILD/megadlm not built (make build)"
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"
VOCAB=50304
CC_BLAS=(-I/usr/include/x86_64-linux-gnu/openblas-openmp -L"$OMP_BLAS" -Wl,-rpath,"$OMP_BLAS")
gcc -O2 -std=c11 -fopenmp "${CC_BLAS[@]}" "$ROOT/bench/sgemm_bench.c" -lopenblas -o "$OUT/sgemm_bench"
gcc -O2 -shared -fPIC "${CC_BLAS[@]}" "$ROOT/bench/gemm_profile.c" -o "$OUT/gemm_profile.so" -ldl -lpthread

PRECISION=${PRECISION:-fp32}
case $PRECISION in fp32 | bf16) ;; *) die "PRECISION=$PRECISION: expected fp32 or bf16" ;; esac
echo "== where the step's time goes: GPT-2 124M (L=12 h=768 s=256 b=4 V=$VOCAB), $PRECISION," \
  "$THREADS threads, $WARMUP warm-up + $ITERS timed iterations"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| OpenBLAS kernels $OPENBLAS_CORETYPE | load average $(cut -d' ' -f1-3 /proc/loadavg)"
train=(train --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 256
       --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 4
       --mock-data --tokenizer-type NullTokenizer --vocab-size 50256
       --train-iters $((WARMUP + ITERS)) --lr 6e-4 --hidden-dropout 0 --attention-dropout 0
       --log-interval 1 --eval-iters 0)
[ "$PRECISION" = bf16 ] && train+=(--bf16)
iter_ms() { grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | awk '{ print $NF }'; }

# ---- 1. GEMMs
if [ "$PRECISION" = bf16 ]; then
  echo "-- GEMMs: oneDNN's JIT code under --bf16: their share is the profile's GEMM kernel below"
  OMP_NUM_THREADS=$THREADS "$BUILD/megadlm" "${train[@]}" > "$OUT/gemm_run.log" 2>&1 ||
    { tail -5 "$OUT/gemm_run.log" >&2; die "megadlm failed (log: $OUT/gemm_run.log)"; }
  echo "   $(grep -m1 '^> bf16 GEMM' "$OUT/gemm_run.log")"
else
OMP_NUM_THREADS=$THREADS "$OUT/sgemm_bench" 1 > "$OUT/sgemm.log"
OMP_NUM_THREADS=$THREADS GEMM_PROFILE_OUT="$OUT/gemms.txt" GEMM_PROFILE_VOCAB=$VOCAB \
  LD_PRELOAD="$OUT/gemm_profile.so" "$BUILD/megadlm" "${train[@]}" > "$OUT/gemm_run.log" 2>&1 ||
  { tail -5 "$OUT/gemm_run.log" >&2; die "megadlm failed (log: $OUT/gemm_run.log)"; }
[ -s "$OUT/gemms.txt" ] || die "the GEMM profiler wrote nothing (is megadlm linked to libopenblas?)"
# every call is counted, the warm-up's too: divide by every iteration's time
total_s=$(iter_ms "$OUT/gemm_run.log" | awk '{ s += $1 } END { printf "%.3f", s / 1000 }')
best_alone=$(awk '$1 != "#" { if ($6 > b) b = $6 } END { print b }' "$OUT/sgemm.log")
echo
echo "-- GEMMs ($OUT/gemms.txt): $(iter_ms "$OUT/gemm_run.log" | wc -l) iterations, $total_s s"
awk -v T="$total_s" -v th="$THREADS" -v alone="$best_alone" '
  { flop = 2 * $3 * $4 * $5 * $6; s = $7
    # attention calls its small products from every thread of a parallel region: thread-seconds
    if ($1 == "small") s /= th
    sec[$1] += s; fl[$1] += flop; all += s
    if ($9 > best[$1]) best[$1] = $9 }
  END {
    printf "%-34s %8s %8s %13s %13s\n", "kind", "seconds", "share", "mean GFLOP/s", "best GFLOP/s"
    n = split("layer output small", k, " ")
    for (i = 1; i <= n; i++) if (sec[k[i]] > 0)
      printf "%-34s %8.3f %7.1f%% %13.1f %13.1f\n", k[i] (k[i] == "small" ? " (attention, per thread)" : ""),
        sec[k[i]], 100 * sec[k[i]] / T, fl[k[i]] / 1e9 / (k[i] == "small" ? sec[k[i]] * th : sec[k[i]]), best[k[i]]
    printf "%-34s %8.3f %7.1f%%\n", "all GEMMs", all, 100 * all / T
    printf "%-34s %8.3f %7.1f%%\n", "outside GEMMs", T - all, 100 * (T - all) / T
    printf "sgemm alone, best layout, hot caches: %.1f GFLOP/s\n", alone }' "$OUT/gemms.txt"
fi

# ---- 2. every operation, sampled
echo
if ! command -v perf > /dev/null || ! perf record -q -e cpu-clock -o /dev/null true 2> /dev/null; then
  echo "-- per kind of operation: skipped (perf is not installed or may not sample here)"
  exit 0
fi
# start sampling after the warm-up iteration (initialisation and the first step excluded)
start_ms=$(iter_ms "$OUT/gemm_run.log" | head -n "$WARMUP" | awk '{ s += $1 } END { printf "%d", s + 3000 }')
OMP_NUM_THREADS=$THREADS perf record -q -e cpu-clock -F 499 -D "$start_ms" -o "$OUT/perf.data" \
  "$BUILD/megadlm" "${train[@]}" > "$OUT/perf_run.log" 2>&1 || die "perf record failed"
perf report -i "$OUT/perf.data" --no-children --sort dso,symbol --stdio 2> /dev/null |
  awk '/^ *[0-9.]+%/ { p = $1; sub("%", "", p); dso = ""; sym = ""
    for (i = 2; i <= NF; i++) if ($i == "[.]" || $i == "[k]") break; else dso = dso " " $i
    for (j = i + 1; j <= NF; j++) sym = sym " " $j
    if (dso ~ /\[JIT\]/) k = "GEMM kernel (oneDNN JIT code)"
    else if (sym ~ /bf16_|half_|fp16_|_round_f32|widen/) k = "bf16 conversions (rounding, widening)"
    else if (sym ~ /sgemm_kernel|sgemm_small_kernel/) k = "GEMM kernel"
    else if (sym ~ /sgemm_(on|ot|in|it)copy|sgemm_beta|gemm_thread|inner_thread/) k = "GEMM packing, scaling"
    else if (sym ~ /sched_yield|__schedule|do_syscall|schedule$|futex|0x0000/) k = "waiting threads (yield, OpenMP)"
    else if (sym ~ /adamw|sumsq|clip|optimizer|grad_scaler/) k = "optimizer (AdamW, grad norm, clip)"
    else if (sym ~ /cross_entropy/) k = "cross-entropy"
    else if (sym ~ /gelu|swiglu|activation/) k = "activation (GeLU)"
    else if (sym ~ /layernorm|rmsnorm|norm_/) k = "LayerNorm"
    else if (sym ~ /head_probs|attention|softmax|simd_exp/) k = "attention outside GEMMs (softmax)"
    else if (sym ~ /memset|memcpy|memmove|page|clear_page|mem_/) k = "memory (memset, copies, page faults)"
    else if (sym ~ /bias|residual|dropout|embedding|linear_/) k = "bias, residual, dropout, embedding"
    else k = "other"
    share[k] += p; all += p }
  END { for (k in share) printf "%7.2f%%  %s\n", share[k], k }' | sort -rn |
  { echo "-- per kind of operation ($OUT/perf.data, cpu-clock samples of the timed iterations, both threads)"; cat; }
