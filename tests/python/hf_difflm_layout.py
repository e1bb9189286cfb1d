"""The layout of a MegaDLMs DiffLM export, checked against what MegaDLMs' own converter writes,
as read from its sources (the MegaDLMs repository):

  tools/weights_conversion/megatron_to_hf_te.py
      write_fromscratch_model: per layer q/k/v/o_proj, q_norm, k_norm, gate/down/up_proj,
      input_layernorm, post_attention_layernorm (+ rotary_emb.inv_freq), then model.norm,
      lm_head (output_layer with --untieembed, else the embedding), model.embed_tokens;
      config = the template's, vocab_size = padded_vocab_size, max_position_embeddings =
      seq_length; model.save_pretrained(max_shard_size = param_count * 2 //
      max(1, num_output_shards - 1)), param_count counting every tensor above (inv_freq:
      head_dim / 2 values a layer); the template's other files copied (generation_config.json).
  tools/weights_conversion/hf_configs/gptneox_1.7b_dlm/config.json, generation_config.json
      the keys; architectures ["DiffLM"], auto_map, no model_type.
  tools/weights_conversion/hf_configs/gptneox_1.7b_dlm/modeling_dlm.py
      the shapes (DLMAttention, DLMMLP, DLMRMSNorm, DLMModel, DiffLM) and the state_dict order
      (module registration order); DLMRotaryEmbedding's inv_freq is a non-persistent buffer, so
      save_pretrained does not write it; every nn.Linear has bias=False.
  huggingface_hub split_state_dict_into_shards (what save_pretrained calls): in state_dict
      order, a tensor larger than the limit gets a shard of its own at once; otherwise a new
      shard is started when the tensor would take the current one over the limit; one shard is
      model.safetensors, more are model-0000i-of-0000N.safetensors with
      model.safetensors.index.json {"metadata": {"total_size"}, "weight_map"}.

    hf_difflm_layout.py HF_DIR layers=L hidden=H heads=A groups=G head_dim=D ffn=F vocab=V
        seq=S dtype=F32|BF16 mask=M eos=E shards=N theta=T eps=X [untied=0|1]

The expected values come from these arguments (the training flags), not from config.json.
"""
import json
import os
import struct
import sys


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def expected_tensors(p):
    """(name, shape) in DiffLM's state_dict order (modeling_dlm.py registration order)."""
    L, h, a, g, d, F, V = (p[k] for k in ("layers", "hidden", "heads", "groups", "head_dim", "ffn", "vocab"))
    out = [("model.embed_tokens.weight", [V, h])]
    for l in range(L):
        q = f"model.layers.{l}."
        out += [(q + "self_attn.q_proj.weight", [a * d, h]),
                (q + "self_attn.k_proj.weight", [g * d, h]),
                (q + "self_attn.v_proj.weight", [g * d, h]),
                (q + "self_attn.o_proj.weight", [h, a * d]),
                (q + "self_attn.q_norm.weight", [d]),
                (q + "self_attn.k_norm.weight", [d]),
                (q + "mlp.gate_proj.weight", [F, h]),
                (q + "mlp.up_proj.weight", [F, h]),
                (q + "mlp.down_proj.weight", [h, F]),
                (q + "input_layernorm.weight", [h]),
                (q + "post_attention_layernorm.weight", [h])]
    out += [("model.norm.weight", [h]), ("lm_head.weight", [V, h])]
    return out


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def expected_shards(p, tensors):
    esize = 2 if p["dtype"] == "BF16" else 4
    param_count = sum(numel(s) for _, s in tensors) + p["layers"] * (p["head_dim"] // 2)
    limit = param_count * 2 // max(1, p["shards"] - 1)
    shard_list, current, current_size = [], [], 0
    for name, shape in tensors:
        size = numel(shape) * esize
        if size > limit:
            shard_list.append([name])
            continue
        if current_size + size > limit:
            shard_list.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shard_list.append(current)
    if len(shard_list) == 1:
        return {n: "model.safetensors" for n in shard_list[0]}
    N = len(shard_list)
    return {n: f"model-{i + 1:05d}-of-{N:05d}.safetensors" for i, s in enumerate(shard_list) for n in s}


def check(hf_dir, p):
    bad = []
    tensors = expected_tensors(p)
    where = expected_shards(p, tensors)
    files = sorted(set(where.values()))
    index_path = os.path.join(hf_dir, "model.safetensors.index.json")
    if len(files) > 1:
        index = json.load(open(index_path))
        if index.get("weight_map") != where:
            bad.append(f"weight_map differs: {index.get('weight_map')} vs {where}")
        esize = 2 if p["dtype"] == "BF16" else 4
        total = sum(numel(s) for _, s in tensors) * esize
        if index.get("metadata") != {"total_size": total}:
            bad.append(f"index metadata {index.get('metadata')}, expected total_size {total}")
    elif os.path.exists(index_path):
        bad.append("an index for a single file")
    present = sorted(f for f in os.listdir(hf_dir) if f.endswith(".safetensors"))
    if present != files:
        bad.append(f"weight files {present}, expected {files}")
    seen = {}
    for f in present:
        h = read_header(os.path.join(hf_dir, f))
        if h.pop("__metadata__", {}).get("format") != "pt":
            bad.append(f"{f}: __metadata__.format is not pt")
        for name, info in h.items():
            seen[name] = (f, info["dtype"], info["shape"])
    for name, shape in tensors:
        want = (where[name], p["dtype"], shape)
        if seen.get(name) != want:
            bad.append(f"{name}: {seen.get(name)}, expected {want}")
    extra = set(seen) - {n for n, _ in tensors}
    if extra:
        bad.append(f"tensors MegaDLMs' export lacks: {sorted(extra)}")

    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    want = {
        "architectures": ["DiffLM"],
        "auto_map": {"AutoConfig": "configuration_dlm.DLMConfig",
                     "AutoModelForCausalLM": "modeling_dlm.DiffLM"},
        "hidden_act": "silu", "hidden_size": p["hidden"], "intermediate_size": p["ffn"],
        "max_position_embeddings": p["seq"], "num_attention_heads": p["heads"],
        "num_hidden_layers": p["layers"], "num_key_value_heads": p["groups"],
        "rms_norm_eps": p["eps"], "rope_theta": p["theta"], "rope_scaling": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16" if p["dtype"] == "BF16" else "float32",
        "use_sliding_window": False, "use_mrope": False, "vocab_size": p["vocab"],
        "mask_token_id": p["mask"], "attn_mask_type": "bidirectional", "eos_token_id": p["eos"],
    }
    for k, v in want.items():
        if cfg.get(k, "<absent>") != v:
            bad.append(f"config.json {k}: {cfg.get(k, '<absent>')!r}, expected {v!r}")
    template_keys = {"architectures", "auto_map", "attention_dropout", "eos_token_id", "hidden_act",
                     "hidden_size", "initializer_range", "intermediate_size",
                     "max_position_embeddings", "max_window_layers", "num_attention_heads",
                     "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_theta",
                     "sliding_window", "tie_word_embeddings", "torch_dtype", "use_cache",
                     "use_mrope", "use_sliding_window", "vocab_size", "mask_token_id",
                     "attn_mask_type"}
    missing = template_keys - set(cfg)
    if missing:
        bad.append(f"config.json lacks the template's keys {sorted(missing)}")
    if "model_type" in cfg:
        bad.append("config.json has a model_type (DLMConfig has none)")
    if p["head_dim"] * p["heads"] != p["hidden"] and cfg.get("head_dim") != p["head_dim"]:
        bad.append("config.json lacks head_dim != hidden / heads")
    gen = json.load(open(os.path.join(hf_dir, "generation_config.json")))
    for k, v in {"do_sample": False, "eos_token_id": p["eos"], "use_cache": True}.items():
        if gen.get(k, "<absent>") != v:
            bad.append(f"generation_config.json {k}: {gen.get(k, '<absent>')!r}, expected {v!r}")
    for b in bad:
        print("FAIL:", b)
    print(f"{len(tensors)} tensors in {len(files)} file(s), config.json {len(cfg)} keys: "
          f"{len(bad)} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    p = {}
    for kv in sys.argv[2:]:
        k, v = kv.split("=", 1)
        p[k] = v if k == "dtype" else float(v) if k in ("theta", "eps") else int(v)
    sys.exit(check(sys.argv[1], p))
