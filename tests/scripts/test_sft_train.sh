#!/usr/bin/env bash
# Supervised fine-tuning (--sft), both families, on prompt/response pairs:
#   - preprocess --sft: the tokens and the loss mask read back here in Python from the .bin/.idx
#     bytes, against the pairs encoded by hand (ByteLevel: a token is a byte) with the template;
#     the template's placeholders and refusals;
#   - autoregressive SFT loss (one pair per sample, padding without loss) and LLaDA's diffusion
#     SFT loss (difflm-noshift, EOS padding counted) against PyTorch (tests/python/sft_torch.py:
#     batches, masks and weights rebuilt from the documented formulas);
#   - --finetune --load from a pretrained checkpoint of each family: the first SFT loss is
#     PyTorch's on the pretrained weights;
#   - packed SFT (the default): a resumed run bitwise equal to an uninterrupted one; 2-rank data,
#     tensor (+ sequence), pipeline and context parallelism equal to one process;
#   - the validation loss on response tokens (against PyTorch); the refusals.
set -uo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
fail=0
PY=/usr/bin/python3

# 14 pairs of varied lengths (two longer than the sequence: cut), non-ASCII included
$PY - <<'PYEOF' > pairs.jsonl
import json
words = "and the lord said unto moses behold I will rain bread from heaven for you é ü".split()
for i in range(14):
    p = " ".join(words[(i * 3 + k) % len(words)] for k in range(1 + i % 4))
    r = " ".join(words[(i * 5 + k) % len(words)] for k in range(1 + (i * 7) % 6 + (9 if i in (4, 11) else 0)))
    print(json.dumps({"prompt": p, "response": r}))
PYEOF
TPL='Q: {prompt}
A:'
"$MEGADLM" preprocess --input pairs.jsonl --output-prefix sft --tokenizer-type ByteLevel --sft \
    --json-keys 'prompt response' --prompt-template "$TPL" > pre.log 2>&1 ||
    { echo "FAILED: preprocess --sft"; cat pre.log; exit 1; }
# a template with special tokens and literal braces
"$MEGADLM" preprocess --input pairs.jsonl --output-prefix spec --tokenizer-type ByteLevel --sft \
    --json-keys prompt,response --prompt-template '{{{prompt}}}{eos}>' > spec.log 2>&1 ||
    { echo "FAILED: preprocess --sft with {eos}"; cat spec.log; exit 1; }
