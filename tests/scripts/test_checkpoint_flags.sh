#!/usr/bin/env bash
# Megatron's checkpointing flags as MegaDLMs' launch lines pass them (docs/CHECKPOINT.md,
# "Megatron's checkpoint flags"). References: an uninterrupted run (bitwise: losses, files),
# the files of the checkpoint converted (cmp), state.json read with Python's json module, and
# the directories on disk.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
shape=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16
       --max-position-embeddings 16)
run=(--micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --mock-data --vocab-size 100
     --make-vocab-size-divisible-by 64 --log-interval 1 --eval-iters 0 "${DROPOUT[@]}"
     --train-iters 8)
common=("${shape[@]}" "${run[@]}")
fail=0
FAIL() { echo "FAILED: $*"; fail=1; }
train() { "$MEGADLM" train "$@"; }
# refused NAME EXPECTED ARGS...: the run fails with EXPECTED in its message
refused() {
  local name=$1 want=$2; shift 2
  expect_error "$want" train "$@" || FAIL "$name"
  printf '%s\n' "$ERR_OUT" > "$name.log"
}

# the uninterrupted reference: saves every 2 iterations
train "${common[@]}" --seed 5 --save straight --save-interval 2 > straight.log 2>&1 ||
  { echo "FAILED: reference run"; tail -5 straight.log; exit 1; }

# --- formats ---
train "${common[@]}" --seed 5 --exit-interval 2 --save fmt --ckpt-format torch_dist \
  --auto-detect-ckpt-format --ckpt-fully-parallel-load --ckpt-fully-parallel-save \
  --ckpt-assume-constant-structure > fmt.log 2>&1 || FAIL "torch_dist and its companions refused"
cmp -s fmt/$(iter_dir 2)/model.safetensors straight/$(iter_dir 2)/model.safetensors ||
  FAIL "--ckpt-format torch_dist does not write megadlm's checkpoint"
refused torch "megadlm does not write PyTorch pickles" "${common[@]}" --save x --ckpt-format torch
refused zarr "--ckpt-format zarr" "${common[@]}" --save x --ckpt-format zarr
# a Megatron torch_dist directory given to --load is named as such
mkdir -p megatron/iter_0000100
printf 100 > megatron/latest_checkpointed_iteration.txt
touch megatron/iter_0000100/{metadata.json,common.pt,__0_0.distcp,__1_0.distcp}
refused megatron-dist "a Megatron torch_dist checkpoint (found metadata.json common.pt, 2 *.distcp files): megadlm cannot read PyTorch distributed checkpoints" \
  "${common[@]}" --load megatron --auto-detect-ckpt-format
mkdir -p megatron-legacy/iter_0000007/mp_rank_00
printf 7 > megatron-legacy/latest_checkpointed_iteration.txt
refused megatron-torch "a Megatron torch checkpoint (1 mp_rank_* directories" "${common[@]}" --load megatron-legacy

# --- --no-save-optim, --no-save-rng, --no-load-rng ---
train "${common[@]}" --seed 5 --train-iters 4 --save noopt --no-save-optim --no-save-rng \
  --exit-interval 4 > noopt.log 2>&1 || FAIL "--no-save-optim run"
[ -f noopt/$(iter_dir 4)/optimizer.safetensors ] && FAIL "--no-save-optim wrote optimizer.safetensors"
refused noopt-load "optimizer.safetensors: missing: the checkpoint was saved without optimizer state" \
  "${common[@]}" --seed 5 --load noopt
train "${common[@]}" --seed 5 --load noopt --no-load-optim > noopt-load2.log 2>&1 ||
  FAIL "a checkpoint without optimizer state does not load with --no-load-optim"
python3 - "$WORK" <<'EOF' || fail=1
import json, sys
w = sys.argv[1]
s = json.load(open(f"{w}/straight/iter_0000002/state.json"))
if s.get("rng_state") != {"seed": "5"}:
    sys.exit(f"FAILED: state.json rng_state is {s.get('rng_state')}, expected the seed 5")
if "rng_state" in json.load(open(f"{w}/noopt/iter_0000004/state.json")):
    sys.exit("FAILED: --no-save-rng wrote rng_state")
EOF
# resumed with another --seed: the checkpoint's RNG state drives dropout unless --no-load-rng,
# which equals loading a checkpoint saved without one
train "${common[@]}" --seed 5 --train-iters 8 --save rng-norng --save-interval 4 --no-save-rng \
  --exit-interval 4 > /dev/null 2>&1
train "${common[@]}" --seed 9 --load straight --ckpt-step 4 > rng-load.log 2>&1 || FAIL "rng load"
train "${common[@]}" --seed 9 --load straight --ckpt-step 4 --no-load-rng > rng-noload.log 2>&1 ||
  FAIL "--no-load-rng"
train "${common[@]}" --seed 9 --load rng-norng > rng-absent.log 2>&1 || FAIL "rng absent"
grep -q "the RNG state's seed 5 (dropout and masking) replaces --seed 9" rng-load.log ||
  FAIL "the loaded RNG state is not logged"
