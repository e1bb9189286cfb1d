#!/usr/bin/python3
"""Inputs of tests/scripts/test_hf_tokenizer_dirs.sh (standard library only).

  special-text SEED LINES TOKENIZER_DIR...  lines that put the added tokens of the directories
                     (their tokenizer.json added_tokens and special_tokens_map.json), pieces
                     of them, runs of spaces (GPT-NeoX has added tokens for runs of 2..24) and
                     words, digits, CJK, emoji and combining marks next to each other
  invalid-utf8 SEED LINES   lines of text with bytes that are not UTF-8: lone continuation
                     bytes, overlong leads (C0, C1), F5..FF, surrogates (ED A0 80), truncated
                     sequences, code points above U+10FFFF
  flags TOKENIZER.json      the tokenizer.json with added tokens that exercise HF's matching:
                     single_word, lstrip, rstrip, normalized (matched after NFC) and not
  flags-text SEED LINES     lines for the tokens of `flags`
  byte-fallback TOKENIZER.json   the tokenizer.json half turned SentencePiece-style
                     (byte_fallback, Llama 2's normalizer, no pre-tokenizer, but still its
                     ByteLevel decoder): refused, only Llama 2's exact shape is read
  specials DIR       "eos bos pad mask" token strings of a directory as transformers reads them
                     (special_tokens_map.json over tokenizer_config.json), one per line
  sp-dir KJV.jsonl OUT   a SentencePiece-style tokenizer directory shaped like Llama 2's
                     (byte_fallback with <0x00>..<0xFF>, U+2581 for spaces, no pre-tokenizer,
                     add_bos_token): its characters and 300 merges learned here, greedily, on
                     the first KJV chapters plus the words above; <s> <unk> </s> and
                     <|mask_token|> <|pad_token|> as Llama 2 has them, and added tokens matched
                     after normalization ("God", "the earth") or single_word + lstrip
"""
import json
import os
import random
import sys

WORDS = ["the", "of", "and", "God", "said", "light", "x", "Hello", "world", "123", "4567",
         "caf\u00e9", "cafe\u0301", "na\u00efve", "\u4f60\u597d", "\u3053\u3093\u306b\u3061\u306f",
         "\U0001F600", "\U0001F469\u200d\U0001F4bb", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629",
         "A\u030a", "\u212b", "don't", "I'M", "\t", "\u00a0", "\u3000", "_", "a_b", "42x",
         "\u0301", "def f(x):", "{\"a\": 1}", "--", "...", "!!", "'s", "\u2581", "\u0120"]


def added_contents(d):
    out = []
    tj = os.path.join(d, "tokenizer.json")
    if os.path.exists(tj):
        out += [a["content"] for a in json.load(open(tj, encoding="utf-8"))["added_tokens"]]
    sm = os.path.join(d, "special_tokens_map.json")
    if os.path.exists(sm):
        for v in json.load(open(sm, encoding="utf-8")).values():
            for x in v if isinstance(v, list) else [v]:
                out.append(x["content"] if isinstance(x, dict) else x)
    return sorted(set(out))


def special_text(seed, n, dirs):
    rng = random.Random(seed)
    toks = sorted(set(t for d in dirs for t in added_contents(d)))
    visible = [t for t in toks if t.strip()]
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.3:
                parts.append(rng.choice(visible))
            elif r < 0.4:
                t = rng.choice(visible)  # a piece of one
                parts.append(t[:rng.randint(1, len(t) - 1)] if len(t) > 1 else t)
            elif r < 0.6:
                parts.append(" " * rng.choice([1, 2, 3, 4, 7, 8, 16, 23, 24, 25, 30, 49]))
            else:
                parts.append(rng.choice(WORDS))
        print("".join(parts))


INVALID = [b"\x80", b"\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xf5\x80\x80\x80", b"\xff", b"\xfe\xff",
           b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xe2\x82", b"\xe2", b"\xf0\x9f\x98", b"\xf0\x9f",
           b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\xaf", b"\xc3", b"\xc3\xc3\xa9"]


def invalid_utf8(seed, n):
    rng = random.Random(seed)
    out = sys.stdout.buffer
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 10)):
            if rng.random() < 0.4:
                parts.append(rng.choice(INVALID))
            else:
                parts.append(rng.choice(WORDS + [" ", "  ", "<|endoftext|>"]).encode("utf-8"))
        out.write(b"".join(parts).replace(b"\n", b" ") + b"\n")


