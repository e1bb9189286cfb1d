#!/usr/bin/env bash
# Checkpoints under --bf16 (one process), GPT-2 and Llama-style models; every expected value is
# computed by tests/python/check_bf16_checkpoint.py (numpy, PyTorch's bf16 rounding), never by
# megadlm:
#  - the files: model.safetensors holds BF16 tensors, torch's rounding of the fp32 main
#    parameters, which the optimizer file holds as optimizer.fp32_param.<name> beside the
#    moments; state.json says params_dtype "bfloat16";
#  - resume is bitwise: 3 iterations, then 2 more from the checkpoint, give the files of 5
#    uninterrupted iterations byte for byte, and the same losses;
#  - fp32 checkpoint -> --bf16 run: main parameters bit for bit, bf16 copy rounded, moments kept;
#    --bf16 checkpoint -> fp32 run: the fp32 main parameters, or with --no-load-optim the BF16
#    values widened (zero moments); --finetune (iteration 0); each with its log line;
#  - convert --to hf writes torch_dtype "bfloat16" and BF16 tensors (float32 for an fp32
#    checkpoint); convert --from hf of that BF16 model widens exactly; generate reads a --bf16
#    checkpoint as its BF16 values widened (the same text as from an F32 copy of them).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
PY=/usr/bin/python3 # Debian's python3 with python3-torch (the python3 first on PATH may lack it)
CHK="$SRC/tests/python/check_bf16_checkpoint.py"
"$PY" -c 'import torch' || { echo "FAIL: $PY lacks torch (scripts/install-deps.sh: python3-torch)"; exit 1; }
fail=0
say_fail() { echo "FAILED: $*"; fail=1; }

common=(--num-layers 3 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 4 --train-iters 5
        --lr 1e-3 --lr-decay-style cosine --lr-warmup-iters 1 --log-interval 1 --eval-iters 0
        "${DROPOUT[@]}" --seed 3)
llama=("${LLAMA_ARCH[@]}" --group-query-attention --num-query-groups 2)
has_line() { grep -qF -- "$2" "$1" || say_fail "$1 lacks the line '$2'"; }

