#!/usr/bin/env python3
"""PyTorch references for megadlm's --bf16 (the first iteration of a parity dump made with
`parity_dump FAMILY DIR bf16`): the same weights and batch as tests/python/torch_gpt.py, and

  1. an emulation of megadlm's rounding points: every linear (QKV, proj, FC1, FC2, the output
     layer) multiplies its input and its weight rounded to bf16 with fp32 sums, and its backward
     rounds the output gradient (dgrad: dout16 @ w16; wgrad: dout16^T @ x16); linear_qkv's and
     linear_fc1's outputs, the q/k norm's and RoPE's, the attention's scaled scores and
     probabilities, the embedding's and each residual add's are rounded to bf16 where they are
     made (backward passes their gradients through); every parameter (norm weights and biases,
     linear biases, the position embedding too) is its bf16 value, as megadlm's model reads
     only its 16-bit parameters (Megatron's are all bf16); everything else fp32. The loss must
     agree to 1e-4 relative, each parameter's gradient to 2e-2 of its norm (the sums' order
     differs, so an element's bf16 rounding may flip by one ulp);
  2. PyTorch's own bf16 mixed precision, torch.autocast(cpu, bfloat16) over the fp32 model
     (linears and matmuls in bf16, bf16 outputs): the loss must agree to 1e-2 relative.

--fp16 (`parity_dump FAMILY DIR fp16`, then FORMAT fp16): the same emulation with every rounding
point in IEEE fp16 (torch.float16) and the same tolerances (the dump's backward has no loss
scale: small output gradients round to fp16 subnormals on both sides alike), the gradients to
a tolerance 8 times tighter (fp16's unit roundoff against bf16's); no autocast
reference (this PyTorch's CPU autocast takes bfloat16 only; test_fp16_train.sh compares the
loss with the fp32 run's instead).

Usage:  torch_bf16.py FAMILY DUMPDIR [bf16|fp16]
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt as tg  # noqa: E402

LOSS_RTOL_EMULATED = 1e-4
GRAD_RTOL_EMULATED = 2e-2
# fp16's unit roundoff is 8 times bf16's (11-bit significands against 8): a flipped rounding
# costs 8 times less, and the other format's rounding points miss this by 3x or more (measured)
GRAD_RTOL_EMULATED_FP16 = GRAD_RTOL_EMULATED / 8
LOSS_RTOL_AUTOCAST = 1e-2


HALF = torch.bfloat16  # the format of megadlm's rounding points (main: bf16 or fp16)


def r16(t):
    return t.to(HALF).to(torch.float32)


class BF16Linear(torch.autograd.Function):
    """y = r16(x) @ r16(w)^T in fp32; dx = r16(dy) @ r16(w); dw = r16(dy)^T @ r16(x)."""

    @staticmethod
    def forward(ctx, x, w):
        x16, w16 = r16(x), r16(w)
        ctx.save_for_backward(x16, w16)
        return x16 @ w16.t()

    @staticmethod
    def backward(ctx, dy):
        x16, w16 = ctx.saved_tensors
        dy16 = r16(dy)
        dx = dy16 @ w16
        dw = dy16.reshape(-1, dy16.shape[-1]).t() @ x16.reshape(-1, x16.shape[-1])
        return dx, dw


def bf16_linear(x, w, b=None):
    y = BF16Linear.apply(x, w)
    return y + b if b is not None else y


def rnd(t):
    """Rounded to bf16 in forward; backward passes the gradient as it is (megadlm rounds the
    tensor in place and its backward kernels read the rounded values)."""
    return t + (r16(t) - t).detach()


def self_attention(c, x, P, p, rope):
    """tests/python/torch_gpt.py's, with megadlm's --bf16 rounding points: linear_qkv's
    output, the q/k norm's and RoPE's outputs, the scaled scores and the probabilities (as
    Megatron's bf16 baddbmm and softmax return them; no attention dropout here)."""
    B, T, _ = x.shape
    NH, NG, HS = c["num_attention_heads"], c["num_query_groups"], c["kv_channels"]
    Q = NH // NG
    qkv = rnd(tg.linear(x, P, p + "linear_qkv")).view(B, T, NG, Q + 2, HS)
    q = qkv[:, :, :, :Q, :].reshape(B, T, NH, HS)
    k = qkv[:, :, :, Q, :]
    v = qkv[:, :, :, Q + 1, :]
    if c["qk_layernorm"]:
        q = rnd(tg.norm(c, q, P, p + "q_layernorm"))
        k = rnd(tg.norm(c, k, P, p + "k_layernorm"))
    if rope is not None:
        q = rnd(tg.apply_rope(q, *rope))
        k = rnd(tg.apply_rope(k, *rope))
    k = k.repeat_interleave(Q, dim=2)
    v = v.repeat_interleave(Q, dim=2)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    scores = rnd(torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HS))
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = rnd(torch.softmax(scores, dim=-1))
    ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(B, T, NH * HS)
    return tg.linear(ctx, P, p + "linear_proj")


def mlp(c, x, P, p):
    """tests/python/torch_gpt.py's, with linear_fc1's output rounded to bf16."""
    h = rnd(tg.linear(x, P, p + "linear_fc1"))
    if c["swiglu"]:
        gate, up = torch.chunk(h, 2, dim=-1)
        h = F.silu(gate) * up
    else:
        h = F.gelu(h, approximate="tanh" if c["gelu"] == "tanh" else "none")
    return tg.linear(h, P, p + "linear_fc2")


