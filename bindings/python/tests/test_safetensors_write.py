"""One save_safetensors: transformer.save_safetensors(tensors, path,
metadata=None, dtype="F32") writes F32, F16 and BF16 whose bytes are
torch's own conversions (Tensor.to(torch.float16 / torch.bfloat16)), that
the library's reader gives back exactly, atomically; and
tools/export_safetensors.py (numpy only) has the same signature and writes
the same bytes."""

import json
import os
import struct
import sys

import numpy as np
import pytest
import torch

import transformer
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import export_safetensors as tool  # noqa: E402


def raw_file(path):
    """(header dict, data bytes), parsed here with json and struct."""
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert (8 + n) % 8 == 0
    return json.loads(blob[8:8 + n]), blob[8 + n:]


def tensor_bytes(header, data, name):
    begin, end = header[name]["data_offsets"]
    return data[begin:end]


def hard_values():
    """Random normals at several scales plus the edges of binary16 and
    bfloat16: overflow, subnormals, exact ties, signed zeros, infinities."""
    g = torch.Generator().manual_seed(14)
    parts = [torch.randn(200, generator=g) * s
             for s in (1e-6, 1e-3, 1.0, 1e3, 6e4, 1e6)]
    edges = torch.tensor([
        65504.0, 65519.0, 65520.0, 65536.0, -65520.0,   # F16 overflow
        2.0 ** -24, 2.0 ** -25, 1.5 * 2.0 ** -24, 3 * 2.0 ** -26,
        2.0 ** -14, 1023.5 * 2.0 ** -24,               # F16 subnormals
        1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11,             # F16 ties
        1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8,               # BF16 ties
        3.4028234663852886e38, -3.4028234663852886e38,  # FLT_MAX
        1e-45, 0.0, -0.0, float("inf"), float("-inf")], dtype=torch.float32)
    return torch.cat(parts + [edges]).reshape(-1, 2)


