#!/usr/bin/python3
"""Checks numbers of megadlm's log and progress.txt against values computed here, not by
megadlm:
  params-norm LOG CKPT_ITER_DIR   the last log line's "params norm" against the L2 norm of every
                                  tensor of the checkpoint's model.safetensors (read by hand,
                                  NumPy; F32 or BF16), saved at that iteration
  num-zeros LOG CKPT_DIR          iteration 1's "num zeros" against the zeros of the first
                                  step's Adam exp_avg in iter_0000001/optimizer.safetensors:
                                  (1 - beta1) x the clipped gradient, zero where it is
  throughput LOG FLOPS WORLD      each "throughput per GPU (TFLOP/s/GPU)" against Megatron's
                                  formula FLOPS / (time per iteration x 1e12 x world), the time
                                  taken from the line's rounded milliseconds
  progress FILE FLOPS SEQ GBS WORLD  progress.txt in Megatron's format (tab-separated, "Job ID",
                                  "# GPUs"), with "Floating-point operations" = iteration x FLOPS
                                  and "Tokens (in billions)" = iteration x GBS x SEQ / 1e9
FLOPS: Megatron's num_floating_point_operations of one iteration, computed by the caller."""
import json
import re
import struct
import sys

import numpy as np


def tensors(path):
    """name -> float64 array of every tensor of a safetensors file (F32 or BF16)."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = blob[8 + n + a:8 + n + b]
        if t["dtype"] == "F32":
            x = np.frombuffer(raw, dtype="<f4")
        elif t["dtype"] == "BF16":  # the high half of a float32
            x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{path}: {name} is {t['dtype']}")
        out[name] = x.astype(np.float64)
    return out


def params_norm(log, ckpt):
    want = [float(m) for m in re.findall(r"params norm: ([0-9.]+)", open(log).read())][-1]
    total = sum(float(np.dot(x, x)) for x in tensors(f"{ckpt}/model.safetensors").values())
    got = total ** 0.5
    print(f"params norm: log {want}, checkpoint {got:.6f}")
    return abs(got - want) <= 5e-4 + 1e-6 * got


def num_zeros(log, ckpt):
    m = re.search(r"^ \[[^]]*\] iteration +1/.*? num zeros: ([0-9.]+) \|", open(log).read(), re.M)
    if not m:
        print("FAILED: no num zeros at iteration 1")
        return False
    want = float(m[1])
    moments = {k: v for k, v in tensors(f"{ckpt}/iter_0000001/optimizer.safetensors").items()
               if k.startswith("optimizer.exp_avg.")}
    got = sum(int(np.count_nonzero(v == 0.0)) for v in moments.values())
    print(f"num zeros: log {want}, first moments {got} (of {sum(v.size for v in moments.values())})")
    return want == got and len(moments) > 0


def throughput(log, flops, world):
    ok, k = True, 0
    for line in open(log):
        m = re.search(r"elapsed time per iteration \(ms\): ([0-9.]+) \| throughput per GPU "
                      r"\(TFLOP/s/GPU\): ([0-9.]+) \|", line)
        if not m:
            continue
        ms, tf = float(m[1]), float(m[2])
        lo = flops / ((ms + 0.05) * 1e-3 * 1e12 * world) - 5e-4  # ms printed with 1 decimal
        hi = flops / (max(ms - 0.05, 1e-9) * 1e-3 * 1e12 * world) + 5e-4
        k += 1
        if not lo <= tf <= hi:
            print(f"FAILED: {ms} ms gives [{lo:.4f}, {hi:.4f}] TFLOP/s, the log says {tf}")
            ok = False
    print(f"throughput: {k} lines within Megatron's formula")
    return ok and k > 0


def progress(path, flops, seq, gbs, world):
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    head = rf"{stamp}\tJob ID: [^\t]*\t# GPUs: {world}\t"
    lines = open(path).read().splitlines()
    ok, saved = True, 0
    for line in lines:
        if re.fullmatch(head + "Starting job", line):
            continue
        m = re.fullmatch(head + r"Saved checkpoint\tIteration: (\d+)\tJob throughput: "
                         r"[0-9.]+ TFLOP/s/GPU\tCumulative throughput: [0-9.]+ TFLOP/s/GPU\t"
                         r"Floating-point operations: ([0-9.e+]+)\tTokens \(in billions\): "
                         r"([0-9.]+)", line)
        if not m:
            print(f"FAILED: not Megatron's progress line: {line!r}")
            ok = False
            continue
        it, fl, tok = int(m[1]), m[2], m[3]
        saved += 1
        if fl != f"{it * flops:.2e}" or tok != f"{it * gbs * seq / 1e9:.2f}":
            print(f"FAILED: iteration {it}: {fl} / {tok}, expected {it * flops:.2e} / "
                  f"{it * gbs * seq / 1e9:.2f}")
            ok = False
    print(f"progress.txt: {len(lines)} lines, {saved} checkpoints")
    return ok and saved > 0


if __name__ == "__main__":
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "params-norm":
        good = params_norm(*rest)
    elif cmd == "num-zeros":
        good = num_zeros(*rest)
    elif cmd == "throughput":
        good = throughput(rest[0], float(rest[1]), int(rest[2]))
    else:
        good = progress(rest[0], float(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]))
    sys.exit(0 if good else 1)
