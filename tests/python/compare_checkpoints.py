#!/usr/bin/python3
"""Compare two megadlm checkpoint files tensor by tensor (safetensors, F32; BF16 widened).

usage: compare_checkpoints.py A.safetensors B.safetensors RTOL [HEADS GROUPS KV STEP_BOUND [NOISY]]
For every tensor: max|a - b| <= RTOL * max|b| (the whole-tensor scale, so elements near zero do
not dominate). Both files must hold the same names and shapes. Exit 1 on any mismatch.

With HEADS GROUPS KV STEP_BOUND, the key rows of every linear_qkv.bias (Megatron's grouped
layout: per group HEADS/GROUPS query heads, 1 key head, 1 value head, KV rows each) are held to
|a - b| <= STEP_BOUND instead: a key bias adds the same constant to every score of a query, so
softmax makes its gradient exactly zero and only float noise remains, which Adam normalises into
steps of up to lr in either direction whatever the layout. STEP_BOUND = 2 x the sum of the lrs.

With NOISY (a fraction), at most max(1, NOISY x elements) elements of a tensor may exceed
RTOL x max|b|, each still within STEP_BOUND. The numerics: layouts sum gradients in different
orders, a float32 difference of about N u relative (u = 2^-24, N the terms of a sum) in an
element's gradient; Adam turns it into a difference of about lr N u in the step, far below
RTOL x scale. An element whose gradient cancels to the rounding level (a key bias exactly,
others by chance) takes steps driven by rounding noise instead, bounded only by Adam's step
(lr each, STEP_BOUND between two runs); how many such elements there are, and how far they
land, depends on the compiler's code (FMA contraction, vectorization: release and debug builds
differ). A slicing or ordering bug moves whole rows by about max|b|, so it is still caught
when NOISY is below one row's share of the tensor."""
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
        assert info["dtype"] in ("F32", "BF16", "F16"), (path, name, info["dtype"])
        b, e = info["data_offsets"]
        if info["dtype"] == "BF16":  # a --bf16 checkpoint's parameters: widened exactly
            x = (np.frombuffer(buf[b:e], dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif info["dtype"] == "F16":  # an --fp16 checkpoint's: widened exactly
            x = np.frombuffer(buf[b:e], dtype="<f2").astype(np.float32)
        else:
            x = np.frombuffer(buf[b:e], dtype="<f4")
        out[name] = x.reshape(info["shape"])
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
    noisy = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
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
        d = np.abs(x - y).ravel()
        if noisy > 0:  # the few rounding-noise elements, within Adam's step bound
            allowed = max(1, int(noisy * d.size))
            over = d > rtol * scale
            if over.sum() > allowed or d.max() > step_bound:
                print(f"{name}: {over.sum()} elements beyond {rtol} x max|b| (at most {allowed}), "
                      f"largest difference {d.max():.3g} (at most {step_bound})")
                bad += 1
            d = np.sort(d)[:-allowed] if d.size > allowed else d[:0]
            if d.size == 0:
                continue
        err = d.max() / scale
        worst = max(worst, (err, name))
        if err > rtol:
            print(f"{name}: max|a-b|/max|b| = {err:.3g} > {rtol}")
            bad += 1
    what = "worst (beyond the noisy elements)" if noisy > 0 else "worst"
    print(f"{len(a)} tensors, {what} {worst[0]:.3g} ({worst[1]})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
