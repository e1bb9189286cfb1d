#!/usr/bin/env bash
# MegaDLMs' own launch lines, run as written (tests/megadlms/: copies of commit bdf7545, with one
# marked block each for the model size, the iteration counts and, in ckpt_conversion.sh, the rank
# count), on 2 MPI ranks through the shims of tests/megadlms/shims (torchrun -> mpirun megadlm
# train, python tools/count_tokens.py and tools/weights_conversion/megatron_to_hf_te.py ->
# megadlm, nvidia-smi), in a directory laid out as a MegaDLMs checkout (tokenizers under
# megatron/training/tokenizer/, envs/.env):
#   1. dlm_pretrain_1.7b.sh: count_tokens' numbers (the slices' documents, the .bin's tokens),
#      9 iterations with finite losses, saves at its SAVE_INTERVAL 3, validation at its EVAL_INTERVAL 3, TensorBoard
#      events that tests/python/check_tensorboard.py (an independent reader) finds equal to the
#      log; run again: the script's own skip; interrupted after the save at 6 (the later save
#      removed, as a run killed between saves leaves it): the script resumes from 6 and gives
#      iterations 7-9 the first run's losses.
#   2. dlm_pretrain_1.7b_test.sh (GPT-2 tokenizer, tied embeddings, --kv-channels, its own save
#      and evaluation intervals) the same way, and its convert_ckpt branch (a tied export).
#   3. `dlm_pretrain_1.7b.sh convert_ckpt 6` (convert mode, then the converter) and
#      ckpt_conversion.sh (every checkpoint; 6 is skipped as converted): the converted model is
#      the checkpoint's bit for bit; the HF export has the layout of MegaDLMs' converter
#      (tests/python/hf_difflm_layout.py), reads back with `megadlm convert --from hf` to the
#      checkpoint's values, and an independent PyTorch DiffLM forward of it
#      (tests/python/hf_forward.py) gives megadlm's logits -- the part of MegaDLMs'
#      ckpt_conversion_validation.sh (Megatron's logits against the HF model's) that runs here.
#   Also: outside their marked blocks the copies have the checksums of MegaDLMs' files
#   (tests/megadlms/SHA256SUMS.megadlms), and the shims refuse what they cannot map, naming it.
# A flag megadlm refuses fails the test with megadlm's message, which names the flag.
# Environment (set by CTest): MEGADLM, SRC, BUILD, WORK.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
PY=/usr/bin/python3 # Debian's python3 with python3-torch and python3-protobuf
[ -x "$BUILD/tests/hf_logits" ] || { echo "FAILED: $BUILD/tests/hf_logits not built (cmake --build $BUILD --target hf_logits)"; exit 1; }
"$PY" -c 'import torch, google.protobuf' ||
    { echo "FAILED: $PY lacks torch or protobuf (scripts/install-deps.sh --test)"; exit 1; }
fresh_work || exit 1
fail=0
bad() { echo "FAILED: $*"; fail=1; }

# ---- the copies are MegaDLMs' text but for the marked block (checksums of the originals)
(cd "$SRC/tests/megadlms" && while read -r sum f; do
    got=$(sed '/^# >>>>>>>>>>/,/^# <<<<<<<<<</d' "$f" | sha256sum | cut -d' ' -f1)
    [ "$got" = "$sum" ] || { echo "FAILED: tests/megadlms/$f: outside the marked block it is not MegaDLMs' text"; exit 1; }
done < SHA256SUMS.megadlms) || fail=1

# ---- a MegaDLMs checkout's layout, the environment its scripts read, the shims on PATH
P=$WORK/MegaDLMs
mkdir -p "$P/examples/dlm_training" "$P/tests/release_tests" "$P/megatron/training/tokenizer" "$P/envs"
cp "$SRC/tests/megadlms/dlm_pretrain_1.7b.sh" "$SRC/tests/megadlms/ckpt_conversion.sh" "$P/examples/dlm_training/"
cp "$SRC/tests/megadlms/dlm_pretrain_1.7b_test.sh" "$P/tests/release_tests/"
for t in gpt2_tokenizer gptneox_tokenizer; do ln -s "$SRC/data/tokenizers/$t" "$P/megatron/training/tokenizer/$t"; done
cat > "$P/envs/.env" <<ENV
export PROJECT_DIR=$P
export DATASETS_DIR=$WORK/datasets
export CKPT_DIR=$WORK/ckpt
export LOG_DIR=$WORK/logs
export WANDB_MODE=offline
ENV
# shellcheck disable=SC1091
source "$P/envs/.env"
export ROOT_DIR=$PROJECT_DIR # dlm_pretrain_1.7b.sh reads ROOT_DIR (TOKENIZER=) before it sets it
export PATH=$SRC/tests/megadlms/shims:$PATH MEGADLM MEGADLM_MPIRUN_ARGS="--allow-run-as-root --oversubscribe"
export OMP_NUM_THREADS=1
# the rank count: dlm_pretrain_1.7b.sh's variables, and dlm_pretrain_1.7b_test.sh's
export GPUS_PER_NODE=2 NUM_NODES=1 NODE_RANK=0 MASTER_ADDR=localhost MASTER_PORT=6000
export PROC_PER_NODE=2 NODE_COUNT=1

