#!/usr/bin/python3
"""The masked-diffusion training step (difflm-noshift) against PyTorch, from the documented
formulas alone: the mock data (core/datasets/gpt_data.c's comment: SplitMix64 start, tokens
(start + j) mod (vocab - 1)), the objective's random draws (training/difflm.h: Philox4x32-10
per (seed, stream, sample, position), t ~ U(0,1), a position is masked when its draw < t, one
random position when none is, weights m x L / (masked count), lengths cut by
--difflm-varilen-prob), learned positions 1..L (the unshifted tokens 1..L of the sample),
Megatron's GPT layer (LayerNorm, fused QKV in per-head [q k v] order, bidirectional softmax
attention, tanh GeLU), the tied output layer over the padded vocabulary, Megatron's loss per
micro-batch sum(ce x w) / (b x L) averaged over micro-batches, global-norm clipping and AdamW
(no decay on 1-D parameters). Everything is recomputed here in float64 with autograd; nothing
is taken from megadlm but the parameters and Adam moments of its checkpoint at iteration k.

usage: difflm_step_torch.py CKPT LOG K [K ...] -- key=value ...
For each K: rebuild iteration K+1's batch, run forward/backward/clip/AdamW from checkpoint
iteration K, and compare with checkpoint K+1 and the logged iteration K+1:
  - lm loss (rel 1e-5) and real input length (exact);
  - Adam's first moment per tensor (the clipped gradient enters it): |d|_2 / |grad part|_2 <= 1e-4;
  - the parameter update per tensor: |d|_2 / |update|_2 <= 1e-3.
Also checks every logged iteration's real input length in LOG against the draws. Keys: seed
is the objective's (masks, lengths: the RNG state's, which a resumed run takes from its
checkpoint), data_seed the dataset's (--seed, as Megatron's datasets; default: seed)."""
import json
import math
import re
import struct
import sys

import numpy as np
import torch

torch.set_default_dtype(torch.float64)
M32, M64 = 0xFFFFFFFF, (1 << 64) - 1


def philox(ctr, key):
    """Philox4x32-10 (Salmon et al. 2011, Random123's constants)."""
    c0, c1, c2, c3 = ctr
    k0, k1 = key
    for r in range(10):
        if r > 0:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
    return [c0, c1, c2, c3]


def uniform(x):
    return (x >> 8) / 16777216.0


def draw(seed, stream, a, b):
    return philox([b & M32, a & M32, (a >> 32) & M32, stream], [seed & M32, 0x646C6D21])


def splitmix(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def length(cfg, iteration, microbatch):
    """Tokens the model sees in micro-batch `microbatch` of the iteration logged as
    iteration + 1 (the draw is keyed by the iterations completed before it): R - 1, R cut by
    --difflm-varilen-prob."""
    s = cfg["seq"]
    r = draw(cfg["seed"], 4, (iteration << 32) | microbatch, 0)
    R = s if uniform(r[0]) >= cfg["varilen"] else 2 + r[1] % (s - 1)
    return R - 1


def sample(cfg, i):
    period = cfg["vocab_size"]  # NullTokenizer: --vocab-size ids plus end-of-document; mod (that - 1)
    start = splitmix(splitmix(splitmix(cfg.get("data_seed", cfg["seed"])) ^ 0) ^ i) % period
    return [(start + j) % period for j in range(cfg["seq"] + 1)]


def microbatch(cfg, first, L):
    toks, labs, ws = [], [], []
    for b in range(cfg["mbs"]):
        i, seq = first + b, sample(cfg, first + b)
        t = uniform(draw(cfg["seed"], 1, i, 0)[0])
        m = [uniform(draw(cfg["seed"], 2, i, j)[0]) < t for j in range(L)]
        if not any(m):
            m[draw(cfg["seed"], 3, i, 0)[0] % L] = True
        lab = seq[1 : L + 1]
        toks.append([cfg["mask"] if m[j] else lab[j] for j in range(L)])
        labs.append(lab)
        ws.append([L / sum(m) if m[j] else 0.0 for j in range(L)])
    return torch.tensor(toks), torch.tensor(labs), torch.tensor(ws)


def load(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    out = {}
    for k, v in json.loads(blob[8 : 8 + n]).items():
        if k != "__metadata__":
            s, e = v["data_offsets"]
            a = np.frombuffer(blob[8 + n + s : 8 + n + e], dtype=np.float32).reshape(v["shape"])
            out[k] = torch.tensor(a.copy())
    return out


def forward(P, cfg, tok):
    B, L = tok.shape
    H, NH = cfg["hidden"], cfg["heads"]
    hd = H // NH
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (H,), P[p + ".weight"], P[p + ".bias"], 1e-5)
    E = P["embedding.word_embeddings.weight"]
    h = E[tok] + P["embedding.position_embeddings.weight"][torch.arange(1, L + 1)]
    for i in range(cfg["layers"]):
        p = f"decoder.layers.{i}."
        lin = lambda x, n: x @ P[p + n + ".weight"].T + P[p + n + ".bias"]
        qkv = lin(ln(h, p + "input_layernorm"), "self_attention.linear_qkv").view(B, L, NH, 3, hd)
        q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), -1) @ v
        h = h + lin(a.transpose(1, 2).reshape(B, L, H), "self_attention.linear_proj")
        x = torch.nn.functional.gelu(lin(ln(h, p + "pre_mlp_layernorm"), "mlp.linear_fc1"), approximate="tanh")
        h = h + lin(x, "mlp.linear_fc2")
    return ln(h, "decoder.final_layernorm") @ E.T


