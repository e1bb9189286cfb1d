#!/usr/bin/python3
"""PyTorch CPU training step of a GPT-2 124M, the reference for bench/bench_gpt2.sh.

The model is Megatron's GPT as megadlm builds it, written in plain torch: learned position
embedding, pre-LayerNorm blocks (fused QKV linear, causal attention as explicit
matmul + mask + softmax + matmul since torch 1.13 has no scaled_dot_product_attention,
output projection, 4h MLP with tanh GELU), final LayerNorm, output layer tied to the word
embedding. Dropout is 0 (the layers are left out). The vocabulary is padded to 50304 like
megadlm's (tokens are drawn from the 50257 real ones), so both do the same arithmetic.

One iteration = zero_grad, forward, cross-entropy, backward, clip_grad_norm_(1.0),
AdamW step: what megadlm's train_step does. The first --warmup iterations are not timed.

Prints, for the driver to parse:
  loaded: <path>            every BLAS / OpenMP / allocator library mapped into this process
  iter_ms: <ms> loss: <x>   one line per timed iteration
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(h, eps=1e-5)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln2 = nn.LayerNorm(h, eps=1e-5)
        self.fc1 = nn.Linear(h, 4 * h)
        self.fc2 = nn.Linear(4 * h, h)

    def forward(self, x, mask):
        B, T, C = x.shape
        hs = C // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, h, heads, vocab, max_pos):
        super().__init__()
        self.wte = nn.Embedding(vocab, h)
        self.wpe = nn.Embedding(max_pos, h)
        self.blocks = nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(h, eps=1e-5)
        mask = torch.triu(torch.ones(max_pos, max_pos, dtype=torch.bool), diagonal=1)
        self.register_buffer("mask", mask, persistent=False)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
            else:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, labels):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x, self.mask)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied output layer
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def loaded_libraries():
    """Shared objects that decide the speed: BLAS, OpenMP runtime, malloc replacement."""
    keys = ("blas", "lapack", "gomp", "libiomp", "omp", "jemalloc", "tcmalloc", "mkl")
    paths = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and any(k in os.path.basename(parts[5]) for k in keys):
                paths.add(os.path.realpath(parts[5]))
    return sorted(paths)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-layers", type=int, default=12)
    ap.add_argument("--hidden-size", type=int, default=768)
    ap.add_argument("--num-attention-heads", type=int, default=12)
    ap.add_argument("--seq-length", type=int, default=256)
    ap.add_argument("--max-position-embeddings", type=int, default=1024)
    ap.add_argument("--micro-batch-size", type=int, default=4)
    ap.add_argument("--vocab-size", type=int, default=50257, help="real tokens")
    ap.add_argument("--padded-vocab-size", type=int, default=50304)
    ap.add_argument("--iters", type=int, default=3, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--lr", type=float, default=6e-4)
    a = ap.parse_args()

    torch.manual_seed(1234)
    torch.set_num_threads(a.threads)
    model = GPT(a.num_layers, a.hidden_size, a.num_attention_heads, a.padded_vocab_size,
                a.max_position_embeddings)
    # Megatron's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__} | threads {torch.get_num_threads()} | "
          f"parameters {nparams}", flush=True)

    B, T = a.micro_batch_size, a.seq_length
    for it in range(a.warmup + a.iters):
        seq = torch.randint(0, a.vocab_size, (B, T + 1))
        tokens, labels = seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        if it == 0:  # everything is mapped by now
            for p in loaded_libraries():
                print(f"loaded: {p}", flush=True)
        tag = "warmup_ms" if it < a.warmup else "iter_ms"
        print(f"{tag}: {ms:.1f} loss: {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
