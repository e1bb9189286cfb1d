#!/usr/bin/env bash
# The masked-diffusion training step against PyTorch (tests/python/difflm_step_torch.py): the
# batch rebuilt in Python from the documented mock-data and masking formulas (Philox4x32-10,
# SplitMix64), forward, backward, clipping and AdamW in float64 autograd from megadlm's
# checkpoint at iteration k, compared with megadlm's checkpoint and log at k + 1: loss, real
# input length, Adam's first moment (the gradient) and the update of every tensor. Two
# micro-batches per step, variable lengths, clipping active. Then a run resumed under another
# --seed: the checkpoint's RNG seed drives the masks and lengths (Megatron's RNG state), the new
# --seed the mock data (Megatron's datasets read --seed), and the logged real input length must
# be the length the model saw.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 24
        --max-position-embeddings 24 --micro-batch-size 3 --global-batch-size 6
        --mock-data --vocab-size 37 --model-running-mode difflm-noshift --mask-token 60
        --difflm-varilen-prob 0.5 --hidden-dropout 0 --attention-dropout 0 --seed 3
        --lr 2e-3 --lr-decay-style constant --weight-decay 0.1 --clip-grad 1.0
        --log-interval 1 --eval-iters 0 --save ckpt --save-interval 1)
cfg=(layers=2 hidden=64 heads=4 seq=24 mbs=3 gbs=6 vocab_size=37 mask=60 varilen=0.5 seed=3
     lr=0.002 wd=0.1 clip=1.0)
fail=0
"$MEGADLM" train "${common[@]}" --train-iters 4 > run.log 2>&1 || { echo "FAILED: run"; tail -5 run.log; exit 1; }
/usr/bin/python3 "$SRC/tests/python/difflm_step_torch.py" ckpt run.log 1 2 3 -- "${cfg[@]}" || fail=1
# resume at iteration 4 under --seed 9: the saved seed 3 is the one in use (Megatron's RNG state)
rm -rf ckpt/iter_0000004; echo 3 > ckpt/latest_checkpointed_iteration.txt
"$MEGADLM" train "${common[@]}" --seed 9 --load ckpt --train-iters 6 > resumed.log 2>&1 ||
    { echo "FAILED: resumed run"; tail -5 resumed.log; exit 1; }
grep -q "replaces --seed 9" resumed.log || { echo "FAILED: no word of the checkpoint's seed"; fail=1; }
/usr/bin/python3 "$SRC/tests/python/difflm_step_torch.py" ckpt resumed.log 4 5 -- "${cfg[@]}" data_seed=9 || fail=1
[ $fail = 0 ] && echo "PASS: difflm step equals PyTorch"
exit $fail