for family in gpt2 llama; do
  extra=()
  [ "$family" = llama ] && extra=("${llama[@]}")
  train() { "$MEGADLM" train "${common[@]}" "${extra[@]}" "$@"; }
  f=$family

  # ---- the files, and bitwise resume --------------------------------------------------------
  train --bf16 --save "$f-full" --log-memory > "$f-full.log" 2>&1 || { say_fail "$f: train"; continue; }
  "$PY" "$CHK" saved "$f-full/iter_0000005" || say_fail "$f: the --bf16 checkpoint's files"
  # --log-memory's checkpoint line in the files' dtypes: 2 bytes a parameter, 12 of optimizer
  # state (moments and main parameters), all written by the one rank
  line=$(grep -o "written by this rank [0-9]* bytes.*optimizer state [0-9]*" "$f-full.log")
  read -r w s p o < <(sed -E 's/[^0-9]+/ /g' <<<"$line" | awk '{print $1, $3, $4, $5}')
  [ "$w" = "$s" ] && [ $((6 * p)) = "$o" ] && [ $((p + o)) = "$s" ] ||
    say_fail "$f: --log-memory checkpoint line: $line"
  train --bf16 --save "$f-part" --exit-interval 3 > "$f-part1.log" 2>&1
  cp -r "$f-part" "$f-bf16-3" # the --bf16 checkpoint of iteration 3, for the loads below
  train --bf16 --save "$f-part" --load "$f-part" > "$f-part2.log" 2>&1 ||
    say_fail "$f: the resumed --bf16 run"
  same_ckpt "$f-full" "$f-part" 5 ||
    say_fail "$f: resumed --bf16 run's checkpoint differs from the uninterrupted run's"
  [ "$(losses -n "$f-full.log" | tail -2)" = "$(losses -n "$f-part2.log")" ] && [ -n "$(losses -n "$f-part2.log")" ] ||
    say_fail "$f: resumed losses '$(losses -n "$f-part2.log" | tr '\n' ' ')', uninterrupted '$(losses -n "$f-full.log" | tail -2 | tr '\n' ' ')'"
  echo "$f: resume under --bf16 bitwise (files and the losses of iterations 4, 5)"

  # ---- fp32 checkpoint -> --bf16 run ---------------------------------------------------------
  train --save "$f-fp32-3" --exit-interval 3 > "$f-fp32.log" 2>&1
  train --bf16 --load "$f-fp32-3" --save "$f-f2b" --train-iters 3 > "$f-f2b.log" 2>&1 ||
    say_fail "$f: fp32 -> bf16 load"
  has_line "$f-f2b.log" "> loading checkpoint: model.safetensors holds F32 parameters, this run is bf16: fp32 main parameters taken from them bit for bit, the model's bf16 parameters rounded from them (to nearest even)"
  "$PY" "$CHK" f32-to-bf16 "$f-fp32-3/iter_0000003" "$f-f2b/iter_0000003" ||
    say_fail "$f: fp32 checkpoint loaded by a --bf16 run"

  # ---- --bf16 checkpoint -> fp32 run ---------------------------------------------------------
  train --load "$f-bf16-3" --save "$f-b2f" --train-iters 3 > "$f-b2f.log" 2>&1 ||
    say_fail "$f: bf16 -> fp32 load"
  has_line "$f-b2f.log" "> loading checkpoint: model.safetensors holds BF16 parameters, this run is fp32: parameters taken from the optimizer file's fp32 main parameters"
  "$PY" "$CHK" bf16-to-f32 "$f-bf16-3/iter_0000003" "$f-b2f/iter_0000003" main ||
    say_fail "$f: --bf16 checkpoint loaded by an fp32 run"
  train --load "$f-bf16-3" --no-load-optim --save "$f-b2fw" --train-iters 3 > "$f-b2fw.log" 2>&1 ||
    say_fail "$f: bf16 -> fp32 load with --no-load-optim"
  has_line "$f-b2fw.log" "> loading checkpoint: model.safetensors holds BF16 parameters, this run is fp32, without the optimizer state: parameters are the BF16 values widened exactly"
  "$PY" "$CHK" bf16-to-f32 "$f-bf16-3/iter_0000003" "$f-b2fw/iter_0000003" widen ||
    say_fail "$f: --bf16 checkpoint loaded by an fp32 run with --no-load-optim"
  # the lr schedule starts again: iteration 4 after --no-load-optim has a fresh run's first lr
  lr() { sed -nE "s/^ \[[^]]*\] iteration +$2\/.*learning rate: ([0-9.E+-]+) .*/\1/p" "$1"; }
  train --load "$f-bf16-3" --no-load-optim --train-iters 4 > "$f-b2fw4.log" 2>&1
  train --train-iters 4 --exit-interval 1 > "$f-fresh4.log" 2>&1
  [ -n "$(lr "$f-fresh4.log" 1)" ] && [ "$(lr "$f-b2fw4.log" 4)" = "$(lr "$f-fresh4.log" 1)" ] ||
    say_fail "$f: --no-load-optim: lr $(lr "$f-b2fw4.log" 4) at iteration 4, a fresh run's first $(lr "$f-fresh4.log" 1)"
  # without the optimizer file, only --no-load-optim / --finetune load it
  cp -r "$f-bf16-3" "$f-noopt"; rm "$f-noopt/iter_0000003/optimizer.safetensors"
  expect_error "optimizer.safetensors: missing: the checkpoint was saved without optimizer state (--no-load-optim or --finetune load the model alone)" \
    train --bf16 --load "$f-noopt" --train-iters 4 || say_fail "$f: a checkpoint without optimizer state"
  train --bf16 --load "$f-noopt" --finetune --train-iters 2 > "$f-ft.log" 2>&1 || say_fail "$f: --finetune"
  has_line "$f-ft.log" "> loading checkpoint: model.safetensors holds BF16 parameters, this run is bf16, without the optimizer state: fp32 main parameters are the BF16 values widened exactly"
  grep -q "successfully loaded checkpoint from $f-noopt .* at iteration 0$" "$f-ft.log" ||
    say_fail "$f: --finetune did not start at iteration 0"
  grep -q '^ \[[^]]*\] iteration        1/       2 | consumed samples:            4 ' "$f-ft.log" ||
    say_fail "$f: --finetune did not start from 0 consumed samples"
  echo "$f: cross-precision loads as expected"

  # ---- convert and generate ------------------------------------------------------------------
  "$MEGADLM" convert --to hf "$f-full" "$f-hf" 2> "$f-hf.log" || say_fail "$f: convert --to hf"
  "$PY" "$CHK" hf "$f-full/iter_0000005" "$f-hf" || say_fail "$f: convert --to hf of a --bf16 checkpoint"
  "$MEGADLM" convert --to hf "$f-fp32-3" "$f-hf32" 2> /dev/null || say_fail "$f: convert --to hf (fp32)"
  grep -q '"torch_dtype":[[:space:]]*"float32"' "$f-hf32/config.json" ||
    say_fail "$f: convert --to hf of an fp32 checkpoint: torch_dtype is not float32"
  # (the run's tokenizer: generate draws from its vocabulary)
  "$MEGADLM" convert --from hf "$f-hf" "$f-import" --vocab-size 100 2> /dev/null ||
    say_fail "$f: convert --from hf of BF16"
  "$PY" "$CHK" hf-import "$f-hf" "$f-import/iter_0000000" || say_fail "$f: convert --from hf of BF16"
  "$PY" "$CHK" widen "$f-full/iter_0000005" "$f-widened/iter_0000005" > /dev/null
  gen() { "$MEGADLM" generate --load "$1" --prompt "3 4 5" --max-new-tokens 6 --top-k 1 2>/dev/null; }
  g16=$(gen "$f-full") || say_fail "$f: generate from a --bf16 checkpoint"
  g32=$(gen "$f-widened") || say_fail "$f: generate from the F32 copy"
  gim=$(gen "$f-import") || say_fail "$f: generate from the imported BF16 model"
  [ -n "$g16" ] && [ "$g16" = "$g32" ] && [ "$g16" = "$gim" ] ||
    say_fail "$f: generate: --bf16 checkpoint '$g16', its F32 copy '$g32', imported from HF '$gim'"
  echo "$f: convert --to hf writes BF16 (torch_dtype bfloat16), --from hf reads it back; generate: $g16"
done
exit $fail