diff -q <(losses -n rng-noload.log) <(losses -n rng-absent.log) > /dev/null ||
  FAIL "--no-load-rng differs from a checkpoint saved with --no-save-rng"
diff -q <(losses -n rng-load.log) <(losses -n rng-noload.log) > /dev/null &&
  FAIL "loading the RNG state changed nothing"
# a malformed rng_state is refused, naming the file
cp -r straight badrng
python3 -c "
import json; p='badrng/iter_0000004/state.json'; s=json.load(open(p)); s['rng_state']={'seed': 5}
json.dump(s, open(p, 'w'))"
refused badrng 'badrng/iter_0000004/state.json: expected "rng_state" to be {"seed": "<unsigned integer>"}' \
  "${common[@]}" --seed 5 --load badrng --ckpt-step 4
# with the same --seed, loading the RNG state is the plain exact resume
train "${common[@]}" --seed 5 --load straight --ckpt-step 4 > rng-same.log 2>&1
diff -q <(losses -n straight.log | tail -4) <(losses -n rng-same.log) > /dev/null ||
  FAIL "resume from iteration 4 differs from the uninterrupted run"

# --- --ckpt-step, --exit-on-missing-checkpoint, --checkpoint-steps ---
refused ckpt-step "--ckpt-step 5: straight/iter_0000005: no such checkpoint directory" \
  "${common[@]}" --load straight --ckpt-step 5
refused ckpt-step-noload "--ckpt-step needs --load DIR" "${common[@]}" --ckpt-step 5
train "${common[@]}" --load nothing-here --exit-on-missing-checkpoint --save nothing-saved \
  > missing.log 2>&1 || FAIL "--exit-on-missing-checkpoint: non-zero status (Megatron exits 0)"
grep -q "'--exit-on-missing-checkpoint' set ... exiting" missing.log || FAIL "no exit message"
grep -q "iteration        1/" missing.log && FAIL "--exit-on-missing-checkpoint trained"
train "${common[@]}" --seed 5 --save steps --save-interval 4 --checkpoint-steps "3,,5" \
  > steps.log 2>&1 || FAIL "--checkpoint-steps run"
[ "$(ls -d steps/iter_* | xargs -n1 basename | tr '\n' ' ')" = "iter_0000003 iter_0000004 iter_0000005 iter_0000008 " ] ||
  FAIL "--checkpoint-steps 3,,5 with --save-interval 4 saved $(ls steps)"
refused steps-bad 'found "x"' "${common[@]}" --save s --checkpoint-steps "3,x"
# a --checkpoint-steps checkpoint holds the state after that iteration: resume is exact
train "${common[@]}" --seed 5 --load steps --ckpt-step 3 > steps-resume.log 2>&1
diff -q <(losses -n straight.log | tail -5) <(losses -n steps-resume.log) > /dev/null ||
  FAIL "resume from the --checkpoint-steps checkpoint 3 differs from the uninterrupted run"

# --- non-persistent checkpoints: persistent at 4, non-persistent at 2 and 6 (2 removed) ---
np=(--non-persistent-save-interval 2 --non-persistent-ckpt-type global)
train "${common[@]}" --seed 5 --save np --save-interval 4 "${np[@]}" --exit-interval 7 \
  > np1.log 2>&1 || FAIL "non-persistent run"
[ "$(ls np/non_persistent | tr '\n' ' ')" = "iter_0000006 latest_checkpointed_iteration.txt " ] ||
  FAIL "non-persistent directory holds: $(ls np/non_persistent)"
# the job dies during iteration 7, before its persistent save
rm -rf np/$(iter_dir 7); printf 4 > np/latest_checkpointed_iteration.txt
train "${common[@]}" --seed 5 --save np --save-interval 4 "${np[@]}" --load np > np2.log 2>&1 ||
  FAIL "resume from the non-persistent checkpoint"
grep -q "successfully loaded checkpoint from np/non_persistent .* at iteration 6" np2.log ||
  FAIL "resume did not pick the newer non-persistent checkpoint 6"
diff -q <(losses -n straight.log | tail -2) <(losses -n np2.log) > /dev/null ||
  FAIL "resume from the non-persistent checkpoint differs from the uninterrupted run"
cmp -s straight/$(iter_dir 8)/model.safetensors np/$(iter_dir 8)/model.safetensors ||
  FAIL "the final checkpoint after a non-persistent resume differs"
# a persistent checkpoint newer than the non-persistent one wins (Megatron's warning)
train "${common[@]}" --seed 5 --load np --non-persistent-ckpt-type global > np3.log 2>&1
grep -q "non-persistent checkpoints are older than persistent checkpoint" np3.log &&
  grep -q "successfully loaded checkpoint from np .* at iteration 8" np3.log ||
  FAIL "a newer persistent checkpoint was not preferred"
# a tie goes to the non-persistent checkpoint (Megatron: non-persistent iteration >= persistent)
mkdir -p tie/non_persistent
cp -r straight/$(iter_dir 6) tie/; printf 6 > tie/latest_checkpointed_iteration.txt
cp -r straight/$(iter_dir 6) tie/non_persistent/; printf 6 > tie/non_persistent/latest_checkpointed_iteration.txt
train "${common[@]}" --seed 5 --load tie --non-persistent-ckpt-type global > tie.log 2>&1
grep -q "successfully loaded checkpoint from tie/non_persistent .* at iteration 6" tie.log ||
  FAIL "a tie did not go to the non-persistent checkpoint"
