#!/usr/bin/python3
"""Independent safetensors reader/writer for checking megadlm's implementation.

Written from the format description (https://github.com/huggingface/safetensors, README
"Format"): 8-byte little-endian u64 header length N, N bytes of UTF-8 JSON
{"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}},
then the byte buffer (offsets relative to its start), tensors row-major little-endian.
Uses only struct, json, zlib, numpy and torch -- nothing from megadlm.

Commands (driven by tests/scripts/test_safetensors_python.sh):
  read-c FILE                 check a file written by `write_safetensors write` bit for bit
  write-py FILE EXPECT.json   write a file from Python; EXPECT.json holds what a reader
                              must report (dtype, shape, offsets, float32 bits, metadata)
  compare DUMP.json EXPECT.json   compare `write_safetensors dump` output with EXPECT.json
  check-ckpt DIR              check a checkpoint directory written by `write_safetensors ckpt`
  read-c16 FILE               check a file written by `write_safetensors write16`: BF16 and F16
                              tensors that megadlm converted from floats, read with torch

16-bit values: what megadlm must give for float32 bits x is torch's x.to(torch.bfloat16) /
x.to(torch.float16), except for NaNs, where megadlm keeps the sign and the top payload bits and
sets the quiet bit (src/core/kernels/bf16.h; torch gives one canonical NaN).
"""
import json
import os
import struct
import sys
import zlib

import numpy as np

# torch is imported only where used (read-c, write-py): it takes a second to import.

DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}

