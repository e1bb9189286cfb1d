#!/usr/bin/env bash
# Speed benchmark: GPT-2 124M training step, megadlm vs PyTorch's CPU step, against the
# machine's cblas_sgemm rate, all measured in this one run and reported as ratios (the machine
# is shared and noisy; absolute numbers from different runs do not compare). See bench/README.md.
#
# usage: bash bench/bench_gpt2.sh [BUILD=build]
# env:   ITERS=3 (timed iterations per framework)  WARMUP=1 (untimed, first)
#        THREADS=$(nproc)  (OpenMP threads for megadlm and sgemm; torch.set_num_threads)
#        PYTHON=/usr/bin/python3 (Debian's, which has python3-torch)
# needs: bash scripts/install-deps.sh --bench (python3-torch, libopenblas0-openmp,
#        libopenblas0-pthread, libjemalloc2) and a built $BUILD/megadlm.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
ITERS=${ITERS:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-$(nproc)}
PYTHON=${PYTHON:-/usr/bin/python3}
LIBDIR=/usr/lib/x86_64-linux-gnu
OMP_BLAS=$LIBDIR/openblas-openmp
PTH_BLAS=$LIBDIR/openblas-pthread
JEMALLOC=$LIBDIR/libjemalloc.so.2
OUT=$BUILD/bench
mkdir -p "$OUT"

# GPT-2 124M: 12 layers, h=768, 12 heads, s=256, b=4, 50257 tokens (50256 + eod) padded to 50304.
L=12 H=768 HEADS=12 S=256 B=4 VOCAB=50257 PADDED=50304 FFN=$((4 * 768))

die() { echo "bench: $*" >&2; exit 1; }
[ -x "$BUILD/megadlm" ] || die "$BUILD/megadlm not built (make build)"
for f in "$OMP_BLAS/libopenblas.so.0" "$PTH_BLAS/libopenblas.so.0" "$JEMALLOC"; do
  [ -e "$f" ] || die "$f missing: run bash scripts/install-deps.sh --bench"
done
"$PYTHON" -c 'import torch' 2>/dev/null || die "$PYTHON cannot import torch: install python3-torch"
# one OpenBLAS kernel set for megadlm, sgemm and both torch runs (exported to all of them)
. "$ROOT/bench/blas_kernels.sh"
bench_blas_kernels "$BUILD/megadlm"

# Model FLOPs per iteration, Megatron's formula (src/training/model_provider.c
# model_flops_per_iteration), one number for every framework:
#   12 B s L h^2 ((1 + g/a + s/h)(a d/h) + f/h + V/(2 L h)),  g = a, d = h/a, V = padded vocab.
GFLOP=$(awk -v B=$B -v s=$S -v L=$L -v h=$H -v a=$HEADS -v f=$FFN -v V=$PADDED 'BEGIN {
  g = a; d = h / a
  printf "%.3f", 12 * B * s * L * h * h * ((1 + g / a + s / h) * (a * d / h) + f / h + V / (2 * L * h)) / 1e9 }')

# median of the numbers on stdin
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan";
  else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the directories of the OpenBLAS and the malloc a torch log says were mapped
libs_of() { grep '^loaded:' "$1" | grep -E 'openblas|jemalloc|tcmalloc' | sed 's/^loaded: //' |
  tr '\n' ' '; }

echo "== megadlm speed bench: GPT-2 124M (L=$L h=$H heads=$HEADS s=$S b=$B V=$VOCAB padded $PADDED)," \
  "fp32, dropout 0, $THREADS threads, $WARMUP warm-up + $ITERS timed iterations each"
echo "   $(date -u '+%Y-%m-%d %H:%M UTC') | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" \
  "| $(nproc) cores | load average $(cut -d' ' -f1-3 /proc/loadavg)" \
  "| OpenBLAS kernels $OPENBLAS_CORETYPE (OPENBLAS_CORETYPE, every run)"
echo "   logs: $OUT"

# ---- 1. cblas_sgemm, OpenMP OpenBLAS (what megadlm links). Run before and after the models;
# the best of the two runs counts per shape (a busy neighbour only ever slows a call down).
echo "-- sgemm"
gcc -O2 -std=c11 -fopenmp -I/usr/include/x86_64-linux-gnu/openblas-openmp "$ROOT/bench/sgemm_bench.c" \
  -L"$OMP_BLAS" -Wl,-rpath,"$OMP_BLAS" -lopenblas -o "$OUT/sgemm_bench"
ldd "$OUT/sgemm_bench" | grep "$OMP_BLAS/libopenblas" >/dev/null || die "sgemm_bench does not load $OMP_BLAS"
OMP_NUM_THREADS=$THREADS "$OUT/sgemm_bench" 1 | tee "$OUT/sgemm.log"

