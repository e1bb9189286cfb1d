#!/usr/bin/env bash
# `megadlm train --fp16` (one process) and Megatron's loss scaling:
#  - validation: --fp16 with --bf16, and the distributed optimizer (not built yet), refused by
#    name, by train and memory; TP, PP and DP accepted (their runs: test_fp16_parallel.sh);
#  - --log-memory: predicted == measured per category; bytes per parameter as --bf16's
#    (parameters 2, gradients 4, optimizer state 12), saved activations as --bf16's (the same
#    tensors in 2 bytes); the first loss within 1e-2 relative of the fp32 run's;
#  - a forced overflow: from --initial-loss-scale 2^25 the fp16 rounding of the output layer's
#    gradient overflows (below), so the first iterations are skipped; the log's loss scale,
#    skipped counts, grad norms, losses and learning rates, and the checkpoints of every
#    iteration, follow Megatron's rules written out below (not read from megadlm's code);
#  - a constant --loss-scale; with --bf16 it changes no bit (powers of two scale exactly);
#  - every recompute mode gives byte-identical checkpoints to no recompute under --fp16, and a
#    run resumed mid-way gives the straight run's bits and loss scales, both families;
#  - generate reads an --fp16 checkpoint as fp32 (its main parameters).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }

common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4
        --lr 1e-3 --log-interval 1 --eval-iters 0 "${DROPOUT[@]}" --seed 3)
llama=("${LLAMA[@]}")

# ---- validation -------------------------------------------------------------------------------
for flags in "--tensor-model-parallel-size 2" "--pipeline-model-parallel-size 3" "--world-size 2"; do
  # shellcheck disable=SC2086
  out=$("$MEGADLM" memory "${common[@]}" --train-iters 5 --fp16 $flags 2>&1) ||
    say_fail "memory --fp16 $flags refused: $out"
done
for cmd in memory train; do
  expect_error "--fp16 with --use-distributed-optimizer: not supported yet" \
    "$MEGADLM" $cmd "${common[@]}" --train-iters 5 --fp16 --use-distributed-optimizer ||
    say_fail "$cmd --fp16 --use-distributed-optimizer"
done
expect_error "--fp16 and --bf16 exclude each other" \
  "$MEGADLM" train "${common[@]}" --train-iters 5 --fp16 --bf16 || say_fail "--fp16 --bf16"
expect_error "--hysteresis has no effect without --fp16" \
  "$MEGADLM" train "${common[@]}" --train-iters 5 --hysteresis 3 || say_fail "--hysteresis"
echo "validation: TP, PP and DP accepted; the distributed optimizer and stray loss-scaler flags refused by name"

