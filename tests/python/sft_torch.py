#!/usr/bin/python3
"""Supervised fine-tuning losses against PyTorch, from the documented formulas alone
(docs/DATA.md "SFT data", training/sft.h): the JSONL pairs encoded here as ByteLevel bytes
(template(prompt) bytes, response bytes, end of document 256; the response and its end of
document are the answer), one pair per sample padded with 256 (--sft-padding pad: no loss on
the padding; eos: the padding is answer, LLaDA's), the samples in the order of
numpy.random.RandomState(seed).shuffle over the documents repeated for the epochs the run
reads; then
  ar      Megatron's GPT-2 layer, causal, positions 0..T-1; loss per micro-batch
          sum(CE x m) / sum(m) over the labels whose token is an answer token;
  difflm  difflm-noshift: x = sample[1..s-1], positions 1..L, bidirectional; per sample
          t = Philox4x32-10 draw (key (seed, "sft!")), p = (1 - 1e-3) t + 1e-3 in float32, an
          answer position is masked when its draw < p, a prompt position never; loss per
          micro-batch (1/B) sum_b sum_masked CE / (p_b A_b), A_b the answer tokens of row b;
and the logged lm loss of iteration K is the mean of its micro-batches' losses. Nothing is
taken from megadlm but the weights of its checkpoint at iteration K-1 and the log line.

usage: sft_torch.py ar|difflm JSONL CKPT LOG K key=value ...
keys: template, layers, hidden, heads, seq, mbs, gbs, iters (the run's --train-iters), seed,
padding (pad|eos), mask (the mask token), weights (a checkpoint iteration directory whose
weights to use instead of CKPT's iteration K-1), split=validation with docs=LO:HI and
nsamples=N (the validation loss logged at iteration K, the split's sequences and samples)."""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import difflm_step_torch as D  # noqa: E402  (philox, uniform, load, logged, forward)

torch.set_default_dtype(torch.float64)
EOD, KEY = 256, 0x73667421


def documents(path, template):
    docs = []
    for line in open(path, encoding="utf-8"):
        if not line.strip():
            continue
        o = json.loads(line)
        p = list(template.replace("{prompt}", o["prompt"]).encode())
        r = list(o["response"].encode()) + [EOD]
        docs.append((p + r, [0] * len(p) + [1] * len(r)))
    return docs


def samples(cfg, docs):
    lo, hi = (int(x) for x in cfg.get("docs", f"0:{len(docs)}").split(":"))
    n, want = hi - lo, int(cfg.get("nsamples", cfg["iters"] * cfg["gbs"]))
    epochs = -(-want // n)
    index = np.tile(np.arange(lo, hi, dtype=np.int32), epochs)
    np.random.RandomState(cfg["seed"]).shuffle(index)
    out, S = [], cfg["seq"] + 1
    pad_mask = 1 if cfg["padding"] == "eos" else 0
    for d in index[:want]:
        ids, m = docs[d]
        ids, m = ids[:S], m[:S]
        out.append((ids + [EOD] * (S - len(ids)), m + [pad_mask] * (S - len(m))))
    return out


def causal_forward(P, cfg, tok):
    """Megatron's GPT-2 layer stack, causal, learned positions 0..T-1, tied output layer."""
    B, T = tok.shape
    H, NH = cfg["hidden"], cfg["heads"]
    hd = H // NH
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (H,), P[p + ".weight"], P[p + ".bias"], 1e-5)
    E = P["embedding.word_embeddings.weight"]
    h = E[tok] + P["embedding.position_embeddings.weight"][torch.arange(T)]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg["layers"]):
        p = f"decoder.layers.{i}."
        lin = lambda x, n: x @ P[p + n + ".weight"].T + P[p + n + ".bias"]
        qkv = lin(ln(h, p + "input_layernorm"), "self_attention.linear_qkv").view(B, T, NH, 3, hd)
        q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))
        s = (q @ k.transpose(-1, -2) / hd ** 0.5).masked_fill(~causal, float("-inf"))
        a = torch.softmax(s, -1) @ v
        h = h + lin(a.transpose(1, 2).reshape(B, T, H), "self_attention.linear_proj")
        x = torch.nn.functional.gelu(lin(ln(h, p + "pre_mlp_layernorm"), "mlp.linear_fc1"),
                                     approximate="tanh")
        h = h + lin(x, "mlp.linear_fc2")
    return ln(h, "decoder.final_layernorm") @ E.T


