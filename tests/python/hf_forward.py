"""Independent PyTorch forward of the Hugging Face architectures, written from transformers'
definitions (models/gpt2/modeling_gpt2.py, models/llama/modeling_llama.py,
models/qwen3/modeling_qwen3.py, models/qwen3_moe/modeling_qwen3_moe.py; MegaDLMs' DiffLM from its
tools/weights_conversion/hf_configs/gptneox_1.7b_dlm/modeling_dlm.py), on the files `megadlm convert --to hf` wrote.

    hf_forward.py forward HF_DIR LOGITS.safetensors [--perturb]
        reads HF_DIR/config.json and HF_DIR/model.safetensors (or the shards of
        model.safetensors.index.json) by Hugging Face names, runs the
        architecture config.json names (float64) on the tokens of LOGITS.safetensors
        (tests/tools/hf_logits.c) and compares with megadlm's logits there: max |diff| /
        max |megadlm| must be <= 1e-5. --perturb adds 1e-2 to one weight first (the check must
        then fail); --perturb=NAME to element [1, 2] of the tensor NAME. --tol=X replaces 1e-5
        (the bf16 forward's rounding). For MoE models it also prints the smallest margin between
        a token's k-th and (k+1)-th routing probability (a near tie could route differently in
        float32 and float64).
    hf_forward.py same-values A.safetensors B.safetensors
        the same names and shapes and equal values (F32 against BF16: widened exactly).
    hf_forward.py same A.safetensors B.safetensors
        the two files hold the same tensor names, shapes, dtypes and bytes (headers may differ).

Reads safetensors with the standard library and numpy only (no transformers, no safetensors).
"""
import json
import math
import struct
import sys

import numpy as np
import torch

TOL = 1e-5


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    header.pop("__metadata__", None)
    return header, buf


def load(path):
    header, buf = read_st(path)
    dt = {"F32": "<f4", "I32": "<i4", "F16": "<f2", "BF16": "<u2"}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        a = np.frombuffer(buf[b:e], dtype=dt[info["dtype"]]).reshape(info["shape"])
        if info["dtype"] == "BF16":  # the upper 16 bits of a float32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = torch.from_numpy(a.astype(np.float64) if a.dtype.kind == "f" else a.astype(np.int64))
    return out


def load_dir(hf_dir):
    """model.safetensors, or every shard model.safetensors.index.json names."""
    index = f"{hf_dir}/model.safetensors.index.json"
    try:
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    W = {}
    for f in files:
        W.update(load(f"{hf_dir}/{f}"))
    return W


def same_values(a_path, b_path):
    """The same names and shapes, and every value equal (a BF16 file against the F32 file it
    was widened into: the F32 values are exactly the BF16 ones)."""
    A, B = load(a_path), load(b_path)
    if sorted(A) != sorted(B):
        print(f"FAIL: tensor names differ: {sorted(set(A) ^ set(B))}")
        return 1
    bad = [n for n in A if A[n].shape != B[n].shape or not torch.equal(A[n], B[n])]
    for n in bad:
        print(f"FAIL: {n}: the values differ")
    print(f"{len(A)} tensors, {len(bad)} differ in value")
    return 1 if bad else 0


def same(a_path, b_path):
    ha, ba = read_st(a_path)
    hb, bb = read_st(b_path)
    if sorted(ha) != sorted(hb):
        print(f"FAIL: tensor names differ: only in {a_path}: {sorted(set(ha) - set(hb))}, "
              f"only in {b_path}: {sorted(set(hb) - set(ha))}")
        return 1
    bad = 0
    for name in ha:
        ia, ib = ha[name], hb[name]
        if ia["dtype"] != ib["dtype"] or ia["shape"] != ib["shape"]:
            print(f"FAIL: {name}: {ia['dtype']}{ia['shape']} vs {ib['dtype']}{ib['shape']}")
            bad += 1
            continue
        if ba[slice(*ia["data_offsets"])] != bb[slice(*ib["data_offsets"])]:
            print(f"FAIL: {name}: the bytes differ")
            bad += 1
    print(f"{len(ha)} tensors, {bad} differ")
    return 1 if bad else 0


# ---------------------------------------------------------------- GPT-2 (modeling_gpt2.py)

def gelu_new(x):  # ACT2FN["gelu_new"]: NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def conv1d(x, w, b):  # Conv1D: x @ weight + bias, weight [nx, nf]
    return torch.addmm(b, x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[1])


