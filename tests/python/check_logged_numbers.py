#!/usr/bin/python3
"""Checks numbers of megadlm's log and progress.txt against values computed here, not by
megadlm:
  params-norm LOG CKPT_ITER_DIR   the last log line's "params norm" against the L2 norm of every
                                  tensor of the checkpoint's model.safetensors (read by hand,
                                  NumPy), saved at that iteration
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


def params_norm(log, ckpt):
    want = [float(m) for m in re.findall(r"params norm: ([0-9.]+)", open(log).read())][-1]
    blob = open(f"{ckpt}/model.safetensors", "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    total = 0.0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        x = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<f4").astype(np.float64)
        total += float(np.dot(x, x))
    got = total ** 0.5
    print(f"params norm: log {want}, checkpoint {got:.6f}")
    return abs(got - want) <= 5e-4 + 1e-6 * got


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
    elif cmd == "throughput":
        good = throughput(rest[0], float(rest[1]), int(rest[2]))
    else:
        good = progress(rest[0], float(rest[1]), int(rest[2]), int(rest[3]), int(rest[4]))
    sys.exit(0 if good else 1)
