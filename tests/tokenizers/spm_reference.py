#!/usr/bin/python3
"""Trains small SentencePiece models on the KJV text and writes the
reference ids of Debian's python3-sentencepiece (0.1.97, the reference
implementation) for the tokenizer corpus.

    spm_reference.py CORPUS.json OUT_DIR
    spm_reference.py --ids MODEL CORPUS.json OUT.tsv   (one given model)

For each model NAME of MODELS it writes OUT_DIR/NAME.model (trained by
sentencepiece's trainer, the library behind Debian's spm_train, on every
KJV verse, one thread, so the same each run) and OUT_DIR/NAME.tsv: one
line per text, the text's bytes in hex, a tab, sentencepiece's ids
(EncodeAsIds), a tab, the bytes of sentencepiece's DecodeIds of those ids
in hex (tests/tokenizer_reference.c compares all three).

The texts are the corpus (hard strings, KJV verses and passages) and
EXTRA below: text the normalizers rewrite (NFKC compatibility forms,
full-width and half-width letters, ligatures, circled digits), runs of
spaces at the start, middle and end, the pieces' own spellings (<s>,
<unk>, <0x41>), the user-defined symbols, and invalid UTF-8 (given to
sentencepiece as bytes, which it accepts: each malformed byte becomes
U+FFFD).  Nothing is committed; ctest runs this as a fixture.
"""
import json
import os
import sys

import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import kjv_text  # noqa: E402

# Models as the checkpoints people use have them:
#  llama-bpe: Llama's settings (BPE, byte fallback, digits split, identity
#             normalization, no removal of extra whitespace, dummy prefix);
#  t5-unigram: T5's / Marian's (unigram, nmt_nfkc, extra whitespace
#             removed, unknown characters <unk>);
#  unigram-bytes: unigram with byte fallback and user-defined symbols;
#  bpe-nfkc: BPE with nmt_nfkc, no byte fallback, a control symbol.
MODELS = {
    "llama-bpe": dict(model_type="bpe", vocab_size=3000, byte_fallback=True,
                      split_digits=True, normalization_rule_name="identity",
                      remove_extra_whitespaces=False, add_dummy_prefix=True,
                      character_coverage=0.9999, unk_id=0, bos_id=1, eos_id=2,
                      allow_whitespace_only_pieces=True),
    "t5-unigram": dict(model_type="unigram", vocab_size=4000,
                       normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1,
                       unk_id=2, bos_id=-1),
    "unigram-bytes": dict(model_type="unigram", vocab_size=3000,
                          byte_fallback=True, character_coverage=0.999,
                          user_defined_symbols=["<sep>", "LORD", "[[x]]"],
                          normalization_rule_name="nfkc"),
    "bpe-nfkc": dict(model_type="bpe", vocab_size=2500,
                     normalization_rule_name="nmt_nfkc",
                     control_symbols=["<mask>"], character_coverage=0.9995),
}

EXTRA = [
    "", " ", "   ", "\t\n", " leading", "trailing ", "  two  spaces  ",
    "a  b   c    d", "\u3000ideographic\u3000space", "\u00a0nbsp\u00a0",
    "\uff21\uff22\uff23 full width \uff11\uff12\uff13", "\uff76\uff80\uff76\uff85",
    "\ufb01nd the \ufb02ow", "\u2460\u2461\u2462 circled", "\u212b \u00c5 A\u030a",
    "\u1e9b\u0323", "e\u0301te\u0301", "\u2126\u03a9", "x\u00b2 + y\u00b3",
    "\u2163 Roman", "\u3392 \u33a1", "\u00bd \u2153", "\u2026...",
    "<s> </s> <unk> <pad> <mask> <sep> <0x41>", "LORD LORDS lord", "[[x]][[x]]x",
    "\u2581 already a meta space \u2581\u2581", "tab\there\tand\rcr",
    "\u0000nul\u0001ctl", "\u200b\u200c\u200d\ufeff", "\U0001f600\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U00010348 gothic",
    "\ud55c\uad6d\uc5b4", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "12345678901234567890", "3.14159 and 2,718", "   \n   \n",
]

INVALID = [b"\xff", b"a\xffb", b"\xc3", b"ab\xc3", b"\xe2\x96",
           b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong", b"\xf4\x90\x80\x80",
           b"ok \x80\x80 ok", b"\xef\xbf\xbd literal"]


def train(name, opts, text_path, out_dir):
    prefix = os.path.join(out_dir, name)
    args = dict(input=text_path, model_prefix=prefix, num_threads=1,
                input_sentence_size=0, shuffle_input_sentence=False,
                minloglevel=2)
    args.update(opts)
    spm.SentencePieceTrainer.train(**args)
    return prefix + ".model"


def write_reference(sp, texts, out_path):
    """sentencepiece's ids and decoding of each text, as a .tsv line."""
    n_ids = 0
    with open(out_path, "w") as out:
        for t in texts:
            ids = sp.EncodeAsIds(t)
            back = sp.DecodeIds(ids).encode("utf-8")
            n_ids += len(ids)
            out.write("%s\t%s\t%s\n" % (t.hex(), " ".join(map(str, ids)),
                                        back.hex()))
    return n_ids


def main():
    if sys.argv[1] == "--ids":  # --ids MODEL CORPUS.json OUT.tsv
        sp = spm.SentencePieceProcessor(model_file=sys.argv[2])
        with open(sys.argv[3], encoding="utf-8") as f:
            texts = [t.encode("utf-8") for t in json.load(f)]
        print("%d ids" % write_reference(sp, texts, sys.argv[4]))
        return
    corpus_path, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    with open(corpus_path, encoding="utf-8") as f:
        texts = [t.encode("utf-8") for t in json.load(f)]
    texts += [t.encode("utf-8") for t in EXTRA] + INVALID
    text_path = os.path.join(out_dir, "kjv.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        f.write("\n".join(kjv_text.kjv_verses()) + "\n")
    for name, opts in MODELS.items():
        model = train(name, opts, text_path, out_dir)
        sp = spm.SentencePieceProcessor(model_file=model)
        n_ids = write_reference(sp, texts, os.path.join(out_dir, name + ".tsv"))
        print("%s: %d pieces, %d texts, %d ids" % (name, sp.GetPieceSize(),
                                                   len(texts), n_ids))


if __name__ == "__main__":
    main()
