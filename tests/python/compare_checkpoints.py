#!/usr/bin/python3
"""Compare two megadlm checkpoint files tensor by tensor (safetensors, F32).

usage: compare_checkpoints.py A.safetensors B.safetensors RTOL [HEADS GROUPS KV STEP_BOUND]
For every tensor: max|a - b| <= RTOL * max|b| (the whole-tensor scale, so elements near zero do
not dominate). Both files must hold the same names and shapes. Exit 1 on any mismatch.

With HEADS GROUPS KV STEP_BOUND, the key rows of every linear_qkv.bias (Megatron's grouped
layout: per group HEADS/GROUPS query heads, 1 key head, 1 value head, KV rows each) are held to
|a - b| <= STEP_BOUND instead: a key bias adds the same constant to every score of a query, so
softmax makes its gradient exactly zero and only float noise remains, which Adam normalises into
steps of up to lr in either direction whatever the layout. STEP_BOUND = 2 x the sum of the lrs."""
import json
import struct
import sys

import numpy as np


def read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(buf[b:e], dtype="<f4").reshape(info["shape"])
    return out


def key_rows(heads, groups, kv):
    per = heads // groups
    rows = []
    for g in range(groups):
        start = (g * (per + 2) + per) * kv
        rows.extend(range(start, start + kv))
    return np.array(rows)


def main():
    a, b, rtol = read(sys.argv[1]), read(sys.argv[2]), float(sys.argv[3])
    layout = [int(x) for x in sys.argv[4:7]] if len(sys.argv) > 7 else None
    step_bound = float(sys.argv[7]) if layout else 0.0
    if sorted(a) != sorted(b):
        print("tensor names differ:", sorted(set(a) ^ set(b)))
        return 1
    worst, bad = (0.0, ""), 0
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.shape != y.shape:
            print(f"{name}: shape {x.shape} vs {y.shape}")
            bad += 1
            continue
        if layout and name.endswith("linear_qkv.bias"):
            k = key_rows(*layout)
            if np.abs(x[k] - y[k]).max() > step_bound:
                print(f"{name}: key rows differ by {np.abs(x[k] - y[k]).max():.3g} > {step_bound}")
                bad += 1
            x, y = np.delete(x, k), np.delete(y, k)
        scale = max(np.abs(y).max(), 1e-30)
        err = np.abs(x - y).max() / scale
        worst = max(worst, (err, name))
        if err > rtol:
            print(f"{name}: max|a-b|/max|b| = {err:.3g} > {rtol}")
            bad += 1
    print(f"{len(a)} tensors, worst {worst[0]:.3g} ({worst[1]})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