# ---- memory and the first loss ------------------------------------------------------------------
# a first scale that does not overflow (the default 2^32 skips the first iterations: below), so
# that iteration 1 takes a step and logs its loss
row() { grep -o "memory $2 (bytes) | predicted [0-9]* | measured [0-9]* | difference -*[0-9]*" "$1"; }
measured() { row "$1" "$2" | awk '{print $(NF-3)}'; }
layer() { grep -o "saved activations layer 0 (bytes) | measured [0-9]* | analytic [0-9]*" "$1"; }
short=(--train-iters 3 --lr-decay-style cosine --lr-warmup-iters 1)
for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  for p in fp32 bf16 fp16; do
    flag=(); [ "$p" != fp32 ] && flag=(--"$p")
    [ "$p" = fp16 ] && flag+=(--initial-loss-scale 4096)
    "$MEGADLM" train "${common[@]}" "${short[@]}" "${extra[@]}" "${flag[@]}" --log-memory \
        > "$family-$p.log" 2>&1 || { say_fail "$family $p train"; tail -3 "$family-$p.log"; }
  done
  log=$family-fp16.log
  grep -q '^> fp16: ' "$log" || say_fail "$family: no '> fp16:' line"
  grep -q '^> fp16 GEMM: fp32 sgemm on converted tiles' "$log" || say_fail "$family: no fp16 GEMM line"
  grep -q '^> loss scaling: dynamic from 4096.0' "$log" || say_fail "$family: no loss scaling line"
  # Megatron: fp16 does not force fp32 gradient accumulation; dynamic scaling turns the NaN
  # check off (an overflow is the scaler's signal)
  grep -Eq '^  accumulate_allreduce_grads_in_fp32 \.+ False$' "$log" ||
    say_fail "$family: --fp16 set accumulate_allreduce_grads_in_fp32"
  grep -Eq '^  check_for_nan_in_loss_and_grad \.+ False$' "$log" ||
    say_fail "$family: --fp16 left check_for_nan_in_loss_and_grad on"
  for cat in parameters gradients "optimizer state" "saved activations"; do
    r=$(row "$log" "$cat") || { say_fail "$family: no $cat row"; continue; }
    [ "${r##* }" = 0 ] || say_fail "$family: $r"
  done
  p32=$(measured "$family-fp32.log" parameters); p16=$(measured "$log" parameters)
  g32=$(measured "$family-fp32.log" gradients); g16=$(measured "$log" gradients)
  o32=$(measured "$family-fp32.log" "optimizer state"); o16=$(measured "$log" "optimizer state")
  [ $((2 * p16)) = "$p32" ] || say_fail "$family: fp16 parameters $p16 bytes, fp32 $p32"
  [ "$g16" = "$g32" ] || say_fail "$family: fp16 gradients $g16 bytes, fp32 $g32"
  [ $((2 * o16)) = $((3 * o32)) ] || say_fail "$family: fp16 optimizer $o16 bytes, fp32 $o32"
  lf=$(layer "$log"); lb=$(layer "$family-bf16.log")
  [ -n "$lf" ] && [ "$lf" = "$lb" ] || say_fail "$family: layer 0 saved: fp16 '$lf', bf16 '$lb'"
  [ "$(awk '{print $(NF-3)}' <<<"$lf")" = "$(awk '{print $NF}' <<<"$lf")" ] ||
    say_fail "$family: layer 0 saved measured != analytic: $lf"
  "$MEGADLM" memory "${common[@]}" "${short[@]}" "${extra[@]}" --fp16 --json > "$family.json"
  read -r mp mo < <(python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["megadlm_train_bytes"]; print(b["parameters"], b["optimizer"])' "$family.json")
  [ "${mp%.0}" = "$p16" ] && [ "${mo%.0}" = "$o16" ] ||
    say_fail "$family: memory predicts parameters $mp optimizer $mo, train measured $p16 $o16"
  grep -q 'number of skipped iterations:   1' "$log" && say_fail "$family: a step was skipped at scale 4096"
  l32=$(losses "$family-fp32.log" | head -1)
  l16=$(losses "$log" | head -1)
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b)<=1e-2*abs(a) else 1)' "$l32" "$l16" ||
    say_fail "$family: first loss fp32 $l32, fp16 $l16"
  # not secretly the fp32 or the bf16 run: its losses differ from theirs. All three iterations'
  # (the log's 7 digits can meet at the first, fp16 being 8 times finer than bf16: llama's does)
  s16=$(losses "$log" | tr '\n' ' '); s32=$(losses "$family-fp32.log" | tr '\n' ' ')
  sbf=$(losses "$family-bf16.log" | tr '\n' ' ')
  [ "$(wc -w <<<"$s16")" = 3 ] && [ "$s16" != "$s32" ] && [ "$s16" != "$sbf" ] ||
    say_fail "$family: --fp16's losses $s16 are the fp32 ($s32) or bf16 ($sbf) run's"
  # the grad norm is the unscaled gradients' (4096 times larger otherwise)
  n32=$(grep -o 'grad norm: [0-9.]*' "$family-fp32.log" | head -1 | awk '{print $3}')
  n16=$(grep -o 'grad norm: [0-9.]*' "$log" | head -1 | awk '{print $3}')
  python3 -c 'import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b)<=2e-2*abs(a) else 1)' "$n32" "$n16" ||
    say_fail "$family: first grad norm fp32 $n32, fp16 $n16"
  echo "$family: memory rows equal, parameters $p16 (fp32 $p32) optimizer $o16 (fp32 $o32) layer saved as bf16's; first loss $l16 (fp32 $l32), grad norm $n16 (fp32 $n32)"
