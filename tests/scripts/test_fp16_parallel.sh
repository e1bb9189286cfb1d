#!/usr/bin/env bash
# --fp16 (with its loss scaler) under tensor (+ sequence) parallelism, the TP communication
# overlap, pipeline parallelism (1F1B and interleaved) and data parallelism with DDP buckets,
# under mpirun with real ranks, against one process under --fp16 (same seeds, same global
# batch):
#  - losses (5 iterations, a first scale of 2^12 that never overflows here) within rel 1e-3 of
#    the one-process --fp16 run, the same loss scale and skipped counts on every line. Why 1e-3:
#    a layout sums some products in another order (TP's row-parallel partial sums, DP's
#    gradient all-reduce, norm-weight gradients over SP shards), a last-bit fp32 difference;
#    where such a value is then rounded to fp16 (residual stream, qkv, fc1, GEMM operands) it
#    can land on the neighbouring fp16 value, 2^-11 = 4.9e-4 relative for that element, and the
#    loss averages many elements of which few flip; test_bf16_parallel's bound for bf16's
#    2^-8 steps, kept. PP and DP run the same GEMMs on the same rows as one process, so their
#    first loss is the one-process loss as logged;
#  - --log-memory: predicted == measured for parameters, gradients, optimizer state and saved
#    activations on every rank; the log's `> fp16 communication:` line;
#  - sequence parallelism's all-gathers move fp16 (about half the fp32 run's payload, the same
#    calls), with and without the overlap; the overlap gives the plain run's bits with its row
#    plan (exact fp16 all-gathers, however they travel); pipeline transfers of activations in
#    fp16 (half the fp32 run's bytes), of gradients in fp32;
#  - a forced overflow (--initial-loss-scale 2^25: test_fp16_train.sh shows from the model why
#    the first iterations overflow and checks one process's sequence against Megatron's rules):
#    every TP / PP layout skips exactly the iterations one process skips and logs the same
#    loss scales and counts, and its last checkpoint's grad_scaler state (state.json, saved
#    once) is one process's; DP 2 (alone and in TP 2 x PP 2 x DP 2) from half the first scale
#    does so with half the scales (why: below); a PP 2 run resumed mid-way (the scaler
#    restored on every rank) gives the uninterrupted run's bits and loss scales;
#  - an overflow on one pipeline stage alone: from a checkpoint whose layer 0 MLP is rescaled
#    (fc2 x 1000, fc1 / 1000: about the same forward values, fc1's output gradient 1000 times
#    larger; untied embeddings, so nothing of stage 0's gradients reaches stage 1) only stage 0's
#    fp16 gradient operands overflow at 2^20, and with --hysteresis 1 every overflow halves the
#    scale; the log comes from the last stage, so it shows one process's scales only when the
#    last stage takes stage 0's found_inf (Megatron's all-reduce with MAX over the
#    model-parallel group). Measured without that reduction: the last stage logs 2^20 where one
#    process logs 2^19.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }

common=(--num-layers 4 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 3)
llama=("${LLAMA[@]}" --ffn-hidden-size 64)
TP=(--tensor-model-parallel-size 2 --make-vocab-size-divisible-by 64)
ONE=(--make-vocab-size-divisible-by 128)
SP=("${TP[@]}" --sequence-parallel)
calm=(--train-iters 5 --initial-loss-scale 4096)
seq=(--train-iters 12 --initial-loss-scale 33554432 --loss-scale-window 3 --hysteresis 2)