# ---- 2. megadlm
echo "-- megadlm ($(ldd "$BUILD/megadlm" | awk '/libopenblas/ { print $3 }'))"
OMP_NUM_THREADS=$THREADS "$BUILD/megadlm" train \
  --num-layers $L --hidden-size $H --num-attention-heads $HEADS --seq-length $S \
  --max-position-embeddings 1024 --micro-batch-size $B --global-batch-size $B \
  --mock-data --tokenizer-type NullTokenizer --vocab-size $((VOCAB - 1)) \
  --train-iters $((WARMUP + ITERS)) --lr 6e-4 --hidden-dropout 0 --attention-dropout 0 \
  --log-interval 1 --log-throughput --eval-iters 0 >"$OUT/megadlm.log" 2>&1 || {
  tail -20 "$OUT/megadlm.log" >&2; die "megadlm train failed (log: $OUT/megadlm.log)"; }
grep -o 'elapsed time per iteration (ms): [0-9.]*' "$OUT/megadlm.log" | awk '{ print $NF }' \
  >"$OUT/megadlm.ms"
[ "$(wc -l <"$OUT/megadlm.ms")" -eq $((WARMUP + ITERS)) ] ||
  die "expected $((WARMUP + ITERS)) iteration lines in $OUT/megadlm.log"
echo "   iterations (ms): $(tr '\n' ' ' <"$OUT/megadlm.ms")(first $WARMUP not counted)"
# megadlm logs its own throughput from model_flops_per_iteration: it must agree with $GFLOP
awk -v G="$GFLOP" '/elapsed time per iteration/ {
    for (i = 1; i <= NF; i++) { if ($i == "(ms):") ms = $(i + 1); if ($i == "(TFLOP/s/GPU):") tf = $(i + 1) } }
  END { own = tf * ms; if (own < 0.97 * G || own > 1.03 * G)
    printf "WARNING: megadlm counts %.1f GFLOP per iteration, this bench %.1f\n", own, G }' "$OUT/megadlm.log"

# ---- 3. PyTorch, twice. Stock = as Debian installs python3-torch: libtorch1.13 depends on
# libopenblas0-pthread | -openmp | -serial, so apt picks the pthread build, and glibc malloc.
# Tuned = OpenBLAS's OpenMP build (one thread pool with torch's) + jemalloc keeping freed pages.
run_torch() { # mode, env arguments (-u options first, then NAME=VALUE)
  local mode=$1; shift
  echo "-- torch $mode"
  env "$@" "$PYTHON" "$ROOT/bench/torch_gpt2_step.py" --num-layers $L --hidden-size $H \
    --num-attention-heads $HEADS --seq-length $S --micro-batch-size $B --vocab-size $VOCAB \
    --padded-vocab-size $PADDED --iters "$ITERS" --warmup "$WARMUP" --threads "$THREADS" \
    >"$OUT/torch_$mode.log" 2>&1 || { tail -20 "$OUT/torch_$mode.log" >&2; die "torch $mode failed"; }
  grep -E '^(torch |loaded:|warmup_ms|iter_ms)' "$OUT/torch_$mode.log" | sed 's/^/   /'
}
run_torch stock -u LD_PRELOAD -u MALLOC_CONF -u OMP_NUM_THREADS LD_LIBRARY_PATH="$PTH_BLAS"
run_torch tuned -u OMP_NUM_THREADS LD_LIBRARY_PATH="$OMP_BLAS" LD_PRELOAD="$JEMALLOC" \
  MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1
