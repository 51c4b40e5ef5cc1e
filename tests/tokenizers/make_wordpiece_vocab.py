#!/usr/bin/python3
"""Writes a WordPiece test vocabulary, as BERT's vocab.txt and as a Hugging
Face tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece,
TemplateProcessing "[CLS] $A [SEP] $B:1 [SEP]:1", WordPiece decoder).

No public BERT vocabulary is at hand, so this one is built from the King
James text (Debian's bible-kjv, tools/kjv_text.py): the special tokens, every
character of the text and of the even-numbered hard strings (alone and as
"##" + it; the others keep characters the vocabulary lacks), the
2,000 commonest words, the 1,500 commonest two- to four-letter word endings
as "##" pieces and the 300 commonest two- and three-letter word starts, and
the 500 CJK characters from U+4E00 on plus those of the hard strings.  Words
are cut as BERT's basic tokenizer would (whitespace, punctuation); with
--cased nothing is lower-cased and accents stay.

Usage: make_wordpiece_vocab.py [--cased] OUT_DIR
writes OUT_DIR/vocab.txt, OUT_DIR/tokenizer.json and
OUT_DIR/tokenizer_config.json (do_lower_case).
"""
import collections
import json
import os
import sys
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import kjv_text  # noqa: E402

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def words(text, cased):
    if not cased:
        text = unicodedata.normalize("NFD", text.lower())
        text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    out, cur = [], []
    for c in text:
        if c.isspace() or unicodedata.category(c).startswith("P") or \
                (c.isascii() and not c.isalnum()):
            if cur:
                out.append("".join(cur))
                cur = []
            if not c.isspace():
                out.append(c)
        else:
            cur.append(c)
    if cur:
        out.append("".join(cur))
    return out


def main():
    cased = "--cased" in sys.argv
    out_dir = [a for a in sys.argv[1:] if a != "--cased"][0]
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(HERE, "hard_strings.json"), encoding="utf-8") as f:
        hard = json.load(f)
    verses = kjv_text.kjv_verses()
    counts = collections.Counter()
    for v in verses:
        counts.update(words(v, cased))
    # Only the even-numbered hard strings lend their characters, so that the
    # others meet characters the vocabulary lacks ([UNK]).
    hard_words = collections.Counter()
    for h in hard[::2]:
        hard_words.update(words(h, cased))
    vocab, seen = [], set()

    def add(t):
        if t not in seen and t.strip() == t and t:
            seen.add(t)
            vocab.append(t)

    for t in SPECIALS:
        add(t)
    chars = sorted({c for w in list(counts) + list(hard_words) for c in w
                    if not unicodedata.category(c).startswith("C")})
    for c in chars:
        add(c)
    for c in chars:
        add("##" + c)
    for w, _ in counts.most_common(2000):
        add(w)
    ends, starts = collections.Counter(), collections.Counter()
    for w, n in counts.items():
        for k in (2, 3, 4):
            if len(w) > k:
                ends[w[-k:]] += n
        for k in (2, 3):
            if len(w) > k:
                starts[w[:k]] += n
    for e, _ in ends.most_common(1500):
        add("##" + e)
    for s, _ in starts.most_common(300):
        add(s)
    for cp in range(0x4E00, 0x4E00 + 500):
        add(chr(cp))
    with open(os.path.join(out_dir, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in vocab))
    ids = {t: i for i, t in enumerate(vocab)}
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": ids[t], "content": t, "single_word": False,
                          "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True}
                         for t in SPECIALS],
        "normalizer": {"type": "BertNormalizer", "clean_text": True,
                       "handle_chinese_chars": True, "strip_accents": None,
                       "lowercase": not cased},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                t: {"id": t, "ids": [ids[t]], "tokens": [t]}
                for t in ("[CLS]", "[SEP]")}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]",
                  "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w",
              encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w",
              encoding="utf-8") as f:
        json.dump({"do_lower_case": not cased, "tokenizer_class":
                   "BertTokenizer"}, f)


if __name__ == "__main__":
    main()