# Must match g_tensors in tests/tools/write_safetensors.c (same order).
C_TENSORS = [
    ("decoder.layers.0.self_attention.linear_qkv.weight", [24, 8]),
    ("embedding.word_embeddings.weight", [33, 8]),
    ("decoder.final_layernorm.weight", [8]),
    ("block.3d", [2, 3, 4]),
    ("scalar", []),
    ("empty", [0, 4]),
    ("n\u00e4me with \"quotes\", \\backslash and unicode \u2211", [3]),
]


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def formula_bits(n, k):
    """bits[i] = (uint32)(i * 2654435761 + k * 40503 + 12345), as in write_safetensors.c."""
    i = np.arange(n, dtype=np.uint64)
    return ((i * np.uint64(2654435761) + np.uint64(k * 40503 + 12345)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def finite_formula_bits(n, k):
    """formula_bits with NaN / infinity patterns made finite (bit 23 cleared), as the
    checkpoint of `write_safetensors ckpt` (a checkpoint never holds a non-finite value)."""
    b = formula_bits(n, k)
    special = (b & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    return np.where(special, b ^ np.uint32(0x00800000), b).astype(np.uint32)


def to16(f32_bits, dtype):
    """Bits of float32 values (bit patterns) rounded to torch.bfloat16 / torch.float16 by torch,
    NaNs by megadlm's quiet-NaN rule."""
    import torch
    x = np.asarray(f32_bits, dtype=np.uint32)
    got = torch.from_numpy(x.view(np.float32).copy()).to(dtype).view(torch.int16).numpy().view(np.uint16)
    a = x & np.uint32(0x7FFFFFFF)
    nan = a > np.uint32(0x7F800000)
    if dtype == torch.bfloat16:
        rule = ((x >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    else:
        rule = (((x >> np.uint32(16)) & np.uint32(0x8000)) | np.uint32(0x7E00)
                | ((a >> np.uint32(13)) & np.uint32(0x3FF))).astype(np.uint16)
    return np.where(nan, rule, got).astype(np.uint16)


def read_safetensors(path):
    """Parses and validates a file; returns (header dict in file order, buffer bytes, N)."""
    with open(path, "rb") as f:
        data = f.read()
    check(len(data) >= 8, f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    check(8 + n <= len(data), f"{path}: header length {n} past the end of the file")
    raw = data[8:8 + n]
    text = raw.decode("utf-8")  # strict: raises on invalid UTF-8
    check(text.startswith("{"), f"{path}: header does not start with '{{'")
    header = json.loads(text)  # json.loads accepts trailing whitespace (the padding)
    check(isinstance(header, dict), f"{path}: header is not an object")
    # duplicate keys: json keeps the last one; count them with a hook
    pairs = json.loads(text, object_pairs_hook=lambda p: p)
    names = [k for k, _ in pairs]
    check(len(names) == len(set(names)), f"{path}: duplicate keys in the header")
    buf = data[8 + n:]
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            check(isinstance(info, dict) and all(isinstance(v, str) for v in info.values()),
                  f"{path}: __metadata__ is not a map of strings")
            continue
        check(info["dtype"] in DTYPE_SIZE, f"{path}: {name}: unknown dtype {info['dtype']}")
        shape = info["shape"]
        check(all(isinstance(d, int) and d >= 0 for d in shape), f"{path}: {name}: bad shape")
        b, e = info["data_offsets"]
        check(0 <= b <= e <= len(buf), f"{path}: {name}: offsets [{b}, {e}] outside the buffer")
        check(int(np.prod(shape, dtype=np.int64)) * DTYPE_SIZE[info["dtype"]] == e - b,
              f"{path}: {name}: shape {shape} does not match offsets [{b}, {e}]")
        if e > b:
            spans.append((b, e, name))
    spans.sort()
    cursor = 0
    for b, e, name in spans:
        check(b == cursor, f"{path}: {name}: begins at {b}, expected {cursor} (gap or overlap)")
        cursor = e
    check(cursor == len(buf), f"{path}: buffer has {len(buf) - cursor} unindexed trailing bytes")
    return header, buf, n


def tensor_bytes(header, buf, name):
    b, e = header[name]["data_offsets"]
    return buf[b:e]


def cmd_read_c(path):
    import torch
    header, buf, n = read_safetensors(path)
    check(n % 8 == 0, f"{path}: header length {n} is not a multiple of 8")
    with open(path, "rb") as f:
        f.seek(8)
        raw = f.read(n)
    stripped = raw.rstrip(b" ")
    check(stripped.endswith(b"}") and len(raw) - len(stripped) < 8,
          f"{path}: header must be the JSON then fewer than 8 spaces")
    keys = list(header.keys())
    check(keys[0] == "__metadata__", f"{path}: __metadata__ is not first: {keys[:2]}")
    check(keys[1:] == [t[0] for t in C_TENSORS],
          f"{path}: tensors not in the given order: {keys[1:]}")
    meta = header["__metadata__"]
    check(meta.get("format") == "pt", f"{path}: metadata format = {meta.get('format')!r}")
    check(meta.get("note") == "h\u00e9llo \"json\"\n\ttab", f"{path}: metadata note = {meta.get('note')!r}")
    cursor = 0
    for k, (name, shape) in enumerate(C_TENSORS):
        info = header[name]
        check(info["dtype"] == "F32", f"{name}: dtype {info['dtype']}")
        check(info["shape"] == shape, f"{name}: shape {info['shape']} != {shape}")
        b, e = info["data_offsets"]
        check(b == cursor, f"{name}: data not contiguous in the given order ({b} != {cursor})")
        cursor = e
        raw_t = tensor_bytes(header, buf, name)
        numel = int(np.prod(shape, dtype=np.int64))
        got = np.frombuffer(raw_t, dtype="<u4")
        want = formula_bits(numel, k)
        check(got.shape == (numel,) and np.array_equal(got, want), f"{name}: values differ")
        crc = "%08x" % (zlib.crc32(raw_t) & 0xFFFFFFFF)
        check(meta.get("crc32." + name) == crc, f"{name}: crc32 {meta.get('crc32.' + name)} != {crc}")
        # and through torch, reshaped: bit patterns must survive
        if numel:
            t = torch.frombuffer(bytearray(raw_t), dtype=torch.float32).reshape(shape)
            check(np.array_equal(t.view(torch.int32).numpy().view(np.uint32).reshape(-1), want),
                  f"{name}: torch view differs")
    print(f"ok: {path}: {len(C_TENSORS)} tensors, header {n} bytes, buffer {len(buf)} bytes")


def cmd_write_py(path, expect_path):
    import torch
    rng = np.random.default_rng(1234)
    f32 = rng.integers(0, 2**32, size=(5, 7), dtype=np.uint64).astype(np.uint32)
    f32[0, :4] = [0x7FC00001, 0xFF800000, 0x80000000, 0x00000001]  # NaN payload, -inf, -0, denormal
    f16 = np.array([[1.0, -2.5, 65504.0], [6.1e-5, 5.96e-8, -0.0],
                    [np.inf, -np.inf, np.nan], [0.1, 3.14159, -1e-7]], dtype=np.float16)
    bf16_bits = np.array([0x3F80, 0xC049, 0x0001, 0x7F80, 0xFFC1, 0x8000], dtype=np.uint16)
    odd_f16 = np.array([1.5, -0.25, 1024.0], dtype=np.float16)  # 6 bytes: makes the next F32 unaligned
    scalar = np.array(2.75, dtype=np.float32)
    empty = np.zeros((3, 0), dtype=np.float32)
    uni = "p\u00fd.t\u00e9nsor \u2603"
    # (name, dtype, shape, little-endian bytes, float32 bits a reader must report)
    bf16_as_f32 = torch.from_numpy(bf16_bits.view(np.int16).copy()).view(torch.bfloat16).float()
    tensors = [
        ("odd.f16", "F16", [3], odd_f16.astype("<f2").tobytes(), odd_f16.astype(np.float32).view(np.uint32)),
        ("f32.random", "F32", [5, 7], f32.astype("<u4").tobytes(), f32.reshape(-1)),
        ("f16.values", "F16", [4, 3], f16.astype("<f2").tobytes(), f16.astype(np.float32).view(np.uint32).reshape(-1)),
        ("bf16.values", "BF16", [6], bf16_bits.astype("<u2").tobytes(), bf16_as_f32.numpy().view(np.uint32)),
        ("f32.scalar", "F32", [], scalar.astype("<f4").tobytes(), scalar.reshape(1).view(np.uint32)),
        ("f32.empty", "F32", [3, 0], b"", np.zeros(0, dtype=np.uint32)),
        (uni, "F32", [2], np.array([1.0, -1.0], dtype="<f4").tobytes(), np.array([1.0, -1.0], dtype=np.float32).view(np.uint32)),
    ]
    # Data in list order; header lists tensors in reverse order, metadata last.
    offsets, pos = {}, 0
    for name, _, _, raw, _ in tensors:
        offsets[name] = [pos, pos + len(raw)]
        pos += len(raw)
    meta = {"format": "pt", "writer": "check_safetensors.py", "\u00fcnicode": "\u2713"}
    header = {}
    for name, dt, shape, _, _ in reversed(tensors):
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": offsets[name]}
    header["__metadata__"] = meta
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw, _ in tensors:
            f.write(raw)
    # read as BF16 / F16 by megadlm (st_read_as): the F32 value rounded (an F16 or BF16 value
    # read as its own dtype is its bits, which the rounding of its exact F32 value gives back)
    expect = {"metadata": meta, "tensors": {
        name: {"dtype": dt, "shape": shape, "data_offsets": offsets[name],
               "f32_bits": [int(x) for x in bits],
               "bf16_bits": [int(x) for x in to16(bits, torch.bfloat16)],
               "f16_bits": [int(x) for x in to16(bits, torch.float16)]}
        for name, dt, shape, _, bits in tensors}}
    with open(expect_path, "w", encoding="utf-8") as f:
        json.dump(expect, f, ensure_ascii=False)
    read_safetensors(path)  # our own writer passes our own reader
    print(f"ok: wrote {path} ({len(tensors)} tensors)")


# Must match g_tensors16 in tests/tools/write_safetensors.c: (name, dtype, shape, formula k or
# None for the raw bf16 patterns (j * 40503 + 7) & 0xffff).
C_TENSORS16 = [("w.bf16", "BF16", [6, 50], 0), ("w.f16", "F16", [7, 30], 1), ("w.f32", "F32", [5], 2),
               ("raw.bf16", "BF16", [3, 4], None), ("big.bf16", "BF16", [140001], 3),
               ("empty.f16", "F16", [0, 3], 4)]


def cmd_read_c16(path):
    import torch
    header, buf, n = read_safetensors(path)
    names = [k for k in header if k != "__metadata__"]
    check(names == [t[0] for t in C_TENSORS16], f"{path}: tensors {names}")
    tdt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    for name, dt, shape, k in C_TENSORS16:
        info = header[name]
        check(info["dtype"] == dt and info["shape"] == shape, f"{name}: {info}")
        raw = tensor_bytes(header, buf, name)
        numel = int(np.prod(shape, dtype=np.int64))
        if k is None:
            want = ((np.arange(numel, dtype=np.uint64) * 40503 + 7) & 0xFFFF).astype(np.uint16)
        elif dt == "F32":
            want = formula_bits(numel, k)
        else:
            want = to16(formula_bits(numel, k), tdt[dt])
        got = np.frombuffer(raw, dtype="<u2" if dt != "F32" else "<u4")
        check(np.array_equal(got, want), f"{name}: bits differ")
        if numel:  # and torch reads them as that dtype, the same values
            t = torch.frombuffer(bytearray(raw), dtype=tdt[dt]).reshape(shape)
            itype = torch.int16 if dt != "F32" else torch.int32
            check(np.array_equal(t.view(itype).numpy().reshape(-1).view(want.dtype), want),
                  f"{name}: torch view differs")
    print(f"ok: {path}: {len(C_TENSORS16)} tensors (BF16, F16 written from floats)")


def cmd_compare(dump_path, expect_path):
    with open(dump_path, encoding="utf-8") as f:
        got = json.load(f)
    with open(expect_path, encoding="utf-8") as f:
        want = json.load(f)
    check(got["metadata"] == want["metadata"], f"metadata {got['metadata']} != {want['metadata']}")
    check(sorted(got["tensors"]) == sorted(want["tensors"]),
          f"tensor names {sorted(got['tensors'])} != {sorted(want['tensors'])}")
    for name, w in want["tensors"].items():
        g = got["tensors"][name]
        for key in ("dtype", "shape", "data_offsets"):
            check(g[key] == w[key], f"{name}: {key} {g[key]} != {w[key]}")
        for key in ("f32_bits", "bf16_bits", "f16_bits"):
            check(key in g, f"{name}: no {key} in the dump")
            gb, wb = g[key], w[key]
            check(len(gb) == len(wb), f"{name}: {len(gb)} {key}, expected {len(wb)}")
            for i, (a, b) in enumerate(zip(gb, wb)):
                check(a == b, f"{name}[{i}]: {key} {a:#x}, expected {b:#x}")
    print(f"ok: {dump_path} matches {expect_path} ({len(want['tensors'])} tensors)")


def cmd_check_ckpt(d):
    with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "rb") as f:
        check(f.read() == b"7", "tracker does not hold exactly '7'")
    entries = sorted(os.listdir(d))
    check(entries == ["iter_0000007", "latest_checkpointed_iteration.txt"], f"{d}: {entries}")
    it = os.path.join(d, "iter_0000007")
    check(sorted(os.listdir(it)) == ["model.safetensors", "optimizer.safetensors", "state.json"],
          f"{it}: {sorted(os.listdir(it))}")
    with open(os.path.join(it, "state.json")) as f:
        st = json.load(f)
    check(st == {"iteration": 7, "consumed_train_samples": 56, "optimizer_step": 7,
                 "params_dtype": "float32", "args": {"hidden_size": 8}, "format_version": 1},
          f"state.json: {st}")
    for fname, groups in (("model.safetensors", [("", 0)]),
                          ("optimizer.safetensors", [("optimizer.exp_avg.", 100),
                                                     ("optimizer.exp_avg_sq.", 200)])):
        path = os.path.join(it, fname)
        header, buf, n = read_safetensors(path)
        meta = header["__metadata__"]
        check(n % 8 == 0, f"{path}: header not padded")
        names = [k for k in header if k != "__metadata__"]
        check(names == [p + t[0] for p, _ in groups for t in C_TENSORS], f"{path}: names {names}")
        for prefix, base in groups:
            for k, (name, shape) in enumerate(C_TENSORS):
                full = prefix + name
                check(header[full]["shape"] == shape and header[full]["dtype"] == "F32",
                      f"{path}: {full}: {header[full]}")
                raw = tensor_bytes(header, buf, full)
                numel = int(np.prod(shape, dtype=np.int64))
                check(np.array_equal(np.frombuffer(raw, dtype="<u4"), finite_formula_bits(numel, base + k)),
                      f"{path}: {full}: values differ")
                crc = "%08x" % (zlib.crc32(raw) & 0xFFFFFFFF)
                check(meta.get("crc32." + full) == crc, f"{path}: {full}: crc32 differs")
    print(f"ok: checkpoint {d}")


def main(argv):
    cmds = {"read-c": (cmd_read_c, 1), "write-py": (cmd_write_py, 2), "read-c16": (cmd_read_c16, 1),
            "compare": (cmd_compare, 2), "check-ckpt": (cmd_check_ckpt, 1)}
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    cmds[argv[1]][0](*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
