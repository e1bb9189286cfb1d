#!/usr/bin/env bash
# `megadlm plan --device this-cpu` against this machine: calibrates the device for 2 and for 4
# ranks (mpirun -np 2 and -np 4, one thread a rank), then trains a small GPT in 15 configurations of 2 and 4 ranks
# (layouts x recompute x micro-batch) for a few iterations each, and prints per configuration
# the plan's predicted seconds per iteration beside the median train logged (iterations after
# the first two), the error, and memory: the plan's figure for the most loaded rank against
# train --log-memory's predicted and measured (parameters + gradients + optimizer state +
# saved activations, largest rank). At the end: the median absolute error (target <= 20%) and
# whether the configuration measured fastest is among the two the plan ranks fastest of these.
#
#   bash bench/bench_plan.sh [BUILD]      # env ITERS=6; logs in $BUILD/bench/plan/
#
# One thread a rank (OMP_NUM_THREADS=1): with 2 threads a rank beside another busy process,
# OpenBLAS's threads wait for each other and a 128 x 128 GEMM ran 300x slower than on one.
set -uo pipefail
BUILD=${1:-build}
MEGADLM=$(realpath "$BUILD/megadlm")
ITERS=${ITERS:-6}
OUT=$BUILD/bench/plan
mkdir -p "$OUT"
export OMP_NUM_THREADS=1
MPI=(mpirun --allow-run-as-root --oversubscribe)
model=(--num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --vocab-size 256 --global-batch-size 16)
# one calibration per rank count: on a shared machine what a rank gets depends on how many
# ranks (and other processes) share the cores, so each world is planned with its own
for world in 2 4; do
  device=$OUT/device-this-cpu-$world.json
  "${MPI[@]}" -np "$world" "$MEGADLM" plan "${model[@]}" --world-size "$world" --micro-batch-size 4 \
    --fp32 --device this-cpu --calibrate --device-cache "$device" --top 1 > "$OUT/calibrate-$world.log" 2>&1 ||
    { cat "$OUT/calibrate-$world.log"; exit 1; }
  python3 - "$device" "$world" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"this-cpu with {sys.argv[2]} ranks: sgemm GFLOP/s at " + ", ".join(f"{n:g}: {r/1e9:.0f}" for n, r in zip(d["gemm_dims"], d["gemm_rates_fp32"]))
      + f"; elementwise {d['elementwise_bandwidth']/1e9:.2f} GB/s; memory {d['memory_bandwidth']/1e9:.1f} GB/s;"
      f" MPI {d['intra_node_bandwidth']/1e9:.2f} GB/s, {d['latency']*1e6:.1f} us (the node's, shared by its ranks)")
EOF
done

# world | layout and recompute flags (micro-batch included)
configs=(
  "2|--micro-batch-size 4"
  "2|--micro-batch-size 8"
  "2|--micro-batch-size 2 --recompute-activations"
  "2|--micro-batch-size 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  "2|--tensor-model-parallel-size 2 --micro-batch-size 4"
  "2|--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 8"
  "2|--pipeline-model-parallel-size 2 --micro-batch-size 2"
  "2|--pipeline-model-parallel-size 2 --micro-batch-size 4 --recompute-granularity full --recompute-method block --recompute-num-layers 1"
  "4|--micro-batch-size 4"
  "4|--micro-batch-size 2 --recompute-activations"
  "4|--tensor-model-parallel-size 2 --micro-batch-size 4"
  "4|--tensor-model-parallel-size 4 --micro-batch-size 8"
  "4|--pipeline-model-parallel-size 2 --micro-batch-size 2"
  "4|--pipeline-model-parallel-size 4 --micro-batch-size 1"
  "4|--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 2"
)

