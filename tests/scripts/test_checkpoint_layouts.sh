#!/usr/bin/env bash
# Checkpoints written and read in slices (training/dist_checkpointing.c):
#  1. The files do not depend on the layout: with --lr 0 the parameters stay at their init, so
#     model.safetensors saved by TP 2 x PP 2, by TP 2 x DP 2 with the distributed optimizer
#     (small buckets: its pieces cut tensors) and by interleaved PP 2 x DP 2 with it is byte for
#     byte the single process's (header, crc32s, data); the moments agree within rel 1e-4.
#  2. No rank holds more than its slices: --log-memory's "checkpoint save/load" lines of
#     TP 2 x PP 2 show every rank writing at most its own slices (the ranks' writes adding up to
#     exactly the files' tensor bytes), reading exactly its slices, and allocating at most
#     64 KiB (and under 1/8 of the files) of checkpoint buffers: the tensor list, not tensors.
#  3. The distributed optimizer's state crosses layouts: DP 2 with it saves at iteration 3 and
#     TP 2 (DP 1, plain AdamW) finishes; TP 2 x DP 2 with it saves and interleaved PP 2 x DP 2
#     with it (other buckets) finishes: every loss within rel 1e-5 of the single process's, the
#     final parameters and moments within rel 3e-4.
#  4. A flipped byte in a tensor split across TP is caught by the crc32 check every rank takes
#     part in (each rank hashes only what it owns): every rank refuses to load.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fresh_work || exit 1
export OMP_NUM_THREADS=1
common=(--num-layers 4 "${GPT_TINY[@]}" --micro-batch-size 2 --global-batch-size 8
        --log-interval 1 --eval-iters 0 --seed 17 --make-vocab-size-divisible-by 32)
fail=0
run() { # run NAME NP flags...
  local name=$1 np=$2; shift 2
  if [ "$np" = 1 ]; then "$MEGADLM" train "${common[@]}" --save "$name" "$@" > "$name.log" 2>&1
  else "${MPIRUN[@]}" -np "$np" "$MEGADLM" train "${common[@]}" --save "$name" "$@" > "$name.log" 2>&1; fi ||
    { echo "FAILED: $name did not run"; tail -5 "$name.log"; return 1; }
}
cmpck() { # cmpck FILE A B RTOL: tensors of A and B within RTOL (compare_checkpoints.py)
  /usr/bin/python3 "$SRC/tests/python/compare_checkpoints.py" "$2/$1" "$3/$1" "$4" 4 4 8 1.2e-2 \
      | sed "s|^|  $2 $(basename "$1" .safetensors): |"
}

# 1. byte-identical files from every layout
zero=(--train-iters 1 --lr 0 --min-lr 0)
BUCKETS=(--use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 1000)
run z-ref 1 "${zero[@]}" || exit 1
run z-tp2pp2 4 "${zero[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --log-memory || exit 1
run z-tp2dp2 4 "${zero[@]}" --tensor-model-parallel-size 2 "${BUCKETS[@]}" || exit 1
run z-pp2dp2vp 4 "${zero[@]}" --pipeline-model-parallel-size 2 \
    --num-layers-per-virtual-pipeline-stage 1 "${BUCKETS[@]}" || exit 1
for d in z-tp2pp2 z-tp2dp2 z-pp2dp2vp; do
  if cmp -s z-ref/iter_0000001/model.safetensors "$d"/iter_0000001/model.safetensors; then
    echo "  $d: model.safetensors identical to the single process's"
  else echo "FAILED: $d: model.safetensors differs from the single process's"; fail=1; fi
  cmpck iter_0000001/optimizer.safetensors $d z-ref 1e-4 || fail=1
done

# 2. every rank writes and reads its slices only
run z-load 4 "${zero[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --load z-tp2pp2 --log-memory || fail=1
header_bytes() { /usr/bin/python3 -c 'import struct,sys; print(8 + struct.unpack("<Q", open(sys.argv[1], "rb").read(8))[0])' "$1"; }
files=0; headers=0
for f in model optimizer; do
  p=z-tp2pp2/iter_0000001/$f.safetensors
  files=$((files + $(stat -c %s $p))); headers=$((headers + $(header_bytes $p)))
