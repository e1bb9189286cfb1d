#!/usr/bin/env bash
# `megadlm plan --device this-cpu`:
#  - the first plan measures this machine and saves the description to --device-cache (every
#    key of docs/PLAN.md, positive rates, a GEMM table of 6 sizes); the second reads it back
#    without measuring (no notice, the file unchanged); --calibrate measures again;
#  - under mpirun -np 2 the MPI link is measured (the source says so) and only rank 0 prints;
#  - memory: for small layouts of 2 ranks (pipeline 2, tensor 2 + SP, data parallel with the
#    distributed optimizer, full recompute, context parallel 2 with the ring), the plan's figure (megadlm account) equals what the
#    tracked allocator measured on the most loaded rank of `train --log-memory` (parameters +
#    gradients + optimizer state + saved activations);
#  - every configuration listed (a sample of 25 over the whole --all list, 4 ranks) passes
#    train's validation (`megadlm memory` on its train_flags), and the fastest's train line
#    trains under mpirun -np 4;
#  - mixture of experts: the fastest plan row with EP 2 (alltoall) trains on 4 ranks with a
#    measured peak (the four categories, the MoE layers' state included) at most the plan's
#    bytes, and equal to its balanced figure when the test hook balances the routing;
#  - bad cache files are refused naming the file.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }
export OMP_NUM_THREADS=1
model=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --vocab-size 100 --global-batch-size 8)

# ---- calibration, saved and reused ------------------------------------------------------------
"$MEGADLM" plan "${model[@]}" --world-size 2 --device this-cpu --device-cache dev/cpu.json \
  --top 1 > first.txt 2> first.err || say_fail "first plan: $(cat first.err)"
grep -q "this-cpu measured and saved to dev/cpu.json" first.err || say_fail "no notice: $(cat first.err)"
python3 - dev/cpu.json <<'EOF' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["name", "flops_bf16", "flops_fp32", "efficiency", "memory_bytes", "memory_bandwidth",
        "intra_node_bandwidth", "inter_node_bandwidth", "latency", "ranks_per_node",
        "elementwise_bandwidth", "gemm_dims", "gemm_rates_fp32", "gemm_rates_bf16", "shared",
        "memory_account", "source"]
bad = [k for k in keys if k not in d]
if bad: print("FAILED: device lacks", bad); sys.exit(1)
if d["name"] != "this-cpu" or not d["shared"] or d["memory_account"] != "megadlm":
    print("FAILED: device", d); sys.exit(1)
if d["gemm_dims"] != [32, 64, 128, 256, 512, 1024] or min(d["gemm_rates_fp32"] + d["gemm_rates_bf16"]) <= 0:
    print("FAILED: GEMM table", d["gemm_dims"], d["gemm_rates_fp32"]); sys.exit(1)
if min(d["memory_bandwidth"], d["elementwise_bandwidth"], d["intra_node_bandwidth"]) <= 0:
    print("FAILED: bandwidths", d); sys.exit(1)
if "not under mpirun" not in d["source"]:
    print("FAILED: source", d["source"]); sys.exit(1)
EOF
cp dev/cpu.json saved.json
"$MEGADLM" plan "${model[@]}" --world-size 2 --device this-cpu --device-cache dev/cpu.json \
  --top 1 > second.txt 2> second.err || say_fail "second plan: $(cat second.err)"
[ -s second.err ] && say_fail "second plan measured again: $(cat second.err)"
cmp -s dev/cpu.json saved.json || say_fail "the saved description changed"
diff <(sed -n 1,3p first.txt) <(sed -n 1,3p second.txt) > /dev/null || say_fail "first and second plans differ"
"$MEGADLM" plan "${model[@]}" --world-size 2 --device this-cpu --device-cache dev/cpu.json \
  --calibrate --top 1 > /dev/null 2> third.err
grep -q "measured and saved" third.err || say_fail "--calibrate did not measure"

