#!/usr/bin/python3
"""Writes the seed corpus of fuzz_tokenizer_files.c into
tests/fuzz/corpus/tokenizer_files/: a small byte-level BPE vocabulary (the
256 byte tokens in GPT-2's bytes_to_unicode form, five merges,
<|endoftext|>) as encoder.json + vocab.bpe and as a tokenizer.json, each
with texts that reach the pattern's branches, invalid UTF-8 and the special
token, one file whose merge names an unknown token, and a small BERT
vocab.txt (uncased, and cased through tokenizer_config.json) with texts
reaching accents, CJK, Hangul, long words and control characters, and two
small SentencePiece models (BPE with byte fallback, unigram with a
user-defined piece) with texts reaching spaces, unknown characters and
invalid UTF-8.

Usage: /usr/bin/python3 tests/fuzz/make_tokenizer_corpus.py
"""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus",
                   "tokenizer_files")
SEP = b"\xff\xff"


def printable(b):
    return 33 <= b <= 126 or 0xA1 <= b <= 0xAC or b >= 0xAE


def byte_char(b):
    if printable(b):
        return chr(b)
    return chr(256 + sum(1 for c in range(b) if not printable(c)))


def main():
    os.makedirs(OUT, exist_ok=True)
    vocab = {byte_char(b): b for b in range(256)}
    for i, tok in enumerate(["he", "ll", "hell", "hello", "\u0120w",
                             "<|endoftext|>"]):
        vocab[tok] = 256 + i
    merges = "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\u0120 w\n"
    encoder = json.dumps(vocab).encode()
    texts = [b"hello world", "it's  a test\n\n 123 \u4f60\u597d \U0001f600".encode(),
             b"a\xff b\xe4\xbd<|endoftext|>"]
    def write(name, data):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    for i, text in enumerate(texts):
        for mode in (0, 4):  # without / with TFM_ENCODE_SPLIT_SPECIAL
            write(f"gpt2_{i}_{mode}.bin", bytes([mode]) + encoder + SEP +
                  merges.encode() + SEP + text)
    doc = {"added_tokens": [{"id": 261, "content": "<|endoftext|>",
                             "special": True}],
           "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "use_regex": True},
           "post_processor": None, "decoder": {"type": "ByteLevel"},
           "model": {"type": "BPE", "vocab": vocab,
                     "merges": ["h e", ["l", "l"], "he ll", "hell o",
                                "\u0120 w"]}}
    for i, text in enumerate(texts):
        write(f"json_{i}.bin", bytes([1 | 4]) + json.dumps(doc).encode() +
              SEP + text)
    write("bad_merge.bin", bytes([0]) + encoder + SEP +
          b"#version: 0.2\nh zz\n" + SEP + b"x")
    bert = "".join(t + "\n" for t in [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff",
        "##able", "hello", "!", ",", "cafe", "\u4e2d", "##s", "a", "##a"])
    bert_texts = [b"unaffable, Hello! caf\xc3\xa9 \xe4\xb8\xad\xe5\x9b\xbd",
                  b"[CLS] hello [SEP] \xed\x95\x9c\xea\xb5\xad " + b"a" * 120,
                  b"\xce\x9f\xce\xa3 \x01\xff tab\there"]
    for i, text in enumerate(bert_texts):
        for mode in (8, 8 | 2 | 4):
            write(f"bert_{i}_{mode}.bin", bytes([mode]) + bert.encode() + SEP +
                  (b'{"do_lower_case": false}' if i == 2 else b"") + SEP +
                  text)
    # SentencePiece (mode bit 4): a BPE model with byte fallback and a
    # unigram one with a user-defined piece, as protocol buffers.
    for i, model in enumerate((spm_model(True), spm_model(False))):
        for j, text in enumerate(SPM_TEXTS):
            write(f"spm_{i}_{j}.bin", bytes([16 | (2 if j else 0)]) + model +
                  SEP + text)
    # SentencePiece models as tokenizer.json (mode bit 0): Llama's legacy
    # and Metaspace pipelines (BPE, byte fallback, ranked merges) and T5's
    # (Unigram, WhitespaceSplit + Metaspace).
    for i, doc in enumerate(spm_json_docs()):
        for j, text in enumerate(SPM_TEXTS):
            write(f"spm_json_{i}_{j}.bin", bytes([1 | (2 if j else 4)]) +
                  json.dumps(doc).encode() + SEP + text)


