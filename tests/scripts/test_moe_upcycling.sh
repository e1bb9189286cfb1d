#!/usr/bin/env bash
# Megatron's --moe-use-upcycling: a dense model trained and saved, then upcycled into a 4-expert
# top-2 MoE model (post-softmax routing: the two gates of a token sum to 1, and every expert is
# the dense MLP, so the MoE layer computes the dense MLP):
#   - the upcycled run's first loss is the dense model's on the same batch (rel 1e-6), alone and
#     under expert parallelism (EP 2);
#   - --save gets the upcycled model as iteration 1 (model only): every expert bit for bit the
#     dense layer's linear_fc1 / linear_fc2, every other tensor the dense one's but the routers
#     (initialised); the run trains on from iteration 0 (the experts drift apart), and resumes
#     from its checkpoints without the flag; a --bf16 checkpoint upcycles bit for bit too, and
#     EP 2, PP 2 and the distributed optimizer (--bf16, DP 2) save the same upcycled model;
#   - refused: a --save that holds a checkpoint (Megatron's assertion), an MoE checkpoint,
#     a model that does not match the dense one.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
dense=(--num-layers 2 "${GPT_TINY[@]}" "${LLAMA_ARCH[@]}" --ffn-hidden-size 64
       --micro-batch-size 2 --global-batch-size 4 --lr 1e-2 --log-interval 1 --eval-iters 0
       --seed 7 --hidden-dropout 0 --attention-dropout 0 --make-vocab-size-divisible-by 128)
moe=(--num-experts 4 --moe-router-topk 2 --moe-aux-loss-coeff 0.01)
fail=0
run() { # NAME FLAGS...: one process, NAME.log
  local name=$1; shift
  "$MEGADLM" train "$@" > "$name.log" 2>&1 || { echo "FAILED: $name exited non-zero"; tail -5 "$name.log"; fail=1; }
}
first_loss() { losses "$1" | head -1; }

run dense "${dense[@]}" --train-iters 4 --save dense
# the dense model's loss on the first batch (what the upcycled run reads first: it starts at
# sample 0), with the trained weights
run dense_ref "${dense[@]}" --train-iters 1 --load dense --finetune
run up "${dense[@]}" "${moe[@]}" --train-iters 6 --load dense --save up --moe-use-upcycling
grep -q "Upcycled checkpoint saved to up" up.log || { echo "FAILED: no 'Upcycled checkpoint saved'"; fail=1; }
grep -q "upcycled the dense checkpoint dense iteration 4" up.log || { echo "FAILED: no upcycling line"; fail=1; }
echo "dense first-batch loss $(first_loss dense_ref.log), upcycled first loss $(first_loss up.log)"
rel_close "upcycled first loss" 1e-6 1 <(first_loss dense_ref.log) <(first_loss up.log) || fail=1
[ "$(losses -n up.log | head -1 | cut -d' ' -f1)" = 1/6 ] || { echo "FAILED: not from iteration 0"; fail=1; }
[ "$(losses up.log | wc -l)" = 6 ] || { echo "FAILED: the upcycled run did not train 6 iterations"; fail=1; }
if [ ! -f up/iter_0000001/model.safetensors ] || [ -e up/iter_0000001/optimizer.safetensors ]; then
  echo "FAILED: iteration 1 is not the model-only upcycled checkpoint"; fail=1
fi
echo "upcycled run's losses: $(losses up.log | tr '\n' ' ')"
[ "$(cat up/latest_checkpointed_iteration.txt)" = 6 ] || { echo "FAILED: the run's own save"; fail=1; }

# the tensors: iteration 1 is the dense checkpoint upcycled; after training the experts differ
"$PY" - dense/iter_0000004/model.safetensors up/iter_0000001/model.safetensors \
    up/iter_0000006/model.safetensors <<'EOF' || fail=1
import json, re, struct, sys
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); b = f.read()
    h.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], b[slice(*v["data_offsets"])]) for k, v in h.items()}
dense, up, trained = (load(p) for p in sys.argv[1:])
bad = 0
for name, t in up.items():
    m = re.match(r"(decoder\.layers\.\d+\.mlp)\.experts\.local_experts\.\d+\.(linear_fc[12]\.weight)$", name)
    src = f"{m.group(1)}.{m.group(2)}" if m else name
    if ".mlp.router." in name:
        continue
    if dense.get(src) != t:
        print(f"FAILED: {name} is not the dense {src}"); bad = 1
routers = [n for n in up if ".mlp.router." in n]
used = {re.sub(r"experts\.local_experts\.\d+\.", "", n) for n in up if "local_experts" in n}
if len(routers) != 2 or set(dense) - set(up) != used:
    print(f"FAILED: routers {routers}, dense tensors not in the MoE model: {set(dense) - set(up)}"); bad = 1
e0, e1 = (trained[f"decoder.layers.0.mlp.experts.local_experts.{e}.linear_fc1.weight"][2] for e in (0, 1))
if e0 == e1:
    print("FAILED: after training experts 0 and 1 are still equal"); bad = 1