done
check_io() { # check_io LOG save|load
  local log=$1 what=$2 lines sum=0 n=0 line moved slices buffers tfiles
  lines=$(grep "checkpoint $what |" "$log") || { echo "FAILED: $log: no checkpoint $what lines"; return 1; }
  while read -r line; do
    tfiles=$(sed 's/.*tensor files \([0-9]*\) bytes.*/\1/' <<<"$line")
    moved=$(sed 's/.* by this rank \([0-9]*\) bytes.*/\1/' <<<"$line")
    slices=$(sed "s/.*this rank's slices \([0-9]*\) bytes.*/\1/" <<<"$line")
    buffers=$(sed 's/.*checkpoint buffers (peak) \([0-9]*\) bytes.*/\1/' <<<"$line")
    [ "$tfiles" = "$files" ] || { echo "FAILED: $log: tensor files $tfiles, on disk $files"; return 1; }
    if [ "$what" = save ] && [ "$moved" -gt "$slices" ]; then
      echo "FAILED: $log: a rank wrote $moved bytes, more than its slices ($slices)"; return 1; fi
    if [ "$what" = load ] && [ "$moved" -ne "$slices" ]; then
      echo "FAILED: $log: a rank read $moved bytes, its slices are $slices"; return 1; fi
    if [ "$buffers" -gt 65536 ]; then
      echo "FAILED: $log: a rank allocated $buffers bytes of checkpoint buffers"; return 1; fi
    if [ $((buffers * 8)) -gt "$files" ]; then
      echo "FAILED: $log: a rank allocated $buffers bytes of checkpoint buffers, files $files"; return 1; fi
    sum=$((sum + moved)); n=$((n + 1))
    echo "  $what, $(sed 's/^\[\(Rank [0-9]*\)\].*/\1/' <<<"$line"): $moved bytes of its slices' $slices, buffers $buffers bytes"
  done <<<"$lines"
  [ $n = 4 ] || { echo "FAILED: $log: $n checkpoint $what lines, expected 4"; return 1; }
  if [ "$what" = save ] && [ $sum -ne $((files - headers)) ]; then
    echo "FAILED: the ranks wrote $sum bytes, the files hold $((files - headers)) bytes of tensors"; return 1
  fi
  echo "  $what: $sum bytes moved in all, files $files bytes ($headers of headers)"
}
check_io z-tp2pp2.log save || fail=1
check_io z-load.log load || fail=1

# 3. the distributed optimizer's state across layouts (training on, dropout on)
train=(--train-iters 6 --lr 1e-3 --lr-decay-style cosine "${DROPOUT[@]}")
close() { close_losses "$1" "$2" 1e-5 6; } # close REF.log OTHER.log: the 6 losses within rel 1e-5
run ref 1 "${train[@]}" || exit 1
resume() { # resume NAME NP_A "FLAGS_A" NP_B "FLAGS_B"
  local name=$1
  # shellcheck disable=SC2086
  run "$name" "$2" "${train[@]}" $3 --exit-interval 3 && mv "$name.log" "$name-a.log" &&
  # shellcheck disable=SC2086
  run "$name" "$4" "${train[@]}" $5 --load "$name" && mv "$name.log" "$name-b.log" &&
  grep -q "successfully loaded checkpoint" "$name-b.log" &&
  cat "$name-a.log" "$name-b.log" > "$name.log" && close ref.log "$name.log" &&
  cmpck iter_0000006/model.safetensors "$name" ref 3e-4 &&
  cmpck iter_0000006/optimizer.safetensors "$name" ref 3e-4 ||
  { echo "FAILED: $name"; return 1; }
}
resume dp2dist-to-tp2 2 "${BUCKETS[*]}" 2 "--tensor-model-parallel-size 2" || fail=1
resume tp2dp2dist-to-pp2dp2vp 4 "--tensor-model-parallel-size 2 ${BUCKETS[*]}" \
    4 "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --use-distributed-optimizer --overlap-grad-reduce --ddp-bucket-size 700" || fail=1

# 4. a flipped byte inside a TP-split tensor: every rank refuses
cp -r dp2dist-to-tp2 corrupt
/usr/bin/python3 - corrupt/iter_0000006/model.safetensors <<'EOF'
import json, struct, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    h = json.loads(f.read(n))
    b, e = h["decoder.layers.1.self_attention.linear_proj.weight"]["data_offsets"]
    at = 8 + n + b + (e - b) * 3 // 4 + 1
    f.seek(at); x = f.read(1); f.seek(at); f.write(bytes([x[0] ^ 0x10]))
EOF
if timeout 120 "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${train[@]}" \
    --train-iters 7 --tensor-model-parallel-size 2 --load corrupt --distributed-timeout-minutes 1 \
    > corrupt.log 2>&1; then
  echo "FAILED: a corrupted checkpoint loaded"; fail=1
elif [ "$(grep -c "linear_proj.weight: crc32 mismatch" corrupt.log)" -ne 2 ]; then
  echo "FAILED: expected both ranks to report the crc32 mismatch:"; tail -4 corrupt.log; fail=1
else
  echo "  corrupt: both ranks refuse ($(grep -m1 -o 'tensor [^ ]*: crc32 mismatch' corrupt.log))"
fi
# a save that fails on rank 0 (DIR is a file) fails on every rank, with rank 0's message
touch blocked
if timeout 120 "${MPIRUN[@]}" -np 2 "$MEGADLM" train "${common[@]}" "${zero[@]}" \
    --tensor-model-parallel-size 2 --save blocked --distributed-timeout-minutes 1 > blocked.log 2>&1; then
  echo "FAILED: saving into a file succeeded"; fail=1
elif [ "$(grep -cE "error: saving the checkpoint of iteration [0-9]+ to blocked: blocked: exists and is not a directory" blocked.log)" -ne 2 ]; then
  echo "FAILED: expected both ranks to report the failed save:"; tail -4 blocked.log; fail=1
else
  echo "  blocked: both ranks report the failed save"
fi
[ $fail = 0 ] && echo "checkpoints in slices: all layouts agree"
exit $fail
