#!/usr/bin/python3
"""Writes a SentencePiece model as the tokenizer.json that Hugging Face's
converters make of it (transformers' convert_slow_tokenizer.py: the
LlamaConverter for BPE models, the T5Converter for unigram ones), as the
checkpoints people download hold them:

    spm_tokenizer_json.py FORM MODEL OUT.json   (OUT's folder is made)

FORM is one of
  llama-legacy     Llama 2's file: BPE with byte fallback and fuse_unk, the
                   merges generate_merges() makes (every split of a piece
                   into two pieces, by the piece's score), the normalizer
                   Sequence[Prepend("▁"), Replace(" ", "▁")], no
                   pre-tokenizer, the decoder Sequence[Replace("▁", " "),
                   ByteFallback, Fuse, Strip(" ", 1, 0)], and
                   LlamaTokenizerFast's post-processor "<s> $A" /
                   "<s> $A <s> $B";
  llama-metaspace  the same with legacy=False: no normalizer, the
                   pre-tokenizer Metaspace("▁", prepend_scheme "first",
                   split false);
  t5               T5's file: Unigram (the pieces and scores, unk_id) with
                   the 100 <extra_id_N> tokens appended, the normalizer
                   Precompiled (the model's own charsmap, base64), the
                   pre-tokenizer Sequence[WhitespaceSplit, Metaspace("▁",
                   add_prefix_space)], the Metaspace decoder and the
                   post-processor "$A </s>" / "$A </s> $B </s>".

Control pieces (type 3) and the unknown piece are special added tokens,
user-defined pieces (type 4) added tokens that are not special, as the
converters' SentencePieceExtractor.  The model file is read with
sentencepiece's own protobuf (python3-sentencepiece's
sentencepiece_model_pb2, Debian's python3-protobuf).  Nothing is
committed; ctest runs this as a fixture.
"""
import base64
import json
import os
import sys

from sentencepiece import sentencepiece_model_pb2

SPACE = "\u2581"


def added_token(i, content, special):
    return {"id": i, "content": content, "single_word": False,
            "lstrip": False, "rstrip": False, "normalized": False,
            "special": special}


def generate_merges(vocab, scores):
    """transformers' generate_merges(vocab, vocab_scores): every split of a
    piece into two pieces, the pieces in order of score (highest first),
    then shorter left parts first; splits of one piece by the ids of their
    parts."""
    merges = []
    for piece, score in scores:
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: (m[2], len(m[0]), len(m[1])), reverse=True)
    return [[m[0], m[1]] for m in merges]


def template(single, pair, specials):
    def items(spec):
        out = []
        for tok in spec.split():
            name, type_id = tok.split(":")
            if name.startswith("$"):
                out.append({"Sequence": {"id": name[1:],
                                         "type_id": int(type_id)}})
            else:
                out.append({"SpecialToken": {"id": name,
                                             "type_id": int(type_id)}})
        return out
    return {"type": "TemplateProcessing", "single": items(single),
            "pair": items(pair),
            "special_tokens": {name: {"id": name, "ids": [i],
                                      "tokens": [name]}
                               for name, i in specials}}


def main():
    form, model_path, out = sys.argv[1:4]
    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    pieces = [(p.piece, p.score, p.type) for p in proto.pieces]
    unk_id = proto.trainer_spec.unk_id
    added = [added_token(i, p, t != 4) for i, (p, _, t) in enumerate(pieces)
             if t in (2, 3, 4)]
    if form.startswith("llama"):
        vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
        scores = [(p, s) for p, s, _ in pieces]
        model = {"type": "BPE", "dropout": None,
                 "unk_token": pieces[unk_id][0],
                 "continuing_subword_prefix": None,
                 "end_of_word_suffix": None, "fuse_unk": True,
                 "byte_fallback": bool(proto.trainer_spec.byte_fallback),
                 "ignore_merges": False,
                 "vocab": vocab, "merges": generate_merges(vocab, scores)}
        bos = pieces[proto.trainer_spec.bos_id][0]
        post = template(f"{bos}:0 $A:0", f"{bos}:0 $A:0 {bos}:1 $B:1",
                        [(bos, proto.trainer_spec.bos_id)])
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE},
             "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
        if form == "llama-legacy":
            normalizer = {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": SPACE},
                {"type": "Replace", "pattern": {"String": " "},
                 "content": SPACE}]}
            pre = None
        elif form == "llama-metaspace":
            normalizer = None
            pre = {"type": "Metaspace", "replacement": SPACE,
                   "prepend_scheme": "first", "split": False}
        else:
            sys.exit(f"unknown form {form}")
    elif form == "t5":
        vocab = [[p, s] for p, s, _ in pieces]
        for k in range(99, -1, -1):
            vocab.append([f"<extra_id_{k}>", 0.0])
            added.append(added_token(len(vocab) - 1, f"<extra_id_{k}>", True))
        model = {"type": "Unigram", "unk_id": unk_id, "vocab": vocab,
                 "byte_fallback": bool(proto.trainer_spec.byte_fallback)}
        charsmap = proto.normalizer_spec.precompiled_charsmap
        normalizer = {"type": "Precompiled",
                      "precompiled_charsmap":
                          base64.b64encode(charsmap).decode("ascii")}
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "WhitespaceSplit"},
            {"type": "Metaspace", "replacement": SPACE,
             "add_prefix_space": True}]}
        decoder = {"type": "Metaspace", "replacement": SPACE,
                   "add_prefix_space": True}
        eos = proto.trainer_spec.eos_id
        post = template(f"$A:0 {pieces[eos][0]}:0",
                        f"$A:0 {pieces[eos][0]}:0 $B:1 {pieces[eos][0]}:1",
                        [(pieces[eos][0], eos)])
    else:
        sys.exit(f"unknown form {form}")
    doc = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": added, "normalizer": normalizer,
           "pre_tokenizer": pre, "post_processor": post, "decoder": decoder,
           "model": model}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
