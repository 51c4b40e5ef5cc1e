"""GGUF tokenizers on llama.cpp's own vocabulary files and its own expected
ids: models/ggml-vocab-<name>.gguf with .inp (texts separated by
"\\n__ggml_vocab_test__\\n") and .out (one line of ids per text), the data
of llama.cpp's tests/test-tokenizer-0.cpp, which tokenizes with
add_special false and parse_special false.  The ids must be llama.cpp's;
vocabularies this library does not read are refused by name."""

import os

import pytest

from gguf_reference import llama_cpp_dir

import transformer

ROOT = llama_cpp_dir()
pytestmark = pytest.mark.skipif(
    ROOT is None or not os.path.isdir(os.path.join(ROOT or "", "models")),
    reason="no llama.cpp checkout with models/")


def vocab(name):
    return os.path.join(ROOT, "models", f"ggml-vocab-{name}.gguf")


@pytest.mark.parametrize("name,kind", [("gpt-2", "byte_bpe"),
                                       ("llama-spm", "sentencepiece"),
                                       ("phi-3", "sentencepiece")])
def test_llama_cpp_ids(name, kind):
    path = vocab(name)
    tok = transformer.load_tokenizer(path)
    assert tok.kind == kind
    with open(path + ".inp", encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    with open(path + ".out", encoding="ascii") as f:
        outs = f.read().split("\n")
    n = 0
    for text, out in zip(texts, outs):
        want = [int(i) for i in out.split()]
        assert tok.encode(text, add_special_tokens=False) == want, text
        n += 1
    assert n == len(texts) >= 40


@pytest.mark.parametrize("name,word", [("qwen2", "qwen2"),
                                       ("bert-bge", "bert"),
                                       ("gpt-neox", "default"),
                                       ("aquila", "version 2")])
def test_refused_by_name(name, word):
    with pytest.raises((transformer.UnsupportedError,
                        transformer.FormatError)) as e:
        transformer.load_tokenizer(vocab(name))
    assert word in str(e.value)