first() { losses "$1" | head -1; }
memory_equal() { # memory_equal LOG NP: the four predicted rows on every rank, each difference 0
  local rows bad
  rows=$(grep -c 'memory [a-z ]* (bytes) | predicted [0-9]* | measured [0-9]* | difference' "$1" || true)
  bad=$(grep 'memory [a-z ]* (bytes) | predicted' "$1" | grep -vc 'difference 0 |' || true)
  [ "$rows" = $((4 * $2)) ] && [ "$bad" = 0 ] ||
    { say_fail "$1: --log-memory rows $rows (want $((4 * $2))), $bad not equal"; grep 'predicted' "$1" | head -8; }
}
# compare REF.log OTHER.log RTOL [D]: the same iterations, loss scales (OTHER's times D, default
# 1), skipped and nan counts and grad-norm presence on every line; losses within RTOL (a
# skipped iteration's 0 exactly)
compare() {
  python3 - "$@" <<'PY'
import re, sys
ref, other, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
d = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
def lines(path):
    out = []
    for line in open(path):
        if not re.search(r" iteration +\d+/ *\d+ \|", line):
            continue
        get = lambda pat: (re.search(pat, line) or [None, None])[1]
        scale = float(get(r"loss scale: ([^ ]+) \|")) * (d if path == other else 1.0)
        out.append((get(r" iteration +(\d+)/"), scale,
                    get(r"skipped iterations: +(\d+)"), get(r"nan iterations: +(\d+)"),
                    get(r"grad norm: ([^ ]+) \|") is None, get(r"lm loss: ([^ ]+) \|")))
    return out
a, b = lines(ref), lines(other)
bad, worst = [], 0.0
if not a or len(a) != len(b):
    bad.append("%d log lines, the reference %d" % (len(b), len(a)))
for x, y in zip(a, b):
    if x[:5] != y[:5]:
        bad.append("iteration %s: (scale, skipped, nan, no grad norm) %s, one process %s" % (x[0], y[1:5], x[1:5]))
    if (x[5] is None) != (y[5] is None):
        bad.append("iteration %s: lm loss %s, one process %s" % (x[0], y[5], x[5]))
    elif x[5] is not None:
        u, v = float(x[5]), float(y[5])
        r = abs(u - v) / abs(u) if u else abs(v)
        worst = max(worst, r)
        if r > tol:
            bad.append("iteration %s: loss %s, one process %s (rel %.3g)" % (x[0], y[5], x[5], r))
for m in bad:
    print("FAILED: %s: %s" % (other, m))
print("  %s: %d lines, scales and skips as one process, losses worst rel %.3g" % (other, len(b), worst))
sys.exit(1 if bad else 0)
PY
}
scaler() { # scaler STATE.json [D]: its grad_scaler, the scale times D
  python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("grad_scaler") or {}
g["scale"] = g.get("scale", 0) * float(sys.argv[2]); print(sorted(g.items()))' "$1" "${2:-1}"; }
run() { # run NAME NP flags...: an --fp16 run saving into NAME
  local name=$1 np=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "${extra[@]}" --fp16 --save "$name" "$@" \
      > "$name.log" 2>&1 || { say_fail "$name did not run"; tail -5 "$name.log"; return 1; }
}
check() { # check NAME NP flags...: the calm run's losses, scales, first loss, memory
  local name=$1 np=$2
  run "$@" "${calm[@]}" --log-memory || return 0
  compare "$f-ref.log" "$name.log" 1e-3 || fail=1
  local l1 r16 r32
  l1=$(first "$name.log"); r16=$(first "$f-ref.log"); r32=$(first "$f-ref32.log")
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b)<=1e-2*abs(a) else 1)' \
      "$r32" "$l1" || say_fail "$name: first loss $l1, one-process fp32 $r32"
  case "$name" in "$f-pp2"|"$f-vpp2"|"$f-dp2")
    [ "$l1" = "$r16" ] || say_fail "$name: first loss $l1, one-process fp16 $r16" ;; esac
  [ "$(losses "$name.log")" != "$(losses "$f-ref32.log")" ] || say_fail "$name: the fp32 run's losses"
  memory_equal "$name.log" "$np"
  grep -q '^> fp16 communication: ' "$name.log" || say_fail "$name: no '> fp16 communication:' line"
}

