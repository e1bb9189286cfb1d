#!/usr/bin/python3
"""Checks of --bf16 checkpoints and of loads across precisions, independent of megadlm.

Reads the safetensors files with check_safetensors.py's reader (struct, json, numpy) and
rounds with PyTorch's own float32 -> bfloat16 conversion (round to nearest even). Nothing
here comes from megadlm. ITER arguments are iteration directories (DIR/iter_NNNNNNN).

Commands (driven by tests/scripts/test_bf16_checkpoint.sh):
  saved ITER              a --bf16 run's checkpoint: model.safetensors holds BF16 tensors that
                          are torch's rounding of the optimizer file's fp32 main parameters
                          (optimizer.fp32_param.<name>), every crc32 matches, state.json says
                          params_dtype "bfloat16"
  f32-to-bf16 SRC OUT     OUT (saved by a --bf16 run that loaded the fp32 checkpoint SRC and took
                          no step): main parameters = SRC's parameters bit for bit, the model's
                          bf16 = their rounding, moments = SRC's
  bf16-to-f32 SRC OUT MODE  OUT (saved by an fp32 run that loaded the --bf16 checkpoint SRC and
                          took no step): parameters = SRC's fp32 main parameters (MODE main) or
                          SRC's BF16 values widened (MODE widen: no optimizer state loaded, zero
                          moments)
  hf ITER HFDIR           `convert --to hf` of a --bf16 checkpoint: torch_dtype "bfloat16", every
                          tensor BF16, the tensors that map one to one equal to the checkpoint's
  hf-import HFDIR ITER    `convert --from hf` of a BF16 Hugging Face model: F32 tensors equal to
                          the BF16 values widened
  widen SRC DST           writes DST (an fp32 checkpoint: state.json, model.safetensors of F32
                          tensors) from the --bf16 checkpoint SRC, its BF16 values widened
"""
import json
import os
import shutil
import struct
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_safetensors import check, read_safetensors  # noqa: E402  (the independent reader)

import torch  # noqa: E402


def tensors(path):
    """{name: (dtype, shape, raw bytes)} in file order, and the metadata; checks every crc32."""
    header, buf, _ = read_safetensors(path)
    meta = header.get("__metadata__", {})
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = buf[b:e]
        want = meta.get("crc32." + name)
        if want is not None:
            check(want == "%08x" % zlib.crc32(raw), f"{path}: {name}: crc32 {want} does not match")
        out[name] = (info["dtype"], info["shape"], raw)
    return out, meta


def f32(raw):
    return np.frombuffer(raw, dtype="<f4")


def bf16_bits(raw):
    return np.frombuffer(raw, dtype="<u2")