done

# ---- a forced overflow: skip, halve, grow ----------------------------------------------------
# Why the first iterations overflow, from the model and not from megadlm: the loss of a
# micro-batch is the mean over its B*T = 32 tokens, averaged over 2 micro-batches, so the
# gradient of logit (token, label) is (p - 1) * S / 64 with S the loss scale; the output
# layer's backward rounds it to fp16 (Megatron: the fp16 GEMM's operand), where everything of
# magnitude 65520 or more becomes infinite. At initialisation (std 0.02, 100 classes) p is
# about 1/100 for every label, and skipped steps leave the parameters as they were, so while
# S >= 2^23 (0.5 * 2^23 / 64 = 65536 > 65520, for any p <= 1/2) every iteration overflows.
# With hysteresis 2 Megatron's scaler keeps 2^25 after the first overflow and halves from the
# second on: iterations 1-4 run at 2^25, 2^25, 2^24, 2^23 and all overflow; the scale logged
# after them is 2^25, 2^24, 2^23, 2^22. What happens after that depends on the gradients; the
# check below replays Megatron's DynamicGradScaler on the skips the log shows.
seq=(--train-iters 16 --lr-decay-style constant --lr-warmup-iters 15 --fp16
     --initial-loss-scale 33554432 --loss-scale-window 3 --hysteresis 2)
"$MEGADLM" train "${common[@]}" "${seq[@]}" --save seq --save-interval 1 > seq.log 2>&1 ||
  { say_fail "overflow run"; tail -3 seq.log; }
"$MEGADLM" train "${common[@]}" "${seq[@]}" --log-interval 4 > seq4.log 2>&1 ||
  { say_fail "overflow run, log interval 4"; tail -3 seq4.log; }
python3 - seq.log seq4.log seq <<'PY' || fail=1
import json, re, struct, sys
log, log4, ckpt = sys.argv[1:4]

def lines(path):
    out = []
    for line in open(path):
        m = re.search(r" iteration +(\d+)/ *\d+ \|", line)
        if not m:
            continue
        get = lambda pat: (re.search(pat, line) or [None, None])[1]
        out.append(dict(it=int(m[1]), lr=get(r"learning rate: ([^ ]+) \|"),
                        loss=get(r"lm loss: ([^ ]+) \|"), scale=float(get(r"loss scale: ([^ ]+) \|")),
                        norm=get(r"grad norm: ([^ ]+) \|"),
                        skipped=int(get(r"number of skipped iterations: +(\d+) \|")),
                        nan=int(get(r"number of nan iterations: +(\d+) \|"))))
    return out

def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return b[8 + n:]

def moments(path):
    """The bytes of the Adam moments (optimizer.exp_avg*) of an optimizer file; the file also
    holds the fp32 main parameters (optimizer.fp32_param.*), which are not zero at the start."""
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head, data = json.loads(b[8:8 + n]), b[8 + n:]
    return b"".join(data[t["data_offsets"][0]:t["data_offsets"][1]]
                    for k, t in sorted(head.items(), key=lambda kv: kv[0])
                    if k.startswith("optimizer.exp_avg"))

bad = []
L = lines(log)
if [l["it"] for l in L] != list(range(1, 17)):
    bad.append("expected 16 log lines, got %s" % [l["it"] for l in L])
    L = []