def pb_varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([v & 0x7F | 0x80])
        v >>= 7
    return out + bytes([v])


def pb_field(number, wire, payload):
    key = pb_varint(number << 3 | wire)
    if wire == 2:
        return key + pb_varint(len(payload)) + payload
    return key + payload


def spm_piece(piece, score, kind):
    import struct
    body = pb_field(1, 2, piece.encode()) + pb_field(2, 5, struct.pack("<f", score))
    if kind != 1:
        body += pb_field(3, 0, pb_varint(kind))
    return pb_field(1, 2, body)


def spm_model(bpe):
    """sentencepiece's ModelProto: <unk>, <s>, </s>, (bytes), pieces."""
    m = spm_piece("<unk>", 0, 2) + spm_piece("<s>", 0, 3) + spm_piece("</s>", 0, 3)
    if bpe:
        m += b"".join(spm_piece("<0x%02X>" % b, 0, 6) for b in range(256))
    else:
        m += spm_piece("<sep>", 0, 4)
    for k, p in enumerate(["\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab",
                           "bc", "abc", "\u4e2d"]):
        m += spm_piece(p, -1.0 - 0.5 * k, 1)
    trainer = pb_field(3, 0, pb_varint(2 if bpe else 1))
    if bpe:
        trainer += pb_field(35, 0, pb_varint(1))
    normalizer = pb_field(3, 0, pb_varint(1)) + pb_field(4, 0, pb_varint(0 if bpe else 1))
    return m + pb_field(2, 2, trainer) + pb_field(3, 2, normalizer)


def spm_json_docs():
    """Llama-like BPE (legacy and Metaspace) and T5-like Unigram
    tokenizer.json files, as transformers' converters write them."""
    sp = "\u2581"
    pieces = ["<unk>", "<s>", "</s>", sp, "a", "b", "c", sp + "a", "ab",
              sp + "ab", "bc", "abc"]
    vocab = {p: i for i, p in enumerate(pieces)}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    added = [{"id": i, "content": p, "special": True}
             for i, p in enumerate(pieces[:3])]
    bos = {"type": "TemplateProcessing",
           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                      {"Sequence": {"id": "A", "type_id": 0}}]}
    bpe = {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True,
           "fuse_unk": True, "vocab": vocab,
           "merges": ["a b", [sp, "a"], sp + "a b", "b c", "a bc"]}
    legacy = {"added_tokens": added, "normalizer": {
        "type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": sp},
            {"type": "Replace", "pattern": {"String": " "}, "content": sp}]},
        "pre_tokenizer": None, "post_processor": bos,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": sp}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": bpe}
    metaspace = dict(legacy, normalizer=None, pre_tokenizer={
        "type": "Metaspace", "replacement": sp, "prepend_scheme": "first",
        "split": False})
    t5 = {"added_tokens": [{"id": 0, "content": "<pad>", "special": True},
                           {"id": 1, "content": "</s>", "special": True},
                           {"id": 2, "content": "<unk>", "special": True},
                           {"id": 9, "content": "<sep>", "special": True}],
          "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "WhitespaceSplit"},
              {"type": "Metaspace", "replacement": sp,
               "add_prefix_space": True}]},
          "post_processor": {"type": "TemplateProcessing", "single": [
              {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": "</s>", "type_id": 0}}]},
          "decoder": {"type": "Metaspace", "replacement": sp,
                      "add_prefix_space": True},
          "model": {"type": "Unigram", "unk_id": 2, "vocab": [
              ["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], [sp, -2.0],
              ["a", -3.0], ["b", -3.0], [sp + "a", -2.5], [sp + "ab", -6.0],
              ["ab", -1.0], ["<sep>", 0.0], ["\u4e2d", -4.0]]}}
    return legacy, metaspace, t5


SPM_TEXTS = [b"ab abc  c\xe4\xb8\xad", b"  a<sep>b \xc3\xa9\xff<s>",
             b"\xe2\x96\x81 x\tz  "]


if __name__ == "__main__":
    main()
