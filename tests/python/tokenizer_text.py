#!/usr/bin/python3
"""Deterministic test text for the tokenizer tests (standard library only).

    tokenizer_text.py SEED BYTES [KJV.jsonl] > text

Writes about BYTES bytes of lines mixing English with contractions (any case), runs of spaces
and tabs (leading, inner, trailing), other Unicode spaces, digits and numbers of several
scripts, ASCII punctuation runs, JSON and code, accented Latin (precomposed and with combining
marks), Greek, Cyrillic, Arabic, Hebrew, Devanagari, Thai, CJK, kana, Hangul and emoji (with
ZWJ sequences, skin tones, flags). With KJV.jsonl, every line of its "text" fields follows.

Left out on purpose (see docs/DATA.md, "GPT2BPETokenizer and gpt-3-encoder"): U+0085 and
U+FEFF, where JavaScript's \\s (gpt-3-encoder) and Python's (GPT-2's encoder.py, Megatron)
disagree, and characters assigned after Unicode 14 (PCRE2 10.42's tables). Only valid UTF-8,
no '\\n' inside a line."""
import json
import random
import sys

WORDS = """the of and to in is that it was for on are with as his they be at one have this from
or had by word but what some we can out other were all there when up use your how said an each
she which do their time if will way about many then them write would like so these her long
make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under
name very through just form sentence great think say help low line differ turn cause much mean
before move right boy old too same tell does set three want air well also play small end put
home read hand port large spell add even land here must big high such follow act why ask men
change went light kind off need house picture try us again animal point mother world near build
self earth father head stand own page should country found answer school grow study still learn
plant cover food sun four between state keep eye never last let thought city tree cross farm
hard start might story saw far sea draw left late run while press close night real life few
north""".split()

CONTRACTIONS = ["don't", "I'm", "we'll", "they've", "she'd", "it's", "can't", "won't", "you're",
                "he'll", "I'd", "we've", "isn't", "DON'T", "I'M", "We'Ll", "it'S", "o'clock",
                "rock'n'roll", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''", "'", "y'all",
                "ma'am", "'twas", "'em", "l'été", "d'Artagnan", "’s", "don’t"]

SPACES = [" ", "  ", "   ", "    ", "\t", "\t\t", " \t", "\t ", "        ", " \r ", "\x0b",
          "\x0c", "\u00a0", "\u2002", "\u2003", "\u2009", "\u200a", "\u3000", "\u202f",
          "\u205f", "\u1680", "\u2028", "\u2029", " \u00a0 ", "\u200b", "\u180e", "\u2060"]

PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + [
    "...", "!!", "?!", "--", "---", "—", "–", "…", "«", "»", "“", "”", "‘", "’", "„", "¿", "¡",
    "•", "§", "¶", "©", "®", "™", "°", "±", "×", "÷", "€", "£", "¥", "₹", "¢", "‰", "→", "⇒",
    "∀", "∑", "√", "∞", "≠", "≤", "≥", "♥", "★", "☃", "♪", "✓", "、", "。", "，", "！", "？",
    "「", "」", "（", "）", "《", "》", "；", "：", "::", "->", "=>", "&&", "||", "<|", "|>",
    "<|endoftext|>", "##", "**", "__", "//", "/*", "*/", "<!--", "-->", "\\n", "\\t", "%d",
    "$$", "@@", "~~", "^^", ",,", ";;", "((", "))", "[[", "]]", "{{", "}}", "\",\"", "','",
    "\"],[\"", "},{", "],[", "','", "\".\"", "'.'"]

ACCENTED = ["café", "naïve", "résumé", "façade", "Ångström", "über", "Straße", "Ærø", "jalapeño",
            "señor", "crème brûlée", "Dvořák", "Łódź", "Zürich", "São Paulo", "Tiếng Việt",
            "Nguyễn", "ﬁnancial", "Œuvre", "İstanbul", "ışık", "Ελληνικά", "Ἀθῆναι",
            "cafe\u0301", "nai\u0308ve", "A\u030a", "e\u0301\u0301", "o\u0302\u0323",
            "n\u0303", "\u0301", "x\u0327\u0301", "ǅ", "ﬀ", "ℌ", "Ⅻ", "ǰ"]

SCRIPTS = ["Привет, мир", "Съешь же ещё этих мягких французских булок", "Ελληνική γλώσσα",
           "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Բարեւ աշխարհ",
           "გამარჯობა", "ሰላም ልዑል", "Здравей", "Україна", "Қазақстан", "ᏣᎳᎩ", "ᚠᚢᚦᚨᚱᚲ",
           "Հայերեն", "ܫܠܡܐ", "ދިވެހި", "ꦗꦮ", "ᠮᠣᠩᠭᠣᠯ"]