for f in gpt2 llama; do
  extra=()
  [ "$f" = llama ] && extra=("${llama[@]}")
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${ONE[@]}" --train-iters 5 > "$f-ref32.log" 2>&1 ||
    { say_fail "$f fp32 reference"; continue; }
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${ONE[@]}" --fp16 "${calm[@]}" > "$f-ref.log" 2>&1 ||
    { say_fail "$f fp16 reference"; continue; }
  echo "$f: one process, first loss fp32 $(first "$f-ref32.log"), fp16 $(first "$f-ref.log")"
  check "$f-tp2" 2 "${TP[@]}"
  check "$f-tp2sp" 2 "${SP[@]}"
  check "$f-pp2" 2 "${ONE[@]}" --pipeline-model-parallel-size 2
  check "$f-vpp2" 2 "${ONE[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
  check "$f-dp2" 2 "${ONE[@]}" --ddp-bucket-size 2000 --overlap-grad-reduce
  check "$f-tp2sp-pp2-dp2" 8 "${SP[@]}" --pipeline-model-parallel-size 2 --ddp-bucket-size 2000 \
      --overlap-grad-reduce

  # the forced overflow: every layout skips what one process skips, with its scales
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${ONE[@]}" --fp16 "${seq[@]}" --save "$f-seq" \
      > "$f-seq.log" 2>&1 || { say_fail "$f overflow reference"; continue; }
  [ "$(grep -c 'number of skipped iterations:   1' "$f-seq.log")" -ge 4 ] ||
    say_fail "$f: the one-process overflow run skipped fewer than its first 4 iterations"
  # DP d: each rank's loss is over its gbs / d samples' micro-batches (Megatron's loss /
  # num_microbatches, then DDP's 1/d in the all-reduce), so its fp16 operands at scale S are
  # one process's at d x S: from 2^24 it rounds what one process rounds from 2^25, skips the
  # same iterations and logs half the scales (the scaler only doubles and halves)
  for layout in "tp2sp 2 1 ${SP[*]}" "pp2 2 1 ${ONE[*]} --pipeline-model-parallel-size 2" \
                "vpp2 2 1 ${ONE[*]} --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1" \
                "dp2 2 2 ${ONE[*]} --ddp-bucket-size 2000 --overlap-grad-reduce" \
                "tp2sp-pp2-dp2 8 2 ${SP[*]} --pipeline-model-parallel-size 2 --ddp-bucket-size 2000" \
                "tp2sp-pp2 4 1 ${SP[*]} --pipeline-model-parallel-size 2"; do
    read -r name np d flags <<<"$layout"
    # shellcheck disable=SC2086
    run "$f-seq-$name" "$np" $flags "${seq[@]}" --initial-loss-scale $((33554432 / d)) || continue
    compare "$f-seq.log" "$f-seq-$name.log" 1e-3 "$d" || fail=1
    [ "$(scaler "$f-seq/iter_0000012/state.json")" = "$(scaler "$f-seq-$name/iter_0000012/state.json" "$d")" ] ||
      say_fail "$f-seq-$name: grad_scaler $(scaler "$f-seq-$name/iter_0000012/state.json"), one process $(scaler "$f-seq/iter_0000012/state.json")"
  done
  echo "$f: overflow: $(grep -c 'number of skipped iterations:   1' "$f-seq.log") of 12 iterations skipped, in every layout"
done

# ---- the communication: 16-bit on the wire where its readers round ---------------------------
f=gpt2 extra=()
run tp2sp-plan2 2 "${SP[@]}" "${calm[@]}" --tp-comm-overlap-num-splits 2 &&
  run tp2sp-overlap 2 "${SP[@]}" "${calm[@]}" --tp-comm-overlap --log-memory &&
  { same_ckpt tp2sp-plan2 tp2sp-overlap 5 || say_fail "--tp-comm-overlap differs from the plain run under --fp16"; }
grep -Eq 'TP communication overlapped.*: [1-9][0-9]* ring all-gathers, [1-9][0-9]* ring reduce-scatters, [1-9][0-9]* bulk all-gathers, [1-9][0-9]* bulk' tp2sp-overlap.log ||
  say_fail "tp2sp-overlap: not every overlap ran: $(grep 'TP communication overlapped' tp2sp-overlap.log | tail -1)"
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${SP[@]}" --train-iters 5 --log-memory \
    > tp2sp-fp32.log 2>&1 || say_fail "tp2sp-fp32 did not run"
ag() { grep -m1 -o 'all-gather [0-9]* ([0-9]* calls)' "$1" | tr -d '(' | awk '{print $2, $3}'; }
b16=0 c16=0 b32=0 c32=0
read -r b16 c16 < <(ag gpt2-tp2sp.log) || true; read -r b32 c32 < <(ag tp2sp-fp32.log) || true
python3 -c 'import sys; b16,c16,b32,c32=map(float,sys.argv[1:]); sys.exit(0 if c16==c32>0 and 0.5*b32<=b16<0.55*b32 else 1)' \
    "$b16" "$c16" "$b32" "$c32" || say_fail "all-gather payload fp16 $b16 ($c16 calls), fp32 $b32 ($c32 calls)"
read -r bov cov < <(ag tp2sp-overlap.log) || true
[ "${bov:-}" = "$b16" ] && [ "${cov:-}" = "$c16" ] ||
  say_fail "--tp-comm-overlap all-gather payload ${bov:-none} (${cov:-?} calls), plain $b16 ($c16)"
