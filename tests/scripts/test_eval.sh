#!/usr/bin/env bash
# megadlm eval and --use-on-the-fly-eval (training/eval_tasks.h, training/on_the_fly_eval.h) on
# tiny GPT and masked-diffusion models over a NullTokenizer vocabulary (the text is the ids):
#   - training with --use-on-the-fly-eval logs the task's scores at every --eval-interval, in
#     TensorBoard too (tests/python/check_tensorboard.py, an independent reader), and the last
#     ones equal megadlm eval's on the checkpoint saved at that iteration; under data
#     parallelism (2 ranks) as well; refused without its task file and under TP;
#   - acc and acc_norm recomputed in Python from the task file and eval's per-request
#     log-likelihoods (--log-samples) with lm-eval's definitions equal the printed ones;
#   - rank split: mpirun -np 2 and -np 3 print exactly what one process prints, for both
#     families and the three task types (multiple choice, log-likelihood, perplexity);
#   - bad input: each error names the file, the line and the field.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1 # the numbers of a process depend on its threads' split of the GEMMs
fail=0
model=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --lr 1e-2
       --hidden-dropout 0 --attention-dropout 0 --log-interval 1 --eval-interval 2
       --eval-iters 1 --train-iters 4)
dlm=(--model-running-mode difflm-noshift --mask-token 101)

# ---- tasks: ids of a 100-token vocabulary (the mock data counts up, mod 99)
/usr/bin/python3 - <<'PY'
import json, random
r = random.Random(1)
with open("mc.jsonl", "w") as f:
    for i in range(11):
        start = r.randrange(60)
        ctx = " ".join(str(start + j) for j in range(r.randrange(1, 6)))
        true = " ".join(str(start + len(ctx.split()) + j) for j in range(r.randrange(1, 4)))
        ends = [true] + [" ".join(str(r.randrange(99)) for _ in range(r.randrange(1, 4)))
                         for _ in range(3)]
        order = list(range(4))
        r.shuffle(order)
        label = order.index(0)
        f.write(json.dumps({"ctx" if i % 2 else "context": ctx,
                            "endings": [ends[k] for k in order],
                            "label": label if i % 3 else str(label)}) + "\n")
with open("ll.jsonl", "w") as f:
    for i in range(7):
        f.write(json.dumps({"context": " ".join(str(i + j) for j in range(i)),
                            "continuation": " " + " ".join(str(2 * i + j) for j in range(3))}) + "\n")
with open("text.txt", "w") as f:
    f.write(" ".join(str((7 * j) % 100) for j in range(50)) + "\n")
PY

# ---- training with --use-on-the-fly-eval
"$MEGADLM" train "${model[@]}" --use-on-the-fly-eval --on-the-fly-eval-task mc.jsonl \
    --save gpt --tensorboard-dir tb > gpt.log 2>&1 || { echo "FAILED: gpt training"; tail -5 gpt.log; exit 1; }
"$MEGADLM" train "${model[@]}" "${dlm[@]}" --use-on-the-fly-eval --on-the-fly-eval-task ll.jsonl \
    --on-the-fly-eval-mc-num 8 --save dlm > dlm.log 2>&1 || { echo "FAILED: dlm training"; tail -5 dlm.log; exit 1; }
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${model[@]}" --use-on-the-fly-eval \
    --on-the-fly-eval-task mc.jsonl --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --save gpt_dp2 > dp2.log 2>&1 ||
    { echo "FAILED: DP 2 training"; tail -5 dp2.log; exit 1; }