CJK = ["你好，世界", "我爱自然语言处理", "中华人民共和国", "今天天气很好。", "機械学習",
       "こんにちは世界", "カタカナ", "ひらがなとカタカナ", "東京都", "한국어 텍스트",
       "안녕하세요 세계", "대한민국", "漢字かな交じり文", "ｶﾀｶﾅ", "ＡＢＣ１２３", "㈱", "㍻"]

EMOJI = ["😀", "😂", "🤖", "🚀", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵",
         "❤️", "✨", "🎉🎉🎉", "🙂🙃", "🧑🏿‍🚀", "☺︎", "⌚", "🐍", "🀄", "🃏", "💯", "🔥🔥", "#️⃣",
         "1️⃣", "©️", "👋🏻 hi", "🤷‍♀️"]

NUMBERS = ["0", "7", "42", "123", "1234", "12345", "123456789012345678901234567890", "3.14159",
           "-273.15", "1e-9", "0x1F600", "2024-01-31", "12:34:56", "+1 (555) 010-9999",
           "1,000,000", "10%", "$19.99", "v1.2.3", "٠١٢٣٤٥٦٧٨٩", "۱۲۳", "०१२३", "１２３",
           "½", "¾", "²³", "⅔", "Ⅳ", "ⅻ", "①②③", "〇一二三", "𝟙𝟚𝟛", "௰", "፲"]

CODE = ['{"text": "hello", "id": 12, "ok": true}', "def f(x):\treturn x ** 2  # square",
        "for (int i = 0; i < n; i++) { a[i] += b[i]; }", "<div class=\"x\">&amp;</div>",
        "SELECT * FROM t WHERE a >= 10;", "x = [1, 2, 3][::-1]", "printf(\"%s\\n\", s);",
        "git commit -m 'fix: it's done'", "https://example.org/path?q=1&r=two#frag",
        "user@example.com", "C:\\\\Windows\\\\System32", "#include <stdio.h>",
        "$ ls -la | grep '^d'", "a=b&&c||d", "[[1,2],[3,4]]", "{'a': [\"b\", 'c']}",
        "\"\",\"\",\"\"", "'','',''", "],[],[", "(\"a\"),(\"b\")"]


def word(rng):
    w = rng.choice(WORDS)
    r = rng.random()
    if r < 0.1:
        w = w.capitalize()
    elif r < 0.13:
        w = w.upper()
    return w


def segment(rng):
    k = rng.random()
    if k < 0.40:
        return word(rng)
    if k < 0.48:
        return rng.choice(CONTRACTIONS)
    if k < 0.56:
        return rng.choice(PUNCT)
    if k < 0.62:
        return rng.choice(NUMBERS) if rng.random() < 0.6 else str(rng.randrange(10 ** rng.randint(1, 12)))
    if k < 0.68:
        return rng.choice(ACCENTED)
    if k < 0.73:
        return rng.choice(SCRIPTS)
    if k < 0.79:
        return rng.choice(CJK)
    if k < 0.84:
        return rng.choice(EMOJI)
    if k < 0.88:
        return rng.choice(CODE)
    if k < 0.94:
        return rng.choice(SPACES)
    # random characters from ranges whose categories are the same in every Unicode version
    # since 6.0: ASCII printables, Latin-1, Latin Extended-A, Greek, Cyrillic, CJK, Hangul
    lo, hi = rng.choice([(0x21, 0x7E), (0xA1, 0xFF), (0x100, 0x17F), (0x391, 0x3C9),
                         (0x410, 0x44F), (0x4E00, 0x9FA5), (0xAC00, 0xD7A3), (0x3041, 0x3096)])
    return "".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8)))


def line(rng):
    n = rng.choice([0, 1, 2, 3, 5, 8, 12, 20, 40])
    parts = []
    if rng.random() < 0.1:
        parts.append(rng.choice(SPACES))  # leading whitespace
    for _ in range(n):
        parts.append(segment(rng))
        r = rng.random()
        if r < 0.75:
            parts.append(" ")
        elif r < 0.85:
            parts.append(rng.choice(SPACES))
    if rng.random() < 0.15:
        parts.append(rng.choice(SPACES))  # trailing whitespace
    return "".join(parts)


def main():
    seed, size = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(seed)
    out = sys.stdout.buffer
    total = 0
    while total < size:
        s = line(rng).replace("\n", " ").encode("utf-8")
        out.write(s + b"\n")
        total += len(s) + 1
    if len(sys.argv) > 3:
        with open(sys.argv[3], encoding="utf-8") as f:
            for rec in f:
                if rec.strip():
                    for s in json.loads(rec)["text"].split("\n"):
                        out.write(s.encode("utf-8") + b"\n")


if __name__ == "__main__":
    main()
