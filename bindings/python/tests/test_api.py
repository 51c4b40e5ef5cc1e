"""The package surface: exports, docstrings with shapes, version, and the
zero-copy path for contiguous float32 arrays."""

import inspect
import pydoc

import numpy as np
import pytest

import transformer
from transformer import _core, _lowlevel as ll


def public_objects():
    for name in transformer.__all__:
        obj = getattr(transformer, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            yield name, obj


def test_all_exports_exist():
    for name in transformer.__all__:
        assert hasattr(transformer, name), name


@pytest.mark.parametrize("name,obj", list(public_objects()),
                         ids=[n for n, _ in public_objects()])
def test_docstrings(name, obj):
    assert obj.__doc__ and len(obj.__doc__.strip()) > 20, name
    if inspect.isclass(obj) and not issubclass(obj, BaseException):
        for attr, member in vars(obj).items():
            if attr.startswith("_") or not callable(member):
                continue
            assert member.__doc__, f"{name}.{attr} has no docstring"


@pytest.mark.parametrize("cls", [
    transformer.MultiheadAttention, transformer.TransformerEncoderLayer,
    transformer.TransformerDecoderLayer, transformer.TransformerEncoder,
    transformer.TransformerDecoder, transformer.Transformer])
def test_help_gives_shapes_and_arguments(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "[L, N, E]" in text or "[S, N, E]" in text
    assert "batch_first" in text and "mask" in text
    assert "load_state_dict" in text and "state_dict" in text


def test_signatures_mirror_torch():
    torch = pytest.importorskip("torch")
    pairs = [(transformer.MultiheadAttention, torch.nn.MultiheadAttention),
             (transformer.LayerNorm, torch.nn.LayerNorm),
             (transformer.TransformerEncoderLayer,
              torch.nn.TransformerEncoderLayer),
             (transformer.TransformerDecoderLayer,
              torch.nn.TransformerDecoderLayer),
             (transformer.Transformer, torch.nn.Transformer),
             (transformer.TransformerEncoder, torch.nn.TransformerEncoder),
             (transformer.TransformerDecoder, torch.nn.TransformerDecoder)]
    for ours, theirs in pairs:
        for method in ("__init__", "forward"):
            o = inspect.signature(getattr(ours, method)).parameters
            t = inspect.signature(getattr(theirs, method)).parameters
            # every PyTorch 1.13 argument exists, in the same position,
            # with the same default (device and dtype are keywords; newer
            # PyTorch puts bias=True before them, as we do)
            names_o = [n for n in o if n not in ("device", "dtype", "bias")
                       or ours is transformer.MultiheadAttention]
            names_t = [n for n in t if n not in ("device", "dtype", "bias")
                       or ours is transformer.MultiheadAttention]
            assert names_o[:len(names_t)] == names_t, (ours, method)
            for n in names_t:
                if t[n].default is not inspect.Parameter.empty and \
                        not callable(t[n].default):
                    assert o[n].default == t[n].default, (ours, method, n)


def test_version():
    assert transformer.__version__ == ll.tfm_version_string()
    assert transformer.version_info >= (1, 0, 0)
    assert ll.tfm_version_number() == ll.TFM_VERSION_NUMBER


def test_contiguous_float32_is_not_copied():
    a = np.ones((2, 3), np.float32)
    assert _core.as_float32(a, "a") is a
    b = np.ones((2, 3))
    assert _core.as_float32(b, "b") is not b


def test_low_level_wraps_numpy_memory_in_place():
    """tfm_tensor_add(x, y) writes into x's own buffer: the array is wrapped,
    not copied."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = x[:]                      # shares memory with x
    ll.tfm_tensor_add(x, np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(view, np.arange(6).reshape(2, 3) + 1)
    with pytest.raises(transformer.ShapeError):
        ll.tfm_tensor_add(x, np.ones((3, 2), np.float32))


def test_threads_share_a_module():
    import threading
    mha = transformer.MultiheadAttention(16, 4, batch_first=True)
    mha.load_state_dict({k: np.random.default_rng(0).standard_normal(v.shape)
                         for k, v in mha.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((2, 7, 16)).astype(np.float32)
    expected, _ = mha(x, x, x)
    results = []

    def work():
        for _ in range(50):
            results.append(np.array_equal(mha(x, x, x)[0], expected))
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200 and all(results)


def test_set_num_threads_like_torch():
    before = transformer.get_num_threads()
    try:
        transformer.set_num_threads(3)
        assert transformer.get_num_threads() == 3
        mha = transformer.MultiheadAttention(16, 4, batch_first=True)
        mha.load_state_dict({k: np.random.default_rng(0).standard_normal(
            v.shape) for k, v in mha.state_dict().items()})
        x = np.random.default_rng(1).standard_normal((2, 7, 16))
        three = mha(x, x, x)[0]
        transformer.set_num_threads(1)
        assert transformer.get_num_threads() == 1
        np.testing.assert_allclose(mha(x, x, x)[0], three, rtol=1e-6,
                                   atol=1e-7)
        transformer.set_num_threads(1000)    # clamped by the library
        assert transformer.get_num_threads() == 64
        transformer.set_num_threads(0)       # the default: online processors
        import os
        assert transformer.get_num_threads() == min(64, os.cpu_count())
        with pytest.raises(transformer.InvalidArgumentError):
            transformer.set_num_threads(-1)
        with pytest.raises(TypeError):
            transformer.set_num_threads(2.5)
        with pytest.raises(TypeError):
            transformer.set_num_threads(True)
        assert transformer.get_num_threads() == min(64, os.cpu_count())
    finally:
        transformer.set_num_threads(before)
