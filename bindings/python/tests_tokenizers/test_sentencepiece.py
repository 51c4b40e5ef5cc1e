"""The Python tokenizer API on SentencePiece models that sentencepiece's
trainer made from the KJV (tests/tokenizers/spm_reference.py, in
$TFM_TOKENIZER_REFS/sentencepiece), with python3-sentencepiece's ids and
decodings, and Llama's and T5's framing as Hugging Face's LlamaTokenizer and
T5Tokenizer give them."""
import os

import pytest

import transformer

pytest.importorskip("sentencepiece")  # the fixture needs it too
SPM = os.path.join(os.environ["TFM_TOKENIZER_REFS"], "sentencepiece")
CONTROL = ("<s>", "</s>", "<unk>", "<pad>", "<mask>")


def cases(name):
    with open(os.path.join(SPM, name + ".tsv"), encoding="ascii") as f:
        for line in f:
            text, ids, back = line.rstrip("\n").split("\t")
            yield (bytes.fromhex(text), [int(i) for i in ids.split()],
                   bytes.fromhex(back).decode("utf-8"))


@pytest.mark.parametrize("name", ["llama-bpe", "t5-unigram"])
def test_reference_ids(name):
    tok = transformer.load_tokenizer(os.path.join(SPM, name + ".model"))
    assert tok.kind == "sentencepiece"
    n = 0
    for raw, want, back in cases(name):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # str only here; the C test takes the bytes
        if any(c in text for c in CONTROL):
            continue  # encode() matches special tokens in the text, as HF
        assert tok.encode(text, add_special_tokens=False) == want, text
        assert tok.decode(want) == back, text
        n += 1
    assert n > 3000


def test_llama_framing():
    tok = transformer.Tokenizer.from_pretrained(os.path.join(SPM, "llama-bpe.model"))
    assert (tok.unk_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 1, 2)
    ids = tok.encode("In the beginning God created")
    assert ids[0] == tok.bos_token_id
    assert tok.convert_ids_to_tokens(ids)[:3] == ["<s>", "\u2581In", "\u2581the"]
    assert tok.decode(ids, skip_special_tokens=True) == "In the beginning God created"
    # Byte fallback: a character the model lacks is its UTF-8 bytes.
    emoji = tok.encode("\U0001f600", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(emoji)[-4:] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]
    assert tok.decode(emoji) == "\U0001f600"
    # "<s>" written in the text is the bos token, as Hugging Face's.
    assert tok.encode("<s>", add_special_tokens=False) == [1]


def test_t5_framing():
    tok = transformer.load_tokenizer(os.path.join(SPM, "t5-unigram.model"))
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    assert tok.bos_token_id is None
    ids = tok.encode("In the beginning")
    assert ids[-1] == tok.eos_token_id
    out = tok("In the beginning", "God")
    n_a = len(ids)
    assert out["input_ids"][-1] == tok.eos_token_id
    assert out["token_type_ids"] == [0] * n_a + [1] * (len(out["input_ids"]) - n_a)
    batch = tok(["God", "In the beginning"], padding=True)
    assert batch["input_ids"][0][-1] == tok.pad_token_id
    assert batch["attention_mask"][0][0] == 1 and batch["attention_mask"][0][-1] == 0
    # nmt_nfkc: full-width letters, ligatures; spaces collapsed.
    assert tok.convert_ids_to_tokens(tok.encode("\uff21  \ufb01ne",
                                                add_special_tokens=False)) == \
        tok.convert_ids_to_tokens(tok.encode("A fine", add_special_tokens=False))


def test_low_level_encode_more_ids_than_bytes():
    """Regression: the bindings' plain encode sized its output at one id per
    byte; a SentencePiece text can have more ("x" is "▁" "x" here, and an
    invalid byte is three byte tokens)."""
    from transformer import _lowlevel as _ll
    tok = transformer.load_tokenizer(os.path.join(SPM, "llama-bpe.model"))
    want = tok.encode(b"\xff".decode("latin-1").encode("latin-1").decode(
        "utf-8", "replace"), add_special_tokens=False)  # U+FFFD's pieces
    assert list(tok._call(_ll.tfmpy_tokenizer_encode, b"\xff")) == want
    assert len(want) == 4  # ▁ <0xEF> <0xBF> <0xBD>
    assert list(tok._call(_ll.tfmpy_tokenizer_encode, "x")) == \
        tok.encode("x", add_special_tokens=False)