# ---- data: the King James Bible's first chapters, tokenized as each script's data prefix names
preprocess() { # preprocess FIRST_LINE LINES TOKENIZER PREFIX (PREFIX.bin/.idx)
    mkdir -p "$(dirname "$4")"
    sed -n "$1,$(($1 + $2 - 1))p" "$SRC/data/kjv.jsonl" > "$4.jsonl"
    "$MEGADLM" preprocess --input "$4.jsonl" --output-prefix "$4" --tokenizer-type HuggingFaceTokenizer \
        --tokenizer-model "$P/megatron/training/tokenizer/$3" --append-eod > "$4.log" 2>&1 ||
        { bad "preprocess $4"; cat "$4.log"; }
    mv "$4_text_document.bin" "$4.bin" && mv "$4_text_document.idx" "$4.idx"
}
D=$DATASETS_DIR
preprocess 1 20 gptneox_tokenizer "$D/path/to/train/data/prefix"
preprocess 21 4 gptneox_tokenizer "$D/path/to/valid/data/prefix"
preprocess 1 20 gpt2_tokenizer "$D/nemotron_cc_extracted/processed_gpt2/1b/extracted_mixture_000001"
preprocess 21 4 gpt2_tokenizer "$D/c4_data_constrained/processed_gpt2/validation/c4-en-validation_text_document"

# ---- checks of one training run
check_trained() { # check_trained LOG FIRST LAST: one finite loss per iteration FIRST..LAST
    local got want
    got=$(losses -n "$1" | awk -F'[/ ]' '{ print $1 }' | tr '\n' ' ')
    want=$(seq -s ' ' "$2" "$3")' '
    [ "$got" = "$want" ] || bad "$1: loss lines of iterations '$got', expected '$want'"
    losses -n "$1" | awk '$2 !~ /^[0-9.E+-]+$/ { exit 1 }' || bad "$1: a loss that is not finite: $(losses -n "$1" | tr '\n' ' ')"
}
check_saved() { # check_saved CKPT_PATH LATEST ITER...
    local d=$1 latest=$2 it; shift 2
    [ "$(cat "$d/latest_checkpointed_iteration.txt" 2>/dev/null)" = "$latest" ] ||
        bad "$d: latest_checkpointed_iteration.txt is '$(cat "$d/latest_checkpointed_iteration.txt" 2>/dev/null)', expected $latest"
    local want="" got
    for it in "$@"; do want+=$(printf 'iter_%07d ' "$it"); done
    got=$(cd "$d" && ls -d iter_* 2>/dev/null | tr '\n' ' ')
    [ "$got" = "$want" ] || bad "$d: checkpoints '$got', expected '$want'"
}
check_evaluated() { # check_evaluated LOG ITER...: a validation line at each
    local it
    for it in "${@:2}"; do
        grep -q "validation loss at iteration $it .*lm loss value: " "$1" || bad "$1: no validation at iteration $it"
    done
}
check_tb() { # check_tb LOG TB_DIR [check_tensorboard.py flags]
    "$PY" "$SRC/tests/python/check_tensorboard.py" "$@" --full --no-world-size --difflm --world-size 2 ||
        bad "$1: the TensorBoard events of $2 are not the log's"
}
refused_flag() { # the flag megadlm refused, named in the log
    grep -o "error: .*" "$1" | sed 's/^error: //' | sort -u | head -3 | paste -sd ';'
}
run_script() { # run_script LOG SCRIPT ARGS...
    local log=$1; shift
    (cd "$P" && bash "$@") > "$log" 2>&1 && return 0
    local r; r=$(refused_flag "$log")
    bad "'bash $*' failed${r:+: megadlm: $r} (log: $WORK/$log)"
    [ -n "$r" ] || tail -5 "$log"
    return 1
}
same() { "$PY" "$SRC/tests/python/hf_forward.py" "$@" > /dev/null; }