rows=$OUT/rows.tsv
: > "$rows"
i=0
for c in "${configs[@]}"; do
  i=$((i + 1))
  world=${c%%|*}
  read -r -a flags <<<"${c#*|}"
  # fix TP and PP (1 unless given) so that the plan searches nothing but switches
  [[ " ${flags[*]} " == *" --tensor-model-parallel-size "* ]] || flags+=(--tensor-model-parallel-size 1)
  [[ " ${flags[*]} " == *" --pipeline-model-parallel-size "* ]] || flags+=(--pipeline-model-parallel-size 1)
  # the plan's row for exactly these flags: every searched switch off (no layout flags added)
  "$MEGADLM" plan "${model[@]}" --world-size "$world" "${flags[@]}" --fp32 --device-file "$OUT/device-this-cpu-$world.json" \
    --all --top 0 --json > "$OUT/plan-$i.json" 2> "$OUT/plan-$i.err" ||
    { echo "plan $i failed: $(cat "$OUT/plan-$i.err")"; continue; }
  "${MPI[@]}" -np "$world" "$MEGADLM" train "${model[@]}" "${flags[@]}" --mock-data \
    --tokenizer-type NullTokenizer --train-iters "$ITERS" --lr 1e-4 --log-interval 1 \
    --eval-iters 0 --log-memory > "$OUT/train-$i.log" 2>&1 ||
    { echo "train $i failed: $(tail -3 "$OUT/train-$i.log")"; continue; }
  python3 - "$OUT/plan-$i.json" "$OUT/train-$i.log" "$world" "${flags[*]}" >> "$rows" <<'EOF'
import json, re, statistics, sys
plan, log, world, flags = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = [r for r in json.load(open(plan))["configurations"] if r["layout_flags"] == ""]
assert len(rows) == 1, f"{len(rows)} plan rows without searched flags"
r = rows[0]
text = open(log).read()
times = [float(x) / 1e3 for x in re.findall(r"elapsed time per iteration \(ms\): ([0-9.]+)", text)]
measured = statistics.median(times[2:])
pred, meas = {}, {}
for rank, cat, p, m in re.findall(r"\[Rank (\d+)\] memory (parameters|gradients|optimizer state|saved activations) \(bytes\) \| predicted (\d+) \| measured (\d+)", text):
    pred[rank] = pred.get(rank, 0) + int(p)
    meas[rank] = meas.get(rank, 0) + int(m)
print("\t".join([world, flags, f"{r['seconds_per_iteration']['total']:.5f}", f"{measured:.5f}",
                 f"{r['memory_bytes']:.0f}", str(max(pred.values())), str(max(meas.values()))]))
EOF
done

python3 - "$rows" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"\n{'#':>2} {'ranks':>5}  {'flags':<105} {'predicted ms':>12} {'measured ms':>11} {'error':>7}  memory (plan / predicted / measured bytes)")
errs, mem_ok = [], True
for i, (w, flags, p, m, plan_mem, pred_mem, meas_mem) in enumerate(rows, 1):
    p, m = float(p), float(m)
    errs.append(abs(p - m) / m)
    same = plan_mem == pred_mem == meas_mem
    mem_ok &= same
    print(f"{i:>2} {w:>5}  {flags:<105} {1e3*p:>12.1f} {1e3*m:>11.1f} {100*(p-m)/m:>+6.1f}%  {plan_mem} / {pred_mem} / {meas_mem} {'==' if same else 'DIFFER'}")
fastest = min(range(len(rows)), key=lambda i: float(rows[i][3]))
top2 = sorted(range(len(rows)), key=lambda i: float(rows[i][2]))[:2]
print(f"\n{len(rows)} configurations; median absolute error {100*statistics.median(errs):.1f}% (target <= 20%)")
print(f"measured fastest: #{fastest+1}; the plan's two fastest of these: #{top2[0]+1}, #{top2[1]+1} -> "
      f"{'among them' if fastest in top2 else 'NOT among them'}")
print(f"memory: plan == train's prediction == measured for {'every' if mem_ok else 'NOT every'} configuration")
EOF