echo "TP 2 + SP all-gather payload in iteration 1: $b16 bytes under --fp16, $b32 in fp32 ($c16 calls); the overlap's the same, and the plain run's bits"
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${ONE[@]}" --train-iters 5 \
    --pipeline-model-parallel-size 2 --log-memory > pp2-fp32.log 2>&1 || say_fail "pp2-fp32 did not run"
pp() { # pp LOG RANK FIELD: what the rank sent of FIELD (activations, gradients)
  grep -h -o "\[Rank $2\] pipeline transfers in iteration 1 (bytes sent) | activations [0-9]* | gradients [0-9]*" "$1" |
    awk -v f="$3" '{print f == "activations" ? $(NF-3) : $NF}'; }
a16=$(pp gpt2-pp2.log 0 activations); a32=$(pp pp2-fp32.log 0 activations)
g16=$(pp gpt2-pp2.log 1 gradients); g32=$(pp pp2-fp32.log 1 gradients)
[ "${a32:-0}" -gt 0 ] && [ "${g32:-0}" -gt 0 ] && [ $((2 * ${a16:-0})) = "$a32" ] && [ "$g16" = "$g32" ] ||
  say_fail "pipeline transfers fp16 activations ${a16:-none} gradients ${g16:-none}, fp32 ${a32:-none} ${g32:-none}"
echo "PP 2 in iteration 1: stage 0 sent activations of $a16 bytes under --fp16 ($a32 in fp32), stage 1 gradients of $g16 ($g32)"

# ---- resume: the scaler restored on every rank ------------------------------------------------
PP=("${ONE[@]}" --pipeline-model-parallel-size 2)
run resume 2 "${PP[@]}" "${seq[@]}" --exit-interval 6 &&
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --fp16 "${PP[@]}" "${seq[@]}" --save resume \
      --load resume > resume-b.log 2>&1 && grep -q "successfully loaded checkpoint" resume-b.log ||
  say_fail "PP 2 resume did not run or load"
if [ -d resume/iter_0000012 ]; then
  same_ckpt gpt2-seq-pp2 resume 12 ||
    say_fail "resumed PP 2 --fp16 run differs from the uninterrupted one"
  scales() { grep -o 'loss scale: [^ ]*' "$1" | awk '{print $3}'; }
  diff <(scales gpt2-seq-pp2.log) <(cat <(scales resume.log) <(scales resume-b.log)) > /dev/null ||
    say_fail "PP 2: loss scales differ after resume"
  echo "PP 2 resumed at iteration 6: the uninterrupted run's bits and loss scales"
fi

# ---- an overflow on one pipeline stage alone ---------------------------------------------------
extra=(--untie-embeddings-and-output-weights)
"$MEGADLM" train "${common[@]}" "${extra[@]}" "${ONE[@]}" --train-iters 1 --lr-decay-iters 8 --save big > big.log 2>&1 ||
  say_fail "the fp32 checkpoint for the one-stage overflow"
m=big/iter_0000001/model.safetensors
python3 "$SRC/tests/python/scale_tensor.py" "$m" decoder.layers.0.mlp.linear_fc2.weight 1000 &&
  python3 "$SRC/tests/python/scale_tensor.py" "$m" decoder.layers.0.mlp.linear_fc1.weight 0.001 ||
  say_fail "rescaling layer 0's MLP"
one=(--train-iters 8 --initial-loss-scale 1048576 --hysteresis 1 --loss-scale-window 2)
for name in one pp2 tp2sp-pp2; do cp -r big "stage-$name"; done
"$MEGADLM" train "${common[@]}" "${extra[@]}" "${ONE[@]}" --fp16 "${one[@]}" --load stage-one \
    > stage-one.log 2>&1 || say_fail "one-stage overflow: one process did not run"
grep -q 'iteration        2/       8 .*loss scale: 524288.0 | number of skipped iterations:   1' stage-one.log ||
  say_fail "one-stage overflow: one process did not overflow and halve at iteration 2: $(grep 'iteration        2/' stage-one.log)"
run stage-pp2 2 "${PP[@]}" "${one[@]}" --load stage-pp2 && { compare stage-one.log stage-pp2.log 1e-3 || fail=1; }
run stage-tp2sp-pp2 4 "${SP[@]}" --pipeline-model-parallel-size 2 "${one[@]}" --load stage-tp2sp-pp2 &&
  { compare stage-one.log stage-tp2sp-pp2.log 1e-3 || fail=1; }
echo "one-stage overflow: $(grep -c 'number of skipped iterations:   1' stage-one.log) of 7 iterations skipped; PP 2 and TP 2 x PP 2 log one process's scales"
exit $fail