def ar_loss(P, cfg, batch):
    tok = torch.tensor([s[:-1] for s, _ in batch])
    lab = torch.tensor([s[1:] for s, _ in batch])
    m = torch.tensor([mk[1:] for _, mk in batch], dtype=torch.float64)
    logits = causal_forward(P, cfg, tok)
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), lab.flatten(), reduction="none")
    return float((ce * m.flatten()).sum() / max(float(m.sum()), 1.0))


def f32(x):
    return np.float32(x)


def difflm_loss(P, cfg, batch, first):
    L = cfg["seq"] - 1
    tok, lab, w = [], [], []
    for b, (s, mk) in enumerate(batch):
        g = first + b
        t = D.uniform(D.philox([0, g & D.M32, g >> 32, 1], [cfg["seed"], KEY])[0])
        p = f32(f32(f32(1.0) - f32(1e-3)) * f32(t)) + f32(1e-3)
        A = sum(mk[1:L + 1])
        row_t, row_w = [], []
        for j in range(L):
            u = f32(D.uniform(D.philox([j, g & D.M32, g >> 32, 2], [cfg["seed"], KEY])[0]))
            m = mk[j + 1] == 1 and u < p
            row_t.append(cfg["mask"] if m else s[j + 1])
            row_w.append(1.0 / (float(p) * A) if m else 0.0)
        tok.append(row_t)
        lab.append(s[1:L + 1])
        w.append(row_w)
    logits = D.forward(P, cfg, torch.tensor(tok))
    ce = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.tensor(lab).flatten(),
                                           reduction="none")
    return float((ce * torch.tensor(w).flatten()).sum() / len(batch))


def main():
    mode, jsonl, ckpt, log, K = sys.argv[1:6]
    K = int(K)
    cfg = dict(a.split("=", 1) for a in sys.argv[6:])
    for k in ("layers", "hidden", "heads", "seq", "mbs", "gbs", "iters", "seed", "mask"):
        if k in cfg:
            cfg[k] = int(cfg[k])
    all_samples = samples(cfg, documents(jsonl, cfg["template"]))
    # weights=DIR: the weights of another checkpoint directory (a pretrained model that
    # --finetune --load read) instead of CKPT's iteration K-1
    # split=validation: the validation loss logged at iteration K, on the weights after K
    # iterations, from the validation samples' start (docs=LO:HI, nsamples=N: the split's
    # sequence range and sample count)
    valid = cfg.get("split") == "validation"
    path = cfg.get("weights") or f"{ckpt}/iter_{K - (0 if valid else 1):07d}"
    P = {n: t.double() for n, t in D.load(f"{path}/model.safetensors").items()}
    first = 0 if valid else (K - 1) * cfg["gbs"]
    losses = []
    for mb in range(cfg["gbs"] // cfg["mbs"]):
        f = first + mb * cfg["mbs"]
        batch = all_samples[f:f + cfg["mbs"]]
        losses.append(ar_loss(P, cfg, batch) if mode == "ar" else difflm_loss(P, cfg, batch, f))
    want = sum(losses) / len(losses)
    got = (logged_valid(log)[K] if valid else
           D.logged(log)[K][0] if mode == "difflm" else logged_ar(log)[K])
    rel = abs(got - want) / abs(want)
    print(f"{mode} SFT iteration {K}: megadlm {got:.7g}, PyTorch {want:.7g} (rel {rel:.2g})")
    return 0 if rel <= 1e-5 else 1


def logged_valid(log):
    import re
    out = {}
    for line in open(log):
        m = re.match(r" validation loss at iteration (\d+) \| lm loss value: (\S+)", line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def logged_ar(log):
    import re
    out = {}
    for line in open(log):
        m = re.match(r" \[[^]]*\] iteration\s+(\d+)/", line)
        if m:
            out[int(m.group(1))] = float(re.search(r"lm loss: (\S+)", line).group(1))
    return out


if __name__ == "__main__":
    sys.exit(main())