# ---- 1. examples/dlm_training/dlm_pretrain_1.7b.sh: TRAIN_ITERS 9, SAVE_INTERVAL = EVAL_INTERVAL 3
echo "== dlm_pretrain_1.7b.sh"
CK1=$CKPT_DIR/cache/difflm/training_checkpoints/dlm_training
TB1=$LOG_DIR/dlm_training/tensorboard
S1=examples/dlm_training/dlm_pretrain_1.7b.sh
if run_script one.log $S1; then
    # count_tokens.py: the documents of the slices; the tokens of the .bin (uint16 ids)
    grep -q "Total number of sequences: 20$" one.log && grep -q "Total number of sequences: 4$" one.log ||
        bad "count_tokens.py: not 20 train and 4 valid documents"
    p=$D/path/to/train/data/prefix
    t=$(sed 's/.*"total_tokens": "\([0-9]*\)".*/\1/' "$D/path/to/train/data/.statistics_${p//\//_}")
    [ "$t" = $(($(stat -c %s "$p.bin") / 2)) ] || bad "count_tokens.py: $t tokens, the .bin holds $(($(stat -c %s "$p.bin") / 2))"
    check_trained one.log 1 9
    check_saved "$CK1" 9 3 6 9
    check_evaluated one.log 3 6 9
    check_tb one.log "$TB1"
    # run again: the script's own check skips the finished training
    if run_script again.log $S1; then
        grep -q "The last checkpoint of the training exists. We will not run the training script" again.log ||
            bad "the second run did not skip the finished training"
        [ -z "$(losses -n again.log)" ] || bad "the second run trained"
    fi
    # interrupted between the saves at 6 and 9: the script runs the training, which resumes at 6
    rm -rf "$CK1/iter_0000009"; echo 6 > "$CK1/latest_checkpointed_iteration.txt"
    mv "$TB1" tb-one
    if run_script resume.log $S1; then
        grep -q "No last-iteration checkpoint found. Running the training script." resume.log ||
            bad "the script did not decide to train"
        grep -q "successfully loaded checkpoint from $CK1 .* at iteration 6$" resume.log || bad "no resume from iteration 6"
        check_trained resume.log 7 9
        check_saved "$CK1" 9 3 6 9
        [ "$(losses -n resume.log)" = "$(losses -n one.log | tail -3)" ] ||
            bad "the resumed iterations' losses differ from the uninterrupted run's: $(losses -n resume.log | tr '\n' ' ')"
        check_tb resume.log "$TB1" --start-iteration 6
    fi
fi

# ---- 2. tests/release_tests/dlm_pretrain_1.7b_test.sh: TRAIN_ITERS 10, saved and evaluated at the end
echo "== dlm_pretrain_1.7b_test.sh"
CK2=$CKPT_DIR/cache/difflm/training_checkpoints/dlm_training_test
S2=tests/release_tests/dlm_pretrain_1.7b_test.sh
if run_script two.log $S2; then
    check_trained two.log 1 10
    check_saved "$CK2" 10 10
    check_evaluated two.log 10
    check_tb two.log "$LOG_DIR/dlm_training_test/tensorboard"
    grep -q '"untie_embeddings_and_output_weights":[[:space:]]*false' "$CK2/iter_0000010/state.json" ||
        bad "dlm_pretrain_1.7b_test.sh trains tied embeddings"
    if run_script two-again.log $S2; then
        grep -q "The last checkpoint of the training exists" two-again.log || bad "the test script's second run did not skip"
    fi
    # its convert_ckpt branch: gpt2_1b_dlm, tied (no --untieembed), GPT-2's tokenizer
    if GPUS_PER_NODE_CONVERT_CKPT=2 NUM_NODES_CONVERT_CKPT=1 run_script conv-two.log $S2 convert_ckpt 10; then
        H2=$CKPT_DIR/cache/difflm/converted_checkpoints/dlm_training_test/ckptstep_10/hf
        "$PY" "$SRC/tests/python/hf_difflm_layout.py" "$H2" layers=2 hidden=64 heads=4 groups=4 head_dim=16 \
            ffn=128 vocab=50304 seq=64 dtype=BF16 mask=50257 eos=50256 shards=4 theta=10000 eps=1e-6 untied=0 ||
            bad "the test script's HF export's layout"
    fi
fi

