#!/usr/bin/python3
"""bf16 / fp16 conversions of megadlm (core/kernels/bf16.h) against PyTorch's bit patterns.

Usage: check_bf16.py WORKDIR TOOL [TOOL ...]
Each TOOL is a build of tests/tools/bf16_convert.c (the same conversions compiled for other
instruction sets); every one must give the same bits, and those bits must be PyTorch's:

  fp32 -> bf16, fp32 -> fp16   torch.from_numpy(x).to(torch.bfloat16 / torch.float16) on
                               tricky values (ties to even, subnormals of either format,
                               the overflow thresholds, infinities, zeros, NaNs), on every
                               upper half of an fp32 bit pattern with the lower halves that
                               decide the rounding, and on random bit patterns;
  bf16 -> fp32, fp16 -> fp32   all 65536 bit patterns.

NaNs: PyTorch returns one canonical NaN (which one depends on its code path), megadlm keeps the
sign and the top payload bits and sets the quiet bit (bf16.h), so for a NaN input the check is
that torch's result is a NaN and megadlm's is exactly that NaN. Expected values come from torch
and from the rule as written here, never from megadlm's code.
"""
import os
import subprocess
import sys

import numpy as np
import torch


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def hexs(a):
    return "[" + ", ".join("%#x" % int(v) for v in a[:8]) + (", ..." if len(a) > 8 else "") + "]"


def narrowing_inputs():
    """fp32 bit patterns (uint32)."""
    f = lambda v: np.array(v, dtype=np.float32).view(np.uint32)
    tricky = [
        0x00000000, 0x80000000, 0x3f800000, 0xbf800000,   # zeros, +-1
        0x00000001, 0x80000001, 0x007fffff, 0x00800000,   # fp32 subnormals, FLT_MIN
        0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,   # FLT_MAX, infinities
        0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001,   # quiet and signaling NaNs
        0x7fa00000, 0xffc12345, 0x7fbfffff, 0x7f812345,   # NaN payloads
        # bf16: ties (lower half 0x8000) to the even neighbour, either way; just off ties
        0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000, 0xbf818000,
        # bf16 overflow: 0x7f7f7fff stays finite, 0x7f7f8000 is a tie that goes to inf
        0x7f7f7fff, 0x7f7f8000, 0xff7f8000,
        # fp32 subnormals rounding in bf16 (no flush to zero)
        0x00008000, 0x00018000, 0x00008001, 0x0000ffff, 0x007f8000, 0x007fc000,
        # fp16: 1 + half an ulp (tie, to even 1.0), 1 + 3 half ulps (tie, up)
        0x3f801000, 0x3f803000, 0x3f801001, 0x3f800fff,
    ]
    tricky += list(f([65504.0, 65519.0, 65520.0, 65536.0, -65520.0, 65519.996,
                      2.0 ** -14, np.nextafter(np.float32(2.0 ** -14), np.float32(0)),
                      2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -24, 2.5 * 2.0 ** -24,
                      np.nextafter(np.float32(2.0 ** -25), np.float32(1)), 2.0 ** -26,
                      1023 * 2.0 ** -24, 1023.5 * 2.0 ** -24, 1022.5 * 2.0 ** -24,
                      -1.5 * 2.0 ** -24, 0.1, 1 / 3.0, 3.14159265]))
    # every upper half with the lower halves that decide bf16 and fp16 rounding
    uppers = np.arange(65536, dtype=np.uint32) << np.uint32(16)
    lows = [0x0000, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1000, 0x3000, 0x0fff, 0x2000, 0x4000,
            0xc000, 0x6000]
    systematic = np.concatenate([uppers | np.uint32(lo) for lo in lows])
    rng = np.random.default_rng(20240611)
    random_bits = rng.integers(0, 2 ** 32, size=1_000_000, dtype=np.uint64).astype(np.uint32)
    # values in fp16's range, where most fp16 rounding happens
    random_vals = (rng.standard_normal(300_000) * np.exp(rng.uniform(-20, 11, 300_000)))
    random_vals = random_vals.astype(np.float32).view(np.uint32)
    return np.concatenate([np.array(tricky, dtype=np.uint32), systematic, random_bits,
                           random_vals])


