"""Minimal safetensors writer/reader using numpy only.

File layout (https://github.com/huggingface/safetensors):

    [8 bytes]  N, little-endian uint64: length of the JSON header
    [N bytes]  JSON header, UTF-8, padded with trailing spaces (0x20) so that
               8 + N is a multiple of 8
    [...]      data section: raw little-endian tensor bytes, packed back to
               back with no gaps, in sorted tensor-name order

JSON header:

    {"__metadata__": {str: str, ...},
     "<name>": {"dtype": "F32", "shape": [d0, d1, ...],
                "data_offsets": [begin, end]},      # relative to data section
     ...}

Supported dtypes: F32 (float32), F16 (float16), BF16 (bfloat16; given as a
float32 array and converted with round-to-nearest-even on the upper 16 bits).

    save_safetensors(path, tensors, metadata, dtype="F32")
    load_safetensors(path) -> (tensors, metadata)
    state_dict_to_numpy(module) -> {name: float32 ndarray}
"""

import json
import struct

import numpy as np

_DTYPES = {
    # name: (numpy dtype of the stored bytes, element size)
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
}


def float32_to_bf16_bits(a):
    """float32 array -> uint16 array of bfloat16 bit patterns (RNE)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    # NaN must stay NaN (rounding could carry a NaN mantissa into infinity).
    nan = np.isnan(a)
    if nan.any():
        out[nan] = ((u[nan] >> 16).astype(np.uint16)) | np.uint16(0x0040)
    return out


def bf16_bits_to_float32(b):
    """uint16 array of bfloat16 bit patterns -> float32 array (exact)."""
    b = np.ascontiguousarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def _encode(arr, dtype):
    if dtype not in _DTYPES:
        raise ValueError("unsupported dtype %r (use F32, F16 or BF16)" % dtype)
    arr = np.asarray(arr)
    if dtype == "F32":
        data = np.ascontiguousarray(arr, dtype="<f4")
    elif dtype == "F16":
        data = np.ascontiguousarray(arr, dtype="<f2")
    else:  # BF16
        data = float32_to_bf16_bits(arr.astype(np.float32)).astype("<u2")
    return data.tobytes(order="C")


def save_safetensors(path, tensors, metadata=None, dtype="F32", sort_keys=False):
    """Write ``tensors`` ({name: ndarray}) to ``path`` in safetensors format.

    ``dtype`` is either one dtype name for all tensors ("F32", "F16", "BF16")
    or a dict {name: dtype name}; names missing from the dict get "F32".
    ``metadata`` is a {str: str} dict stored as "__metadata__".
    ``sort_keys`` writes every JSON object of the header with sorted keys.
    Returns the number of bytes written.
    """
    metadata = dict(metadata or {})
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata keys and values must be str: %r=%r" % (k, v))
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("tensor name __metadata__ is reserved")
        dt = dtype.get(name, "F32") if isinstance(dtype, dict) else dtype
        arr = np.asarray(tensors[name])
        raw = _encode(arr, dt)
        header[name] = {"dtype": dt, "shape": [int(d) for d in arr.shape],
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=True,
                       sort_keys=sort_keys).encode("utf-8")
    pad = (-(8 + len(hjson))) % 8
    hjson += b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in chunks:
            f.write(raw)
    return 8 + len(hjson) + offset


def load_safetensors(path, bf16_as_float32=True):
    """Read a safetensors file -> (tensors, metadata).

    F32 -> float32 arrays, F16 -> float16 arrays, BF16 -> float32 arrays
    (exact widening) unless ``bf16_as_float32`` is False (then raw uint16 bits).
    Checks that offsets are in order, contiguous and cover the data section.
    """
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise ValueError("header length %d exceeds file size" % n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {}) or {}
    data = memoryview(blob)[8 + n:]
    tensors = {}
    spans = []
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise ValueError("%s: unsupported dtype %r" % (name, dt))
        npdt, size = _DTYPES[dt]
        shape = tuple(int(d) for d in info["shape"])
        begin, end = (int(x) for x in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * size or begin < 0 or end > len(data):
            raise ValueError("%s: bad data_offsets %r for shape %r" % (name, (begin, end), shape))
        spans.append((begin, end))
        arr = np.frombuffer(data[begin:end], dtype=npdt).reshape(shape).copy()
        if dt == "BF16" and bf16_as_float32:
            arr = bf16_bits_to_float32(arr).reshape(shape)
        tensors[name] = arr
    spans.sort()
    pos = 0
    for b, e in spans:
        if b != pos:
            raise ValueError("data section has a gap or overlap at offset %d" % pos)
        pos = e
    if pos != len(data):
        raise ValueError("data section has %d trailing bytes" % (len(data) - pos))
    return tensors, metadata


def state_dict_to_numpy(module):
    """torch module -> {name: float32 ndarray} (detached, CPU, contiguous)."""
    out = {}
    for name, t in module.state_dict().items():
        out[name] = np.ascontiguousarray(t.detach().cpu().float().numpy())
    return out


def _selftest():
    import os
    import tempfile
    rng = np.random.default_rng(0)
    t = {"b": rng.standard_normal((3, 5)).astype(np.float32),
         "a": rng.standard_normal(7).astype(np.float32),
         "c": np.array(1.5, dtype=np.float32)}
    meta = {"k": "v\n\u00e9"}
    fd, p = tempfile.mkstemp(suffix=".safetensors")
    os.close(fd)
    try:
        for dt in ("F32", "F16", "BF16"):
            n = save_safetensors(p, t, meta, dtype=dt)
            assert n == os.path.getsize(p)
            with open(p, "rb") as f:
                assert (8 + struct.unpack("<Q", f.read(8))[0]) % 8 == 0
            r, m = load_safetensors(p)
            assert m == meta and sorted(r) == sorted(t)
            for k in t:
                assert r[k].shape == t[k].shape
                tol = {"F32": 0, "F16": 1e-3, "BF16": 8e-3}[dt]
                assert np.allclose(r[k].astype(np.float32), t[k], rtol=tol, atol=tol), (dt, k)
        # BF16 round-to-nearest-even on exact ties
        x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, np.inf], dtype=np.float32)
        y = bf16_bits_to_float32(float32_to_bf16_bits(x))
        assert list(y) == [1.0, 1.0, 1.0 + 4 * 2**-8, -2.5, np.inf], y
        assert np.isnan(bf16_bits_to_float32(float32_to_bf16_bits(np.array([np.nan], np.float32))))[0]
    finally:
        os.unlink(p)
    print("export_safetensors self-test OK")


if __name__ == "__main__":
    _selftest()