# the log's last on-the-fly line against eval on the checkpoint of that iteration
same_scores() { # LOG CKPT TASK [eval flags]
  local log=$1 ckpt=$2 task=$3; shift 3
  local line; line=$(grep " on-the-fly eval at iteration 4 |" "$log")
  [ -n "$line" ] || { echo "FAILED: $log: no on-the-fly eval at iteration 4"; return 1; }
  grep -q " on-the-fly eval at iteration 2 |" "$log" || { echo "FAILED: $log: none at iteration 2"; return 1; }
  "$MEGADLM" eval --load "$ckpt" --task-file "$task" --json "$@" > "$ckpt.json" || return 1
  /usr/bin/python3 - "$line" "$ckpt.json" <<'PY'
import json, re, sys
line, got = sys.argv[1], json.load(open(sys.argv[2]))
fields = dict(re.findall(r"\| ([a-z_ ]+): ([0-9.E+-]+)", line))
want = {"acc": got.get("acc"), "acc_norm": got.get("acc_norm"),
        "loglikelihood per token": got["loglikelihood_per_token"]}
bad = [k for k, v in fields.items() if abs(float(v) - want[k]) > 1e-5 * abs(want[k]) + 1e-9]
print(("MISMATCH " if bad else "") + f"on-the-fly {fields} / eval {want}")
sys.exit(1 if bad or not fields else 0)
PY
}
same_scores gpt.log gpt mc.jsonl || fail=1
same_scores dlm.log dlm ll.jsonl --mc-num 8 || fail=1
same_scores dp2.log gpt_dp2 mc.jsonl || fail=1
/usr/bin/python3 "$SRC/tests/python/check_tensorboard.py" gpt.log tb || fail=1
grep -q "on-the-fly eval acc_norm" <(strings tb/* ) || { echo "FAILED: no on-the-fly scalars in TensorBoard"; fail=1; }
expect_error "--use-on-the-fly-eval needs --on-the-fly-eval-task FILE" \
    "$MEGADLM" train "${model[@]}" --use-on-the-fly-eval || fail=1
expect_error "--on-the-fly-eval-task mc.jsonl needs --use-on-the-fly-eval" \
    "$MEGADLM" train "${model[@]}" --on-the-fly-eval-task mc.jsonl || fail=1
expect_error "--tensor-model-parallel-size > 1 is not supported with it" \
    "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${model[@]}" --tensor-model-parallel-size 2 \
    --use-on-the-fly-eval --on-the-fly-eval-task mc.jsonl || fail=1
expect_error "--on-the-fly-eval-task missing.jsonl: No such file" \
    "$MEGADLM" train "${model[@]}" --use-on-the-fly-eval --on-the-fly-eval-task missing.jsonl || fail=1

# a --bf16 run's checkpoint: its 16-bit parameters widened, as generate loads them
if ! { "$MEGADLM" train "${model[@]}" --bf16 --train-iters 2 --save gpt_bf16 > bf16.log 2>&1 &&
        "$MEGADLM" eval --load gpt_bf16 --task-file mc.jsonl > bf16.out 2>&1 &&
        grep -q "^acc_norm " bf16.out; }; then
  echo "FAILED: eval of a --bf16 checkpoint"; tail -3 bf16.log bf16.out; fail=1
fi

# ---- acc / acc_norm from the per-request log-likelihoods, lm-eval's definitions
"$MEGADLM" eval --load gpt --task-file mc.jsonl --json --log-samples > samples.out || fail=1
/usr/bin/python3 - samples.out mc.jsonl <<'PY' || fail=1
import json, math, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
summary, reqs = lines[0], lines[1:]
acc, norm = [], []
for i, doc in enumerate(json.loads(l) for l in open(sys.argv[2])):
    lls = [r["loglikelihood"] for r in reqs if r["example"] == i]
    ll_norm = [ll / len(e) for ll, e in zip(lls, doc["endings"])]
    acc.append(float(lls.index(max(lls)) == int(doc["label"])))
    norm.append(float(ll_norm.index(max(ll_norm)) == int(doc["label"])))
se = lambda x: math.sqrt(sum((v - sum(x) / len(x)) ** 2 for v in x) / (len(x) - 1) / len(x))
want = dict(acc=sum(acc) / len(acc), acc_stderr=se(acc), acc_norm=sum(norm) / len(norm),
            acc_norm_stderr=se(norm))
bad = {k: (summary[k], v) for k, v in want.items() if abs(summary[k] - v) > 1e-12}
print(("MISMATCH " if bad else "") + f"acc/acc_norm from the samples: {want}")
sys.exit(1 if bad or acc == norm else 0)  # (the task is made so that they differ)
PY

# ---- perplexity's windows = lm-eval's get_rolling_token_windows (context_len 1), written out by
# hand as log-likelihood requests (scored as one exact forward each, or with the same draws: the
# same request numbers): the same summed log-likelihood. The text's 50 tokens: GPT (16 a
# window): [EOT] -> t0..15, t15 -> t16..31, t31 -> t32..47, t33..47 -> t48..49; diffusion (15):
# t0..14, t15..29, t30..44 (no context), t35..44 -> t45..49.
/usr/bin/python3 - <<'PY'
import json
t = open("text.txt").read().split()
w = lambda a, b: " ".join(t[a:b])
with open("win_gpt.jsonl", "w") as f:
    for c, k in [("", w(0, 16)), (w(15, 16), " " + w(16, 32)), (w(31, 32), " " + w(32, 48)),
                 (w(33, 48), " " + w(48, 50))]:
        f.write(json.dumps({"context": c, "continuation": k}) + "\n")
with open("win_dlm.jsonl", "w") as f:
    for c, k in [("", w(0, 15)), ("", w(15, 30)), ("", w(30, 45)), (w(35, 45), " " + w(45, 50))]:
        f.write(json.dumps({"context": c, "continuation": k}) + "\n")
PY
for ckpt in gpt dlm; do
  if ! { "$MEGADLM" eval --load $ckpt --task-file text.txt --mc-num 5 --json > "ppl_$ckpt.json" &&
         "$MEGADLM" eval --load $ckpt --task-file "win_$ckpt.jsonl" --mc-num 5 --json > "win_$ckpt.json"; }; then
    echo "FAILED: eval of the windows ($ckpt)"; fail=1; continue
  fi
  /usr/bin/python3 - "ppl_$ckpt.json" "win_$ckpt.json" <<'PY' || { echo "FAILED: $ckpt: perplexity's windows"; fail=1; }
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:])
print(f"perplexity task {a['loglikelihood']!r} ({a['requests']} windows), the windows by hand {b['loglikelihood']!r}")
sys.exit(0 if a["requests"] == 4 and a["tokens"] == 50 and a["loglikelihood"] == b["loglikelihood"] else 1)
PY
done

# ---- rank split: every rank count prints the same
for ckpt in gpt dlm; do
  for task in mc.jsonl ll.jsonl text.txt; do
    flags=(--load "$ckpt" --task-file "$task" --mc-num 5 --log-samples)
    "$MEGADLM" eval "${flags[@]}" > "one_${ckpt}_$task.out" 2>&1 || { echo "FAILED: eval $ckpt $task"; fail=1; }
    for np in 2 3; do
      "${MPIRUN[@]}" -np $np "$MEGADLM" eval "${flags[@]}" > "np${np}_${ckpt}_$task.out" 2>&1 ||
        { echo "FAILED: mpirun -np $np eval $ckpt $task"; fail=1; }
      cmp -s "one_${ckpt}_$task.out" "np${np}_${ckpt}_$task.out" ||
        { echo "FAILED: mpirun -np $np eval $ckpt $task differs from one process:";
          diff "one_${ckpt}_$task.out" "np${np}_${ckpt}_$task.out" | head -5; fail=1; }
    done
  done
done
grep -q "perplexity (bound)" one_dlm_text.txt.out || { echo "FAILED: a diffusion perplexity not labelled a bound"; fail=1; }
grep -q "bits_per_byte " one_gpt_text.txt.out || { echo "FAILED: no bits_per_byte"; fail=1; }

# ---- bad input
bad() { # WANT LINE...: a task file of the lines; eval's error must name WANT
  local want=$1; shift
  printf '%s\n' "$@" > bad.jsonl
  expect_error "$want" "$MEGADLM" eval --load gpt --task-file bad.jsonl || fail=1
}
ok='{"ctx": "1 2", "endings": ["3", "4"], "label": 0}'
bad 'bad.jsonl line 2: field "endings": missing' "$ok" '{"ctx": "1 2", "label": 0}'
bad 'bad.jsonl line 1: field "endings": expected a non-empty array of strings' '{"ctx": "1", "endings": [], "label": 0}'
bad 'bad.jsonl line 1: field "endings": ending 1: expected a non-empty string' '{"ctx": "1", "endings": ["2", ""], "label": 0}'
bad 'bad.jsonl line 3: field "label": expected an integer from 0 to 1' "$ok" "$ok" '{"ctx": "1", "endings": ["2", "3"], "label": 2}'
bad 'bad.jsonl line 1: field "label": expected an integer from 0 to 1' '{"ctx": "1", "endings": ["2", "3"], "label": "x"}'
bad 'bad.jsonl line 1: field "label": missing' '{"ctx": "1", "endings": ["2", "3"]}'
bad 'bad.jsonl line 1: field "ctx": missing (or "context")' '{"endings": ["2", "3"], "label": 0}'
bad 'bad.jsonl line 2: not a JSON object' "$ok" '{"ctx": '
bad 'bad.jsonl line 1: field "continuation": expected a non-empty string' '{"context": "1", "continuation": 5}'
bad 'bad.jsonl line 1: the continuation is 20 tokens; the model scores at most 16' \
    "{\"context\": \"1\", \"continuation\": \" $(seq -s ' ' 1 20)\"}"
expect_error "--task-file nothing.jsonl: No such file or directory" \
    "$MEGADLM" eval --load gpt --task-file nothing.jsonl || fail=1
expect_error "--task-type 'hellaswag': expected multiple_choice, loglikelihood or perplexity" \
    "$MEGADLM" eval --load gpt --task-file mc.jsonl --task-type hellaswag || fail=1
expect_error "--mc-num" "$MEGADLM" eval --load dlm --task-file mc.jsonl --mc-num 0 || fail=1
expect_error "--task-file FILE is required" "$MEGADLM" eval --load gpt || fail=1
[ $fail = 0 ] && echo "PASS: eval and on-the-fly eval: scores, rank split, errors"
exit $fail
