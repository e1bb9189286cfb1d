#!/usr/bin/env bash
# Fully sharded data parallelism (--use-megatron-fsdp / --use-custom-fsdp, the sharding
# strategies). optim is the distributed optimizer's code: its losses equal
# --use-distributed-optimizer's digit for digit; no_shard equals plain data parallelism digit
# for digit.
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMP_NUM_THREADS=1
mpi() { local np=$1; shift; mpirun --allow-run-as-root --oversubscribe -np "$np" "$@"; }
common=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
        --max-position-embeddings 16 --micro-batch-size 1 --global-batch-size 4 --train-iters 4
        --lr 3e-3 --mock-data --vocab-size 100 --log-interval 1 --eval-iters 0 --seed 3)
fail=0
losses() { grep -o 'lm loss: [^ ]*' "$1" | awk '{print $NF}'; }
run() { # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  mpi "$np" "$MEGADLM" train "${common[@]}" "$@" > "$name.log" 2>&1 \
      || { echo "FAILED: $name (exit $?)"; tail -3 "$name.log"; fail=1; }
}
same() { # same A.log B.log: every loss digit for digit
  if [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(losses "$1" | wc -l)" = 4 ]; then
    echo "ok: $2 = $1 (bitwise)"
  else
    echo "FAILED: $2 differs from $1"; paste <(losses "$1") <(losses "$2"); fail=1
  fi
}
run plain 2
run dopt 2 --use-distributed-optimizer
run optim 2 --use-custom-fsdp --data-parallel-sharding-strategy optim
run noshard 2 --use-megatron-fsdp --data-parallel-sharding-strategy no_shard
same dopt.log optim.log
same plain.log noshard.log
grep -q "gradient reduce-scatter" optim.log || { echo "FAILED: optim did not reduce-scatter"; fail=1; }
[ $fail = 0 ] && echo "fsdp: all strategies as their references"
exit $fail