def layer_norm(x, w, b, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)


def causal_attention(q, k, v, scale):  # [B, H, T, D]
    T = q.shape[2]
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    return torch.matmul(torch.softmax(s, dim=-1), v)


def gpt2_forward(cfg, W, ids):
    h, nh = cfg["n_embd"], cfg["n_head"]
    assert cfg.get("activation_function") == "gelu_new"
    eps = cfg["layer_norm_epsilon"]
    B, T = ids.shape
    d = h // nh
    x = W["transformer.wte.weight"][ids] + W["transformer.wpe.weight"][torch.arange(T)][None]
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        r = x
        y = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = conv1d(y, W[p + "attn.c_attn.weight"], W[p + "attn.c_attn.bias"])
        q, k, v = qkv.split(h, dim=2)  # all queries, then all keys, then all values
        q, k, v = (t.view(B, T, nh, d).transpose(1, 2) for t in (q, k, v))
        o = causal_attention(q, k, v, 1.0 / math.sqrt(d)).transpose(1, 2).reshape(B, T, h)
        x = r + conv1d(o, W[p + "attn.c_proj.weight"], W[p + "attn.c_proj.bias"])
        r = x
        y = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        y = gelu_new(conv1d(y, W[p + "mlp.c_fc.weight"], W[p + "mlp.c_fc.bias"]))
        x = r + conv1d(y, W[p + "mlp.c_proj.weight"], W[p + "mlp.c_proj.bias"])
    x = layer_norm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return x @ W["transformer.wte.weight"].T  # lm_head tied to wte


# ---------------------------------------------------------------- Llama / Qwen3

def rms_norm(x, w, eps):  # LlamaRMSNorm / Qwen3RMSNorm
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(T, dim, theta):  # LlamaRotaryEmbedding (default rope_type)
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):  # [B, G, T, D] -> [B, G*n_rep, T, D]
    B, G, T, D = x.shape
    return x[:, :, None].expand(B, G, n_rep, T, D).reshape(B, G * n_rep, T, D)


def full_attention(q, k, v, scale):  # DiffLM with attn_mask_type "bidirectional": no mask
    return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(-1, -2)) * scale, dim=-1), v)


def swiglu_mlp(W, p, y):  # LlamaMLP / Qwen3MoeMLP: down(silu(gate(y)) * up(y))
    g = y @ W[p + "gate_proj.weight"].T
    u = y @ W[p + "up_proj.weight"].T
    return (torch.nn.functional.silu(g) * u) @ W[p + "down_proj.weight"].T


def qwen3_moe_sparse(cfg, l):  # Qwen3MoeDecoderLayer.__init__'s choice of MLP for layer l
    return (l not in (cfg.get("mlp_only_layers") or [])) and (
        cfg["num_experts"] > 0 and (l + 1) % cfg.get("decoder_sparse_step", 1) == 0)


MARGINS = []  # per MoE layer: the smallest gap between the k-th and (k+1)-th probability


def sparse_moe_block(cfg, W, p, y):  # Qwen3MoeSparseMoeBlock.forward
    B, T, h = y.shape
    x = y.reshape(-1, h)
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    router_logits = x @ W[p + "gate.weight"].T
    probs = torch.softmax(router_logits, dim=1)
    weights, selected = torch.topk(probs, k, dim=-1)
    if k < E:
        MARGINS.append((weights[:, -1] - torch.topk(probs, k + 1, dim=-1)[0][:, -1]).min().item())
    if cfg.get("norm_topk_prob", False):  # Qwen3MoeConfig's default: False
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(E):  # each expert on its tokens, weighed by the token's routing weight
        tok, slot = torch.where(selected == e)
        if len(tok):
            y_e = swiglu_mlp(W, f"{p}experts.{e}.", x[tok]) * weights[tok, slot, None]
            out.index_add_(0, tok, y_e)
    return out.reshape(B, T, h)


