#!/usr/bin/python3
"""Helpers of tests/scripts/test_hf_tokenizer.sh (standard library only).

  convert ENCODER.json VOCAB.bpe STYLE   print a Hugging Face tokenizer.json made of GPT-2's
                                         vocabulary and merges; STYLE:
      gpt2     GPT-2's own: ByteLevel pre-tokenizer (GPT-2 regex), merges as "a b" strings
      pairs    the same with merges as ["a", "b"] pairs (the newer format)
      neox     GPT-NeoX style: NFC normalizer, ByteLevel, <|endoftext|> at id 0 of the added
               tokens (here: GPT-2's 50256), |||IP_ADDRESS||| style added tokens
      qwen2    Qwen2 style: NFC, Sequence [Split(Qwen2's regex, Isolated), ByteLevel(no
               regex)], added <|endoftext|> <|im_start|> <|im_end|> and <|sep|> (lstrip and
               rstrip), merges as pairs
      bad-normalizer, bad-model, bad-pre, bad-single-word, bad-merge: refused variants
  bpe ENCODER.json VOCAB.bpe             stdin: JSONL, each line {"pieces": [...], ...}: the
                                         pieces are strings (each BPE-encoded on its own as
                                         one pre-token, with OpenAI's encoder.py bpe()) and
                                         ids (ints, copied); prints the ids of each line
  nfc                                    stdin -> unicodedata.normalize("NFC", stdin)
  nfc-text SEED LINES                    random lines for NFC: bases, combining marks of many
                                         classes (reordering), precomposed letters, Hangul
                                         jamo and syllables, singletons, composition
                                         exclusions, two-part Indic vowels, kana + voicing
  read PREFIX                            prints the ids of every document of an indexed
                                         dataset, one line per document
"""
import json
import struct
import sys
import unicodedata

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def load(encoder_path, bpe_path):
    encoder = json.load(open(encoder_path, encoding="utf-8"))
    lines = open(bpe_path, encoding="utf-8").read().split("\n")
    merges = [tuple(m.split()) for m in lines[1:] if m.strip()]
    return encoder, merges


def added(id_, content, special=True, lstrip=False, rstrip=False, single_word=False):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": False, "special": special}


def convert(encoder, merges, style):
    bytelevel = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True}
    tok = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(50256, "<|endoftext|>")],
        "normalizer": None,
        "pre_tokenizer": bytelevel,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                           "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": False, "vocab": encoder,
                  "merges": [a + " " + b for a, b in merges]},
    }
    pairs = [[a, b] for a, b in merges]
    if style == "pairs":
        tok["model"]["merges"] = pairs
    elif style == "neox":
        tok["normalizer"] = {"type": "NFC"}
        tok["added_tokens"] += [added(50257, "|||IP_ADDRESS|||", special=False),
                                added(50258, "|||EMAIL_ADDRESS|||", special=False)]
    elif style == "qwen2":
        tok["normalizer"] = {"type": "NFC"}
        tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]}
        tok["added_tokens"] = [added(50256, "<|endoftext|>"), added(50257, "<|im_start|>"),
                               added(50258, "<|im_end|>"),
                               added(50259, "<|sep|>", lstrip=True, rstrip=True)]
        tok["model"]["merges"] = pairs
        tok["model"]["vocab"] = {k: v for k, v in encoder.items() if k != "<|endoftext|>"}
    elif style == "bad-normalizer":
        tok["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "NFC"},
                                                                 {"type": "NFKC"}]}
    elif style == "bad-model":
        tok["model"] = {"type": "Unigram", "unk_id": 0, "vocab": [["a", 0.0]]}
    elif style == "bad-pre":
        tok["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁"}
    elif style == "bad-single-word":
        tok["added_tokens"].append(added(50257, "<mask>", single_word=True))
    elif style == "bad-merge":
        tok["model"]["merges"] = tok["model"]["merges"][:10] + ["Ġ zzzzqqq"]
    elif style != "gpt2":
        sys.exit("unknown style " + style)
    return tok


def bpe_encoder(encoder, merges):
    ranks = dict(zip(merges, range(len(merges))))
    b2u = bytes_to_unicode()

    def bpe(token):  # OpenAI's encoder.py
        word = tuple(token)
        pairs = set(zip(word, word[1:]))
        if not pairs:
            return [token]
        while True:
            bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
            if bigram not in ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = set(zip(word, word[1:]))
        return list(word)

    def encode_piece(piece):
        return [encoder[t] for t in bpe("".join(b2u[b] for b in piece.encode("utf-8")))]
    return encode_piece


