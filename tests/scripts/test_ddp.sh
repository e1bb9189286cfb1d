#!/usr/bin/env bash
# Megatron-style data parallelism (core/distributed/distributed_data_parallel.c, the
# distributed optimizer core/optimizer/distrib_optimizer.c) against the single-process run, for
# both model families, dropout 0.1, 2 accumulated micro-batches per DP rank, at DP 2 and at
# TP 2 x DP 2 (sequence parallel):
#   a  --ddp-bucket-size without overlap (Megatron: one bucket, reduced after backward)
#   b  --overlap-grad-reduce with small buckets (several, started from the backward hook)
#   c  --use-distributed-optimizer (reduce-scatter, sharded AdamW, all-gather)
#   d  c + --overlap-grad-reduce --overlap-param-gather
# Every logged loss within rel 1e-5, final parameters and optimizer state within rel 1e-4.
# The counters --log-memory prints must show the overlap happening: with b and d every bucket's
# reduction is started by the backward hook (none after backward), with d every parameter
# all-gather is completed by a forward hook; a and c reduce one bucket after backward. The
# optimizer state measured must equal `megadlm memory`'s prediction (ceil(N/DP) elements of
# each moment with the distributed optimizer). At DP 1 the distributed optimizer is plain AdamW
# bit for bit. Checkpoints: saved with the distributed optimizer at DP 2, resumed without it at
# DP 1, and the reverse. Megatron's rules of the overlap flags are refused naming both flags.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
# mpirun_log LOG NP ARGS...: the ranks' output, each rank's in a file of its own
# (LOG.ranks/1/rank.N/stdout), written to LOG one rank after the other; the launcher's merged
# stream (LOG.mpirun) can cut one rank's line with another's, and the checks read lines
mpirun_log() {
  local log=$1 np=$2 rc=0
  shift 2
  rm -rf "$log.ranks"
  "${MPIRUN[@]}" -np "$np" --output-filename "$log.ranks" "$@" > "$log.mpirun" 2>&1 || rc=$?
  cat "$log.ranks"/1/rank.*/stdout "$log.ranks"/1/rank.*/stderr > "$log" 2>/dev/null
  [ $rc = 0 ] || tail -3 "$log.mpirun" >> "$log"
  return $rc
}
ITERS=6
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8
        --train-iters $ITERS --lr 1e-3 --lr-decay-style cosine --log-interval 1 --eval-interval 3
        --eval-iters 2 "${DROPOUT[@]}" --seed 21 --log-memory)
llama=("${LLAMA_ARCH[@]}" --ffn-hidden-size 64 --group-query-attention --num-query-groups 4
       --qk-layernorm)
declare -A VARIANT=(
  [a]="--ddp-bucket-size 2000"
  [b]="--overlap-grad-reduce --ddp-bucket-size 2000"
  [c]="--use-distributed-optimizer"
  [d]="--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000"
)
# close REF.log OTHER.log: every loss within rel 1e-5, as many as the reference's
close() { close_losses "$1" "$2" 1e-5 "$(losses "$1" | wc -l)"; }
compare() { # compare DIR REF: model and optimizer state at the last iteration, rel 1e-4
  local f
  for f in model optimizer; do
    # 4 heads, 4 groups, kv 8: a key bias only gets float-noise gradients (compare_checkpoints)
    /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$1/iter_000000$ITERS/$f.safetensors" \
        "$2/iter_000000$ITERS/$f.safetensors" 1e-4 4 4 8 1.2e-2 | sed "s|^|  $1 $f: |" || return 1
  done
}
# check_counters LOG VARIANT RANKS: the end-of-run summary of every rank
check_counters() {
  local log=$1 v=$2 ranks=$3
  local lines; lines=$(grep "data-parallel communication over $ITERS iterations" "$log" || true)
  if [ "$(wc -l <<<"$lines")" -ne "$ranks" ] || [ -z "$lines" ]; then
    echo "FAILED: $log: expected $ranks data-parallel summaries"; return 1
  fi
  awk -v v="$v" -v it=$ITERS -v lg="$log" -F'|' '
    { b = s = a = g = f = -1
      for (i = 1; i <= NF; i++) {
        if ($i ~ / buckets /) { split($i, x, " "); b = x[2] }
        if ($i ~ /started during backward/) { split($i, x, " "); s = x[4] }
        if ($i ~ /started after backward/) { split($i, x, " "); a = x[4] }
        if ($i ~ /parameter all-gathers started/) { split($i, x, " "); g = x[4] }
        if ($i ~ /completed in forward/) { split($i, x, " "); f = x[4] }
      }
      ok = 1
      if (v == "a" || v == "c") ok = (b == 1 && s == 0 && a == it)
      else ok = (b >= 3 && s == b * it && a == 0)
      if (v == "d") ok = ok && g == b * it && f == g
      if (!ok) { printf "FAILED: %s (%s): %s\n", lg, v, $0; bad = 1 }
      else if (NR == 1) printf "  %s: buckets %d, started during backward %d, after %d%s\n", lg, b, s, a,
                                 (v == "d" ? sprintf(", all-gathers %d, completed in forward %d", g, f) : "")
    }
    END { exit bad }' <<<"$lines"
}
# the optimizer state measured equals the prediction on every rank; prints the bytes
check_memory() {
  local log=$1
  if grep "memory optimizer state (bytes)" "$log" | grep -qv "difference 0 |"; then
    echo "FAILED: $log: optimizer state differs from the prediction"
    grep "memory optimizer state" "$log"; return 1
  fi
  grep -m1 "memory optimizer state (bytes)" "$log" | sed 's/.*measured \([0-9]*\).*/\1/'
}

