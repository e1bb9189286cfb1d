#!/usr/bin/env bash
# Data parallelism (alone and with tensor parallelism) against the single-process run: each DP
# rank takes its micro-batches of every global batch (Megatron's sampler order), gradients are
# averaged across DP; logged training and validation losses within rel 1e-5, final parameters
# within rel 1e-4, dropout 0.1 on, and a checkpoint saved by DP 2 resumes under TP 2 x DP 2.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8 --train-iters 6
        --lr 1e-3 --lr-decay-style cosine --log-interval 1 --eval-interval 3 --eval-iters 2
        "${DROPOUT[@]}" --seed 21)
# close REF.log OTHER.log [COUNT]: the losses (training and validation) within rel 1e-5
close() { close_losses "$1" "$2" 1e-5 "${3:-}"; }
fail=0
"$MEGADLM" train "${common[@]}" --make-vocab-size-divisible-by 128 --save ref > ref.log
nref=$(losses ref.log | wc -l)
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --save dp2 > dp2.log 2>&1
close ref.log dp2.log "$nref" || fail=1
"${MPIRUN[@]}" -np 4 "$MEGADLM" train "${common[@]}" --tensor-model-parallel-size 2 \
    --make-vocab-size-divisible-by 64 --sequence-parallel --save tp2dp2 > tp2dp2.log 2>&1
close ref.log tp2dp2.log "$nref" || fail=1
for d in dp2 tp2dp2; do
  /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$d/iter_0000006/model.safetensors" \
      ref/iter_0000006/model.safetensors 1e-4 4 4 8 1.2e-2 || fail=1
done
# resume across layouts: DP 2 saves at iteration 3, TP 2 x DP 2 finishes
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --save mixed --exit-interval 3 > mixed-a.log 2>&1
"${MPIRUN[@]}" -np 4 "$MEGADLM" train "${common[@]}" --tensor-model-parallel-size 2 \
    --make-vocab-size-divisible-by 64 --save mixed --load mixed > mixed-b.log 2>&1
grep -q "successfully loaded checkpoint" mixed-b.log || { echo "FAILED: mixed did not load"; fail=1; }
cat mixed-a.log mixed-b.log > mixed.log
close ref.log mixed.log "$nref" || fail=1
/usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" mixed/iter_0000006/model.safetensors \
    ref/iter_0000006/model.safetensors 1e-4 4 4 8 1.2e-2 || fail=1
exit $fail
