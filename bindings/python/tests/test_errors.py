"""Errors: every failure raises the right TransformerError subclass, which
is also the matching builtin, with a useful message; nothing crashes."""

import struct

import numpy as np
import pytest

import transformer
from transformer import _lowlevel as ll

E, H = 8, 2


def mha():
    return transformer.MultiheadAttention(E, H, batch_first=True)


def x(*shape):
    return np.ones(shape, np.float32)


def with_mha(fn):
    """Calls fn(module) while the module is alive: a raw handle (._ptr) is
    only valid as long as its owner."""
    m = mha()
    return fn(m)


def closed_mha():
    m = mha()
    m.close()
    return m


def write_raw_safetensors(path, header, data=b""):
    import json
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return str(path)


# (description, call, exception class, builtin it must also be, message part)
CASES = [
    ("key width", lambda: mha()(x(2, 3, E), x(2, 4, 5), x(2, 4, E)),
     transformer.ShapeError, ValueError, "key has 5 columns, expected 8"),
    ("query rank", lambda: mha()(x(1, 2, 3, E), x(2, 3, E), x(2, 3, E)),
     transformer.ShapeError, ValueError, "must be 3-D"),
    ("key rank", lambda: mha()(x(2, 3, E), x(3, E), x(3, E)),
     transformer.ShapeError, ValueError, "key"),
    ("batch mismatch", lambda: mha()(x(2, 3, E), x(3, 4, E), x(3, 4, E)),
     transformer.ShapeError, ValueError, ""),
    ("attn_mask shape", lambda: mha()(x(2, 3, E), x(2, 4, E), x(2, 4, E),
                                      attn_mask=np.zeros((3, 5), bool)),
     transformer.ShapeError, ValueError, "mask"),
    ("3-D attn_mask count", lambda: mha()(x(2, 3, E), x(2, 4, E), x(2, 4, E),
                                          attn_mask=np.zeros((3, 3, 4), bool)),
     transformer.ShapeError, ValueError, "batch * num_heads"),
    ("key_padding_mask shape",
     lambda: mha()(x(2, 3, E), x(2, 4, E), x(2, 4, E),
                   key_padding_mask=np.zeros((2, 5), bool)),
     transformer.ShapeError, ValueError, "mask"),
    ("heads do not divide", lambda: transformer.MultiheadAttention(10, 3),
     transformer.InvalidArgumentError, ValueError, ""),
    ("zero width", lambda: transformer.MultiheadAttention(0, 1),
     transformer.InvalidArgumentError, ValueError, "embed_dim"),
    ("bad eps", lambda: transformer.LayerNorm(E, eps=-1.0),
     transformer.InvalidArgumentError, ValueError, ""),
    ("empty axis", lambda: mha()(x(2, 0, E), x(2, 0, E), x(2, 0, E)),
     transformer.InvalidArgumentError, ValueError, ""),
    ("huge size int64", lambda: transformer.MultiheadAttention(2**70, 1),
     transformer.TransformerOverflowError, OverflowError, "64 bits"),
    ("missing key", lambda: mha().load_state_dict({}),
     transformer.NotFoundError, KeyError, "in_proj_weight"),
    ("unexpected key", lambda: mha().load_state_dict(
        dict(mha().state_dict(), bogus=np.zeros(1))),
     transformer.NotFoundError, KeyError, "bogus"),
    ("parameter shape", lambda: mha().load_state_dict(
        dict(mha().state_dict(), in_proj_bias=np.zeros(5))),
     transformer.ShapeError, ValueError, "in_proj_bias"),
    ("NaN parameter", lambda: mha().load_state_dict(
        dict(mha().state_dict(), in_proj_bias=np.full(3 * E, np.nan))),
     transformer.NonFiniteError, ValueError, "NaN"),
    ("low-level NaN parameter", lambda: with_mha(lambda m: ll.tfm_module_set_parameter(
        m._ptr, "in_proj_bias", np.full(3 * E, np.inf, np.float32))),
     transformer.NonFiniteError, ValueError, ""),
    ("low-level unknown parameter", lambda: with_mha(lambda m: ll.tfm_module_set_parameter(
        m._ptr, "nope", x(1))),
     transformer.NotFoundError, KeyError, "nope"),
    ("closed", lambda: closed_mha()(x(2, 3, E), x(2, 3, E), x(2, 3, E)),
     transformer.ClosedError, ValueError, "MultiheadAttention is closed"),
    ("closed state_dict", lambda: closed_mha().state_dict(),
     transformer.ClosedError, ValueError, "is closed"),
    ("add_bias_kv with RoPE", lambda: transformer.MultiheadAttention(
        E, H, add_bias_kv=True, rope="half"),
     transformer.InvalidArgumentError, ValueError, "add_bias_kv"),
    ("activation not known", lambda: transformer.TransformerEncoderLayer(
        E, H, activation="swish"),
     transformer.UnsupportedError, NotImplementedError, "silu"),
    ("float64 dtype", lambda: transformer.LayerNorm(E, dtype="float64"),
     transformer.UnsupportedError, NotImplementedError, "float32"),
    ("wrong kind", lambda: with_mha(lambda m: ll.tfm_layer_norm_forward(
        m._ptr, x(2, E), x(2, E))),
     transformer.WrongKindError, TypeError, ""),
    ("NULL argument", lambda: with_mha(lambda m: ll.tfm_mha_forward(
        m._ptr, None, x(1, 2, E), x(1, 2, E), None, x(1, 2, E), None)),
     transformer.NullArgumentError, TypeError, ""),
    ("missing file", lambda: transformer.load_safetensors("/nonexistent/x"),
     transformer.TransformerIOError, OSError, ""),
    ("missing model file", lambda: transformer.Model.load("/nonexistent/m"),
     transformer.TransformerIOError, OSError, ""),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error_class_and_builtin(case):
    _, call, cls, builtin, text = case
    with pytest.raises(cls) as info:
        call()
    assert isinstance(info.value, builtin)
    assert isinstance(info.value, transformer.TransformerError)
    assert text in str(info.value)
    assert str(info.value)       # never an empty message


def test_huge_allocation_is_an_error_not_a_crash():
    with pytest.raises((transformer.TransformerOverflowError,
                        transformer.OutOfMemoryError)) as info:
        transformer.MultiheadAttention(2**40, 1)
    assert isinstance(info.value, (OverflowError, MemoryError))
    with pytest.raises((transformer.TransformerOverflowError,
                        transformer.OutOfMemoryError)):
        transformer.Embedding(2**62, 2**62)


def test_status_code_attribute():
    with pytest.raises(transformer.ShapeError) as info:
        mha()(x(2, 3, E), x(2, 4, 5), x(2, 4, E))
    assert info.value.status == ll.TFM_ERR_SHAPE


@pytest.mark.parametrize("bad", [None, "text", b"bytes", object(),
                                 np.array(["a", "b"]),
                                 np.array([object()] * E),
                                 np.ones((2, 3, E), complex),
                                 np.ones((2, 3, E), bool),
                                 [[1, 2], [3]]])
def test_non_numeric_inputs_raise_type_error(bad):
    with pytest.raises(TypeError):
        mha()(bad, x(2, 3, E), x(2, 3, E))
    with pytest.raises(TypeError):
        mha()(x(2, 3, E), bad, x(2, 3, E))
    with pytest.raises(TypeError):
        transformer.LayerNorm(E)(bad)
    with pytest.raises(TypeError):
        transformer.scaled_dot_product_attention(bad, x(3, E), x(3, E))


@pytest.mark.parametrize("bad", ["mask", np.ones((3, 3), np.int64),
                                 np.ones((3, 3), complex)])
def test_bad_mask_dtype(bad):
    with pytest.raises(TypeError):
        mha()(x(2, 3, E), x(2, 3, E), x(2, 3, E), attn_mask=bad)


def test_bad_argument_types():
    with pytest.raises(TypeError):
        transformer.MultiheadAttention("8", 2)
    with pytest.raises(TypeError):
        transformer.MultiheadAttention(8.0, 2)
    with pytest.raises(TypeError):
        mha().load_state_dict([("in_proj_weight", x(3 * E, E))])
    with pytest.raises(TypeError):
        transformer.TransformerEncoder(mha(), 2)
    with pytest.raises(TypeError):
        transformer.TransformerEncoder(
            transformer.TransformerEncoderLayer(E, H), 2, norm=mha())
    with pytest.raises(TypeError):
        mha().forward_macs("1", 2)


def test_low_level_refuses_unsuitable_arrays():
    m = mha()
    out = x(1, 2, E)
    q = np.ones((1, 2, E))                          # float64
    with pytest.raises(TypeError):
        ll.tfm_mha_forward(m._ptr, q, q, q, None, out, None)
    q = np.ones((1, 2, 2 * E), np.float32)[:, :, ::2]   # not contiguous
    with pytest.raises(ValueError):
        ll.tfm_mha_forward(m._ptr, q, q, q, None, out, None)
    ro = x(1, 2, E)
    ro.setflags(write=False)
    ll.tfm_mha_forward(m._ptr, ro, ro, ro, None, out, None)   # inputs: fine
    with pytest.raises(ValueError):                          # output: not
        ll.tfm_mha_forward(m._ptr, out, out, out, None, ro, None)
    with pytest.raises(transformer.ShapeError):
        ll.tfm_mha_forward(m._ptr, x(1, 1, 1, 1, E), out, out, None, out,
                           None)
    with pytest.raises(TypeError):
        ll.tfm_mha_forward(m._ptr, out, out, out, "masks", out, None)
    with pytest.raises(TypeError):
        ll.tfm_mha_forward(m._ptr, [1.0], out, out, None, out, None)


def test_safetensors_errors(tmp_path):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(transformer.FormatError) as info:
        transformer.load_safetensors(garbage)
    assert isinstance(info.value, ValueError)
    ints = write_raw_safetensors(
        tmp_path / "ints.safetensors",
        {"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}},
        b"\0" * 8)
    with pytest.raises(transformer.UnsupportedError) as info:
        transformer.load_safetensors(ints)
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(transformer.TransformerIOError):
        transformer.save_safetensors({"a": x(2)}, tmp_path / "no" / "dir.st")
    with pytest.raises(TypeError):
        transformer.save_safetensors({"a": "text"}, tmp_path / "t.st")
    with pytest.raises(TypeError):
        transformer.save_safetensors({"a": x(2)}, tmp_path / "t.st",
                                     metadata={"k": 1})
    with pytest.raises(TypeError):
        transformer.load_safetensors(None)


def test_error_after_error_keeps_module_usable():
    m = mha()
    with pytest.raises(transformer.ShapeError):
        m(x(2, 3, E), x(2, 4, 5), x(2, 4, E))
    out, _ = m(x(2, 3, E), x(2, 4, E), x(2, 4, E))
    assert out.shape == (2, 3, E)


def test_exceptions_are_exported_with_their_bases():
    assert issubclass(transformer.ShapeError, ValueError)
    assert issubclass(transformer.InvalidArgumentError, ValueError)
    assert issubclass(transformer.NotFoundError, KeyError)
    assert issubclass(transformer.OutOfMemoryError, MemoryError)
    assert issubclass(transformer.TransformerIOError, OSError)
    assert issubclass(transformer.FormatError, ValueError)
    assert issubclass(transformer.UnsupportedError, NotImplementedError)
    assert issubclass(transformer.CapacityError, ValueError)
    assert issubclass(transformer.CapacityError, IndexError)
    assert issubclass(transformer.NonFiniteError, ValueError)
    assert issubclass(transformer.WrongKindError, TypeError)
    assert issubclass(transformer.NullArgumentError, TypeError)
    assert issubclass(transformer.TransformerOverflowError, OverflowError)
    assert issubclass(transformer.ClosedError, ValueError)
    assert transformer.ShapeError.__module__ == "transformer"