# Megatron's DynamicGradScaler (optimizer/grad_scaler.py), replayed on the log's skips
scale, growth, hyst, H, W, MIN = 2.0**25, 0, 2, 2, 3, 1.0
want_first = [2.0**25, 2.0**24, 2.0**23, 2.0**22]
grew = halved_after_growth = 0
steps, prev, first_step = 0, None, None
for l in L:
    i, skip = l["it"], l["skipped"]
    if i <= 4 and not skip:
        bad.append("iteration %d took a step at scale >= 2^23" % i)
    if skip:
        growth, hyst = 0, hyst - 1
        if hyst <= 0:
            scale = max(scale * 0.5, MIN)
    else:
        growth += 1
        if growth == W:
            growth, hyst, scale = 0, H, scale * 2.0
            grew += 1
        steps += 1
        first_step = first_step or i
    if i <= 4 and l["scale"] != want_first[i - 1]:
        bad.append("iteration %d: loss scale %s, Megatron's %s" % (i, l["scale"], want_first[i - 1]))
    if l["scale"] != scale:
        bad.append("iteration %d: loss scale %s, the replay %s" % (i, l["scale"], scale))
    if l["nan"] != 0:
        bad.append("iteration %d: an overflow counted as a nan iteration" % i)
    # no grad norm after an overflow (optimizer.step returned None); a loss only for a line
    # whose interval took a step (Megatron's loss sum starts with the first step, is averaged
    # over the iterations that took one, and a zero average is left out: training_log's
    # `if avg > 0.0`); the lr moves only with a step (warm-up)
    if (l["norm"] is None) != bool(skip):
        bad.append("iteration %d: skipped %d but grad norm %s" % (i, skip, l["norm"]))
    if (l["loss"] is None) != bool(skip):
        bad.append("iteration %d: skipped %d but lm loss %s" % (i, skip, l["loss"]))
    if prev and (l["lr"] == prev["lr"]) != bool(skip):
        bad.append("iteration %d: skipped %d, lr %s after %s" % (i, skip, l["lr"], prev["lr"]))
    # the checkpoints: a skipped iteration changes no parameter and no moment
    d = "%s/iter_%07d" % (ckpt, i)
    st = json.load(open(d + "/state.json"))
    if st["optimizer_step"] != steps:
        bad.append("iteration %d: optimizer_step %s, %d steps taken" % (i, st["optimizer_step"], steps))
    gs = st.get("grad_scaler", {})
    if gs.get("scale") != scale or gs.get("growth_tracker") != growth or gs.get("hysteresis_tracker") != hyst:
        bad.append("iteration %d: state.json grad_scaler %s, the replay %s %d %d" % (i, gs, scale, growth, hyst))
    model, opt = tensors(d + "/model.safetensors"), tensors(d + "/optimizer.safetensors")
    mom = moments(d + "/optimizer.safetensors")
    if i == 1 and (not skip or not mom or mom.count(0) != len(mom)):
        bad.append("iteration 1: moments not zero after a skipped step")
    if i > 1:
        pd = "%s/iter_%07d" % (ckpt, i - 1)
        same = model == tensors(pd + "/model.safetensors") and opt == tensors(pd + "/optimizer.safetensors")
        if same != bool(skip):
            bad.append("iteration %d: skipped %d, parameters and moments %s" % (i, skip, "unchanged" if same else "changed"))
    prev = l
skips = [l["skipped"] for l in L]
if L and not grew:
    bad.append("no growth in 16 iterations: skips %s" % skips)
# the same run logged every 4 iterations: counts over the interval
L4 = lines(log4)
want4 = [sum(skips[k:k + 4]) for k in range(0, 16, 4)]
if [l["skipped"] for l in L4] != want4 or [l["scale"] for l in L4] != [L[k]["scale"] for k in (3, 7, 11, 15)]:
    bad.append("log interval 4: skipped %s scales %s, expected %s" % ([l["skipped"] for l in L4], [l["scale"] for l in L4], want4))
for b in bad:
    print("FAILED:", b)
print("overflow run: skips %s, scales %s, %d growth(s), %d steps" % ("".join(map(str, skips)), [l["scale"] for l in L], grew, steps))
sys.exit(1 if bad else 0)
PY

# ---- the checkpoint's formats: model.safetensors in F16 (the model's fp16 parameters), the fp32
# main parameters in the optimizer file (optimizer.fp32_param.*), as under --bf16 in BF16
last=$(cat seq/latest_checkpointed_iteration.txt)
python3 - "seq/iter_$(printf %07d "$last")" <<'PY' || say_fail "fp16 checkpoint formats"
import json, struct, sys
def header(path):
    b = open(path, "rb").read()
    return {k: v for k, v in json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]]).items() if k != "__metadata__"}
