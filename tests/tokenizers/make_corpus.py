#!/usr/bin/python3
"""Writes the tokenizer test corpus as a JSON array of strings.

The corpus is the hard strings of hard_strings.json (contractions, runs of
spaces and newlines, emoji, CJK, accents, digits, code) followed by King
James verses from Debian's bible-kjv (tools/kjv_text.py): every tenth verse
of the 31,102 (3,111 verses), and 20 passages of 50 consecutive verses
joined by newlines, so that long texts with newlines are covered too.

Usage: make_corpus.py OUT.json
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import kjv_text  # noqa: E402


def corpus():
    with open(os.path.join(HERE, "hard_strings.json"), encoding="utf-8") as f:
        texts = json.load(f)
    verses = kjv_text.kjv_verses()
    texts += verses[::10]
    for start in range(0, len(verses) - 50, len(verses) // 20):
        texts.append("\n".join(verses[start:start + 50]))
    return texts


def main():
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(corpus(), f, ensure_ascii=False)


if __name__ == "__main__":
    main()
