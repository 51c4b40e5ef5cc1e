"""The Python tokenizer API on the WordPiece test vocabulary
(tests/tokenizers/make_wordpiece_vocab.py, in $TFM_TOKENIZER_REFS/bert-uncased)
with kitoken's ids, and BERT's framing and padding as Hugging Face's
BertTokenizer gives them."""
import os

import pytest

import transformer

REFS = os.environ["TFM_TOKENIZER_REFS"]  # set by ctest; never skipped
BERT = os.path.join(REFS, "bert-uncased")


@pytest.fixture(scope="module")
def tok():
    return transformer.Tokenizer.from_pretrained(BERT)


def test_reference_ids(tok):
    n = 0
    with open(os.path.join(BERT, "kitoken.tsv"), encoding="ascii") as f:
        for line in f:
            text, _, ids = line.rstrip("\n").partition("\t")
            text = bytes.fromhex(text).decode("utf-8")
            want = [int(i) for i in ids.split()]
            assert tok.encode(text, add_special_tokens=False) == want, text
            n += 1
    assert n > 3000


def test_framing(tok):
    assert tok.kind == "wordpiece"
    cls, sep, pad = tok.cls_token_id, tok.sep_token_id, tok.pad_token_id
    assert (pad, cls, sep, tok.unk_token_id, tok.mask_token_id) == (0, 2, 3, 1, 4)
    ids = tok.encode("In the beginning")
    assert ids[0] == cls and ids[-1] == sep
    assert tok.convert_ids_to_tokens(ids) == ["[CLS]", "in", "the",
                                              "beginning", "[SEP]"]
    out = tok("In the beginning", "God created")
    n_a = len(tok.encode("In the beginning"))
    assert out["token_type_ids"] == [0] * n_a + [1] * (len(out["input_ids"]) - n_a)
    assert out["input_ids"][n_a - 1] == sep and out["input_ids"][-1] == sep
    batch = tok(["God", "In the beginning"], padding=True)
    assert batch["input_ids"][0] == [cls, tok.convert_tokens_to_ids("god"),
                                     sep, pad, pad]
    assert batch["attention_mask"] == [[1, 1, 1, 0, 0], [1] * 5]
    assert tok.decode(batch["input_ids"][1], skip_special_tokens=True) == \
        "in the beginning"