refused np-local "--non-persistent-ckpt-type local: not supported" "${common[@]}" --save x \
  --non-persistent-ckpt-type local --non-persistent-save-interval 2
refused np-in-save "--non-persistent-global-ckpt-dir np/ is --save" "${common[@]}" --save np \
  --non-persistent-ckpt-type global --non-persistent-global-ckpt-dir np/
refused np-in-memory "--non-persistent-ckpt-type in_memory: not supported" "${common[@]}" \
  --save x --non-persistent-ckpt-type in_memory

# --- --use-checkpoint-args: the shape comes from the checkpoint ---
train "${run[@]}" --seed 5 --load straight --ckpt-step 4 --use-checkpoint-args --swiglu \
  > useargs.log 2>&1 || { FAIL "--use-checkpoint-args without the shape flags"; tail -3 useargs.log; }
grep -q "Setting num_layers to 2 from checkpoint" useargs.log &&
  grep -q "Setting swiglu to false from checkpoint" useargs.log ||
  FAIL "--use-checkpoint-args did not log the arguments it took"
diff -q <(losses -n straight.log | tail -4) <(losses -n useargs.log) > /dev/null ||
  FAIL "--use-checkpoint-args resume differs from the uninterrupted run"

# --- convert mode, MegaDLMs' line: 2 ranks (TP 2), model only, into DIR/torch; the line keeps
# the training flags (--non-persistent-save-interval without its type among them) ---
conv=(--non-persistent-save-interval 16 --no-load-optim --no-save-optim --no-save-rng --no-load-rng --ckpt-convert-format torch
      --ckpt-convert-save converted/ckptstep_4 --ckpt-step 4)
"${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" --seed 5 \
  --tensor-model-parallel-size 2 --save straight --load straight "${conv[@]}" > convert.log 2>&1 ||
  { FAIL "convert mode"; tail -3 convert.log; }
grep -q "> converted checkpoint: torch_dist -> torch: iteration 4 of straight written to converted/ckptstep_4/torch in megadlm's format (safetensors; model only, no optimizer state, no RNG state)" convert.log ||
  FAIL "no conversion log line"
grep -q "iteration        1/\|iteration        5/" convert.log && FAIL "convert mode trained"
out=converted/ckptstep_4/torch
[ "$(cat $out/latest_checkpointed_iteration.txt)" = 4 ] || FAIL "converted tracker"
cmp -s $out/$(iter_dir 4)/model.safetensors straight/$(iter_dir 4)/model.safetensors ||
  FAIL "converted model.safetensors differs from the source checkpoint's"
[ -e $out/$(iter_dir 4)/optimizer.safetensors ] && FAIL "--no-save-optim conversion wrote the optimizer"
[ "$(cat straight/latest_checkpointed_iteration.txt)" = 8 ] || FAIL "convert mode touched --save"
"$MEGADLM" convert --to hf $out hf > hf.log 2>&1 || FAIL "convert --to hf on the converted checkpoint"
[ -f hf/model.safetensors ] || FAIL "no Hugging Face model written"
refused convert-zarr "--ckpt-convert-format zarr" "${common[@]}" --load straight \
  --ckpt-convert-format zarr --ckpt-convert-save z
refused convert-nosave "--ckpt-convert-format torch needs --ckpt-convert-save DIR" \
  "${common[@]}" --load straight --ckpt-convert-format torch

# --- flags that need another one: refused by name rather than ignored ---
refused async-nosave "--async-save needs --save DIR" "${common[@]}" --async-save
refused np-notype "--non-persistent-save-interval 2 needs --save DIR and --non-persistent-ckpt-type global" \
  "${common[@]}" --save x --non-persistent-save-interval 2
refused np-dir-notype "--non-persistent-global-ckpt-dir needs --non-persistent-ckpt-type global" \
  "${common[@]}" --save x --non-persistent-global-ckpt-dir y
refused useargs-noload "--use-checkpoint-args needs --load DIR" "${common[@]}" --use-checkpoint-args
refused missing-noload "--exit-on-missing-checkpoint needs --load DIR" "${common[@]}" \
  --exit-on-missing-checkpoint
refused convert-save-only "--ckpt-convert-save needs --ckpt-convert-format" "${common[@]}" \
  --load straight --ckpt-convert-save z
refused steps-nosave "--checkpoint-steps needs --save DIR" "${common[@]}" --checkpoint-steps 2
# Megatron's other name of --save-interval
train "${common[@]}" --seed 5 --save psi --persistent-save-interval 3 > psi.log 2>&1
[ "$(ls -d psi/iter_* | xargs -n1 basename | tr '\n' ' ')" = "iter_0000003 iter_0000006 iter_0000008 " ] ||
  FAIL "--persistent-save-interval 3 saved $(ls psi)"

[ $fail = 0 ] && echo "checkpoint flags: all as Megatron's / MegaDLMs'"
exit $fail