m, o = header(sys.argv[1] + "/model.safetensors"), header(sys.argv[1] + "/optimizer.safetensors")
st = json.load(open(sys.argv[1] + "/state.json"))
bad = [k for k, t in m.items() if t["dtype"] != "F16"]
main = [k for k in o if k.startswith("optimizer.fp32_param.")]
ok = m and not bad and len(main) == len(m) and all(o[k]["dtype"] == "F32" for k in main) and st.get("params_dtype") == "float16"
print("fp16 checkpoint: %d F16 tensors, %d fp32 main parameters, params_dtype %s" % (len(m) - len(bad), len(main), st.get("params_dtype")))
sys.exit(0 if ok else 1)
PY

# ---- constant loss scale ------------------------------------------------------------------------
"$MEGADLM" train "${common[@]}" "${short[@]}" --fp16 --loss-scale 1024 > const.log 2>&1 ||
  say_fail "--fp16 --loss-scale 1024"
[ "$(grep -c 'loss scale: 1024.0 | grad norm' const.log)" = 3 ] || say_fail "--loss-scale 1024: $(grep iteration const.log)"
grep -Eq '^  check_for_nan_in_loss_and_grad \.+ True$' const.log ||
  say_fail "--loss-scale turned check_for_nan_in_loss_and_grad off"
# an overflow at a constant scale with the NaN check on (Megatron's gradient check) stops
if "$MEGADLM" train "${common[@]}" "${short[@]}" --fp16 --loss-scale 33554432 > stop.log 2>&1; then
  say_fail "an overflow at a constant scale did not stop the job"
fi
grep -q 'iteration 1: grad norm is nan' stop.log || say_fail "constant-scale overflow: $(tail -2 stop.log)"
"$MEGADLM" train "${common[@]}" "${short[@]}" --fp16 --loss-scale 33554432 \
    --no-check-for-nan-in-loss-and-grad > skip.log 2>&1 || say_fail "constant-scale skips"
[ "$(grep -c 'loss scale: 33554432.0 | number of skipped iterations:   1' skip.log)" = 3 ] ||
  say_fail "constant-scale skips: $(grep iteration skip.log)"
# --bf16 with a constant power-of-two scale: every value scales exactly (bf16 has fp32's
# exponent range), so the unscaled gradients and the training are the unscaled run's bits
"$MEGADLM" train "${common[@]}" "${short[@]}" --bf16 --save bf16-plain > /dev/null 2>&1
"$MEGADLM" train "${common[@]}" "${short[@]}" --bf16 --loss-scale 8 --save bf16-scaled > bf16s.log 2>&1
grep -q 'loss scale: 8.0 |' bf16s.log || say_fail "--bf16 --loss-scale 8: $(grep iteration bf16s.log | head -1)"
same_ckpt bf16-plain bf16-scaled 3 || say_fail "--bf16 --loss-scale 8 changed the checkpoint"
echo "constant loss scale: logged, stops or skips on overflow, exact under --bf16"

# ---- recompute and resume: bitwise identical under --fp16 -----------------------------------
modes=("--recompute-activations"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 1"
       "--recompute-granularity full --recompute-method block --recompute-num-layers 3")
rc=(--train-iters 12 --lr-decay-style cosine --lr-warmup-iters 2 --fp16
    --initial-loss-scale 33554432 --loss-scale-window 3)
same() { same_ckpt "$1" "$2" 12 || return 1
         python3 -c 'import json,sys; a,b=(json.load(open(d+"/iter_0000012/state.json")) for d in sys.argv[1:]); sys.exit(a["grad_scaler"]!=b["grad_scaler"] or a["optimizer_step"]!=b["optimizer_step"])' "$1" "$2"; }
