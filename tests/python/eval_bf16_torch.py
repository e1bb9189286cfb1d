#!/usr/bin/env python3
"""megadlm eval's autoregressive log-likelihood, in fp32 and with --bf16, against PyTorch on the
checkpoint's weights (tests/python/torch_gpt.py's "gpt" family configuration):

  fp32    each request's log-likelihood equals torch_gpt's fp32 forward to 1e-5 relative;
  --bf16  each equals the emulation of megadlm's bf16 rounding points (tests/python/
          torch_bf16.py: linears on bf16 inputs and weights with fp32 sums, the residual stream
          and the attention's scores and probabilities rounded, every parameter its bf16 value)
          to 2e-6 relative, and lies more than 3 such bounds from the fp32 reference
          (the flag changes the arithmetic: an ignored --bf16 would fail here).

Usage:  eval_bf16_torch.py CKPT_DIR TOKENS_FILE FP32_SAMPLES BF16_SAMPLES
  TOKENS_FILE: one request a line, "context ids | continuation ids";
  *_SAMPLES: `megadlm eval --json --log-samples` output (the summary line, then one line a
  request).
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bf16 as tb  # noqa: E402
import torch_gpt as tg  # noqa: E402

FP32_RTOL = 1e-5
BF16_RTOL = 2e-6


def loglikelihood(loss, c, P, ctx, cont):
    """The sum of log p(continuation token | everything before it) in one row, from loss (a
    gpt_loss: the mean cross-entropy over the masked labels)."""
    ids = ctx + cont
    tokens = torch.tensor([ids[:-1]])
    labels = torch.tensor([ids[1:]])
    mask = torch.zeros(labels.shape)
    mask[0, -len(cont):] = 1.0
    return -loss(c, P, tokens, labels, mask).item() * len(cont)


def emulated(c, weights, ctx, cont):
    """loglikelihood under torch_bf16's rounding points (its own patching of torch_gpt)."""
    real = tg.linear, tg.F.linear, tg.self_attention, tg.mlp
    tg.linear = lambda x, P, prefix: tb.bf16_linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))
    tg.F.linear = tb.bf16_linear
    tg.self_attention, tg.mlp = tb.self_attention, tb.mlp
    try:
        P = {n: tb.r16(w) for n, w in weights.items()}
        return loglikelihood(tb.gpt_loss, c, P, ctx, cont)
    finally:
        tg.linear, tg.F.linear, tg.self_attention, tg.mlp = real


def samples(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "request" in r:
            out[r["request"]] = r["loglikelihood"]
    return out


def main(argv):
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    ckpt, tokens_file, fp32_file, bf16_file = argv[1:]
    with open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")) as f:
        it = int(f.read().strip())
    weights = tg.read_safetensors(os.path.join(ckpt, f"iter_{it:07d}", "model.safetensors"))
    weights = {n: w.float() for n, w in weights.items()}
    c = tg.FAMILIES["gpt"]
    ours32, ours16 = samples(fp32_file), samples(bf16_file)
    reqs = []
    for line in open(tokens_file):
        ctx, cont = line.split("|")
        reqs.append(([int(t) for t in ctx.split()], [int(t) for t in cont.split()]))
    if len(ours32) != len(reqs) or len(ours16) != len(reqs):
        raise tg.Mismatch(f"{len(reqs)} requests, eval scored {len(ours32)} and {len(ours16)}")
    torch.set_num_threads(1)
    with torch.no_grad():
        for i, (ctx, cont) in enumerate(reqs):
            ref32 = loglikelihood(tg.gpt_loss, c, weights, ctx, cont)
            ref16 = emulated(c, weights, ctx, cont)
            r32 = abs(ours32[i] - ref32) / abs(ref32)
            r16 = abs(ours16[i] - ref16) / abs(ref16)
            apart = abs(ours16[i] - ref32) / abs(ref32)
            print(f"request {i}: fp32 {ours32[i]:.7f} vs torch {ref32:.7f} (rel {r32:.1e}); "
                  f"--bf16 {ours16[i]:.7f} vs emulated bf16 {ref16:.7f} (rel {r16:.1e}), "
                  f"vs fp32 reference rel {apart:.1e}")
            if r32 > FP32_RTOL:
                raise tg.Mismatch(f"request {i}: fp32 log-likelihood off by {r32:.2e}")
            if r16 > BF16_RTOL:
                raise tg.Mismatch(f"request {i}: --bf16 log-likelihood off the emulation by {r16:.2e}")
            if apart <= 3 * BF16_RTOL:
                raise tg.Mismatch(f"request {i}: --bf16 is within {3 * BF16_RTOL:g} of fp32: "
                                  "the bound cannot tell whether bf16 ran")
    print("PASS: eval's log-likelihoods equal PyTorch's in fp32 and the bf16 emulation's under --bf16")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except tg.Mismatch as e:
        print(f"FAIL: {e}")
        sys.exit(1)