def added(id_, content, special=False, normalized=False, lstrip=False, rstrip=False,
          single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": normalized, "special": special}


FLAG_TOKENS = [  # content, flags
    ("<w>", dict(single_word=True)),
    ("sw", dict(single_word=True, normalized=True)),
    ("[L]", dict(lstrip=True)),
    ("[R]", dict(rstrip=True)),
    ("[LR]", dict(lstrip=True, rstrip=True, special=True)),
    ("cafe\u0301", dict(normalized=True)),        # matches "caf\u00e9" and "cafe\u0301" (NFC)
    ("A\u030a", dict(normalized=False)),          # only the decomposed form
    ("xyz", dict(normalized=True, single_word=True, lstrip=True)),
]


def flags(path):
    tok = json.load(open(path, encoding="utf-8"))
    nid = 1 + max([a["id"] for a in tok["added_tokens"]] + list(tok["model"]["vocab"].values()))
    for k, (content, f) in enumerate(FLAG_TOKENS):
        tok["added_tokens"].append(added(nid + k, content, **f))
    json.dump(tok, sys.stdout, ensure_ascii=False)


def flags_text(seed, n):
    rng = random.Random(seed)
    pieces = [c for c, _ in FLAG_TOKENS] + ["caf\u00e9", "\u00c5", "\u212b", "_", "1", "a", "\u00e9",
                                           " ", "  ", "\t", "\u3000", "\u0301", "\u4e2d", "-",
                                           "\U0001F600", "x", "xy", "<w", "sws"]
    for _ in range(n):
        print("".join(rng.choice(pieces) for _ in range(rng.randint(1, 10))))


def byte_fallback(path):
    tok = json.load(open(path, encoding="utf-8"))
    tok["model"]["byte_fallback"] = True
    tok["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    tok["pre_tokenizer"] = None
    json.dump(tok, sys.stdout, ensure_ascii=False)


def specials(d):
    vals = {}
    for f in ("tokenizer_config.json", "special_tokens_map.json"):  # the map wins
        p = os.path.join(d, f)
        if os.path.exists(p):
            for k, v in json.load(open(p, encoding="utf-8")).items():
                if k.endswith("_token") and v is not None:
                    vals[k] = v["content"] if isinstance(v, dict) else v
    for k in ("eos_token", "bos_token", "pad_token", "mask_token"):
        print(vals[k])


def sp_dir(kjv, out):
    text = " ".join(json.loads(l)["text"] for l in open(kjv, encoding="utf-8").readlines()[:20])
    text += " " + " ".join(WORDS * 20)
    words = {}
    for w in text.split(" "):
        if w:
            k = tuple("\u2581" + w)
            words[k] = words.get(k, 0) + 1
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for c in sorted(set(c for w in words for c in w)):
        vocab.setdefault(c, len(vocab))
    merges = []
    words = [[list(w), n] for w, n in words.items()]
    for _ in range(300):
        counts = {}
        for w, n in words:
            for p in zip(w, w[1:]):
                counts[p] = counts.get(p, 0) + n
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))
        merges.append(list(best))
        vocab.setdefault(best[0] + best[1], len(vocab))
        for wn in words:
            w, i = wn[0], 0
            while i < len(w) - 1:
                if (w[i], w[i + 1]) == best:
                    w[i:i + 2] = [best[0] + best[1]]
                i += 1
    n = len(vocab)
    added_list = [added(0, "<unk>", True), added(1, "<s>", True), added(2, "</s>", True),
                  added(n, "<|mask_token|>", True), added(n + 1, "<|pad_token|>", True),
                  added(n + 2, "God", normalized=True), added(n + 3, "the earth", normalized=True),
                  added(n + 4, "said", single_word=True, lstrip=True)]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_list,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges}}
    os.makedirs(out, exist_ok=True)
    json.dump(tok, open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8"),
              ensure_ascii=False)
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<|pad_token|>",
              "mask_token": "<|mask_token|>", "tokenizer_class": "LlamaTokenizer"}
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "special-text":
        special_text(int(args[0]), int(args[1]), args[2:])
    elif cmd == "invalid-utf8":
        invalid_utf8(int(args[0]), int(args[1]))
    elif cmd == "flags":
        flags(args[0])
    elif cmd == "flags-text":
        flags_text(int(args[0]), int(args[1]))
    elif cmd == "byte-fallback":
        byte_fallback(args[0])
    elif cmd == "specials":
        specials(args[0])
    elif cmd == "sp-dir":
        sp_dir(args[0], args[1])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
