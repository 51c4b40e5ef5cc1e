"""Marian's tokenizer (Hugging Face's MarianTokenizer, Helsinki-NLP's
opus-mt checkpoints) on a directory made here: two unigram SentencePiece
models trained by Debian's python3-sentencepiece on KJV verses
(tests/tokenizers/spm_reference.py's trainer settings), and vocab.json as
transformers' convert_marian_to_pytorch writes it ("</s>" 0, "<unk>" 1, the
pieces of both models, "<pad>" last).

The reference is computed here from sentencepiece itself, as
MarianTokenizer does it: special tokens written in the text split off, a
leading ">>xx<<" language code a token of its own, the rest
source.encode(out_type=str), each piece through vocab.json (else the unk
id), "</s>" appended; decoding the ids' pieces with target.decode_pieces,
special tokens written as themselves and a space, "▁" a space, the ends
stripped."""
import json
import os
import re
import sys

import pytest

import transformer
from conftest import REPO

spm = pytest.importorskip("sentencepiece")
sys.path.insert(0, str(REPO / "tests" / "tokenizers"))
sys.path.insert(0, str(REPO / "tools"))
import make_corpus  # noqa: E402
import hub_marian_reference as R  # noqa: E402

SPECIALS = ("</s>", "<unk>", "<pad>")
CODES = (">>fra<<", ">>deu<<", ">>nld<<")
# Only the target side's training text has these: source.spm does not
# know them (its unknown pieces), vocab.json does (from target.spm).
TARGET_ONLY = ["Stra\u00dfe \u00fcber die Br\u00fccke", "\u00d8l og sm\u00f8r",
               "gro\u00df und gr\u00fcn", "F\u00fc\u00dfe"]


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    try:
        d = tmp_path_factory.mktemp("opus-mt-test")
        vocab = R.write_tokenizer(d, codes=CODES, target_only=TARGET_ONLY)
    except (OSError, ValueError) as e:  # no bible-kjv
        pytest.skip(f"KJV text not available: {e}")
    sp_src = spm.SentencePieceProcessor(model_file=str(d / "source.spm"))
    sp_tgt = spm.SentencePieceProcessor(model_file=str(d / "target.spm"))
    return d, sp_src, sp_tgt, vocab


# ---- the reference: MarianTokenizer's steps on sentencepiece -----------

def ref_encode(sp_src, vocab, text, add_special_tokens=True):
    ids = []
    for seg in re.split("(" + "|".join(map(re.escape, SPECIALS)) + ")", text):
        if seg in SPECIALS:
            ids.append(vocab[seg])
            continue
        if not seg:
            continue
        code = []
        end = seg.find("<<") if seg.startswith(">>") else -1
        if end != -1:  # remove_language_code
            code, seg = [seg[:end + 2]], seg[end + 2:]
        pieces = code + sp_src.encode(seg, out_type=str)
        ids += [vocab.get(p, vocab["<unk>"]) for p in pieces]
    return ids + [vocab["</s>"]] if add_special_tokens else ids


def ref_decode(sp_tgt, vocab, ids, skip_special_tokens=False):
    inv = {i: p for p, i in vocab.items()}
    tokens = [inv[i] for i in ids
              if not (skip_special_tokens and inv[i] in SPECIALS)]
    out, run = "", []
    for t in tokens:  # convert_tokens_to_string
        if t in SPECIALS:
            out += sp_tgt.decode_pieces(run) + t + " "
            run = []
        else:
            run.append(t)
    out += sp_tgt.decode_pieces(run)
    return out.replace("\u2581", " ").strip()


def texts():
    return make_corpus.corpus()


# ---- tests ------------------------------------------------------------

def test_loads_as_marian(marian):
    d, _, _, vocab = marian
    tok = transformer.Tokenizer.from_pretrained(d)
    assert tok.kind == "marian"
    assert len(tok) == tok.vocab_size == len(vocab)
    assert (tok.eos_token_id, tok.unk_token_id, tok.pad_token_id) == \
        (0, 1, len(vocab) - 1)
    assert tok.bos_token_id is None
    assert sorted(tok.all_special_ids) == [0, 1, len(vocab) - 1]
    # token strings are vocab.json's, both ways
    assert tok.get_vocab() == vocab
    assert tok.convert_tokens_to_ids([">>deu<<", "\u2581the", "no such"]) == \
        [vocab[">>deu<<"], vocab["\u2581the"], 1]
    # vocab.json named directly, with the .spm files beside it
    assert transformer.load_tokenizer(d / "vocab.json").kind == "marian"


