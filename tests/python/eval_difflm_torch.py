#!/usr/bin/python3
"""`megadlm eval`'s masked-diffusion log-likelihood against PyTorch in float64, from the
documented formulas alone (training/loglikelihood.h): LLaDA's get_log_likelihood estimate
(per draw d of request r: l = 1 + ((u24 x L) >> 24) with u24 the top 24 bits of Philox's first
word at counter (0, d, r, 1); the l continuation positions of smallest (word at (j, d, r, 2), j)
masked; the draw's value (L / l) x the masked tokens' cross-entropy; the estimate minus the
mean, its standard error sd / sqrt(n)), on the checkpoint's weights with the difflm-noshift
model of difflm_step_torch.py (learned positions 1..L, bidirectional GPT layers, the tied
output layer over the padded vocabulary). Nothing is taken from megadlm but the weights and the
tokens of the requests.

usage: eval_difflm_torch.py CKPT SAMPLES SEED MC_NUM TOKENS -- key=value ...
  SAMPLES: eval --log-samples's output (the JSON lines after the summary)
  TOKENS:  one request a line, "ctx tokens | continuation tokens" (the ids, space-separated)
Checks each request's estimate (rel 1e-6) and standard error (rel 1e-5: a difference of draws);
with exact=1 instead, that each request's estimate lies within 4 standard errors of the exact
expectation over every l and every mask (enumerated: continuations of a few tokens), and that
the standard error is below 2% of |expectation| (many draws: the estimate converges)."""
import itertools
import json
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from difflm_step_torch import forward, load, philox  # noqa: E402

torch.set_default_dtype(torch.float64)
M32 = 0xFFFFFFFF


def draw_mask(seed, request, d, L):
    key = [seed & M32, ((seed >> 32) ^ 0x6C6C6B21) & M32]
    l = 1 + (((philox([0, d, request, 1], key)[0] >> 8) * L) >> 24)
    keys = sorted((philox([j, d, request, 2], key)[0], j) for j in range(L))
    return {j for _, j in keys[:l]}


def masked_ce(P, cfg, ctx, cont, masks):
    """(L / l) x the masked tokens' cross-entropy for each set of masked continuation
    positions in masks, one forward each (float64)."""
    seq = ctx + cont
    out = []
    for m in masks:
        x = torch.tensor([[cfg["mask"] if i >= len(ctx) and i - len(ctx) in m else t
                           for i, t in enumerate(seq)]])
        logp = torch.log_softmax(forward(P, cfg, x)[0], -1)
        ce = -sum(logp[len(ctx) + j, cont[j]].item() for j in m)
        out.append(ce * len(cont) / len(m))
    return out


def exact(P, cfg, ctx, cont):
    """The expectation of a draw's value: l uniform in 1..L, the mask uniform among the l-subsets."""
    L = len(cont)
    total = 0.0
    for l in range(1, L + 1):
        subsets = [set(c) for c in itertools.combinations(range(L), l)]
        total += sum(masked_ce(P, cfg, ctx, cont, subsets)) / len(subsets) / L
    return -total


def main():
    sep = sys.argv.index("--")
    ckpt, samples, seed, mc, tokfile = sys.argv[1:sep]
    seed, mc = int(seed), int(mc)
    cfg = {}
    for kv in sys.argv[sep + 1:]:
        k, v = kv.split("=")
        cfg[k] = int(v)
    it = int(open(f"{ckpt}/latest_checkpointed_iteration.txt").read())
    P = {n: t.double() for n, t in load(f"{ckpt}/iter_{it:07d}/model.safetensors").items()}
    got = [json.loads(x) for x in open(samples) if x.startswith('{"request"')]
    reqs = []
    for line in open(tokfile):
        a, b = line.split("|")
        reqs.append(([int(t) for t in a.split()], [int(t) for t in b.split()]))
    bad = 0
    if len(got) != len(reqs):
        print(f"MISMATCH: {len(got)} requests scored, {len(reqs)} expected")
        sys.exit(1)
    for r, ((ctx, cont), g) in enumerate(zip(reqs, got)):
        if cfg.get("exact"):
            e = exact(P, cfg, ctx, cont)
            z = (g["loglikelihood"] - e) / g["stderr"]
            print(f"request {r}: exact expectation {e:.6f}; megadlm's mean of {mc} draws "
                  f"{g['loglikelihood']:.6f} ± {g['stderr']:.6f} is {z:+.2f} standard errors "
                  f"from it")
            if abs(z) > 4 or g["stderr"] > 0.02 * abs(e):
                print(f"MISMATCH: request {r}: the estimate does not converge to the exact value")
                bad = 1
            continue
        vals = masked_ce(P, cfg, ctx, cont, [draw_mask(seed, r, d, len(cont)) for d in range(mc)])
        mean = sum(vals) / mc
        sem = math.sqrt(sum((v - mean) ** 2 for v in vals) / (mc - 1) / mc)
        rel = abs(g["loglikelihood"] + mean) / abs(mean)
        rel_se = abs(g["stderr"] - sem) / sem
        print(f"request {r}: megadlm {g['loglikelihood']:.10f} ± {g['stderr']:.6f}, PyTorch "
              f"float64 {-mean:.10f} ± {sem:.6f} (rel {rel:.1e}, {rel_se:.1e})")
        if rel > 1e-6 or rel_se > 1e-5:
            print(f"MISMATCH: request {r}")
            bad = 1
    sys.exit(bad)


if __name__ == "__main__":
    main()