$PY - "$TPL" <<'PYEOF' || fail=1
import json, struct, sys
import numpy as np
def read(prefix):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    dtype = {1: np.uint8, 8: np.uint16}[idx[17]]
    S, D = struct.unpack("<QQ", idx[18:34])
    lens = np.frombuffer(idx, np.int32, S, 34)
    ptrs = np.frombuffer(idx, np.int64, S, 34 + 4 * S)
    docs = np.frombuffer(idx, np.int64, D, 34 + 12 * S)
    binf = np.fromfile(prefix + ".bin", dtype)
    isz = np.dtype(dtype).itemsize
    seqs = [binf[p // isz: p // isz + n].tolist() for p, n in zip(ptrs, lens)]
    assert docs.tolist() == list(range(S + 1)), "one sequence per document"
    return seqs, idx[17]
def check(prefix, wrap):
    toks, dt = read(prefix + "_sft_document")
    masks, mdt = read(prefix + "_sft_document_loss_mask")
    assert dt == 8 and mdt == 1, (dt, mdt)
    pairs = [json.loads(l) for l in open("pairs.jsonl")]
    assert len(toks) == len(pairs) == len(masks)
    for (t, m, o) in zip(toks, masks, pairs):
        p = wrap(o["prompt"])
        r = list(o["response"].encode()) + [256]
        assert t == p + r, (t, p + r)
        assert m == [0] * len(p) + [1] * len(r), m
    print(f"{prefix}: {len(toks)} pairs, tokens and loss masks as encoded by hand")
check("sft", lambda p: list(sys.argv[1].replace("{prompt}", p).encode()))
check("spec", lambda p: list(("{" + p + "}").encode()) + [256] + list(b">"))
PYEOF
# a Hugging Face directory's special tokens by name: GPT-2's (pad 50258, mask 50257, eod 50256),
# and GPT-NeoX's with add_bos_token: its BOS once, at the start of each document
cp -r "$SRC/data/tokenizers/gptneox_tokenizer" neox_bos
sed -i 's/"add_bos_token": false/"add_bos_token": true/' neox_bos/tokenizer_config.json
grep -q '"add_bos_token": true' neox_bos/tokenizer_config.json || { echo "FAILED: add_bos_token not set"; fail=1; }
for dir in "$SRC/data/tokenizers/gpt2_tokenizer" neox_bos; do
  name=$(basename "$dir")
  HF=(--tokenizer-type HuggingFaceTokenizer --tokenizer-model "$dir")
  "$MEGADLM" preprocess --input pairs.jsonl --output-prefix "hf_$name" "${HF[@]}" --sft \
      --json-keys 'prompt response' --prompt-template '{pad}User: {prompt}{mask}' > hf.log 2>&1 ||
      { echo "FAILED: preprocess --sft $name"; cat hf.log; fail=1; continue; }
  read -r _ _ _ eod _ bos _ pad _ mask < <("$MEGADLM" tokenize "${HF[@]}" --special-ids < /dev/null 2>/dev/null)
  # the pieces as `megadlm tokenize` encodes each line (the tokenizer is checked against
  # Hugging Face's elsewhere): the prompt line with its text around it, the response line
  $PY -c 'import json,sys; [print("User: " + json.loads(l)["prompt"]) for l in open("pairs.jsonl")]' |
      "$MEGADLM" tokenize "${HF[@]}" > p.ids 2>/dev/null
  $PY -c 'import json,sys; [print(json.loads(l)["response"]) for l in open("pairs.jsonl")]' |
      "$MEGADLM" tokenize "${HF[@]}" > r.ids 2>/dev/null
  $PY - "hf_$name" "$eod" "$bos" "$pad" "$mask" "$name" <<'PYEOF' || fail=1
import struct, sys
import numpy as np
prefix, eod, bos, pad, mask, name = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
idx = open(prefix + "_sft_document.idx", "rb").read()
S, D = struct.unpack("<QQ", idx[18:34])
lens = np.frombuffer(idx, np.int32, S, 34)
toks = np.fromfile(prefix + "_sft_document.bin", np.uint16 if idx[17] == 8 else np.int32).tolist()
masks = np.fromfile(prefix + "_sft_document_loss_mask.bin", np.uint8).tolist()
P = [list(map(int, l.split())) for l in open("p.ids")]
R = [list(map(int, l.split())) for l in open("r.ids")]
add_bos = name == "neox_bos"
off = 0
for i, n in enumerate(lens):
    t, m = toks[off:off + n], masks[off:off + n]
    off += n
    p, r = P[i], R[i]
    if add_bos:  # the tokenizer's BOS once, first; none before the text piece or the response
        assert p[0] == bos and r[0] == bos, (p[:2], r[:2])
        want_p = [bos, pad] + p[1:] + [mask]
        r = r[1:]
    else:
        want_p = [pad] + p + [mask]
    assert t == want_p + r + [eod], (i, t, want_p + r + [eod])
    assert m == [0] * len(want_p) + [1] * (len(r) + 1), (i, m)
print(f"{name}: the template's special tokens by name, {len(lens)} documents")
PYEOF
done
expect_error "--prompt-template: unknown placeholder '{user}'" "$MEGADLM" preprocess --input pairs.jsonl \
    --output-prefix x --tokenizer-type ByteLevel --sft --json-keys 'prompt response' \
    --prompt-template '{user}: {prompt}' || fail=1
expect_error "the ByteLevel tokenizer has no bos token" "$MEGADLM" preprocess --input pairs.jsonl \
    --output-prefix x --tokenizer-type ByteLevel --sft --json-keys 'prompt response' \
    --prompt-template '{bos}{prompt}' || fail=1
expect_error "--sft: expected --json-keys PROMPT_KEY RESPONSE_KEY" "$MEGADLM" preprocess \
    --input pairs.jsonl --output-prefix x --tokenizer-type ByteLevel --sft --json-keys prompt || fail=1
expect_error "--prompt-template needs --sft" "$MEGADLM" preprocess --input pairs.jsonl \
    --output-prefix x --tokenizer-type ByteLevel --prompt-template '{prompt}' || fail=1

# ---- the losses against PyTorch
model=(--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 24
       --max-position-embeddings 24 --tokenizer-type ByteLevel --hidden-dropout 0
       --attention-dropout 0 --lr 3e-3 --lr-decay-style constant --log-interval 1
       --eval-iters 0 --seed 11 --split "1,0,0")
cfg=(template="$TPL" layers=2 hidden=32 heads=4 seq=24 seed=11 mask=300)
DLM=(--model-running-mode difflm-noshift --mask-token 300)
"$MEGADLM" train "${model[@]}" --data-path sft_sft_document --sft --sft-padding pad \
    --micro-batch-size 3 --global-batch-size 6 --train-iters 3 --save ar --save-interval 1 \
    > ar.log 2>&1 || { echo "FAILED: AR SFT run"; tail -5 ar.log; exit 1; }
for K in 2 3; do
  $PY "$SRC/tests/python/sft_torch.py" ar pairs.jsonl ar ar.log $K "${cfg[@]}" mbs=3 gbs=6 \
      iters=3 padding=pad || fail=1
done
"$MEGADLM" train "${model[@]}" "${DLM[@]}" --data-path sft_sft_document --sft --sft-padding eos \
    --micro-batch-size 3 --global-batch-size 6 --train-iters 3 --save dlm --save-interval 1 \
    > dlm.log 2>&1 || { echo "FAILED: diffusion SFT run"; tail -5 dlm.log; exit 1; }
for K in 2 3; do
  $PY "$SRC/tests/python/sft_torch.py" difflm pairs.jsonl dlm dlm.log $K "${cfg[@]}" mbs=3 gbs=6 \
      iters=3 padding=eos || fail=1
done

# the validation loss is on response tokens too: --split 1,1,0 puts pairs 7..13 in the
# validation split, (3 / 2 + 1) x 1 x 6 = 12 samples; evaluated at iteration 2
"$MEGADLM" train "${model[@]/1,0,0/1,1,0}" --data-path sft_sft_document --sft --sft-padding pad \
    --micro-batch-size 3 --global-batch-size 6 --train-iters 3 --eval-iters 1 --eval-interval 2 \
    --save val --save-interval 1 > val.log 2>&1 || { echo "FAILED: validation run"; tail -5 val.log; exit 1; }
$PY "$SRC/tests/python/sft_torch.py" ar pairs.jsonl val val.log 2 "${cfg[@]}" mbs=3 gbs=6 iters=3 \
    padding=pad split=validation docs=7:14 nsamples=12 || { echo "FAILED: validation loss"; fail=1; }

# ---- --finetune --load from pretrained checkpoints of both families (pretrained on the
# responses as plain documents)
"$MEGADLM" preprocess --input pairs.jsonl --output-prefix plain --tokenizer-type ByteLevel \
    --json-keys response --append-eod > plain.log 2>&1 || { echo "FAILED: preprocess"; exit 1; }
for fam in ar dlm; do
  extra=(); mode="ar"; [ "$fam" = dlm ] && extra=("${DLM[@]}") && mode="difflm"
  "$MEGADLM" train "${model[@]}" "${extra[@]}" --data-path plain_response_document \
      --micro-batch-size 2 --global-batch-size 2 --train-iters 3 --save pre_$fam \
      --save-interval 3 > pre_$fam.log 2>&1 || { echo "FAILED: pretrain $fam"; tail -5 pre_$fam.log; exit 1; }
  "$MEGADLM" train "${model[@]}" "${extra[@]}" --data-path sft_sft_document --sft \
      --sft-padding pad --micro-batch-size 6 --global-batch-size 6 --train-iters 2 \
      --load pre_$fam --finetune > ft_$fam.log 2>&1 || { echo "FAILED: finetune $fam"; tail -5 ft_$fam.log; exit 1; }
  $PY "$SRC/tests/python/sft_torch.py" $mode pairs.jsonl none ft_$fam.log 1 "${cfg[@]}" mbs=6 gbs=6 \
      iters=2 padding=pad weights=pre_$fam/iter_0000003 || { echo "FAILED: --finetune --load ($fam)"; fail=1; }
done

# ---- packed SFT: resume bitwise; data and tensor parallelism equal one process
packed=("${model[@]}" --data-path sft_sft_document --sft --micro-batch-size 2 --global-batch-size 4)
for fam in ar dlm; do
  extra=(); [ $fam = dlm ] && extra=("${DLM[@]}")
  "$MEGADLM" train "${packed[@]}" "${extra[@]}" --train-iters 4 --save full_$fam --save-interval 2 \
      > full_$fam.log 2>&1 || { echo "FAILED: packed $fam"; tail -5 full_$fam.log; exit 1; }
  cp -r full_$fam part_$fam && rm -rf part_$fam/iter_0000004 && echo 2 > part_$fam/latest_checkpointed_iteration.txt
  "$MEGADLM" train "${packed[@]}" "${extra[@]}" --train-iters 4 --load part_$fam --save part_$fam \
      --save-interval 2 > resume_$fam.log 2>&1 || { echo "FAILED: resume $fam"; tail -5 resume_$fam.log; exit 1; }
  same_ckpt full_$fam part_$fam 4 || { echo "FAILED: packed $fam SFT resumed differs"; fail=1; }
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${packed[@]}" "${extra[@]}" --train-iters 4 > dp_$fam.log 2>&1 ||
      { echo "FAILED: DP $fam"; tail -5 dp_$fam.log; exit 1; }
  close_losses full_$fam.log dp_$fam.log 1e-5 4 || { echo "FAILED: DP 2 $fam"; fail=1; }
  "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${packed[@]}" "${extra[@]}" --train-iters 4 \
      --tensor-model-parallel-size 2 --sequence-parallel --make-vocab-size-divisible-by 64 \
      > tp_$fam.log 2>&1 ||
      { echo "FAILED: TP $fam"; tail -5 tp_$fam.log; exit 1; }
  close_losses full_$fam.log tp_$fam.log 1e-5 4 || { echo "FAILED: TP 2 $fam"; fail=1; }
  for lay in "--pipeline-model-parallel-size 2" "--context-parallel-size 2"; do
    # shellcheck disable=SC2086
    "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${packed[@]}" "${extra[@]}" --train-iters 4 $lay \
        > lay_$fam.log 2>&1 || { echo "FAILED: $lay $fam"; tail -5 lay_$fam.log; exit 1; }
    close_losses full_$fam.log lay_$fam.log 1e-5 4 || { echo "FAILED: $lay $fam"; fail=1; }
  done
done

# ---- refusals
expect_error "plain_response_document_loss_mask.idx: cannot open" "$MEGADLM" train "${model[@]}" \
    --data-path plain_response_document --sft --micro-batch-size 2 --train-iters 1 || fail=1
expect_error "--sft-padding eos needs --sft" "$MEGADLM" train "${model[@]}" \
    --data-path sft_sft_document --sft-padding eos --micro-batch-size 2 --train-iters 1 || fail=1
expect_error "--eod-mask-loss with --sft" "$MEGADLM" train "${model[@]}" \
    --data-path sft_sft_document --sft --eod-mask-loss --micro-batch-size 2 --train-iters 1 || fail=1
[ $fail = 0 ] && echo "PASS: supervised fine-tuning"
exit $fail