print(f"upcycled checkpoint: {len(up)} tensors, each expert the dense MLP, {len(routers)} routers initialised")
sys.exit(bad)
EOF

# resumed from the run's checkpoint without the flag
run up_more "${dense[@]}" "${moe[@]}" --train-iters 8 --load up --save up
grep -q "successfully loaded checkpoint from up .* at iteration 6" up_more.log \
  || { echo "FAILED: the upcycled run did not resume"; fail=1; }
[ "$(losses up_more.log | wc -l)" = 2 ] || { echo "FAILED: the resumed run's iterations"; fail=1; }

# expert parallelism: each rank reads its own experts' copies; the same first loss
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${dense[@]}" "${moe[@]}" --train-iters 2 --load dense \
    --save up_ep2 --moe-use-upcycling --expert-model-parallel-size 2 \
    --moe-token-dispatcher-type alltoall > up_ep2.log 2>&1 || { echo "FAILED: EP 2 upcycling"; tail -5 up_ep2.log; fail=1; }
rel_close "upcycled first loss, EP 2" 1e-6 1 <(first_loss dense_ref.log) <(first_loss up_ep2.log) || fail=1
cmp up/iter_0000001/model.safetensors up_ep2/iter_0000001/model.safetensors \
  || { echo "FAILED: the EP 2 upcycled checkpoint differs"; fail=1; }

# --bf16: the BF16 dense checkpoint's values, bit for bit, in every expert
run dense16 "${dense[@]}" --bf16 --train-iters 2 --save dense16
run up16 "${dense[@]}" "${moe[@]}" --bf16 --train-iters 2 --load dense16 --save up16 --moe-use-upcycling
"$PY" - dense16/iter_0000002/model.safetensors up16/iter_0000001/model.safetensors <<'EOF' || fail=1
import json, struct, sys
def load(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); b = f.read()
    h.pop("__metadata__", None)
    return {k: (v["dtype"], b[slice(*v["data_offsets"])]) for k, v in h.items()}
d, u = load(sys.argv[1]), load(sys.argv[2])
ok = all(u[f"decoder.layers.{l}.mlp.experts.local_experts.{e}.{w}"] == d[f"decoder.layers.{l}.mlp.{w}"]
         for l in range(2) for e in range(4) for w in ("linear_fc1.weight", "linear_fc2.weight"))
ok = ok and u["decoder.layers.0.mlp.router.weight"][0] == "BF16"
print("bf16 upcycled checkpoint: experts are the dense BF16 MLP" if ok else "FAILED: bf16 upcycling")
sys.exit(0 if ok else 1)
EOF

# other layouts read their slices of the same upcycled model: pipeline stages (PP 2), the
# distributed optimizer's fp32 main parameters under --bf16 (DP 2)
for layout in "pp2|up|--pipeline-model-parallel-size 2" \
              "dopt16|up16|--bf16 --use-distributed-optimizer"; do
  name=${layout%%|*}; rest=${layout#*|}; ref=${rest%%|*}; flags=${rest#*|}
  load=dense; [ "$ref" = up16 ] && load=dense16
  # shellcheck disable=SC2086
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${dense[@]}" "${moe[@]}" $flags --train-iters 2 \
      --load "$load" --save "up_$name" --moe-use-upcycling > "up_$name.log" 2>&1 \
      || { echo "FAILED: upcycling ($name)"; tail -5 "up_$name.log"; fail=1; }
  cmp "$ref/iter_0000001/model.safetensors" "up_$name/iter_0000001/model.safetensors" \
    || { echo "FAILED: the upcycled checkpoint ($name) differs from one process's"; fail=1; }
done

# refusals
if expect_error "The upcycling destination directory already exists" "$MEGADLM" train "${dense[@]}" \
    "${moe[@]}" --train-iters 2 --load dense --save up --moe-use-upcycling; then
  echo "refused as expected: $(grep -m1 error <<<"$ERR_OUT")"; else fail=1; fi
if expect_error "is already a mixture-of-experts model" "$MEGADLM" train "${dense[@]}" "${moe[@]}" \
    --train-iters 2 --load up --save up_again --moe-use-upcycling; then
  echo "refused as expected: $(grep -m1 error <<<"$ERR_OUT")"; else fail=1; fi
if expect_error "the checkpoint was saved with ffn_hidden_size = 64, this run has 96" "$MEGADLM" train \
    "${dense[@]}" "${moe[@]}" --ffn-hidden-size 96 --train-iters 2 --load dense --save up_wide \
    --moe-use-upcycling; then
  echo "refused as expected: $(grep -m1 error <<<"$ERR_OUT")"; else fail=1; fi
if [ -e up_again ] || [ -e up_wide/latest_checkpointed_iteration.txt ]; then
  echo "FAILED: a refused run saved"; fail=1
fi

[ "$fail" = 0 ] && echo PASS
exit $fail