def logged(log):
    """iteration -> (lm loss, real input length) from Megatron's training log lines."""
    out = {}
    for line in open(log):
        m = re.match(r" \[[^]]*\] iteration\s+(\d+)/", line)
        if m:
            loss = float(re.search(r"lm loss: (\S+)", line).group(1))
            rl = float(re.search(r"real input length: (\S+)", line).group(1))
            out[int(m.group(1))] = (loss, rl)
    return out


def check_step(cfg, ckpt, k, log):
    W = {n: t.double() for n, t in load(f"{ckpt}/iter_{k:07d}/model.safetensors").items()}
    O = {n: t.double() for n, t in load(f"{ckpt}/iter_{k:07d}/optimizer.safetensors").items()}
    W1 = {n: t.double() for n, t in load(f"{ckpt}/iter_{k + 1:07d}/model.safetensors").items()}
    O1 = {n: t.double() for n, t in load(f"{ckpt}/iter_{k + 1:07d}/optimizer.safetensors").items()}
    P = {n: t.clone().requires_grad_(True) for n, t in W.items()}
    nmb, loss_sum, len_sum = cfg["gbs"] // cfg["mbs"], 0.0, 0
    for mb in range(nmb):  # iteration k + 1 is the (k + 1)-th; micro-batch mb of it
        L = length(cfg, k, mb)
        tok, lab, w = microbatch(cfg, k * cfg["gbs"] + mb * cfg["mbs"], L)
        logits = forward(P, cfg, tok)
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1), reduction="none")
        loss = (ce.view(w.shape) * w).sum() / w.numel()
        (loss / nmb).backward()
        loss_sum, len_sum = loss_sum + loss.item(), len_sum + L
    bad = []
    want_loss, want_len = log[k + 1]
    got = loss_sum / nmb
    if abs(got - want_loss) > 1e-5 * abs(got):
        bad.append(f"lm loss {want_loss} logged, {got} here")
    if want_len != len_sum / nmb:
        bad.append(f"real input length {want_len} logged, {len_sum / nmb} here")
    norm = math.sqrt(sum((p.grad**2).sum().item() for p in P.values()))
    clip = min(1.0, cfg["clip"] / (norm + 1e-6))
    b1, b2, eps, lr, step = 0.9, 0.999, 1e-8, cfg["lr"], k + 1
    worst_m = worst_p = 0.0
    for n, p in P.items():
        g = p.grad * clip
        m = b1 * O["optimizer.exp_avg." + n] + (1 - b1) * g
        v = b2 * O["optimizer.exp_avg_sq." + n] + (1 - b2) * g * g
        decay = cfg["wd"] if p.dim() >= 2 else 0.0
        new = W[n] * (1 - lr * decay) - lr * (m / (1 - b1**step)) / ((v / (1 - b2**step)).sqrt() + eps)
        dm = (m - O1["optimizer.exp_avg." + n]).norm() / ((1 - b1) * g).norm()
        dp = (new - W1[n]).norm() / (W1[n] - W[n]).norm()
        worst_m, worst_p = max(worst_m, dm.item()), max(worst_p, dp.item())
        if dm > 1e-4 or dp > 1e-3:
            bad.append(f"{n}: Adam moment off by {dm:.2e} of the gradient, parameters by {dp:.2e} of the update")
    print(f"iteration {k + 1}: lm loss {want_loss:.7g} logged, {got:.7g} here; grad norm {norm:.5g}; "
          f"worst moment {worst_m:.2e}, worst update {worst_p:.2e}")
    return bad


def main():
    sep = sys.argv.index("--")
    ckpt, logfile, ks = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:sep]]
    cfg = {}
    for kv in sys.argv[sep + 1 :]:
        key, val = kv.split("=")
        cfg[key] = float(val) if "." in val else int(val)
    log = logged(logfile)
    bad = []
    for it, (_, rl) in sorted(log.items()):
        want = sum(length(cfg, it - 1, mb) for mb in range(cfg["gbs"] // cfg["mbs"])) / (cfg["gbs"] // cfg["mbs"])
        if rl != want:
            bad.append(f"iteration {it}: real input length {rl} logged, the draws give {want}")
    for k in ks:
        bad += check_step(cfg, ckpt, k, log)
    for b in bad:
        print("MISMATCH:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":  # sft_torch.py imports the formulas
    main()
