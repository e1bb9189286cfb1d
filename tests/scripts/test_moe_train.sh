#!/usr/bin/env bash
# Mixture of experts in training: expert parallelism over MPI against one process (Megatron's
# rank order, tokens exchanged by all-to-all or all-gather), alone and with data, tensor,
# pipeline and context parallelism and the distributed optimizer, with and without capacity
# dropping; logged training and validation losses within rel 1e-5.
# The log line carries Megatron's load_balancing_loss and z_loss; a masked-diffusion MoE model
# trains (its loss falls).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
moe=(--num-experts 8 --moe-router-topk 2 --moe-aux-loss-coeff 0.01 --moe-z-loss-coeff 0.001
     --moe-ffn-hidden-size 24)
common=(--num-layers 2 "${GPT_TINY[@]}" "${LLAMA_ARCH[@]}" --micro-batch-size 2
        --global-batch-size 8 --train-iters 6 --lr 1e-3 --lr-decay-style cosine --log-interval 1
        --eval-interval 3 --eval-iters 2 --seed 21 --make-vocab-size-divisible-by 128
        "${moe[@]}")
fail=0
tp=(--tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 64)
run() { # NAME NP FLAGS...: a run's log in NAME.log
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then
    "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1
  else
    "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1
  fi || { echo "FAILED: $name exited non-zero"; tail -5 "$name.log"; fail=1; }
}
check() { close_losses "$1.log" "$2.log" 1e-5 "$(losses "$1.log" | wc -l)" || fail=1; }

run ref 1
grep -q "load_balancing_loss: " ref.log || { echo "FAILED: no load_balancing_loss in the log line"; fail=1; }
grep -q "z_loss: " ref.log || { echo "FAILED: no z_loss in the log line"; fail=1; }
# TensorBoard: the same values every iteration, and each layer's with --moe-per-layer-logging
run tb 1 --tensorboard-dir tb --moe-per-layer-logging --moe-layer-freq 2
/usr/bin/python3 "$SRC/tests/python/check_moe_tensorboard.py" tb.log tb 2 || fail=1
run dp2 2
check ref dp2
for disp in allgather alltoall; do
  run "ep2_$disp" 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type "$disp"
  check ref "ep2_$disp"
  run "ep4_$disp" 4 --expert-model-parallel-size 4 --moe-token-dispatcher-type "$disp"
  check ref "ep4_$disp"
done
run ep2dp2 4 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
check ref ep2dp2
# FSDP (without expert parallelism: Megatron refuses FSDP2 with it): experts are sharded like
# every tensor
run fsdp 2 --use-custom-fsdp --data-parallel-sharding-strategy optim_grads_params
check ref fsdp
# the distributed optimizer: the experts' state sharded over the expert-data-parallel group
run ep2dp2_dopt 4 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --ddp-bucket-size 2000
check ref ep2dp2_dopt
run ep4_dopt 4 --expert-model-parallel-size 4 --use-distributed-optimizer
check ref ep4_dopt
# --bf16: experts wider than the dense MLP, a shared expert, EP 2 with the distributed optimizer
bf=(--bf16 --moe-ffn-hidden-size 72 --moe-shared-expert-intermediate-size 16)
run bf16_ref 1 "${bf[@]}"
run bf16_ep2 2 "${bf[@]}" --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --use-distributed-optimizer
check bf16_ref bf16_ep2
# --moe-grouped-gemm on one thread (OMP_NUM_THREADS=1): the loop's calls, so the same bits
# (bf16: an operand workspace per thread)
run bf16_loop 1 "${bf[@]}" --save bf16_loop
run bf16_grouped 1 "${bf[@]}" --moe-grouped-gemm --save bf16_grouped
cmp bf16_loop/iter_0000006/model.safetensors bf16_grouped/iter_0000006/model.safetensors ||
  { echo "FAILED: --moe-grouped-gemm changed the bf16 parameters"; fail=1; }
