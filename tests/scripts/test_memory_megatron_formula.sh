#!/usr/bin/env bash
# `megadlm memory` and `train --log-memory` print megadlm's "Theoretical memory footprints"
# line and, where Megatron's own formula (theoretical_memory_usage.py) shows other numbers,
# Megatron's line beside it, labelled. Megatron's numbers are checked against
# tests/python/megatron_theoretical_memory.py, a transcription of that file:
#  - Llama 3 8B on TP 8 with SP and selective recompute (RMSNorm, GQA, SwiGLU): both lines,
#    and both in --json (megatron_formula);
#  - the same without SP (Megatron computes no activation): Megatron's weight figure alone;
#  - GPT-2 124M on TP 2 with SP and selective recompute: the two agree, one line;
#  - a small Llama-style and a GPT-2-style `train --log-memory`: the same lines as memory's.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
REF=(/usr/bin/python3 "$SRC/tests/python/megatron_theoretical_memory.py")
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }
label="Megatron's own formula (theoretical_memory_usage.py) gives: "
megatron_line() { grep "^$label" | sed "s/^$label/Theoretical memory footprints: /; s/ (.*//"; }

# ---- Llama 3 8B, TP 8, SP + selective recompute --------------------------------------------
llama8b=(--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention
         --num-query-groups 8 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm
         --untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type rope
         --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1
         --global-batch-size 4 --vocab-size 127999)
tp8=(--tensor-model-parallel-size 8 --sequence-parallel --recompute-activations --world-size 8)
out=$("$MEGADLM" memory "${llama8b[@]}" "${tp8[@]}") || say_fail "memory llama 8B: $out"
n=$(grep -c "^Theoretical memory footprints: " <<<"$out")
[ "$n" = 1 ] || say_fail "llama 8B: $n megadlm lines"
want=$("${REF[@]}" num_layers=32 hidden_size=4096 num_attention_heads=32 \
  group_query_attention=true num_query_groups=8 ffn_hidden_size=14336 swiglu=true \
  padded_vocab_size=128000 untie_embeddings_and_output_weights=true \
  tensor_model_parallel_size=8 seq_length=8192 micro_batch_size=1 global_batch_size=4 \
  sequence_parallel=true recompute_granularity=selective)
got=$(megatron_line <<<"$out")
[ -n "$got" ] && [ "$got" = "$want" ] || say_fail "llama 8B: Megatron's line '$got', its formula gives '$want'"
grep -q "^$label.*(it counts a bias in every RMSNorm; .*no GQA.*no SwiGLU gate" <<<"$out" ||
  say_fail "llama 8B: Megatron's line does not say why it differs: $(sed -n 2p <<<"$out")"
[ "$(head -1 <<<"$out")" != "$want" ] || say_fail "llama 8B: megadlm's line equals Megatron's"
echo "llama 8B TP 8 SP selective: $(head -1 <<<"$out")"
echo "  beside it: $got"
# --json: megatron_formula, the same numbers
"$MEGADLM" memory "${llama8b[@]}" "${tp8[@]}" --json > l8.json || say_fail "memory --json"
/usr/bin/python3 - l8.json "$want" <<'EOF' || fail=1
import json, re, sys
o = json.load(open(sys.argv[1]))["megatron_formula"]
mb = [float(x) for x in re.findall(r"=([0-9.]+) MB", sys.argv[2])]
got = [o["weights_and_optimizer_bytes"], o["activation_bytes"], o["total_bytes"]]
if [round(x / 2**20, 2) for x in got] != mb or o["differs"] is not True or "RMSNorm" not in o["why"]:
    print("FAILED: --json megatron_formula", o, "expected MB", mb); sys.exit(1)
EOF

# ---- the same without SP: Megatron prints the weight and optimizer alone ------------------------
out=$("$MEGADLM" memory "${llama8b[@]}" --use-distributed-optimizer --world-size 4) ||
  say_fail "memory llama 8B DP 4: $out"
want=$("${REF[@]}" num_layers=32 hidden_size=4096 num_attention_heads=32 \
  group_query_attention=true num_query_groups=8 ffn_hidden_size=14336 swiglu=true \
  padded_vocab_size=128000 untie_embeddings_and_output_weights=true data_parallel_size=4 \
  use_distributed_optimizer=true seq_length=8192 global_batch_size=4)
got=$(megatron_line <<<"$out")
[ -n "$got" ] && [ "$got" = "$want" ] || say_fail "llama 8B DP 4: Megatron's line '$got', its formula gives '$want'"
echo "llama 8B DP 4: beside megadlm's line: $got"

# ---- GPT-2 124M, TP 2, SP + selective: the two agree ------------------------------------------
gpt2=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024
      --max-position-embeddings 1024 --micro-batch-size 4 --global-batch-size 32 --vocab-size 50256)
out=$("$MEGADLM" memory "${gpt2[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --recompute-activations --world-size 2) || say_fail "memory gpt2: $out"
want=$("${REF[@]}" num_layers=12 hidden_size=768 num_attention_heads=12 padded_vocab_size=50432 \
  tensor_model_parallel_size=2 seq_length=1024 micro_batch_size=4 global_batch_size=32 \
  sequence_parallel=true recompute_granularity=selective)
[ "$(head -1 <<<"$out")" = "$want" ] || say_fail "gpt2: megadlm's line '$(head -1 <<<"$out")', Megatron's '$want'"
grep -q "Megatron's own formula" <<<"$out" && say_fail "gpt2: a Megatron line where the two agree"
"$MEGADLM" memory "${gpt2[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --recompute-activations --world-size 2 --json |
  /usr/bin/python3 -c 'import json,sys; o=json.load(sys.stdin)["megatron_formula"]; sys.exit(o["differs"] is not False)' ||
  say_fail "gpt2: --json megatron_formula.differs is not false"
echo "gpt2 TP 2 SP selective: one line, Megatron's own: $want"

# ---- train --log-memory prints the same lines -----------------------------------------------------
# h = 256: the norms' biases Megatron counts, (2hL + h) x 18 bytes, show at two decimals of MB
small=(--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16 --micro-batch-size 2 --global-batch-size 4 --vocab-size 100)
llama=("${LLAMA_ARCH[@]}" --group-query-attention --num-query-groups 2)
train_only=(--train-iters 1 --lr 1e-3 --mock-data --eval-iters 0 --log-memory)
for family in gpt2 llama; do
  extra=(); [ $family = llama ] && extra=("${llama[@]}")
  "$MEGADLM" train "${small[@]}" "${extra[@]}" "${train_only[@]}" > train.log 2>&1 ||
    { say_fail "$family train --log-memory"; tail -3 train.log; continue; }
  mem=$("$MEGADLM" memory "${small[@]}" "${extra[@]}" | sed -n '/^Theoretical/p; /^Megatron/p')
  lines=$(sed -n '/^Theoretical/p; /^Megatron/p' train.log)
  [ -n "$lines" ] && [ "$lines" = "$mem" ] || say_fail "$family: train --log-memory printed '$lines', memory '$mem'"
  n=$(wc -l <<<"$lines"); want_n=1; [ $family = llama ] && want_n=2
  [ "$n" = $want_n ] || say_fail "$family: $n footprint lines, expected $want_n"
  echo "$family train --log-memory: $n footprint line(s), as memory's"
done

[ $fail -eq 0 ] && echo "PASSED" || echo "FAILED"
exit $fail
