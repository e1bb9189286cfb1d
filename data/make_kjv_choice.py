#!/usr/bin/env python3
"""Writes kjv_choice.jsonl: a small multiple-choice task from the bundled corpus (kjv.jsonl),
in lm-evaluation-harness's / llm.c's HellaSwag layout ({"ctx", "endings", "label"}) that
`megadlm eval` scores. Each example is a verse of 12 to 40 words cut after its first half:
"ctx" is the chapter's reference and the verse's first half, the endings are the true second
half and the second halves of three other verses (of the whole corpus), in a random order; "label" is the true one's index. Chance is 25%.

Deterministic: Python's random.Random(SEED) draws the verses, the distractors and the order.
usage: python3 data/make_kjv_choice.py [N] > data/kjv_choice.jsonl   (N examples, default 300)
"""
import json
import random
import sys

SEED = 30
HERE = __file__.rsplit("/", 1)[0] if "/" in __file__ else "."


def verses():
    """(reference, text) of every verse of kjv.jsonl, in order."""
    out = []
    with open(f"{HERE}/kjv.jsonl", encoding="utf-8") as f:
        for line in f:
            lines = json.loads(line)["text"].split("\n")
            chapter = lines[0]
            for v in lines[1:]:
                num, _, text = v.partition(" ")
                out.append((f"{chapter}:{num}", text.strip()))
    return out


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    rng = random.Random(SEED)
    all_verses = verses()
    usable = [i for i, (_, t) in enumerate(all_verses) if 12 <= len(t.split()) <= 40]
    halves = {}
    for i in usable:
        words = all_verses[i][1].split()
        cut = len(words) // 2
        halves[i] = (" ".join(words[:cut]), " ".join(words[cut:]))
    for i in rng.sample(usable, n):
        others = []
        while len(others) < 3:
            j = rng.choice(usable)
            if j != i and j not in others and halves[j][1] != halves[i][1]:
                others.append(j)
        endings = [halves[i][1]] + [halves[j][1] for j in others]
        order = list(range(4))
        rng.shuffle(order)
        ref = all_verses[i][0]
        print(json.dumps({"ctx": f"{ref} {halves[i][0]}", "endings": [endings[k] for k in order],
                          "label": order.index(0), "source": ref}))


if __name__ == "__main__":
    main()