# --fp16 (one process and TP 2: Megatron refuses expert parallelism with fp16): its loss scale
# scales the routers' losses too
run fp16_ref 1 --fp16
run fp16_tp2 2 --fp16 "${tp[@]}"
check fp16_ref fp16_tp2
grep -q "load_balancing_loss: " fp16_ref.log || { echo "FAILED: fp16 run without router losses"; fail=1; }
# tensor parallelism (with sequence parallelism, as Megatron requires): each expert split as
# the dense MLP, the tokens gathered over TP (allgather: over TP x EP)
for disp in allgather alltoall; do
  run "tp2_$disp" 2 "${tp[@]}" --moe-token-dispatcher-type "$disp"
  check ref "tp2_$disp"
  run "tp2ep2_$disp" 4 "${tp[@]}" --expert-model-parallel-size 2 --moe-token-dispatcher-type "$disp"
  check ref "tp2ep2_$disp"
done
# the logged balancing loss sums the token shards' parts over TP (Megatron's reduce_group):
# one process's value (TP 2 alone holds the same micro-batches as one process)
lbl() { grep -o 'load_balancing_loss: [^ ]*' "$1" | awk '{print $2}'; }
rel_close "load_balancing_loss, TP 2" 1e-5 6 <(lbl ref.log) <(lbl tp2_allgather.log) || fail=1
# capacity under TP: each rank's token shard has its capacity (Megatron's), so TP 2 is the
# reference of TP 2 x EP 2
capa=(--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 0.5 "${tp[@]}")
run tp2_cap 2 "${capa[@]}"
run tp2ep2_cap 4 "${capa[@]}" --expert-model-parallel-size 2
check tp2_cap tp2ep2_cap
# context parallelism: each rank's chunks are its part of the sequence's losses (larger
# coefficients: a wrong scale of their gradient shows within 6 steps)
cpx=(--moe-aux-loss-coeff 0.1 --moe-z-loss-coeff 0.01)
run ref_cp 1 "${cpx[@]}"
run cp2 2 "${cpx[@]}" --context-parallel-size 2
check ref_cp cp2
rel_close "load_balancing_loss, CP 2" 1e-5 6 <(lbl ref_cp.log) <(lbl cp2.log) || fail=1
run cp2ep2 4 "${cpx[@]}" --context-parallel-size 2 --expert-model-parallel-size 2 \
    --moe-token-dispatcher-type alltoall --cp-comm-type p2p
check ref_cp cp2ep2
run cp2tp2 4 "${cpx[@]}" --context-parallel-size 2 "${tp[@]}"
check ref_cp cp2tp2
# device-limited routing: the groups are the EP ranks, so EP 2 with both dispatchers agree
run ep2_limited_a2a 2 --expert-model-parallel-size 2 --moe-router-topk-limited-devices 1 \
    --moe-token-dispatcher-type alltoall
run ep2_limited_ag 2 --expert-model-parallel-size 2 --moe-router-topk-limited-devices 1
check ep2_limited_a2a ep2_limited_ag
if cmp -s <(losses ep2_limited_a2a.log) <(losses ep2_alltoall.log); then
  echo "FAILED: --moe-router-topk-limited-devices 1 changed nothing"; fail=1
fi
run pp2ep2 4 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 \
    --moe-token-dispatcher-type alltoall --overlap-grad-reduce
check ref pp2ep2
# the interleaved schedule: 4 layers, MoE on the first and last ([1,0,0,1]), 2 chunks a stage
ilv=(--num-layers 4 --moe-layer-freq "[1,0,0,1]" --train-iters 4 --eval-interval 2)
run ref_ilv 1 "${ilv[@]}"
run vpp2ep2 4 "${ilv[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
    --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall
check ref_ilv vpp2ep2
# recomputation keeps every bit (the saved parameters after 6 steps, byte for byte)
run bits_none 1 --save bits_none
for r in "full|--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" \
         "selective|--recompute-granularity selective" "moe|--moe-layer-recompute"; do
  name=${r%%|*}
  # shellcheck disable=SC2086
  run "bits_$name" 1 ${r#*|} --save "bits_$name"
  cmp bits_none/iter_0000006/model.safetensors "bits_$name/iter_0000006/model.safetensors" ||
    { echo "FAILED: recompute ($name) changed the parameters"; fail=1; }
done
# --moe-grouped-gemm on one thread in fp32 too
run grouped_fp32 1 --moe-grouped-gemm --save grouped_fp32
cmp bits_none/iter_0000006/model.safetensors grouped_fp32/iter_0000006/model.safetensors ||
  { echo "FAILED: --moe-grouped-gemm changed the fp32 parameters"; fail=1; }
# a checkpoint saved under EP 2 (each expert by its expert-data-parallel replica 0) resumes
# under EP 4 with the other dispatcher
run resume_a 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --save resume --exit-interval 3
run resume_b 4 --expert-model-parallel-size 4 --save resume --load resume \
    --use-distributed-optimizer
grep -q "successfully loaded checkpoint" resume_b.log || { echo "FAILED: EP 4 did not load"; fail=1; }
cat resume_a.log resume_b.log > resume.log
check ref resume
/usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" resume/iter_0000006/model.safetensors \
    bits_none/iter_0000006/model.safetensors 1e-4 || fail=1
# --use-checkpoint-args takes the MoE shape from the checkpoint (Megatron forces num_experts,
# moe_layer_freq, moe_ffn_hidden_size, moe_router_topk, ...)
dense=(--num-layers 2 "${GPT_TINY[@]}" "${LLAMA_ARCH[@]}" --micro-batch-size 2 --global-batch-size 8
       --train-iters 7 --lr 1e-3 --lr-decay-style cosine --log-interval 1 --eval-iters 0 --seed 21
       --make-vocab-size-divisible-by 128)
"$MEGADLM" train "${dense[@]}" --use-checkpoint-args --load bits_none --save ckargs \
    > ckargs.log 2>&1 || { echo "FAILED: --use-checkpoint-args on an MoE checkpoint"; tail -3 ckargs.log; fail=1; }
for want in "Setting num_experts to 8 from checkpoint" "Setting moe_ffn_hidden_size to 24" \
            "successfully loaded checkpoint" "load_balancing_loss: "; do
  grep -q "$want" ckargs.log || { echo "FAILED: --use-checkpoint-args: no '$want'"; fail=1; }
done
# capacity dropping (alltoall only, Megatron's rule): the same tokens dropped on every layout
cap=(--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 0.5)
run ref_cap 1 "${cap[@]}"
grep -q "topk_token_drop_ratio: " ref_cap.log || { echo "FAILED: no drop ratio logged"; fail=1; }
run ep2_cap 2 --expert-model-parallel-size 2 "${cap[@]}"
check ref_cap ep2_cap
run ep4_cap_pad 4 --expert-model-parallel-size 4 "${cap[@]}" --moe-pad-expert-input-to-capacity
run ref_cap_pad 1 "${cap[@]}" --moe-pad-expert-input-to-capacity
check ref_cap_pad ep4_cap_pad
# a shared expert, MoE on every other layer, one layer dense
run ref_shared 1 --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2
run ep2_shared 2 --expert-model-parallel-size 2 --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2
check ref_shared ep2_shared
# --moe-shared-expert-overlap: the shared expert under the all-to-all, the same bits
run ep2_shared_a2a 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2 --save shared_a2a
run ep2_shared_overlap 2 --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2 --moe-shared-expert-overlap \
    --save shared_overlap
check ref_shared ep2_shared_overlap
cmp shared_a2a/iter_0000006/model.safetensors shared_overlap/iter_0000006/model.safetensors ||
  { echo "FAILED: --moe-shared-expert-overlap changed the parameters"; fail=1; }
grep "MoE all-to-all" ep2_shared_overlap.log | head -1
grep -q "s of shared-expert compute with exchanges in flight" ep2_shared_overlap.log ||
  { echo "FAILED: no all-to-all statistics"; fail=1; }
# --tp-comm-overlap: the attention's and the shared expert's linears on the TP rings
run tp2ep2_overlap 4 "${tp[@]}" --tp-comm-overlap --expert-model-parallel-size 2 \
    --moe-token-dispatcher-type alltoall --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2
check ref_shared tp2ep2_overlap
run tp2ep2_shared 4 "${tp[@]}" --expert-model-parallel-size 2 --moe-token-dispatcher-type alltoall \
    --moe-shared-expert-intermediate-size 16 --moe-layer-freq 2
check ref_shared tp2ep2_shared
# a masked-diffusion MoE model learns the bundled corpus (bytes of the first 3000 verses)
head -n 3000 "$SRC/data/kjv.jsonl" > kjv.jsonl
"$MEGADLM" preprocess --input kjv.jsonl --output-prefix kjv --tokenizer-type ByteLevel \
    --append-eod > /dev/null
"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
    --max-position-embeddings 64 "${LLAMA_ARCH[@]}" --tokenizer-type ByteLevel \
    --data-path kjv_text_document --split 98,2,0 --micro-batch-size 8 --global-batch-size 8 \
    --train-iters 80 --lr 3e-3 --lr-warmup-iters 5 --log-interval 10 --eval-iters 0 \
    --model-running-mode difflm-noshift --mask-token 256 --attention-mask-type no_mask \
    "${moe[@]}" --moe-shared-expert-intermediate-size 32 --seed 3 --save dlm \
    > difflm.log 2>&1 || { echo "FAILED: difflm MoE run"; tail -5 difflm.log; fail=1; }
first=$(losses -n difflm.log | head -1 | awk '{print $2}')
last=$(losses -n difflm.log | tail -1 | awk '{print $2}')
echo "difflm MoE on the corpus: loss $first at iteration 10, $last at 80"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' ||
  { echo "FAILED: the MoE diffusion model's loss did not fall"; fail=1; }
# sampling an MoE checkpoint: the caches' row forwards run the MoE layers as the full forward
# does (diffusion: one round a block, cached = uncached bit for bit; autoregressive: the
# key/value cache gives the uncached greedy text)
one=(--load dlm --prompt "In the beginning" --gen-length 16 --block-length 4 --steps 4)
want=$("$MEGADLM" generate "${one[@]}" 2>/dev/null)
for c in prefix dual; do
  got=$("$MEGADLM" generate "${one[@]}" --cache $c 2>/dev/null)
  [ -n "$want" ] && [ "$got" = "$want" ] || { echo "FAILED: MoE --cache $c: '$got' vs '$want'"; fail=1; }
done
want=$("$MEGADLM" generate --load bits_none --prompt "10 11 12 13" --max-new-tokens 12 --top-k 1 2>/dev/null)
got=$("$MEGADLM" generate --load bits_none --prompt "10 11 12 13" --max-new-tokens 12 --top-k 1 \
      --cache prefix 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] || { echo "FAILED: MoE key/value cache: '$got' vs '$want'"; fail=1; }
# ... and under tensor parallelism (each rank's share of every expert) the one process's text
for c in none prefix; do
  got=$("${MPIRUN[@]}" -np 2 "$MEGADLM" generate --load bits_none --prompt "10 11 12 13" \
        --max-new-tokens 12 --top-k 1 --cache $c --tensor-model-parallel-size 2 2>/dev/null)
  [ -n "$want" ] && [ "$got" = "$want" ] || { echo "FAILED: MoE TP 2 --cache $c: '$got' vs '$want'"; fail=1; }
done
drawn=(--load dlm --prompt "In the beginning" --gen-length 16 --block-length 4 --steps 4
       --temperature 0.8 --seed 3)
want=$("$MEGADLM" generate "${drawn[@]}" 2>/dev/null)
got=$("${MPIRUN[@]}" -np 2 "$MEGADLM" generate "${drawn[@]}" --cache dual \
      --tensor-model-parallel-size 2 2>/dev/null)
[ -n "$want" ] && [ "$got" = "$want" ] || { echo "FAILED: MoE diffusion TP 2: '$got' vs '$want'"; fail=1; }
[ "$fail" = 0 ] && echo PASS
exit $fail