# ---- under mpirun: the link is measured, rank 0 prints ----------------------------------------
"${MPIRUN[@]}" -np 2 "$MEGADLM" plan "${model[@]}" --world-size 2 --device this-cpu \
  --device-cache mpi.json --top 2 > mpi.txt 2> mpi.err || say_fail "mpirun plan: $(cat mpi.err)"
grep -q "measured on this machine by 2 ranks" mpi.json || say_fail "source: $(grep source mpi.json)"
[ "$(grep -c '^megadlm plan:' mpi.txt)" = 1 ] || say_fail "not one report: $(cat mpi.txt)"

# ---- memory: the plan's figure == the allocator's, most loaded rank ------------------------------
for layout in "--pipeline-model-parallel-size 2 --micro-batch-size 2" \
              "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 4" \
              "--micro-batch-size 2 --use-distributed-optimizer --tensor-model-parallel-size 1" \
              "--micro-batch-size 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2 --tensor-model-parallel-size 1" \
              "--context-parallel-size 2 --cp-comm-type p2p --micro-batch-size 2"; do
  read -r -a flags <<<"$layout"
  [[ " $layout " == *" --pipeline-model-parallel-size "* ]] || flags+=(--pipeline-model-parallel-size 1)
  [[ " $layout " == *" --tensor-model-parallel-size "* ]] || flags+=(--tensor-model-parallel-size 1)
  "$MEGADLM" plan "${model[@]}" --world-size 2 "${flags[@]}" --fp32 --device-file mpi.json \
    --all --top 0 --json > plan.json 2> plan.err || { say_fail "plan $layout: $(cat plan.err)"; continue; }
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${model[@]}" "${flags[@]}" --mock-data \
    --tokenizer-type NullTokenizer --train-iters 2 --lr 1e-4 --eval-iters 0 --log-memory \
    > train.log 2>&1 || { say_fail "train $layout: $(tail -3 train.log)"; continue; }
  python3 - plan.json train.log "$layout" <<'EOF' || fail=1
import json, re, sys
rows = [r for r in json.load(open(sys.argv[1]))["configurations"] if r["layout_flags"] == ""]
meas = {}
for rank, m in re.findall(r"\[Rank (\d+)\] memory (?:parameters|gradients|optimizer state|saved activations) \(bytes\) \| predicted \d+ \| measured (\d+)", open(sys.argv[2]).read()):
    meas[rank] = meas.get(rank, 0) + int(m)
if len(rows) != 1 or len(meas) != 2:
    print(f"FAILED: {sys.argv[3]}: {len(rows)} plan rows, {len(meas)} ranks measured"); sys.exit(1)
want = max(meas.values())
print(f"{sys.argv[3]}: plan {rows[0]['memory_bytes']:.0f} bytes, measured {want} (most loaded rank)")
if rows[0]["memory_bytes"] != want:
    print(f"FAILED: {sys.argv[3]}: plan {rows[0]['memory_bytes']} != measured {want}"); sys.exit(1)
EOF
done

# ---- mixture of experts: a plan row trained on 4 ranks under its predicted bytes ---------------
# the fastest row with expert parallelism 2 and the alltoall dispatcher (megadlm account); the
# measured peak of the most loaded rank (parameters + gradients + optimizer state + saved
# activations, each category's peak, routing-dependent MoE state included) stays at most the
# plan's bytes (the MoE state at its bound) with the model's own routing, and equals the plan's
# balanced figure under the test hook that routes every expert the same share
moe=(--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32
     --max-position-embeddings 32 --vocab-size 100 --global-batch-size 8 --disable-bias-linear
     --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-layer-freq 2
     --moe-shared-expert-intermediate-size 32)
"$MEGADLM" plan "${moe[@]}" --world-size 4 --device-file mpi.json --all --top 0 --json \
  > moe.json 2> moe.err || say_fail "plan MoE: $(cat moe.err)"