scales() { grep -o 'iteration *[0-9]*/.*loss scale: [0-9.]*' "$1" | sed 's/|.*loss scale:/ scale/; s/  */ /g'; }
for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${rc[@]}" --save "$family-none" > "$family-none.log" 2>&1 ||
    { say_fail "$family: train"; continue; }
  grep -q 'number of skipped iterations:   1' "$family-none.log" || say_fail "$family: no skipped iteration"
  i=0
  for mode in "${modes[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    "$MEGADLM" train "${common[@]}" "${extra[@]}" "${rc[@]}" $mode --save "$family-$i" > "$family-$i.log" 2>&1
    same "$family-none" "$family-$i" || say_fail "$family: --fp16 $mode differs from no recompute"
  done
  r=(--recompute-granularity full --recompute-method uniform --recompute-num-layers 2)
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${rc[@]}" "${r[@]}" --save "$family-resume" \
      --exit-interval 8 > "$family-first.log" 2>&1
  "$MEGADLM" train "${common[@]}" "${extra[@]}" "${rc[@]}" "${r[@]}" --save "$family-resume" \
      --load "$family-resume" > "$family-second.log" 2>&1
  same "$family-none" "$family-resume" || say_fail "$family: resumed --fp16 run differs"
  diff <(scales "$family-none.log") <(cat <(scales "$family-first.log") <(scales "$family-second.log")) > /dev/null ||
    say_fail "$family: loss scales differ after resume"
  echo "$family: recompute modes and resume identical to no recompute under --fp16 ($(grep -c 'skipped iterations:   1' "$family-none.log") of 12 iterations skipped)"
done

# ---- the scaler's state on load ----------------------------------------------------------------
# from a --bf16 checkpoint (no scaler state): --initial-loss-scale, with a warning
"$MEGADLM" train "${common[@]}" --train-iters 4 --lr-decay-style cosine --lr-warmup-iters 1 \
    --fp16 --initial-loss-scale 2048 --load bf16-plain > from-bf16.log 2>&1 || say_fail "--fp16 from a --bf16 checkpoint"
grep -q "WARNING: the checkpoint holds no loss scaler's state" from-bf16.log &&
  grep -q 'iteration        4/       4 .*loss scale: 2048.0' from-bf16.log ||
  say_fail "--fp16 from a --bf16 checkpoint: $(grep -E 'WARNING|iteration ' from-bf16.log)"
# a malformed state is refused, naming the file and the key
cp -r gpt2-none badscaler
sed -i 's/"scale":[[:space:]]*[0-9.e+]*/"scale": -1/' badscaler/iter_0000012/state.json
expect_error 'iter_0000012/state.json: grad_scaler: expected "scale" to be a positive finite float' \
  "$MEGADLM" train "${common[@]}" "${rc[@]}" --train-iters 13 --load badscaler ||
  say_fail "a negative loss scale in state.json"
echo "scaler state: absent -> initial scale with a warning; malformed -> refused"

# ---- generate from an --fp16 checkpoint: fp32 inference from the fp32 main parameters --------
# (the checkpoint's arguments carry --fp16 and non-default scaler flags, which generate drops)
cp -r gpt2-none as-fp32
python3 - as-fp32/iter_0000012/state.json <<'PY'
import json, sys
p = sys.argv[1]; s = json.load(open(p))
assert s["args"]["fp16"] is True and s["args"]["loss_scale_window"] == 3
s["args"].update(fp16=False, initial_loss_scale=4294967296.0, loss_scale_window=1000.0)
json.dump(s, open(p, "w"), indent=1)
PY
g16=$("$MEGADLM" generate --load gpt2-none --prompt "3 4 5" --max-new-tokens 6 --top-k 1 2>g16.err) ||
  say_fail "generate from an --fp16 checkpoint: $(cat g16.err)"
g32=$("$MEGADLM" generate --load as-fp32 --prompt "3 4 5" --max-new-tokens 6 --top-k 1 2>/dev/null)
[ -n "$g16" ] && [ "$g16" = "$g32" ] || say_fail "generate: --fp16 checkpoint '$g16', the same as fp32 '$g32'"
echo "generate from an --fp16 checkpoint: $g16"
exit $fail
