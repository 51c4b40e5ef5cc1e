"""Lifetime: handles are freed exactly once (by close() or by the garbage
collector), closed objects raise instead of crashing."""

import gc
import os

import numpy as np
import pytest

import transformer
from conftest import TEST_MODELS

DECODER = TEST_MODELS / "decoder_learned_prenorm_gelu.safetensors"


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_thousand_modules_are_freed():
    gc.collect()
    base = transformer.live_handles("module")
    for _ in range(1000):
        m = transformer.MultiheadAttention(64, 4)
        assert transformer.live_handles("module") == base + 1
        del m
    assert transformer.live_handles("module") == base


def test_memory_does_not_grow():
    """1000 layers of ~67 KB each: freed, so the process does not grow by
    their 67 MB."""
    def churn():
        for _ in range(1000):
            transformer.MultiheadAttention(64, 4).state_dict()
    churn()                          # warm up allocator and caches
    gc.collect()
    before = rss_bytes()
    churn()
    gc.collect()
    assert rss_bytes() - before < 20 * 2**20


def test_close_is_idempotent_and_use_after_close_raises():
    m = transformer.TransformerEncoderLayer(8, 2, 16)
    base = transformer.live_handles("module")
    m.close()
    assert m.closed
    assert transformer.live_handles("module") == base - 1
    m.close()                        # no double free
    assert transformer.live_handles("module") == base - 1
    x = np.ones((1, 3, 8), np.float32)
    for call in (lambda: m(x), m.state_dict, m.num_parameters,
                 lambda: m.forward_macs(1, 3),
                 lambda: m.load_state_dict({}, strict=False)):
        with pytest.raises(transformer.ClosedError) as info:
            call()
        assert isinstance(info.value, ValueError)
        assert "is closed" in str(info.value)
    assert "<closed>" in repr(m)
    del m                            # __del__ after close: nothing to free
    gc.collect()


def test_context_manager_closes():
    with transformer.LayerNorm(8) as norm:
        assert not norm.closed
    assert norm.closed
    with pytest.raises(transformer.ClosedError):
        norm(np.ones(8, np.float32))


def test_reference_cycles_are_collected():
    gc.collect()
    base = transformer.live_handles()
    for _ in range(100):
        a = transformer.LayerNorm(8)
        b = transformer.LayerNorm(8)
        a.other, b.other = b, a
    del a, b
    gc.collect()
    assert transformer.live_handles() == base


def test_stack_and_norm_are_independent():
    norm = transformer.LayerNorm(8)
    enc = transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(8, 2, 16), 2, norm=norm)
    enc.close()
    assert not norm.closed
    norm(np.ones(8, np.float32))


def test_model_close_closes_its_caches():
    model = transformer.Model.load(DECODER)
    cache = model.kv_cache(4)
    cache.decode([1, 2])
    model.close()
    assert cache.closed
    with pytest.raises(transformer.ClosedError):
        cache.decode([3])
    with pytest.raises(transformer.ClosedError):
        len(cache)
    with pytest.raises(transformer.ClosedError):
        model.logits([1, 2])


def test_cache_keeps_the_model_alive():
    gc.collect()
    base = transformer.live_handles("module")
    model = transformer.Model.load(DECODER)
    cache = model.kv_cache()
    expected = model.logits([1, 2, 3])
    del model
    gc.collect()
    assert transformer.live_handles("module") == base + 1
    np.testing.assert_allclose(cache.decode([1, 2, 3]), expected, atol=1e-5)
    del cache
    gc.collect()
    assert transformer.live_handles("module") == base
    assert transformer.live_handles("kv_cache") == 0


def test_model_and_cache_in_a_cycle():
    gc.collect()
    base = transformer.live_handles()
    for _ in range(20):
        model = transformer.Model.load(DECODER)
        cache = model.kv_cache()
        model.cache, cache.model_again = cache, model
    del model, cache
    gc.collect()
    assert transformer.live_handles() == base


def test_many_caches_and_tokenizers_are_freed():
    gc.collect()
    model = transformer.Model.load(DECODER)
    base = transformer.live_handles()
    for _ in range(500):
        c = model.kv_cache(4)
        c.decode([1])
        t = transformer.Tokenizer("abc")
        t.encode("cab")
    del c, t
    gc.collect()
    assert transformer.live_handles() == base


def test_tokenizer_close():
    t = transformer.Tokenizer("ab")
    t.close()
    t.close()
    with pytest.raises(transformer.ClosedError):
        t.encode("a")
    assert "closed" in repr(t)


@pytest.mark.parametrize("make", [
    lambda: transformer.MultiheadAttention(8, 2, kdim=3, batch_first=True),
    lambda: transformer.LayerNorm((2, 4), eps=1e-3),
    lambda: transformer.TransformerEncoderLayer(8, 2, 16, activation="gelu"),
    lambda: transformer.TransformerDecoderLayer(8, 2, 16, norm_first=True),
    lambda: transformer.TransformerEncoder(
        transformer.TransformerEncoderLayer(8, 2, 16), 2,
        norm=transformer.LayerNorm(8)),
    lambda: transformer.TransformerDecoder(
        transformer.TransformerDecoderLayer(8, 2, 16), 2),
    lambda: transformer.Transformer(8, 2, 1, 1, 16),
    lambda: transformer.Embedding(5, 8),
    lambda: transformer.Model.load(DECODER),
])
def test_deepcopy_and_pickle_make_independent_copies(make):
    import copy
    import pickle
    m = make()
    sd = {k: np.random.default_rng(0).standard_normal(v.shape)
          for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    for twin in (copy.deepcopy(m), pickle.loads(pickle.dumps(m))):
        assert type(twin) is type(m) and repr(twin) == repr(m)
        assert twin._handle is not m._handle
        for k, v in twin.state_dict().items():
            np.testing.assert_array_equal(v, np.float32(sd[k]))
        twin.close()
        assert not m.closed
    m.close()
    with pytest.raises(transformer.ClosedError):
        copy.deepcopy(m)


def test_copied_model_keeps_tokenizer():
    import copy
    m = transformer.Model.load(DECODER)
    m.tokenizer = transformer.Tokenizer("abcdefghijklmnopqrstuvw")
    twin = copy.deepcopy(m)
    assert twin.tokenizer.vocab == m.tokenizer.vocab
    assert twin.generate("abc", 5, temperature=0) == \
        m.generate("abc", 5, temperature=0)
    with pytest.raises(TypeError):
        copy.deepcopy(m.kv_cache())