fail=0
for family in gpt2 llama; do
  fam=(); [ $family = llama ] && fam=("${llama[@]}")
  echo "$family"
  "$MEGADLM" train "${common[@]}" "${fam[@]}" --save ref-$family > ref-$family.log 2>&1 \
      || { echo "FAILED: reference"; tail -5 ref-$family.log; exit 1; }
  plain_opt=$(check_memory ref-$family.log)
  for layout in dp2 tp2dp2; do
    if [ $layout = dp2 ]; then np=2; par=(); else
      np=4; par=(--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64 --sequence-parallel); fi
    for v in a b c d; do
      name=$family-$layout-$v
      # shellcheck disable=SC2086
      mpirun_log "$name.log" $np "$MEGADLM" train "${common[@]}" "${fam[@]}" "${par[@]}" \
          ${VARIANT[$v]} --save "$name" \
          || { echo "FAILED: $name did not run"; tail -5 "$name.log"; fail=1; continue; }
      close ref-$family.log "$name.log" || fail=1
      compare "$name" ref-$family || fail=1
      check_counters "$name.log" $v $np || fail=1
      opt=$(check_memory "$name.log") || fail=1
      if [ $layout = dp2 ] && { [ $v = c ] || [ $v = d ]; }; then
        # ceil(N/2) of each moment: half the plain run's bytes (rounded up to 8 bytes)
        if [ $((2 * opt - plain_opt)) -lt 0 ] || [ $((2 * opt - plain_opt)) -gt 8 ]; then
          echo "FAILED: $name: optimizer state $opt bytes, plain $plain_opt"; fail=1
        fi
      fi
    done
  done
done

# DP 1: the distributed optimizer is AdamW, bit for bit
"$MEGADLM" train "${common[@]}" --use-distributed-optimizer --save dp1-dist > dp1-dist.log 2>&1
if [ "$(losses dp1-dist.log)" != "$(losses ref-gpt2.log)" ]; then echo "FAILED: DP 1 distributed optimizer"; fail=1; fi
/usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" dp1-dist/iter_000000$ITERS/optimizer.safetensors \
    ref-gpt2/iter_000000$ITERS/optimizer.safetensors 0 > /dev/null || { echo "FAILED: DP 1 optimizer state"; fail=1; }

# checkpoints across the optimizer's layouts: DP 2 distributed -> DP 1 plain, and the reverse
mpirun_log to-plain-a.log 2 "$MEGADLM" train "${common[@]}" ${VARIANT[d]} --save to-plain \
    --exit-interval 3
"$MEGADLM" train "${common[@]}" --save to-plain --load to-plain > to-plain-b.log 2>&1
"$MEGADLM" train "${common[@]}" --save to-dist --exit-interval 3 > to-dist-a.log 2>&1
mpirun_log to-dist-b.log 2 "$MEGADLM" train "${common[@]}" --use-distributed-optimizer \
    --save to-dist --load to-dist
for d in to-plain to-dist; do
  grep -q "successfully loaded checkpoint" $d-b.log || { echo "FAILED: $d did not load"; fail=1; }
  cat $d-a.log $d-b.log > $d.log
  close ref-gpt2.log $d.log || fail=1
  compare $d ref-gpt2 || fail=1
done

# Megatron's rules: --overlap-param-gather needs the distributed optimizer and overlapped
# gradient reduction; every rank refuses, naming both flags
for rule in "--overlap-grad-reduce|--use-distributed-optimizer" "--use-distributed-optimizer|--overlap-grad-reduce"; do
  given=${rule%|*} missing=${rule#*|}
  out=$("${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --overlap-param-gather $given 2>&1) \
      && { echo "FAILED: --overlap-param-gather $given was accepted"; fail=1; }
  if [ "$(grep -c -- "--overlap-param-gather needs $missing" <<<"$out")" -ne 2 ]; then
    echo "FAILED: --overlap-param-gather $given: expected both ranks to name $missing:"; echo "$out" | head -3; fail=1
  fi
done
[ $fail = 0 ] && echo "data parallelism: all equivalent"
exit $fail