python3 - moe.json > moe-row.txt <<'EOF' || fail=1
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["configurations"]
        if r["expert_model_parallel_size"] == 2 and r["moe_token_dispatcher_type"] == "alltoall"]
if not rows: print("FAILED: no EP 2 alltoall row", file=sys.stderr); sys.exit(1)
r = rows[0]
print(repr(r["memory_bytes"]), repr(r["memory_bytes_moe_balanced"]), r["train_flags"])
EOF
read -r moe_bound moe_balanced moe_line < moe-row.txt
read -r -a moe_words <<<"$moe_line"
moe_peak() { # LOG: the most loaded rank's sum of the four categories' peaks
  python3 - "$1" <<'EOF'
import re, sys
peak = {}
for rank, cat, p in re.findall(r"\[Rank (\d+)\] memory \(bytes\) \| (parameters|gradients|optimizer state|saved activations) +\| +\d+ \| +(\d+)", open(sys.argv[1]).read()):
    peak[rank] = peak.get(rank, 0) + int(p)
print(max(peak.values()) if len(peak) == 4 else -1)
EOF
}
for routing in model balanced; do
  [ $routing = balanced ] && export MEGADLM_MOE_BALANCED_ROUTING=1
  "${MPIRUN[@]}" -np 4 "$MEGADLM" train "${moe_words[@]}" --mock-data --tokenizer-type NullTokenizer \
    --train-iters 2 --lr 1e-4 --eval-iters 0 --log-memory > moe-$routing.log 2>&1 ||
    say_fail "MoE train ($routing routing): ${moe_words[*]}: $(tail -3 moe-$routing.log)"
  unset MEGADLM_MOE_BALANCED_ROUTING
  got=$(moe_peak moe-$routing.log)
  echo "MoE row (${moe_line##*--num-layers 4 }), $routing routing: measured peak $got bytes, plan $moe_bound at the bound, $moe_balanced balanced"
  python3 -c 'import sys; g, b, e, mode = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
sys.exit(0 if g > 0 and g <= b and (mode != "balanced" or g == e) else 1)' "$got" "$moe_bound" "$moe_balanced" $routing ||
    say_fail "MoE $routing routing: measured peak $got, plan $moe_bound (balanced $moe_balanced)"
done

# ---- every listed configuration is one train accepts; the fastest's line trains -------------
"$MEGADLM" plan "${model[@]}" --world-size 4 --device-file mpi.json --all --top 0 --json \
  > all.json 2> all.err || say_fail "plan --all: $(cat all.err)"
python3 - all.json > lines.txt <<'EOF' || fail=1
import json, sys
rows = json.load(open(sys.argv[1]))["configurations"]
if len(rows) < 100: print(f"FAILED: only {len(rows)} rows"); sys.exit(1)
for r in rows[::max(1, len(rows) // 25)]: print(r["train_flags"])
EOF
n=0
while read -r line; do
  read -r -a words <<<"$line"
  "$MEGADLM" memory "${words[@]}" --world-size 4 > /dev/null 2> mem.err || say_fail "listed but refused: $line: $(cat mem.err)"
  n=$((n + 1))
done < lines.txt
echo "$n listed configurations accepted by train's validation (megadlm memory)"
read -r -a best <<<"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["configurations"][0]["train_flags"])' all.json)"
"${MPIRUN[@]}" -np 4 "$MEGADLM" train "${best[@]}" --mock-data --tokenizer-type NullTokenizer \
  --train-iters 1 --lr 1e-4 --eval-iters 0 > best.log 2>&1 ||
  say_fail "the fastest's train line failed: ${best[*]}: $(tail -3 best.log)"

# ---- a broken cache is refused, naming the file ------------------------------------------------
echo '{"name": "this-cpu"' > broken.json
out=$("$MEGADLM" plan "${model[@]}" --world-size 2 --device this-cpu --device-cache broken.json 2>&1) &&
  say_fail "broken cache accepted"
grep -q "broken.json: not valid JSON" <<<"$out" || say_fail "broken cache: $out"
exit $fail