def torch_round(x):
    """float32 array -> bfloat16 bit patterns, by PyTorch (round to nearest even)."""
    t = torch.from_numpy(np.array(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def widen(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(
        a.view(np.uint8), b.view(np.uint8))


def load_ckpt(it):
    model, _ = tensors(os.path.join(it, "model.safetensors"))
    opath = os.path.join(it, "optimizer.safetensors")
    opt = tensors(opath)[0] if os.path.exists(opath) else {}
    with open(os.path.join(it, "state.json")) as f:
        state = json.load(f)
    return model, opt, state


def cmd_saved(it):
    model, opt, state = load_ckpt(it)
    check(state.get("params_dtype") == "bfloat16", f"{it}/state.json: params_dtype "
          f"{state.get('params_dtype')!r}, expected 'bfloat16'")
    check(state["args"].get("bf16") is True, f"{it}/state.json: args.bf16 is not true")
    names = list(model)
    order = [f"optimizer.{g}.{n}" for g in ("exp_avg", "exp_avg_sq", "fp32_param") for n in names]
    check(list(opt) == order, f"{it}/optimizer.safetensors: tensors {list(opt)[:4]}..., expected "
          "every exp_avg, every exp_avg_sq, every fp32_param in the model's order")
    changed = 0
    for n in names:
        dt, shape, raw = model[n]
        check(dt == "BF16", f"{it}/model.safetensors: {n} is {dt}, expected BF16")
        for g in ("exp_avg", "exp_avg_sq", "fp32_param"):
            odt, oshape, _ = opt[f"optimizer.{g}.{n}"]
            check(odt == "F32" and oshape == shape, f"{it}: optimizer.{g}.{n}: {odt} {oshape}")
        main = f32(opt[f"optimizer.fp32_param.{n}"][2])
        check(np.array_equal(bf16_bits(raw), torch_round(main)),
              f"{it}: {n}: the BF16 tensor is not torch's rounding of its fp32 main parameters")
        changed += int(np.count_nonzero(widen(bf16_bits(raw)) != main))
    check(changed > 0, f"{it}: the fp32 main parameters are all bf16 values (nothing to round)")
    print(f"ok: {it}: {len(names)} BF16 parameters = torch's rounding of the fp32 main parameters "
          f"({changed} values differ from them); {len(opt)} F32 optimizer tensors; crc32s match")


def cmd_f32_to_bf16(src, out):
    sm, so, _ = load_ckpt(src)
    om, oo, ostate = load_ckpt(out)
    check(ostate.get("params_dtype") == "bfloat16", f"{out}: params_dtype is not bfloat16")
    for n, (dt, _, raw) in sm.items():
        check(dt == "F32", f"{src}: {n} is {dt}, expected an fp32 checkpoint")
        x = f32(raw)
        check(same_bits(f32(oo[f"optimizer.fp32_param.{n}"][2]), x),
              f"{out}: {n}: the fp32 main parameters are not the fp32 checkpoint's")
        check(np.array_equal(bf16_bits(om[n][2]), torch_round(x)),
              f"{out}: {n}: the bf16 parameters are not torch's rounding of the fp32 checkpoint's")
        for g in ("exp_avg", "exp_avg_sq"):
            k = f"optimizer.{g}.{n}"
            check(same_bits(f32(oo[k][2]), f32(so[k][2])), f"{out}: {k} differs from {src}'s")
    print(f"ok: fp32 -> bf16: {len(sm)} main parameters bit for bit, bf16 rounded by torch, "
          "moments kept")


def cmd_bf16_to_f32(src, out, mode):
    sm, so, _ = load_ckpt(src)
    om, oo, ostate = load_ckpt(out)
    check(ostate.get("params_dtype") == "float32", f"{out}: params_dtype is not float32")
    check(not any(k.startswith("optimizer.fp32_param.") for k in oo),
          f"{out}: an fp32 checkpoint holds fp32_param tensors")
    for n, (dt, _, raw) in sm.items():
        check(dt == "BF16", f"{src}: {n} is {dt}, expected a --bf16 checkpoint")
        check(om[n][0] == "F32", f"{out}: {n} is {om[n][0]}, expected F32")
        want = (f32(so[f"optimizer.fp32_param.{n}"][2]) if mode == "main"
                else widen(bf16_bits(raw)))
        check(same_bits(f32(om[n][2]), want), f"{out}: {n}: not the {mode} values of {src}")
        for g in ("exp_avg", "exp_avg_sq"):
            k = f"optimizer.{g}.{n}"
            got = f32(oo[k][2])
            if mode == "main":
                check(same_bits(got, f32(so[k][2])), f"{out}: {k} differs from {src}'s")
            else:
                check(not np.any(got), f"{out}: {k}: not zero without the optimizer state")
    print(f"ok: bf16 -> fp32 ({mode}): {len(sm)} parameters as expected")


# tensors of the Hugging Face files equal to a checkpoint's tensor as they are (no permutation)
HF_SAME = {"model.embed_tokens.weight": "embedding.word_embeddings.weight",
           "model.norm.weight": "decoder.final_layernorm.weight",
           "lm_head.weight": "output_layer.weight",
           "model.layers.0.self_attn.o_proj.weight":
               "decoder.layers.0.self_attention.linear_proj.weight",
           "model.layers.0.mlp.down_proj.weight": "decoder.layers.0.mlp.linear_fc2.weight",
           "transformer.wte.weight": "embedding.word_embeddings.weight",
           "transformer.wpe.weight": "embedding.position_embeddings.weight",
           "transformer.ln_f.weight": "decoder.final_layernorm.weight",
           "transformer.ln_f.bias": "decoder.final_layernorm.bias"}


def cmd_hf(it, hf):
    model, _, _ = load_ckpt(it)
    with open(os.path.join(hf, "config.json")) as f:
        cfg = json.load(f)
    check(cfg.get("torch_dtype") == "bfloat16", f"{hf}/config.json: torch_dtype "
          f"{cfg.get('torch_dtype')!r}, expected 'bfloat16'")
    out, _ = tensors(os.path.join(hf, "model.safetensors"))
    for n, (dt, _, _) in out.items():
        check(dt == "BF16", f"{hf}/model.safetensors: {n} is {dt}, expected BF16")
    compared = 0
    for h, m in HF_SAME.items():
        if h not in out:
            continue
        check(out[h][2] == model[m][2], f"{hf}: {h} differs from the checkpoint's {m}")
        compared += 1
    check(compared >= 3, f"{hf}: only {compared} tensors compared")
    print(f"ok: {hf}: torch_dtype bfloat16, {len(out)} BF16 tensors, {compared} equal to the "
          "checkpoint's bit for bit")


def cmd_hf_import(hf, it):
    src, _ = tensors(os.path.join(hf, "model.safetensors"))
    model, _, state = load_ckpt(it)
    check(state.get("params_dtype") == "float32", f"{it}: params_dtype is not float32")
    compared = 0
    for h, m in HF_SAME.items():
        if h not in src:
            continue
        check(src[h][0] == "BF16" and model[m][0] == "F32", f"{it}: {m}: dtypes")
        check(same_bits(f32(model[m][2]), widen(bf16_bits(src[h][2]))),
              f"{it}: {m} is not {hf}'s {h} widened")
        compared += 1
    check(compared >= 3, f"{it}: only {compared} tensors compared")
    print(f"ok: {it}: F32 tensors = the BF16 model's widened ({compared} compared)")


def cmd_widen(src, dst):
    model, _, state = load_ckpt(src)
    os.makedirs(dst)
    state["params_dtype"] = "float32"
    state["args"]["bf16"] = False
    with open(os.path.join(dst, "state.json"), "w") as f:
        json.dump(state, f)
    header, data, at = {}, [], 0
    for n, (_, shape, raw) in model.items():
        b = widen(bf16_bits(raw)).astype("<f4").tobytes()
        header[n] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + len(b)]}
        data.append(b)
        at += len(b)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(data))
    shutil.copy(os.path.join(os.path.dirname(src), "latest_checkpointed_iteration.txt"),
                os.path.join(os.path.dirname(dst), "latest_checkpointed_iteration.txt"))
    print(f"ok: wrote {dst}: {len(model)} F32 tensors widened from {src}")


def main():
    cmds = {"saved": (cmd_saved, 1), "f32-to-bf16": (cmd_f32_to_bf16, 2),
            "bf16-to-f32": (cmd_bf16_to_f32, 3), "hf": (cmd_hf, 2),
            "hf-import": (cmd_hf_import, 2), "widen": (cmd_widen, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds or len(sys.argv) != 2 + cmds[sys.argv[1]][1]:
        sys.exit(__doc__)
    fn, _ = cmds[sys.argv[1]]
    fn(*sys.argv[2:])


if __name__ == "__main__":
    main()