# ---- 3. the conversion: `dlm_pretrain_1.7b.sh convert_ckpt 6`, then ckpt_conversion.sh (all steps)
echo "== convert_ckpt"
C=$CKPT_DIR/cache/difflm/converted_checkpoints/dlm_training
TOK=$P/megatron/training/tokenizer/gptneox_tokenizer
if [ -f "$CK1/iter_0000006/model.safetensors" ] &&
   GPUS_PER_NODE_CONVERT_CKPT=2 NUM_NODES_CONVERT_CKPT=1 run_script conv6.log $S1 convert_ckpt 6; then
    check_saved "$C/ckptstep_6/torch" 6 6
    [ ! -e "$C/ckptstep_6/torch/iter_0000006/optimizer.safetensors" ] || bad "convert mode saved the optimizer"
    same same "$CK1/iter_0000006/model.safetensors" "$C/ckptstep_6/torch/iter_0000006/model.safetensors" ||
        bad "the converted checkpoint's tensors differ from the training's"
    H=$C/ckptstep_6/hf
    # MegaDLMs' converter's layout; the padded vocabulary: 50289 tokens to a multiple of 128
    "$PY" "$SRC/tests/python/hf_difflm_layout.py" "$H" layers=2 hidden=64 heads=4 groups=4 head_dim=16 \
        ffn=128 vocab=50304 seq=64 dtype=BF16 mask=50277 eos=0 shards=4 theta=10000 eps=1e-6 untied=1 ||
        bad "the HF export's layout"
    cmp -s "$TOK/tokenizer.json" "$H/tokenizer.json" || bad "the export's tokenizer.json is not the training's"
    if "$MEGADLM" convert --from hf "$H" back --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$TOK" \
        > back.log 2>&1; then
        same same-values "$CK1/iter_0000006/model.safetensors" back/iter_0000000/model.safetensors ||
            bad "the HF export does not read back to the checkpoint's values"
        # ckpt_conversion_validation.sh's comparison: megadlm's logits and an independent DiffLM forward
        "$BUILD/tests/hf_logits" back logits.safetensors > logits.log 2>&1 || { bad "hf_logits"; cat logits.log; }
        "$PY" "$SRC/tests/python/hf_forward.py" forward "$H" logits.safetensors ||
            bad "the DiffLM forward of the export differs from megadlm's"
        "$PY" "$SRC/tests/python/hf_forward.py" forward "$H" logits.safetensors --perturb > /dev/null 2>&1 &&
            bad "a perturbed weight went undetected"
    else
        bad "megadlm convert --from hf"; cat back.log
    fi
else
    echo "(the conversion of step 6 did not run: see the failures above)"
fi
echo "== ckpt_conversion.sh"
if [ -f "$C/ckptstep_6/hf/tokenizer.json" ] && run_script conv.log examples/dlm_training/ckpt_conversion.sh; then
    grep -q "Torch checkpoint step 6 has already been converted" conv.log &&
        grep -q "HF checkpoint step 6 has already been converted" conv.log || bad "step 6 was not skipped as converted"
    for s in 3 9; do
        same same "$CK1/iter_000000$s/model.safetensors" "$C/ckptstep_$s/torch/iter_000000$s/model.safetensors" ||
            bad "ckptstep_$s: the converted checkpoint differs"
        "$PY" "$SRC/tests/python/hf_difflm_layout.py" "$C/ckptstep_$s/hf" layers=2 hidden=64 heads=4 groups=4 \
            head_dim=16 ffn=128 vocab=50304 seq=64 dtype=BF16 mask=50277 eos=0 shards=4 theta=10000 eps=1e-6 \
            untied=1 || bad "ckptstep_$s: the HF export's layout"
    done
else
    echo "(ckpt_conversion.sh did not run or failed: see the failures above)"
fi

# ---- the shims refuse what they cannot map, naming it
echo "== shims"
refused() { # refused SUBSTRING COMMAND...
    if expect_error "$@"; then echo "refused as expected: $ERR_OUT"
    else bad "'${*:2}'"; fi
}
if [ -d "$C/ckptstep_6/torch" ]; then
    conv=(python "$P/tools/weights_conversion/megatron_to_hf_te.py" --input_dir "$C/ckptstep_6/torch" --output_dir x)
    refused "--rope_theta 1e6" "${conv[@]}" --untieembed --rope_theta 1e6
    refused "--untieembed is missing" "${conv[@]}"
    refused "--vocab_file" "${conv[@]}" --untieembed --vocab_file v.json
fi
refused "--nnodes 2" torchrun --nproc_per_node 2 --nnodes 2 pretrain_difflm.py --lr 1
refused "pretrain_bert.py" torchrun --nproc_per_node 2 pretrain_bert.py --lr 1
refused "nowhere does not exist" python tools/count_tokens.py --weighted-prefix "1.0 $WORK/nowhere/p"

[ $fail = 0 ] || exit 1
echo "PASS: MegaDLMs' launch lines train, save, resume, log and convert as written"