@pytest.mark.parametrize("dtype, torch_dtype", [
    ("F16", torch.float16), ("BF16", torch.bfloat16),
    (torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
    (np.float16, torch.float16), ("bfloat16", torch.bfloat16),
])
def test_bytes_are_torchs_conversion(tmp_path, dtype, torch_dtype):
    x = hard_values()
    path = tmp_path / "h.safetensors"
    n = transformer.save_safetensors({"x": x}, path, dtype=dtype)
    assert n == os.path.getsize(path)
    header, data = raw_file(path)
    name = "F16" if torch_dtype == torch.float16 else "BF16"
    assert header["x"]["dtype"] == name
    assert header["x"]["shape"] == list(x.shape)
    want = x.to(torch_dtype).view(torch.int16).numpy().tobytes()
    assert tensor_bytes(header, data, "x") == want
    # The library's reader widens them back to exactly torch's values.
    back = transformer.load_safetensors(path)["x"]
    np.testing.assert_array_equal(back, x.to(torch_dtype).float().numpy())


def test_nan_stays_nan(tmp_path):
    x = torch.tensor([float("nan"), -float("nan"), 1.0])
    for dtype in ("F16", "BF16"):
        path = tmp_path / f"nan_{dtype}.safetensors"
        transformer.save_safetensors({"x": x}, path, dtype=dtype)
        back = transformer.load_safetensors(path)["x"]
        assert np.isnan(back[:2]).all() and back[2] == 1.0
    # F16: torch's quiet NaN bits exactly (0x7E00, sign kept).
    header, data = raw_file(tmp_path / "nan_F16.safetensors")
    assert tensor_bytes(header, data, "x")[:2] == \
        x[:1].to(torch.float16).view(torch.int16).numpy().tobytes()


def test_f32_mixed_dtypes_metadata_and_module(tmp_path, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = torch.randn(5, dtype=torch.float64)
    c = torch.randn(2, 3).to(torch.bfloat16)        # no numpy twin
    meta = {"note": "h\u00e9llo \"q\"\n\\", "format": "pt", "": "empty key"}
    path = tmp_path / "mixed.safetensors"
    transformer.save_safetensors({"a": a, "b": b, "c": c}, path, meta,
                                 dtype={"a": "F16", "c": torch.bfloat16})
    header, data = raw_file(path)
    assert [header[k]["dtype"] for k in "abc"] == ["F16", "F32", "BF16"]
    assert header["__metadata__"] == meta
    assert transformer.load_safetensors_metadata(path) == meta
    back = transformer.load_safetensors(path)
    np.testing.assert_array_equal(
        back["a"], torch.from_numpy(a).half().float().numpy())
    np.testing.assert_array_equal(back["b"], b.float().numpy())
    np.testing.assert_array_equal(back["c"], c.float().numpy())
    assert tensor_bytes(header, data, "c") == \
        c.view(torch.int16).numpy().tobytes()

    layer = transformer.LayerNorm(6)
    layer.load_state_dict({"weight": rng.standard_normal(6),
                           "bias": rng.standard_normal(6)})
    n = layer.save_safetensors(tmp_path / "ln.safetensors", dtype="BF16")
    assert n == os.path.getsize(tmp_path / "ln.safetensors")
    back = transformer.load_safetensors(tmp_path / "ln.safetensors")
    np.testing.assert_array_equal(
        back["weight"],
        torch.from_numpy(layer.state_dict()["weight"]).bfloat16().float())


def test_refusals_leave_the_old_file(tmp_path):
    path = tmp_path / "keep.safetensors"
    transformer.save_safetensors({"a": np.ones(2, np.float32)}, path)
    before = path.read_bytes()
    with pytest.raises(transformer.UnsupportedError):
        transformer.save_safetensors({"a": np.zeros(2)}, path, dtype="I32")
    with pytest.raises(transformer.UnsupportedError):
        transformer.save_safetensors({"a": np.zeros(2)}, path,
                                     dtype=np.int8)
    with pytest.raises(KeyError):
        transformer.save_safetensors({"a": np.zeros(2)}, path,
                                     dtype={"b": "F16"})
    with pytest.raises(transformer.TransformerIOError):
        transformer.save_safetensors({"a": np.zeros(2)},
                                     tmp_path / "no" / "dir.safetensors")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.safetensors"]


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16",
                                   {"w": "BF16", "b": "F16"}])
def test_tool_writes_the_same_bytes(tmp_path, rng, dtype):
    tensors = {"w": hard_values().numpy(),
               "b": rng.standard_normal((2, 3, 4)).astype(np.float32),
               "z.last": np.arange(6, dtype=np.float32)}
    meta = {"k": "v\n\u00e9", "a": "first", "tab\t": "\x01"}
    ours, theirs = tmp_path / "package.st", tmp_path / "tool.st"
    n1 = transformer.save_safetensors(tensors, ours, meta, dtype=dtype)
    n2 = tool.save_safetensors(tensors, theirs, meta, dtype=dtype)
    assert n1 == n2 == os.path.getsize(ours)
    assert ours.read_bytes() == theirs.read_bytes()
    t, m = tool.load_safetensors(theirs)
    assert m == meta


def test_tool_refuses_the_old_argument_order(tmp_path):
    with pytest.raises(TypeError, match="tensors come first"):
        tool.save_safetensors(str(tmp_path / "x.st"),
                              {"a": np.zeros(1, np.float32)})


def test_tool_writes_atomically(tmp_path, monkeypatch):
    """Temporary file, fsync, rename, fsync of the directory, in that
    order; an error while writing leaves the old file and no temporary."""
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        calls.append(("fsync", os.path.isdir(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(a, b):
        calls.append(("replace", os.path.dirname(a) == os.path.dirname(b)))
        real_replace(a, b)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "a.st"
    tool.save_safetensors({"a": np.ones(3, np.float32)}, path)
    assert calls == [("fsync", False), ("replace", True), ("fsync", True)]
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def failing_fsync(fd):
        raise Boom()

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(Boom):
        tool.save_safetensors({"a": np.zeros(9, np.float32)}, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["a.st"]