def llama_forward(cfg, W, ids, qwen3, bidirectional=False, moe=False):
    h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    ng = cfg.get("num_key_value_heads", nh)
    d = cfg.get("head_dim") or h // nh
    eps = cfg["rms_norm_eps"]
    assert cfg.get("hidden_act", "silu") == "silu" and not cfg.get("rope_scaling")
    B, T = ids.shape
    cos, sin = rope_cos_sin(T, d, cfg.get("rope_theta", 10000.0))
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        r = x
        y = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (y @ W[p + "self_attn.q_proj.weight"].T).view(B, T, nh, d)
        k = (y @ W[p + "self_attn.k_proj.weight"].T).view(B, T, ng, d)
        v = (y @ W[p + "self_attn.v_proj.weight"].T).view(B, T, ng, d)
        if qwen3:  # Qwen3Attention: q_norm / k_norm over head_dim before RoPE
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q = q * cos + rotate_half(q) * sin  # apply_rotary_pos_emb
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, nh // ng), repeat_kv(v, nh // ng)
        attend = full_attention if bidirectional else causal_attention
        o = attend(q, k, v, d ** -0.5).transpose(1, 2).reshape(B, T, nh * d)
        x = r + o @ W[p + "self_attn.o_proj.weight"].T
        r = x
        y = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if moe and qwen3_moe_sparse(cfg, l):
            x = r + sparse_moe_block(cfg, W, p + "mlp.", y)
        else:
            x = r + swiglu_mlp(W, p + "mlp.", y)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", True) else W["lm_head.weight"]
    return x @ head.T


def forward(hf_dir, logits_path, perturb, tol=TOL):
    cfg = json.load(open(f"{hf_dir}/config.json"))
    W = load_dir(hf_dir)
    ref = load(logits_path)
    ids, want = ref["tokens"], ref["logits"]
    arch = cfg["architectures"][0]
    if perturb:
        name = "transformer.h.0.attn.c_attn.weight" if arch == "GPT2LMHeadModel" else "model.layers.0.self_attn.k_proj.weight"
        if perturb is not True:
            name = perturb
        W[name][1, 2] += 1e-2
        print(f"perturbed {name}[1, 2] by 1e-2")
    with torch.no_grad():
        if arch == "GPT2LMHeadModel":
            assert cfg["model_type"] == "gpt2"
            got = gpt2_forward(cfg, W, ids)
        elif arch == "DiffLM":
            # MegaDLMs' modeling_dlm.py: Qwen3-style attention (q_norm / k_norm over head_dim
            # before RoPE), causal only when attn_mask_type is not "bidirectional", lm_head
            # always read (tie_word_embeddings false in its export)
            assert "model_type" not in cfg and not cfg["tie_word_embeddings"]
            got = llama_forward(cfg, W, ids, True, cfg.get("attn_mask_type", "bidirectional") == "bidirectional")
        elif arch in ("LlamaForCausalLM", "Qwen3ForCausalLM"):
            assert cfg["model_type"] == ("llama" if arch == "LlamaForCausalLM" else "qwen3")
            got = llama_forward(cfg, W, ids, arch == "Qwen3ForCausalLM")
        elif arch == "Qwen3MoeForCausalLM":
            # Qwen3's attention (q_norm / k_norm always), Qwen3MoeSparseMoeBlock in the sparse
            # layers; tie_word_embeddings defaults to False in Qwen3MoeConfig
            assert cfg["model_type"] == "qwen3_moe"
            cfg.setdefault("tie_word_embeddings", False)
            got = llama_forward(cfg, W, ids, True, moe=True)
            if MARGINS:
                print(f"routing: smallest k-th / (k+1)-th probability margin {min(MARGINS):.3e}")
        else:
            print(f"FAIL: unknown architecture {arch}")
            return 1
    assert got.shape == want.shape, (got.shape, want.shape)
    rel = ((got - want).abs().max() / want.abs().max()).item()
    print(f"{arch}: logits {tuple(want.shape)}, max rel error {rel:.3e} (tolerance {tol:g})")
    return 0 if rel <= tol else 1


if __name__ == "__main__":
    torch.set_num_threads(2)
    if sys.argv[1] == "same":
        sys.exit(same(sys.argv[2], sys.argv[3]))
    if sys.argv[1] == "same-values":
        sys.exit(same_values(sys.argv[2], sys.argv[3]))
    tol = [float(a.split("=", 1)[1]) for a in sys.argv[4:] if a.startswith("--tol=")]
    perturb = [a.split("=", 1)[1] if "=" in a else True for a in sys.argv[4:] if a.startswith("--perturb")]
    sys.exit(forward(sys.argv[2], sys.argv[3], perturb[0] if perturb else False, tol[0] if tol else TOL))
