#!/usr/bin/env bash
# megadlm eval's masked-diffusion log-likelihood (LLaDA's Monte Carlo estimate,
# training/loglikelihood.h) against PyTorch in float64 (tests/python/eval_difflm_torch.py): the
# same draws rebuilt in Python from the documented Philox counters, on the checkpoint's weights,
# give each request's estimate within 1e-6 (relative) and its standard error within 1e-5; and
# with 4096 draws the estimate of short continuations (3 and 4 tokens) lies within 4 standard
# errors of the exact expectation over every mask count and every mask (enumerated in Python).
# A request whose context is cut on the left to fit the model (seq-length - 1 tokens) and one
# with an empty context are among them. And eval --bf16 (an autoregressive model) against the
# emulation of megadlm's bf16 rounding points, fp32 against PyTorch's fp32.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 24 \
    --max-position-embeddings 24 --micro-batch-size 4 --global-batch-size 4 --mock-data \
    --vocab-size 37 --model-running-mode difflm-noshift --mask-token 60 --hidden-dropout 0 \
    --attention-dropout 0 --seed 3 --lr 1e-2 --lr-decay-style constant --log-interval 10 \
    --eval-iters 0 --save dlm --train-iters 20 > train.log 2>&1 ||
    { echo "FAILED: training"; tail -5 train.log; exit 1; }
model=(-- layers=2 hidden=64 heads=4 mask=60)
fail=0
# NullTokenizer: the text is the token ids
cat > ll.jsonl <<'T'
{"context": "3 4 5 6", "continuation": " 7 8 9"}
{"context": "", "continuation": "10 11 12 13 14"}
{"context": "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22", "continuation": " 23 24"}
T
printf '3 4 5 6 | 7 8 9\n | 10 11 12 13 14\n2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 | 23 24\n' > ll.tokens
"$MEGADLM" eval --load dlm --task-file ll.jsonl --mc-num 16 --seed 5 --json --log-samples > draws.out 2>&1 ||
    { echo "FAILED: eval"; tail -5 draws.out; exit 1; }
grep -q '"context_cut":1' draws.out || { echo "FAILED: no request had its context cut"; fail=1; }
/usr/bin/python3 "$SRC/tests/python/eval_difflm_torch.py" dlm draws.out 5 16 ll.tokens "${model[@]}" || fail=1
cat > short.jsonl <<'T'
{"context": "3 4 5 6", "continuation": " 7 8 9"}
{"context": "20 21 22 23 24 25", "continuation": " 26 27 28 29"}
T
printf '3 4 5 6 | 7 8 9\n20 21 22 23 24 25 | 26 27 28 29\n' > short.tokens
"$MEGADLM" eval --load dlm --task-file short.jsonl --mc-num 4096 --seed 5 --json --log-samples > many.out 2>&1 ||
    { echo "FAILED: eval with 4096 draws"; tail -5 many.out; exit 1; }
/usr/bin/python3 "$SRC/tests/python/eval_difflm_torch.py" dlm many.out 5 4096 short.tokens "${model[@]}" exact=1 || fail=1
# --bf16: an autoregressive model of torch_gpt.py's "gpt" configuration, its log-likelihoods in
# fp32 against PyTorch's and under --bf16 against the emulation of megadlm's bf16 rounding
# points (tests/python/eval_bf16_torch.py), for every bf16 GEMM that runs here
"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 16 \
    --max-position-embeddings 32 --ffn-hidden-size 256 --mock-data --vocab-size 300 \
    --micro-batch-size 4 --global-batch-size 4 --lr 3e-3 --train-iters 20 --hidden-dropout 0 \
    --attention-dropout 0 --log-interval 10 --eval-iters 0 --save gpt > train_gpt.log 2>&1 ||
    { echo "FAILED: training the gpt model"; tail -5 train_gpt.log; exit 1; }
cat > ar.jsonl <<'T'
{"context": "3 4 5 6 7", "continuation": " 8 9 10 11"}
{"context": "100 17 250", "continuation": " 31 2 299 5 6 7"}
{"context": "12", "continuation": " 13"}
T
printf '3 4 5 6 7 | 8 9 10 11\n100 17 250 | 31 2 299 5 6 7\n12 | 13\n' > ar.tokens
"$MEGADLM" eval --load gpt --task-file ar.jsonl --json --log-samples > ar_fp32.out 2>&1 ||
    { echo "FAILED: eval"; tail -5 ar_fp32.out; fail=1; }
for path in auto fallback onednn-matmul; do
  if ! MEGADLM_BF16_GEMM=$path "$MEGADLM" eval --load gpt --task-file ar.jsonl --json --log-samples \
      --bf16 > "ar_bf16_$path.out" 2>&1; then
    grep -q 'does not run on this CPU\|without oneDNN' "ar_bf16_$path.out" && { echo "($path: not here)"; continue; }
    echo "FAILED: eval --bf16 ($path)"; tail -5 "ar_bf16_$path.out"; fail=1; continue
  fi
  echo "-- --bf16 with MEGADLM_BF16_GEMM=$path"
  /usr/bin/python3 "$SRC/tests/python/eval_bf16_torch.py" gpt ar.tokens ar_fp32.out "ar_bf16_$path.out" || fail=1
done
[ $fail = 0 ] && echo "PASS: the diffusion log-likelihood equals PyTorch's on the same draws and converges to the exact ELBO; --bf16 the bf16 emulation's"
exit $fail