def run_tool(tool, mode, src, workdir):
    inp = os.path.join(workdir, mode + ".in")
    out = os.path.join(workdir, mode + "." + os.path.basename(tool) + ".out")
    src.astype("<" + src.dtype.str[1:]).tofile(inp)
    r = subprocess.run([tool, mode, inp, out], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{tool} {mode}: exit {r.returncode}: {r.stderr.strip()}")
    return np.fromfile(out, dtype=np.uint16 if mode.startswith("f32-") else np.uint32)


def torch_narrow(bits, dtype):
    t = torch.from_numpy(bits.view(np.float32).copy()).to(dtype)
    return t.view(torch.int16).numpy().view(np.uint16)


def torch_widen(bits16, dtype):
    t = torch.from_numpy(bits16.view(np.int16).copy()).view(dtype).to(torch.float32)
    return t.numpy().view(np.uint32)


def compare(name, x, got, want, nan_in, nan_out_rule, is_nan_out):
    """got/want: result bits; nan_in: mask of NaN inputs; nan_out_rule: the NaN megadlm must
    give for those; is_nan_out: NaN test on result bits."""
    if got.shape != want.shape:
        fail(f"{name}: {got.shape[0]} results, expected {want.shape[0]}")
    if not np.all(is_nan_out(want[nan_in])):
        fail(f"{name}: torch gave a non-NaN for a NaN input (the check itself is broken)")
    ok = np.where(nan_in, got == nan_out_rule, got == want)
    if not ok.all():
        bad = np.nonzero(~ok)[0]
        fail(f"{name}: {bad.size} of {x.size} differ; inputs {hexs(x[bad])} gave "
             f"{hexs(got[bad])}, expected {hexs(np.where(nan_in, nan_out_rule, want)[bad])}")
    print(f"ok {name}: {x.size} values ({int(nan_in.sum())} NaNs by the quiet-NaN rule)")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    workdir, tools = argv[1], argv[2:]
    os.makedirs(workdir, exist_ok=True)
    x32 = narrowing_inputs()
    x16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    a32 = x32 & np.uint32(0x7fffffff)
    nan32 = a32 > np.uint32(0x7f800000)
    bf_nan = ((x32 >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    h_nan = (((x32 >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7e00)
             | ((a32 >> np.uint32(13)) & np.uint32(0x3ff))).astype(np.uint16)
    bf16_isnan = lambda b: (b & 0x7fff) > 0x7f80
    fp16_isnan = lambda b: (b & 0x7fff) > 0x7c00
    f32_isnan = lambda b: (b & np.uint32(0x7fffffff)) > np.uint32(0x7f800000)
    w16 = x16.astype(np.uint32)
    bf_wide = w16 << np.uint32(16)  # exact: the NaN rule for widening is "the same bits"
    h_wide = (((w16 & 0x8000) << 16) | np.uint32(0x7f800000) | ((w16 & 0x3ff) << 13))
    want = {
        "f32-bf16": (x32, torch_narrow(x32, torch.bfloat16), nan32, bf_nan, bf16_isnan),
        "f32-fp16": (x32, torch_narrow(x32, torch.float16), nan32, h_nan, fp16_isnan),
        "bf16-f32": (x16, torch_widen(x16, torch.bfloat16), bf16_isnan(x16), bf_wide, f32_isnan),
        "fp16-f32": (x16, torch_widen(x16, torch.float16), fp16_isnan(x16), h_wide, f32_isnan),
    }
    first = {}
    for tool in tools:
        print(f"== {os.path.basename(tool)}")
        for mode, (x, w, nan_in, rule, isnan) in want.items():
            got = run_tool(tool, mode, x, workdir)
            compare(f"{os.path.basename(tool)} {mode}", x, got, w, nan_in, rule, isnan)
            if mode in first and not np.array_equal(first[mode], got):
                fail(f"{mode}: {tool} differs from {tools[0]}")
            first.setdefault(mode, got)
    print(f"PASS: {len(tools)} builds give PyTorch's bits")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
