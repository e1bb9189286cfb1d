#!/usr/bin/python3
"""Compare the gradients of the first optimizer step of two megadlm runs, read from their
optimizer.safetensors after iteration 1: Adam's exp_avg is then (1 - beta1) x the gradient, the
same factor in both runs.

usage: first_step_grads.py A/optimizer.safetensors B/optimizer.safetensors MEDIAN WORST
For every matrix (the linears' and embeddings' weights, 2-D): d = |a - b|_2 / |b|_2. Passes
when the median of d over the matrices is <= MEDIAN and the largest <= WORST; prints both and
the worst tensors. Used by test_bf16_parallel to tell a layout whose GEMMs all take the bf16
path (differences only where a differently ordered fp32 sum rounds to another bf16 value: most
matrices equal or nearly) from one where a GEMM runs in fp32 instead (every element of its
gradient moves by the bf16 rounding of its operands)."""
import json
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    out = {}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        if v["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {v['dtype']}, expected F32")
        s, e = v["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + s : 8 + n + e], dtype=np.float32).reshape(v["shape"])
    return out


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    med_tol, worst_tol = float(sys.argv[3]), float(sys.argv[4])
    prefix = "optimizer.exp_avg."
    d = []
    for name, ref in b.items():
        if not name.startswith(prefix) or ref.ndim != 2:
            continue
        if name not in a or a[name].shape != ref.shape:
            sys.exit(f"{name}: missing or of another shape in {sys.argv[1]}")
        den = np.linalg.norm(ref.astype(np.float64))
        num = np.linalg.norm((a[name] - ref).astype(np.float64))
        d.append((num / den if den > 0 else num, name[len(prefix) :]))
    if not d:
        sys.exit(f"{sys.argv[2]}: no exp_avg matrices")
    d.sort()
    med, worst = d[len(d) // 2][0], d[-1][0]
    print(f"{len(d)} matrices: median {med:.3g}, worst {worst:.3g} ({d[-1][1]})")
    sys.exit(0 if med <= med_tol and worst <= worst_tol else 1)


if __name__ == "__main__":
    main()