STOCK_LIBS=$(libs_of "$OUT/torch_stock.log")
TUNED_LIBS=$(libs_of "$OUT/torch_tuned.log")
warn=""
{ [[ $STOCK_LIBS == *openblas-pthread/* && $STOCK_LIBS != *openblas-openmp* &&
     $STOCK_LIBS != *jemalloc* ]]; } || warn+=" stock did not load (only) pthread OpenBLAS + glibc malloc;"
{ [[ $TUNED_LIBS == *openblas-openmp/* && $TUNED_LIBS != *openblas-pthread* &&
     $TUNED_LIBS == *jemalloc* ]]; } || warn+=" tuned did not load (only) OpenMP OpenBLAS + jemalloc;"

# ---- 1b. sgemm again
echo "-- sgemm (again)"
OMP_NUM_THREADS=$THREADS "$OUT/sgemm_bench" 1 | tee -a "$OUT/sgemm.log"

# ---- 4. table. Per framework the best timed iteration counts (as for sgemm, a neighbour's load
# only adds time); the median is printed beside it.
sg() { awk -v n="$1" '$1 == n && $6 > best { best = $6 } END { printf "%.1f", best }' "$OUT/sgemm.log"; }
sg_spread() { awk -v n="$1" '$1 == n { if (!lo || $6 < lo) lo = $6; if ($6 > hi) hi = $6 }
  END { printf "%.0f", 100 * (hi - lo) / hi }' "$OUT/sgemm.log"; }
# the sustained rate: the mean over a run's back-to-back calls, the lower of the two runs
sg_mean() { awk -v n="$1" '$1 == n && (!lo || $7 < lo) { lo = $7 } END { printf "%.1f", lo }' "$OUT/sgemm.log"; }
SG_MEAN=$(sg_mean ref)
SG_REF=$(sg ref) SG_FWD=$(sg fwd) SG_DINP=$(sg dinp) SG_DWGT=$(sg dwgt) SG_SPREAD=$(sg_spread ref)
tail -n +$((WARMUP + 1)) "$OUT/megadlm.ms" >"$OUT/megadlm_timed.ms"
awk '/^iter_ms:/ { print $2 }' "$OUT/torch_stock.log" >"$OUT/torch_stock.ms"
awk '/^iter_ms:/ { print $2 }' "$OUT/torch_tuned.log" >"$OUT/torch_tuned.ms"
best() { sort -g "$1" | head -1; }
TORCH_V=$(awk '/^torch / { print $2; exit }' "$OUT/torch_stock.log")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

awk -v G="$GFLOP" -v tv="$TORCH_V" -v th="$THREADS" -v spread="$SG_SPREAD" -v load="$LOAD_END" \
  -v meg="$(best "$OUT/megadlm_timed.ms")" -v megm="$(median <"$OUT/megadlm_timed.ms")" \
  -v st="$(best "$OUT/torch_stock.ms")" -v stm="$(median <"$OUT/torch_stock.ms")" \
  -v tu="$(best "$OUT/torch_tuned.ms")" -v tum="$(median <"$OUT/torch_tuned.ms")" \
  -v sg="$SG_REF" -v sgm="$SG_MEAN" -v fwd="$SG_FWD" -v dinp="$SG_DINP" -v dwgt="$SG_DWGT" \
  -v sl="$STOCK_LIBS" -v tl="$TUNED_LIBS" 'BEGIN {
  r = G * 1000
  printf "\n== results: %.1f GFLOP per iteration (Megatron formula, V=50304), %d threads, dropout 0\n", G, th
  printf "%-50s %9s %9s %9s\n", "", "ms/iter", "median", "GFLOP/s"
  printf "%-50s %9.1f %9.1f %9.1f\n", "megadlm", meg, megm, r / meg
  printf "%-50s %9.1f %9.1f %9.1f\n", "torch " tv " stock (pthread OpenBLAS, glibc)", st, stm, r / st
  printf "%-50s %9.1f %9.1f %9.1f\n", "torch " tv " tuned (OpenMP OpenBLAS, jemalloc)", tu, tum, r / tu
  printf "%-50s %9s %9s %9.1f\n", "cblas_sgemm 1024x768x3072 (NN), best call", "", "", sg
  printf "%-50s %9s %9s %9.1f\n", "  the same, mean of back-to-back calls (slower run)", "", "", sgm
  printf "%-50s %9s %9s %9s\n", "  linear layouts: fwd NT / dinp NN / dwgt TN", "", "",
    sprintf("%s / %s / %s", fwd, dinp, dwgt)
  printf "\n== ratios (this run; ms/iter = best timed iteration)\n"
  printf "megadlm / torch stock   %6.2fx\n", st / meg
  printf "megadlm / torch tuned   %6.2fx   (target >= 1.15x)\n", tu / meg
  printf "megadlm / sgemm         %6.1f%%   (target >= 90%%; sgemm = best call)\n", 100 * (r / meg) / sg
  printf "torch tuned / sgemm     %6.1f%%\n", 100 * (r / tu) / sg
  printf "megadlm median / sgemm mean of calls   %6.1f%%   (what a shared machine sustains)\n",
    100 * (r / megm) / sgm
  printf "torch tuned median / sgemm mean        %6.1f%%\n", 100 * (r / tum) / sgm
  printf "\n   torch stock loaded: %s\n   torch tuned loaded: %s\n", sl, tl
  printf "   sgemm spread between its two runs: %d%%; load average at the end: %s\n", spread, load
  if (spread > 20) printf "NOTE: the machine was busy during this run (sgemm varied by %d%%): ratios are rough\n", spread
}'
[ -z "$warn" ] || echo "WARNING:$warn (see $OUT/torch_*.log)"
