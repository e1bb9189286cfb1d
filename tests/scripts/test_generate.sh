#!/usr/bin/env bash
# generate: a model trained on mock data (runs of consecutive ids) continues a run when sampled
# greedily (top-k 1); sampling is reproducible for a seed; bad flags are refused.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1

"$MEGADLM" train --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --micro-batch-size 8 --global-batch-size 8 --train-iters 150 \
    --lr 3e-3 --lr-decay-style cosine --lr-warmup-iters 10 --mock-data --vocab-size 50 \
    --hidden-dropout 0 --attention-dropout 0 --log-interval 50 --eval-iters 0 --save ckpt \
    > train.log
tail -1 train.log

out=$("$MEGADLM" generate --load ckpt --prompt "10 11 12 13 14" --max-new-tokens 8 --top-k 1 2>/dev/null)
echo "greedy: $out"
[ "$out" = "10 11 12 13 14 15 16 17 18 19 20 21 22" ] || { echo "FAILED: greedy continuation"; exit 1; }

a=$("$MEGADLM" generate --load ckpt --prompt "3 4 5" --max-new-tokens 10 --temperature 1.5 --seed 9 2>/dev/null)
b=$("$MEGADLM" generate --load ckpt --prompt "3 4 5" --max-new-tokens 10 --temperature 1.5 --seed 9 2>/dev/null)
[ "$a" = "$b" ] || { echo "FAILED: same seed, different samples: '$a' vs '$b'"; exit 1; }

fail=0
check() { # check <substring> args...
  local want=$1; shift
  if out=$("$MEGADLM" generate "$@" 2>&1); then echo "FAILED: generate $* succeeded"; fail=1;
  elif ! grep -qF -- "$want" <<<"$out"; then echo "FAILED: generate $*: '$out' lacks '$want'"; fail=1; fi
}
check "--load" --prompt "1 2"
check "--top-k" --load ckpt --top-k 5 --top-p 0.9
check "--temperature" --load ckpt --temperature 0
check "nope" --load nope
check "--prompt" --load ckpt --prompt "1 x 3"
exit $fail
