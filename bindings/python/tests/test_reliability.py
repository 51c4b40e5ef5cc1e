"""Issue 13 from Python: NUL characters in strings passed to C, the size
of generate's output, the tokenizer's own error from Model.load."""

import numpy as np
import pytest

import transformer
from transformer import _lowlevel as ll


def tiny_model():
    return transformer.Model(architecture="decoder_only", vocab_size=11,
                             d_model=8, n_heads=2, d_ff=16, n_layers=1,
                             context_length=16)


# ---- embedded NUL: C would cut the string there --------------------------

def test_nul_in_strings_is_refused(tmp_path):
    """A tensor name, metadata key or value or path with a NUL was cut at
    it ("w\\0x" written as "w"); now InvalidArgumentError, nothing
    written."""
    path = tmp_path / "t.safetensors"
    w = np.ones(2, np.float32)
    for tensors, metadata in (({"w\0x": w}, None),
                              ({"w": w}, {"k\0": "v"}),
                              ({"w": w}, {"k": "v\0junk"})):
        with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
            transformer.save_safetensors(tensors, path, metadata)
        assert not path.exists()
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        transformer.load_safetensors(str(path) + "\0.x")
    m = tiny_model()
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        m.save(path, metadata={"note": "a\0b"})
    with pytest.raises(transformer.InvalidArgumentError, match="NUL"):
        m.save(str(path) + "\0x")
    assert not path.exists()
    # the reader refuses an escaped NUL in a file written by someone else
    header = b'{"__metadata__":{"k":"v\\u0000x"}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(transformer.FormatError, match='"k" holds an escaped'):
        transformer.load_safetensors_metadata(path)


# ---- generate's size argument ----------------------------------------------

def test_generate_refuses_huge_max_new_tokens_before_allocating(monkeypatch):
    """max_new_tokens=2**40 allocated a 4 TiB output (MemoryError; an abort
    under ASan).  Now InvalidArgumentError past TFM_MAX_NEW_TOKENS, before
    any allocation (np.zeros is never reached)."""
    m = tiny_model()
    assert ll.TFM_MAX_NEW_TOKENS == 2**24
    calls = []
    real_zeros = np.zeros
    monkeypatch.setattr(np, "zeros",
                        lambda *a, **k: calls.append(a) or real_zeros(*a, **k))
    for n in (2**40, 2**63 - 1, ll.TFM_MAX_NEW_TOKENS + 1):
        with pytest.raises(transformer.InvalidArgumentError,
                           match="TFM_MAX_NEW_TOKENS"):
            m.generate([1, 2], max_new_tokens=n)
    assert calls == []
    monkeypatch.undo()
    assert len(m.generate([1, 2], max_new_tokens=3, greedy=True)) == 3


# ---- Model.load and the tokenizer's errors -----------------------------------

def test_model_load_raises_the_tokenizers_error(tmp_path):
    """A file whose tfm.vocab disagrees with its vocabulary size loaded
    with no tokenizer (FormatError swallowed), and generate then said the
    file "has no tfm.tokenizer metadata".  Now Model.load raises the
    tokenizer's FormatError; only a file without "tfm.tokenizer" loads
    without a tokenizer."""
    m = tiny_model()
    bad = tmp_path / "bad.safetensors"
    m.save(bad, metadata={"tfm.tokenizer": "char", "tfm.vocab": "abc"})
    before = transformer.live_handles("module")
    with pytest.raises(transformer.FormatError, match="tfm.vocab_size"):
        transformer.Model.load(bad)
    assert transformer.live_handles("module") == before   # nothing leaked
    unknown = tmp_path / "bpe.safetensors"
    m.save(unknown, metadata={"tfm.tokenizer": "bpe", "tfm.vocab": "abc"})
    with pytest.raises(transformer.FormatError, match="bpe"):
        transformer.Model.load(unknown)
    plain = tmp_path / "plain.safetensors"
    m.save(plain)
    assert transformer.Model.load(plain).tokenizer is None
    good = tmp_path / "good.safetensors"
    m.save(good, metadata={"tfm.tokenizer": "char",
                           "tfm.vocab": "abcdefghijk"})
    assert transformer.Model.load(good).tokenizer.vocab == "abcdefghijk"


def test_save_metadata_cannot_replace_the_configuration(tmp_path):
    """save(metadata=) could replace the file's own keys ("tfm.d_model",
    "format", ...), writing a file that no longer describes the model.
    Now such a key raises InvalidArgumentError (a ValueError) and the path
    is left as it was; other keys are written beside the configuration."""
    m = tiny_model()
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"old")
    for key in ("format", "tfm.d_model", "tfm.n_layers",
                "tfm.attention.score"):
        with pytest.raises(transformer.InvalidArgumentError, match=key):
            m.save(path, metadata={key: "4"})
        assert path.read_bytes() == b"old"
    m.save(path, metadata={"note": "kept"})
    loaded = transformer.Model.load(path)
    assert loaded.config == m.config


# ---- fork after forward passes ------------------------------------------------

_SHARED = {}


def _wide_model():
    m = transformer.Model(architecture="decoder_only", vocab_size=37,
                          d_model=96, n_heads=4, d_ff=192, n_layers=2,
                          context_length=32)
    rng = np.random.default_rng(5)
    m.load_state_dict({k: 0.2 * rng.standard_normal(v.shape).astype(
        np.float32) for k, v in m.state_dict().items()})
    return m


def _child_logits(args):
    """In a pool worker (forked): the shared model's logits, and those of a
    model freshly loaded from the file."""
    path, ids = args
    fresh = transformer.Model.load(path)
    return _SHARED["model"].logits(ids), fresh.logits(ids)


def test_multiprocessing_fork_after_forward_pass(tmp_path):
    """multiprocessing.Pool with the fork start method hung in the child
    once the parent had run a forward pass (the library's thread pool had
    no fork handling).  The children's logits equal the parent's, bit for
    bit (same thread count, same split)."""
    import multiprocessing
    saved = transformer.get_num_threads()
    transformer.set_num_threads(4)
    try:
        model = _wide_model()
        path = tmp_path / "wide.safetensors"
        model.save(path)
        _SHARED["model"] = model
        ids = [np.arange(24).reshape(2, 12) % 37,
               (np.arange(24).reshape(2, 12) * 5 + 1) % 37]
        want = [model.logits(i) for i in ids]     # the pool runs here
        ctx = multiprocessing.get_context("fork")
        pool = ctx.Pool(2)
        try:
            got = pool.map_async(_child_logits,
                                 [(str(path), i) for i in ids]).get(60)
        finally:
            pool.terminate()
            pool.join()
        for (shared, fresh), w in zip(got, want):
            np.testing.assert_array_equal(shared, w)
            np.testing.assert_array_equal(fresh, w)
        np.testing.assert_array_equal(model.logits(ids[0]), want[0])
    finally:
        _SHARED.clear()
        transformer.set_num_threads(saved)
