"""tfm_model_load / tfm_model_load_v2 on GGUF files through the C ABI
(ctypes on the libtransformer.so.1 the package loaded; the load options
have no Python wrapper yet): weights kept in the file's type (AUTO),
converted when asked, in place in the mapping or copied; parameter
storage types and bytes as weights.h defines them (Q8_0: 34 bytes per 32
values), against gguf-py's files."""

import ctypes

import pytest

import gguf_reference as F
from gguf_reference import R, gguf

import transformer  # noqa: F401  (loads libtransformer.so.1)

pytestmark = pytest.mark.skipif(gguf is None, reason="no gguf-py")

LIB = ctypes.CDLL("libtransformer.so.1")
LIB.tfm_last_error.restype = ctypes.c_char_p
LIB.tfm_module_parameter_bytes.restype = ctypes.c_int64
LIB.tfm_module_parameter_bytes.argtypes = [ctypes.c_void_p]
LIB.tfm_module_free.argtypes = [ctypes.c_void_p]
LIB.tfm_module_parameter_dtype.argtypes = [ctypes.c_void_p, ctypes.c_char_p,
                                           ctypes.POINTER(ctypes.c_int)]
F32, F16, Q8_0, Q4_0 = 0, 1, 10, 11
AUTO = -1


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("dtype", ctypes.c_int),
                ("mmap", ctypes.c_int)]


def load(path, dtype=None, mmap=1):
    out = ctypes.c_void_p()
    if dtype is None:
        st = LIB.tfm_model_load(path.encode(), ctypes.byref(out))
    else:
        o = Options()
        LIB.tfm_load_options_init(ctypes.byref(o))
        o.dtype, o.mmap = dtype, mmap
        st = LIB.tfm_model_load_v2(path.encode(), ctypes.byref(o),
                                   ctypes.byref(out))
    if st != 0:
        raise RuntimeError(LIB.tfm_last_error().decode())
    return out


def dtype_of(model, name):
    d = ctypes.c_int(-7)
    assert LIB.tfm_module_parameter_dtype(model, name.encode(),
                                          ctypes.byref(d)) == 0
    return d.value


CFG = F.LLAMA_CONFIG


def _sizes():
    d, ff, V = CFG["hidden_size"], CFG["intermediate_size"], \
        CFG["vocab_size"]
    L = CFG["num_hidden_layers"]
    kv = CFG["num_key_value_heads"] * d // CFG["num_attention_heads"]
    mats = V * d * 2 + L * ((d + 2 * kv) * d + d * d + 3 * ff * d)
    vecs = L * 2 * d + d
    return mats, vecs


@pytest.mark.parametrize("mmap", [0, 1])
def test_kept_in_file_type(tmp_path, mmap):
    path = str(tmp_path / "m.gguf")
    F.write_llama(path, R.random_weights(CFG), CFG, "Q8_0")
    m = load(path, AUTO, mmap)
    try:
        for name in ("token_embedding.weight", "lm_head.weight",
                     "layers.0.self_attn.in_proj_weight",
                     "layers.1.linear2.weight"):
            assert dtype_of(m, name) == Q8_0, name
        assert dtype_of(m, "layers.0.norm1.weight") == F32
        mats, vecs = _sizes()
        assert LIB.tfm_module_parameter_bytes(m) == mats // 32 * 34 + 4 * vecs
    finally:
        LIB.tfm_module_free(m)


def test_tfm_model_load_keeps_gguf_types(tmp_path):
    path = str(tmp_path / "m.gguf")
    F.write_llama(path, R.random_weights(CFG), CFG, "F16")
    m = load(path)
    try:
        assert dtype_of(m, "layers.1.self_attn.in_proj_weight") == F16
    finally:
        LIB.tfm_module_free(m)


@pytest.mark.parametrize("want", [F32, Q4_0])
def test_converted_when_asked(tmp_path, want):
    path = str(tmp_path / "m.gguf")
    F.write_llama(path, R.random_weights(CFG), CFG, "Q8_0")
    m = load(path, want, 1)
    try:
        assert dtype_of(m, "layers.0.self_attn.in_proj_weight") == want
        assert dtype_of(m, "token_embedding.weight") == want
    finally:
        LIB.tfm_module_free(m)


def test_failed_load_leaves_nothing(tmp_path):
    path = str(tmp_path / "m.gguf")
    F.write_llama(path, R.random_weights(CFG), CFG, "Q8_0",
                  drop="output_norm.weight")
    with pytest.raises(RuntimeError, match="output_norm.weight"):
        load(path, AUTO, 1)
    o = Options()
    LIB.tfm_load_options_init(ctypes.byref(o))
    o.dtype = 77
    out = ctypes.c_void_p()
    assert LIB.tfm_model_load_v2(path.encode(), ctypes.byref(o),
                                 ctypes.byref(out)) != 0
    assert out.value is None