def test_encode_corpus(marian):
    """Every corpus text (hard strings, verses, passages) and each with a
    language code before it: ids equal the reference's."""
    d, sp_src, _, vocab = marian
    tok = transformer.load_tokenizer(d)
    n_texts = n_ids = n_unk = 0
    for text in texts():
        for t in (text, CODES[n_texts % 3] + " " + text):
            want = ref_encode(sp_src, vocab, t)
            assert tok.encode(t) == want, t
            assert tok.encode(t, add_special_tokens=False) == want[:-1], t
            n_texts += 1
            n_ids += len(want)
            n_unk += want.count(1)
    assert n_texts > 6000 and n_ids > 250000
    assert n_unk > 0
    print(f"marian encode: {n_texts} texts, {n_ids} ids ({n_unk} unk), "
          "0 differences")


def test_decode_corpus(marian):
    """Target ids (target.spm's pieces through vocab.json) and source ids
    (pieces target.spm may lack, which decode_pieces writes as they are)
    decode as the reference, with the special tokens kept and skipped."""
    d, sp_src, sp_tgt, vocab = marian
    tok = transformer.load_tokenizer(d)
    n = 0
    for i, text in enumerate(texts()):
        tgt = [vocab.get(p, 1) for p in sp_tgt.encode(text, out_type=str)]
        src = ref_encode(sp_src, vocab, text)
        for ids in (tgt + [0], src, [len(vocab) - 1] + tgt[:5] + [1] + tgt[5:]):
            for skip in (False, True):
                assert tok.decode(ids, skip_special_tokens=skip) == \
                    ref_decode(sp_tgt, vocab, ids, skip), (text, ids, skip)
                n += 1
    assert n > 15000
    assert tok.batch_decode([[0], []]) == ["</s>", ""]
    print(f"marian decode: {n} id lists, 0 differences")


def test_language_code(marian):
    d, sp_src, _, vocab = marian
    tok = transformer.load_tokenizer(d)
    ids = tok.encode(">>fra<< In the beginning")
    assert ids[0] == vocab[">>fra<<"]
    assert ids[1:] == ref_encode(sp_src, vocab, "In the beginning")
    assert tok("  >>fra<<x")["input_ids"] == \
        ref_encode(sp_src, vocab, "  >>fra<<x")  # not at the start: text
    # A code the vocabulary lacks is still one token: <unk>.
    assert tok.encode(">>xyz<< God", add_special_tokens=False)[0] == 1
    assert tok.encode(">>xyz<< God") == \
        ref_encode(sp_src, vocab, ">>xyz<< God")
    # up to the first "<<"; in each text between special tokens
    for t in (">>fra<<<<x", ">><<x", ">>fra", "</s>>>deu<< light",
              ">>fra<< a\n>>deu<< b"):
        assert tok.encode(t) == ref_encode(sp_src, vocab, t), t
    off = tok(">>deu<< God", return_offsets_mapping=True)["offset_mapping"]
    assert off[0] == (0, 7) and off[-1] == (0, 0)


def test_unknown_pieces(marian):
    """A character source.spm lacks is its unknown piece, whose text
    vocab.json may still have (from target.spm): that id, as Marian's
    lookup of the piece string gives; a character neither has: <unk>."""
    d, sp_src, _, vocab = marian
    tok = transformer.load_tokenizer(d)
    seen = 0
    for t in TARGET_ONLY + ["\u6f22\u5b57 and \u00df", "a\u00df\u00dfb"]:
        pieces = sp_src.encode(t, out_type=str)
        seen += sum(sp_src.piece_to_id(p) == sp_src.unk_id() and p in vocab
                    for p in pieces)
        assert tok.encode(t) == ref_encode(sp_src, vocab, t), t
    assert seen > 0
    assert 1 in tok.encode("\u6f22\u5b57")