def gpt_loss(c, P, tokens, labels, loss_mask):
    """tests/python/torch_gpt.py's, with the residual stream rounded to bf16: the embedding's
    output and the result of each residual add."""
    B, T = tokens.shape
    wte = P["embedding.word_embeddings.weight"]
    x = F.embedding(tokens, wte)
    rope = None
    if c["position_embedding_type"] == "learned_absolute":
        x = x + P["embedding.position_embeddings.weight"][torch.arange(T)][None]
    else:
        rope = tg.rope_freqs(c, T, x.dtype)
    x = rnd(x)
    for l in range(c["num_layers"]):
        p = f"decoder.layers.{l}."
        x = rnd(x + self_attention(c, tg.norm(c, x, P, p + "input_layernorm"), P,
                                   p + "self_attention.", rope))
        x = rnd(x + mlp(c, tg.norm(c, x, P, p + "pre_mlp_layernorm"), P, p + "mlp."))
    x = tg.norm(c, x, P, "decoder.final_layernorm")
    out_w = P["output_layer.weight"] if c["untie_embeddings_and_output_weights"] else wte
    logits = tg.F.linear(x, out_w)
    losses = F.cross_entropy(logits.reshape(B * T, -1), labels.reshape(-1).long(),
                             reduction="none")
    m = loss_mask.reshape(-1)
    return (losses * m).sum() / m.sum()


def main(argv):
    global HALF
    if len(argv) not in (3, 4) or argv[1] not in tg.FAMILIES or argv[3:] not in ([], ["bf16"], ["fp16"]):
        print(f"usage: {argv[0]} gpt|llama DUMPDIR [bf16|fp16]", file=sys.stderr)
        return 2
    family, dump = argv[1], argv[2]
    fmt = argv[3] if len(argv) == 4 else "bf16"
    HALF = torch.float16 if fmt == "fp16" else torch.bfloat16
    c = tg.FAMILIES[family]
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    weights = tg.read_safetensors(os.path.join(dump, "ckpt", "iter_0000000", "model.safetensors"))
    shapes = tg.param_shapes(c)
    batch = tg.read_safetensors(os.path.join(dump, "batch.safetensors"))
    tokens, labels = batch["tokens"].long(), batch["labels"].long()
    loss_mask = batch["loss_mask"].float()
    ours = tg.read_safetensors(os.path.join(dump, "grads.safetensors"))
    our_loss = float(ours["loss"])

    def fresh(rounded=False):
        # the model file holds the 16-bit parameters; rounding again states what the emulation
        # reads (every parameter in the run's format) whatever the file's dtype
        return {n: (r16(weights[n].float()) if rounded else weights[n].float()).clone()
                .requires_grad_(True) for n in shapes}

    # 1. megadlm's rounding points
    real = tg.linear, tg.F.linear, tg.self_attention, tg.mlp, tg.gpt_loss
    tg.linear = lambda x, P, prefix: bf16_linear(x, P[prefix + ".weight"], P.get(prefix + ".bias"))
    tg.F.linear = bf16_linear  # the output layer (gpt_loss calls F.linear)
    tg.self_attention, tg.mlp = self_attention, mlp
    try:
        P = fresh(rounded=True)
        loss = gpt_loss(c, P, tokens, labels, loss_mask)
        loss.backward()
    finally:
        tg.linear, tg.F.linear, tg.self_attention, tg.mlp, tg.gpt_loss = real
    rel = abs(our_loss - loss.item()) / abs(loss.item())
    if rel > LOSS_RTOL_EMULATED:
        raise tg.Mismatch(f"loss {our_loss} vs emulated {fmt} {loss.item()}: rel {rel:.2e}")
    worst, worst_name = 0.0, ""
    for n in shapes:
        g_ref = P[n].grad.double()
        d = (ours[n].double() - g_ref).norm().item() / max(g_ref.norm().item(), 1e-30)
        if d > worst:
            worst, worst_name = d, n
    grad_rtol = GRAD_RTOL_EMULATED_FP16 if fmt == "fp16" else GRAD_RTOL_EMULATED
    if worst > grad_rtol:
        raise tg.Mismatch(f"gradient {worst_name}: relative difference {worst:.2e} from the "
                          f"emulated {fmt} reference")
    if fmt == "fp16":
        print(f"torch fp16 {family}: loss {our_loss:.7f}; emulated rounding points "
              f"{loss.item():.7f} (rel {rel:.2e}, tol {LOSS_RTOL_EMULATED:g}; worst gradient "
              f"{worst_name} {worst:.2e}, tol {grad_rtol:g})")
        return 0

    # 2. PyTorch's bf16 autocast, on PyTorch's own bf16 kernels (mkldnn off): its oneDNN path
    # exists only on some CPUs (with oneDNN limited to AVX2 it cannot build a bf16 primitive),
    # and the reference must be the same on every machine
    P = fresh()
    with torch.no_grad(), torch.backends.mkldnn.flags(enabled=False), \
            torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        loss_ac = tg.gpt_loss(c, P, tokens, labels, loss_mask).float().item()
    rel_ac = abs(our_loss - loss_ac) / abs(loss_ac)
    if rel_ac > LOSS_RTOL_AUTOCAST or not math.isfinite(our_loss):
        raise tg.Mismatch(f"loss {our_loss} vs PyTorch bf16 autocast {loss_ac}: rel {rel_ac:.2e}")
    print(f"torch bf16 {family}: loss {our_loss:.7f}; emulated rounding points {loss.item():.7f} "
          f"(rel {rel:.2e}, tol {LOSS_RTOL_EMULATED:g}; worst gradient {worst_name} "
          f"{worst:.2e}, tol {GRAD_RTOL_EMULATED:g}); PyTorch autocast bf16 {loss_ac:.7f} "
          f"(rel {rel_ac:.2e}, tol {LOSS_RTOL_AUTOCAST:g})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except tg.Mismatch as e:
        print(f"torch {HALF} FAILED ({' '.join(sys.argv[1:])}): {e}", file=sys.stderr)
        sys.exit(1)