NFC_ALPHABET = [
    (0x41, 0x5A), (0x61, 0x7A), (0x20, 0x20), (0x300, 0x36F), (0x591, 0x5BD), (0x610, 0x61A),
    (0x64B, 0x65F), (0x93C, 0x93C), (0x94D, 0x94D), (0xE38, 0xE3A), (0x1DC0, 0x1DF9),
    (0x20D0, 0x20F0), (0x302A, 0x302F), (0x3099, 0x309A), (0xFE20, 0xFE2F), (0xC0, 0x24F),
    (0x1E00, 0x1EFF), (0x1F00, 0x1FFE), (0x386, 0x3CE), (0x400, 0x45F), (0x1100, 0x1112),
    (0x1161, 0x1175), (0x11A8, 0x11C2), (0xAC00, 0xD7A3), (0x212A, 0x212B), (0x2126, 0x2126),
    (0x340, 0x344), (0x374, 0x374), (0x37E, 0x37E), (0x387, 0x387), (0x958, 0x95F),
    (0x9DC, 0x9DF), (0xA33, 0xA36), (0xA59, 0xA5E), (0xB5C, 0xB5D), (0xFB1D, 0xFB4E),
    (0xDD9, 0xDDF), (0xDCA, 0xDCF), (0xB47, 0xB57), (0xB3E, 0xB3E), (0xBC6, 0xBD7),
    (0xBBE, 0xBBE), (0x304B, 0x3062), (0x30AB, 0x30C2), (0x915, 0x939), (0x2ADC, 0x2ADC),
    (0x1D15E, 0x1D164), (0xF900, 0xFA0D), (0x2F800, 0x2F810), (0x1B05, 0x1B13), (0x1B35, 0x1B43),
]


def nfc_text(seed, lines):
    import random
    rng = random.Random(seed)
    for _ in range(lines):
        chars = []
        for _ in range(rng.randint(1, 24)):
            lo, hi = rng.choice(NFC_ALPHABET)
            c = rng.randint(lo, hi)
            if unicodedata.category(chr(c)) != "Cn" and not 0xD800 <= c <= 0xDFFF:
                chars.append(chr(c))
        sys.stdout.buffer.write("".join(chars).encode("utf-8") + b"\n")


def main():
    cmd = sys.argv[1]
    if cmd == "convert":
        encoder, merges = load(sys.argv[2], sys.argv[3])
        json.dump(convert(encoder, merges, sys.argv[4]), sys.stdout, ensure_ascii=False)
    elif cmd == "bpe":
        encoder, merges = load(sys.argv[2], sys.argv[3])
        enc = bpe_encoder(encoder, merges)
        for line in sys.stdin:
            ids = []
            for item in json.loads(line)["pieces"]:
                ids += [item] if isinstance(item, int) else enc(item)
            print(" ".join(map(str, ids)))
    elif cmd == "nfc":
        data = sys.stdin.buffer.read().decode("utf-8")
        sys.stdout.buffer.write(unicodedata.normalize("NFC", data).encode("utf-8"))
    elif cmd == "nfc-text":
        nfc_text(int(sys.argv[2]), int(sys.argv[3]))
    elif cmd == "read":
        prefix = sys.argv[2]
        idx = open(prefix + ".idx", "rb").read()
        data = open(prefix + ".bin", "rb").read()
        assert idx[:9] == b"MMIDIDX\x00\x00"
        size, fmt = {4: (4, "i"), 8: (2, "H")}[idx[17]]
        S, D = struct.unpack_from("<QQ", idx, 18)
        lens = struct.unpack_from("<%di" % S, idx, 34)
        ptrs = struct.unpack_from("<%dq" % S, idx, 34 + 4 * S)
        docs = struct.unpack_from("<%dq" % D, idx, 34 + 12 * S)
        for d in range(D - 1):
            ids = []
            for s in range(docs[d], docs[d + 1]):
                ids += struct.unpack_from("<%d%s" % (lens[s], fmt), data, ptrs[s])
            print(" ".join(map(str, ids)))
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