def test_framing_and_batches(marian):
    d, sp_src, _, vocab = marian
    tok = transformer.load_tokenizer(d)
    a = ref_encode(sp_src, vocab, "And God said", False)
    b = ref_encode(sp_src, vocab, "Let there be light", False)
    # build_inputs_with_special_tokens: A </s>; a pair A B </s>
    out = tok("And God said", "Let there be light")
    assert out["input_ids"] == a + b + [0]
    assert out["token_type_ids"] == [0] * len(a) + [1] * (len(b) + 1)
    batch = tok(["light", "And God said"], padding=True, return_tensors="np")
    pad = len(vocab) - 1
    assert batch["input_ids"][0].tolist() == \
        ref_encode(sp_src, vocab, "light") + [pad] * (len(a) - 1)
    assert batch["attention_mask"][1].tolist() == [1] * (len(a) + 1)
    # special tokens in the text are their ids (split first, as HF)
    assert tok.encode("light</s><pad>", add_special_tokens=False)[-2:] == \
        [0, pad]


def test_config_tokens_as_objects(marian, tmp_path):
    """tokenizer_config.json's tokens may be AddedToken objects."""
    d, _, _, vocab = marian
    for f in ("source.spm", "target.spm", "vocab.json"):
        (tmp_path / f).write_bytes((d / f).read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": {"content": "</s>", "__type": "AddedToken"},
         "pad_token": None, "clean_up_tokenization_spaces": True}))
    tok = transformer.load_tokenizer(tmp_path)
    assert tok.eos_token_id == 0 and tok.pad_token_id is None
    # clean_up_tokenization: " ," -> ","
    ids = [vocab["\u2581God"], vocab[","], vocab["\u2581light"]]
    assert tok.decode(ids) == "God, light"


def bad_dir(marian, tmp_path, vocab_text, config=None):
    d = marian[0]
    for f in ("source.spm", "target.spm"):
        (tmp_path / f).write_bytes((d / f).read_bytes())
    (tmp_path / "vocab.json").write_text(vocab_text, encoding="utf-8")
    if config is not None:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("vocab_text, words", [
    ('["</s>", "<unk>"]', ["vocab.json", "not a JSON object"]),
    ('{"</s>": 0, "<unk>": 1', ["vocab.json", "not valid JSON"]),
    ('{}', ["vocab.json", "empty"]),
    ('{"</s>": 0, "<unk>": "1"}', ["vocab.json", '"<unk>"', "integer"]),
    ('{"</s>": 0, "<unk>": 1.5}', ["vocab.json", '"<unk>"', "integer"]),
    ('{"</s>": 0, "<unk>": -1}', ["vocab.json", '"<unk>"', "integer"]),
    ('{"</s>": 0, "<unk>": 0, "a": 1}', ["vocab.json", "given twice",
                                          '"<unk>"']),
    ('{"</s>": 0, "<unk>": 1, "a": 3}', ["vocab.json", '"a"', "outside"]),
    ('{"</s>": 0, "<unk>": 1, "a": 1e12}', ["vocab.json", '"a"']),
    ('{"</s>": 0, "a": 1}', ["vocab.json", '"<unk>"', "unk_token"]),
    ('{"<unk>": 0, "a": 1}', ["vocab.json", '"</s>"', "eos_token"]),
])
def test_malformed_vocab_json(marian, tmp_path, vocab_text, words):
    d = bad_dir(marian, tmp_path, vocab_text)
    with pytest.raises(transformer.FormatError) as e:
        transformer.load_tokenizer(d)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_refused_configs(marian, tmp_path):
    good = '{"</s>": 0, "<unk>": 1}'
    d = bad_dir(marian, tmp_path, good, {"separate_vocabs": True})
    with pytest.raises(transformer.UnsupportedError,
                       match="separate_vocabs.*target_vocab.json"):
        transformer.load_tokenizer(d)
    bad_dir(marian, tmp_path, good, {"unk_token": "<oov>"})
    with pytest.raises(transformer.FormatError, match="<oov>.*unk_token"):
        transformer.load_tokenizer(d)
    bad_dir(marian, tmp_path, good, {"eos_token": 7})
    with pytest.raises(transformer.FormatError,
                       match="tokenizer_config.json.*eos_token"):
        transformer.load_tokenizer(d)


@pytest.mark.parametrize("missing", ["target.spm", "vocab.json"])
def test_source_spm_alone_is_refused(marian, tmp_path, missing):
    """source.spm without target.spm or vocab.json is not loaded as a plain
    SentencePiece model (whose ids are not the model's): refused, naming
    the missing file, as MarianTokenizer refuses it."""
    import shutil
    d = marian[0]
    for name in ("source.spm", "target.spm", "vocab.json"):
        if name != missing:
            shutil.copy(d / name, tmp_path / name)
    with pytest.raises(transformer.FormatError, match="no " + missing):
        transformer.Tokenizer.from_pretrained(tmp_path)
