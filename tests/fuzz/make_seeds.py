#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/NAME/seed-*), standard library
only: small valid inputs of each reader and a few edge cases. Inputs the fuzzers found
(crash-*, and corpus entries merged with scripts/fuzz.sh --merge) are kept beside them.

  make_seeds.py [STATE_JSON]   STATE_JSON: a state.json written by `megadlm train --save`
                               (its copy is the checkpoint_state seed "seed-train-state.json")
"""
import json
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = b"\n--next-file--\n"  # FUZZ_SEP of fuzz_util.h
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import hf_tokenizer_json as hfj  # noqa: E402


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- indexed dataset: .idx + SEP + .bin
DT = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "d", 7: "f", 8: "H"}


def idx_bin(docs, code):
    """docs: list of documents, each a list of sequences (lists of ints)."""
    seqs = [s for d in docs for s in d]
    bin_ = b"".join(struct.pack("<%d%s" % (len(s), DT[code]), *s) for s in seqs)
    lens = [len(s) for s in seqs]
    size = struct.calcsize(DT[code])
    ptrs, p = [], 0
    for n in lens:
        ptrs.append(p)
        p += n * size
    didx, k = [0], 0
    for d in docs:
        k += len(d)
        didx.append(k)
    idx = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, code, len(seqs), len(didx))
    idx += struct.pack("<%di" % len(lens), *lens) + struct.pack("<%dq" % len(ptrs), *ptrs)
    idx += struct.pack("<%dq" % len(didx), *didx)
    return idx + SEP + bin_


docs = [[[72, 101, 108, 108, 111, 10]], [[1, 2, 3], [4, 5]], [], [[7] * 40]]
for code in (1, 2, 3, 4, 5, 6, 7, 8):
    put("indexed_dataset", "dtype%d" % code, idx_bin(docs, code))
put("indexed_dataset", "empty", idx_bin([], 8))
put("indexed_dataset", "empty-sequence", idx_bin([[[]], [[9]]], 4))
put("indexed_dataset", "truncated-bin", idx_bin(docs, 8)[:-3])
put("indexed_dataset", "header-only", idx_bin(docs, 8)[:34])


# ---- safetensors
def st(tensors, meta=None, pad=True):
    """tensors: (name, dtype, shape, bytes)."""
    hdr, off = {}, 0
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, dt, shape, data in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(t[3] for t in tensors)


f32 = lambda *v: struct.pack("<%df" % len(v), *v)  # noqa: E731
w = f32(*[0.5 * i - 1 for i in range(12)])
b = f32(1.0, -2.0, 3.5)
put("safetensors", "checkpoint", st(
    [("embedding.word_embeddings.weight", "F32", [4, 3], w),
     ("decoder.final_layernorm.bias", "F32", [3], b)],
    {"format": "pt", "crc32.embedding.word_embeddings.weight": "%08x" % zlib.crc32(w),
     "crc32.decoder.final_layernorm.bias": "%08x" % zlib.crc32(b)}))
put("safetensors", "dtypes", st(
    [("h", "F16", [2, 2], struct.pack("<4e", 1.0, -0.5, 65504.0, 0.0)),
     ("bf", "BF16", [3], bytes([0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f])),
     ("i", "I64", [2], struct.pack("<2q", 1, -1)), ("u8", "U8", [3], b"abc"),
     ("bool", "BOOL", [1], b"\x01"), ("d", "F64", [1], struct.pack("<d", 2.5)),
     ("e", "F8_E4M3", [2], b"\x01\x02")]))
put("safetensors", "scalar-and-empty", st(
    [("scalar", "F32", [], f32(7.0)), ("empty", "F32", [0, 5], b""), ("x", "F32", [1], f32(1))]))
put("safetensors", "nothing", st([], {}))
put("safetensors", "bad-crc", st([("t", "F32", [2], f32(1, 2))], {"crc32.t": "zzzzzzzz"}))
put("safetensors", "unpadded", st([("t", "F32", [1, 1, 1, 1, 1, 1, 1, 1], f32(3))], pad=False))

# ---- checkpoint state.json / tracker (the same bytes go to both files)
state = {"iteration": 1, "consumed_train_samples": 4, "optimizer_step": 1, "format_version": 1,
         "args": {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                  "seq_length": 64, "max_position_embeddings": 64, "micro_batch_size": 2,
                  "global_batch_size": 4, "train_iters": 3, "lr": 0.001,
                  "tokenizer_type": "NullTokenizer", "vocab_size": 100, "mock_data": True,
                  "data_path": ["a", "b"], "data_weights": [0.3, 0.7], "data_weighted": 1,
                  "num_data_paths": 2}}
put("checkpoint_state", "minimal.json", json.dumps(state, indent=1))
put("checkpoint_state", "no-args.json", json.dumps({k: v for k, v in state.items() if k != "args"}))
put("checkpoint_state", "tracker", "1\n")
put("checkpoint_state", "tracker-release", "release")
put("checkpoint_state", "tracker-nul", b"4\x00junk")
put("checkpoint_state", "tracker-big", "99999999999\n")
if len(sys.argv) > 1:
    put("checkpoint_state", "train-state.json", open(sys.argv[1], "rb").read())

# ---- GPT-2 / HF tokenizers: the 256 byte symbols, merges learned from a sample, end of text
b2u = hfj.bytes_to_unicode()
encoder = {b2u[i]: i for i in range(256)}
sample = ("In the beginning God created the heaven and the earth. And the earth was without "
          "form, and void; and darkness was upon the face of the deep. 'tis 1234 café naïve")
words = [list("".join(b2u[c] for c in (" " + wd if k else wd).encode()))
         for k, wd in enumerate(sample.split(" "))]
merges = []
for _ in range(60):  # byte-pair merges as GPT-2 learned them, on the sample
    counts = {}
    for wd in words:
        for p in zip(wd, wd[1:]):
            counts[p] = counts.get(p, 0) + 1
    if not counts:
        break
    best = max(counts, key=lambda p: (counts[p], p))
    merges.append(best)
    encoder.setdefault(best[0] + best[1], len(encoder))
    for wd in words:
        i = 0
        while i < len(wd) - 1:
            if (wd[i], wd[i + 1]) == best:
                wd[i:i + 2] = [best[0] + best[1]]
            i += 1
encoder["<|endoftext|>"] = len(encoder)
vocab_json = json.dumps(encoder, ensure_ascii=False).encode()
merges_txt = ("#version: 0.2\n" + "".join("%s %s\n" % m for m in merges)).encode()
put("gpt2_tokenizer", "small", vocab_json + SEP + merges_txt)
put("gpt2_tokenizer", "small-text", vocab_json + SEP + merges_txt + SEP +
    "And God said, Let there be light: and there was light.\r\n\u00e9\u0301 \U0001F600".encode())
put("gpt2_tokenizer", "no-version-line", vocab_json + SEP + "".join("%s %s\n" % m for m in merges[:5]).encode())
put("gpt2_tokenizer", "no-eod", json.dumps({k: v for k, v in encoder.items() if k != "<|endoftext|>"}).encode() + SEP + merges_txt)
put("gpt2_tokenizer", "bad-merge", vocab_json + SEP + b"#version: 0.2\nzz qq\n")

n = len(encoder)
for style in ("gpt2", "pairs", "neox", "qwen2", "bad-normalizer", "bad-pre", "bad-single-word"):
    tok = hfj.convert(dict(encoder), list(merges), style)
    for k, a in enumerate(tok["added_tokens"]):  # ids next to the small vocabulary
        a["id"] = n - 1 + k if style != "qwen2" else n + k
    if style == "qwen2":
        tok["model"]["ignore_merges"] = True
    put("hf_tokenizer", style + ".json", json.dumps(tok, ensure_ascii=False))
put("hf_tokenizer", "gpt2-text", json.dumps(hfj.convert(dict(encoder), list(merges), "gpt2")).encode()
    + SEP + "<|endoftext|>  God  said\n\n\u0041\u030a \u212b".encode())

# added-token flags (normalized tokens matched after NFC, single_word, lstrip, rstrip)
flags_tok = hfj.convert(dict(encoder), list(merges), "neox")
flags_tok["added_tokens"] = [hfj.added(n - 1, "<|endoftext|>")] + [
    dict(hfj.added(n + k, c, special=False), **f) for k, (c, f) in enumerate([
        ("<w>", {"single_word": True}), ("[L]", {"lstrip": True}), ("[R]", {"rstrip": True}),
        ("cafe\u0301", {"normalized": True}), ("the", {"normalized": True, "single_word": True})])]
put("hf_tokenizer", "flags.json", json.dumps(flags_tok, ensure_ascii=False).encode() + SEP +
    "the<w> <w> [L]  [R]  x caf\u00e9 cafe\u0301 theme the_ th\u00e9 \u212b".encode())
# no tokens for the bytes UTF-8 never holds (GPT-NeoX): invalid text is decoded lossily
lossy = hfj.convert(dict(encoder), list(merges), "neox")
for b in [0xC0, 0xC1] + list(range(0xF5, 0x100)):
    lossy["model"]["vocab"].pop(b2u[b], None)
put("hf_tokenizer", "no-invalid-bytes.json", json.dumps(lossy, ensure_ascii=False).encode() + SEP +
    b"ok \xc0\x80 \xff\xfe \xed\xa0\x80 \xe2\x82 \xf0\x9f\x98 \xf4\x90\x80\x80 end")
sp = hfj.convert(dict(encoder), list(merges), "neox")
sp["model"]["byte_fallback"] = True
sp["pre_tokenizer"] = None
put("hf_tokenizer", "byte-fallback.json", json.dumps(sp, ensure_ascii=False))
# SentencePiece style, Llama 2's shape: byte fallback, U+2581 for spaces, no pre-tokenizer
spv = {"<unk>": 0, "<s>": 1, "</s>": 2}
spv.update({"<0x%02X>" % b: 3 + b for b in range(256)})
for t in ["\u2581", "t", "h", "e", "a", "n", "d", "\u2581t", "\u2581th", "\u2581the", "an", "and"]:
    spv.setdefault(t, len(spv))
llama = {"version": "1.0", "added_tokens": [hfj.added(0, "<unk>"), hfj.added(1, "<s>"),
                                             hfj.added(2, "</s>")],
         "normalizer": {"type": "Sequence", "normalizers": [
             {"type": "Prepend", "prepend": "\u2581"},
             {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
         "pre_tokenizer": None, "post_processor": None,
         "decoder": {"type": "Sequence", "decoders": [
             {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
             {"type": "ByteFallback"}, {"type": "Fuse"},
             {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                   "continuing_subword_prefix": None, "end_of_word_suffix": None,
                   "fuse_unk": True, "byte_fallback": True, "ignore_merges": False, "vocab": spv,
                   "merges": [["\u2581", "t"], ["\u2581t", "h"], ["\u2581th", "e"], ["a", "n"],
                              ["an", "d"]]}}
put("hf_tokenizer", "llama-shape.json", json.dumps(llama, ensure_ascii=False).encode() + SEP +
    "the and <s>thee\u00e9 \u4e2d  \U0001F600</s>".encode() + b" \xff\xc3")

# ---- HF tokenizer directory: tokenizer.json, tokenizer_config.json, special_tokens_map.json,
# added_tokens.json (an empty part: the file is absent), text
def tok_dir(tok, config, tmap, added, text=""):
    parts = [json.dumps(x, ensure_ascii=False).encode() if x is not None else b""
             for x in (tok, config, tmap, added)]
    return SEP.join(parts) + (SEP + text.encode() if text else b"")


neox = hfj.convert(dict(encoder), list(merges), "neox")
neox["added_tokens"] = [hfj.added(n - 1, "<|endoftext|>")]
mask = {"content": "<|mask_token|>", "lstrip": False, "normalized": False, "rstrip": False,
        "single_word": False}
config = {"add_bos_token": False, "add_eos_token": False, "bos_token": "<|endoftext|>",
          "eos_token": "<|endoftext|>", "pad_token": "<|pad_token|>", "mask_token": "<|mask_token|>",
          "additional_special_tokens": ["<|x0|>"],
          "added_tokens_decoder": {str(n): dict(mask, special=True),
                                   str(n + 1): dict(mask, content="  ", normalized=True)}}
tmap = {"eos_token": {"content": "<|endoftext|>"}, "mask_token": mask,
        "pad_token": "<|pad_token|>", "additional_special_tokens": [dict(mask, content="<|x0|>")]}
put("hf_tokenizer_dir", "neox-style", tok_dir(neox, config, tmap, {"<|pad_token|>": n + 2},
                                              "God  said<|mask_token|>  <|x0|><|pad_token|>"))
put("hf_tokenizer_dir", "tokenizer-json-only", tok_dir(neox, None, None, None))
put("hf_tokenizer_dir", "no-eos", tok_dir(neox, {"pad_token": "<|endoftext|>"}, None, None))
put("hf_tokenizer_dir", "add-bos", tok_dir(neox, dict(config, add_bos_token=True), None, None))
put("hf_tokenizer_dir", "bad-config", tok_dir(neox, {"eos_token": 5,
                                                     "added_tokens_decoder": {"x": 1}}, None, {"a": -1}))
put("hf_tokenizer_dir", "empty", b"")
put("hf_tokenizer_dir", "llama-shape", tok_dir(llama, {"add_bos_token": True, "bos_token": "<s>",
                                                       "eos_token": "</s>"}, None, None, "the x"))
put("hf_tokenizer_dir", "decoder-list", tok_dir(neox, dict(config, added_tokens_decoder=[1, "a"]),
                                                None, None))

# ---- preprocess: JSONL lines (keys text and title), also read as .txt with NullTokenizer ids
put("preprocess_jsonl", "lines.jsonl",
    '{"text": "In the beginning God created the heaven and the earth.", "title": "Genesis"}\n'
    '{"text": ["And the earth was without form,", "", "and void."], "title": ["1", "2"]}\n'
    '\n   \n'
    '{"text": "caf\\u00e9 \\ud83d\\ude00 \\u0000 nul", "title": ""}\n'
    '{"title": "no text"}\n'
    '[1, 2, 3]\n'
    '{"text": 5, "title": "x"}\n'
    '{"text": "trailing"} garbage\n'
    '{"text": "no newline at the end", "title": "t"}')
put("preprocess_jsonl", "ids.txt", "1 2 3\n4 5\n\n\n49999 0\n\t\n7\r\n8 x\n")
put("preprocess_jsonl", "crlf.jsonl", '{"text": "a\\r\\nb", "title": "c"}\r\n{"text": "d", "title": "e"}\r\n')

# ---- HF config.json of convert --from hf
gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 384,
        "n_positions": 64, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 256,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "resid_pdrop": 0.1,
        "attn_pdrop": 0.1, "scale_attn_weights": True, "tie_word_embeddings": True,
        "initializer_range": 0.02}
llama = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64,
         "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu",
         "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
         "rope_scaling": None, "attention_bias": False, "mlp_bias": False,
         "tie_word_embeddings": False, "initializer_range": 0.02}
qwen3 = dict(llama, model_type="qwen3", use_sliding_window=False, sliding_window=None,
             tie_word_embeddings=True)
put("hf_config", "gpt2.json", json.dumps(gpt2, indent=2))
put("hf_config", "llama.json", json.dumps(llama, indent=2))
put("hf_config", "qwen3.json", json.dumps(qwen3, indent=2))
put("hf_config", "gpt2-refused.json", json.dumps(dict(gpt2, activation_function="relu", n_head=3)))
put("hf_config", "llama-missing.json", json.dumps({k: v for k, v in llama.items() if k != "hidden_size"}))
put("hf_config", "no-model-type.json", json.dumps({"vocab_size": 10}))
