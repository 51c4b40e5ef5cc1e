"""Minimal safetensors writer/reader using numpy only.

File layout (https://github.com/huggingface/safetensors):

    [8 bytes]  N, little-endian uint64: length of the JSON header
    [N bytes]  JSON header, UTF-8, padded with trailing spaces (0x20) so that
               8 + N is a multiple of 8
    [...]      data section: raw little-endian tensor bytes, packed back to
               back with no gaps, in sorted tensor-name order

JSON header (compact, in this order, as libtransformer's writer prints it):

    {"__metadata__": {str: str, ...},                # keys sorted
     "<name>": {"dtype": "F32", "shape": [d0, d1, ...],
                "data_offsets": [begin, end]},      # relative to data section
     ...}                                           # names sorted

Supported dtypes: F32 (float32), F16 (float16, numpy's round-to-nearest-even
conversion), BF16 (bfloat16; given as a float32 array and rounded to nearest
even on the upper 16 bits, NaN written as 0x7FC0), as torch's
.to(torch.float16) / .to(torch.bfloat16).

    save_safetensors(tensors, path, metadata=None, dtype="F32") -> bytes
    load_safetensors(path) -> (tensors, metadata)
    state_dict_to_numpy(module) -> {name: float32 ndarray}

save_safetensors has the signature of the Python package's
transformer.save_safetensors and writes the same bytes (rank-0 arrays
aside: kept as shape [] here, stored as [1] by the package); it exists so
that the reference generators (tools/make_*.py) and train_charlm.py run with
numpy alone, before and independently of a build.  Files are written
atomically: a temporary file in the same directory, fsync, rename, and an
fsync of the directory.
"""

import collections.abc
import json
import os
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
    # NaN must stay NaN (rounding could carry a NaN mantissa into infinity):
    # 0x7FC0, as c10::BFloat16 and libtransformer's writer.
    out[np.isnan(a)] = np.uint16(0x7FC0)
    return out


def bf16_bits_to_float32(b):
    """uint16 array of bfloat16 bit patterns -> float32 array (exact)."""
    b = np.ascontiguousarray(b, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)


def dtype_name(dtype):
    """The file's dtype name for "F32", "F16", "BF16" (any case) or the
    numpy dtypes float32 and float16.  (transformer.save_safetensors also
    takes torch dtypes and the names float16, half, bfloat16.)"""
    if isinstance(dtype, str) and dtype.upper() in _DTYPES:
        return dtype.upper()
    by_numpy = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    try:
        return by_numpy[np.dtype(dtype)]
    except (TypeError, KeyError):
        raise ValueError("unsupported dtype %r (use F32, F16 or BF16)"
                         % (dtype,)) from None


def _encode(arr, dtype):
    if hasattr(arr, "detach"):                       # a torch tensor
        arr = arr.detach().cpu().float().numpy()
    arr = np.asarray(arr)
    if dtype == "F32":
        data = np.ascontiguousarray(arr, dtype="<f4")
    elif dtype == "F16":
        with np.errstate(over="ignore"):    # beyond 65504: inf, on purpose
            data = np.ascontiguousarray(arr.astype(np.float32), dtype="<f2")
    else:  # BF16
        data = float32_to_bf16_bits(arr.astype(np.float32)).astype("<u2")
    return data.tobytes(order="C"), arr.shape


def _write_atomically(path, chunks):
    """Writes the byte chunks to path through path.tmp.<pid> in the same
    directory: fsync, rename over path, fsync of the directory."""
    path = os.fspath(path)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_safetensors(tensors, path, metadata=None, dtype="F32", *,
                     sort_keys=False):
    """Write ``tensors`` ({name: ndarray or torch tensor}) to ``path`` in
    safetensors format, with the signature of transformer.save_safetensors.

    ``metadata`` is a {str: str} dict stored as "__metadata__".
    ``dtype`` is one dtype for all tensors ("F32", "F16", "BF16", or
    numpy's float32 / float16) or a dict {name: dtype}; names missing from
    the dict get "F32".
    ``sort_keys`` (this tool only) writes every JSON object of the header
    with sorted keys, the layout of the committed tests/fixtures files.
    Returns the number of bytes written.
    """
    if isinstance(tensors, (str, bytes, os.PathLike)) and \
            isinstance(path, collections.abc.Mapping):
        raise TypeError("save_safetensors(tensors, path, metadata=None, "
                        "dtype='F32'): the tensors come first, as in "
                        "transformer.save_safetensors")
    metadata = dict(metadata or {})
    for k, v in metadata.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata keys and values must be str: %r=%r" % (k, v))
    if isinstance(dtype, collections.abc.Mapping):
        per_name = {k: dtype_name(v) for k, v in dtype.items()}
        default = "F32"
    else:
        per_name, default = {}, dtype_name(dtype)
    header = {}
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    chunks = []
    offset = 0
    for name in sorted(tensors):
        if name == "__metadata__":
            raise ValueError("tensor name __metadata__ is reserved")
        dt = per_name.get(name, default)
        raw, shape = _encode(tensors[name], dt)
        header[name] = {"dtype": dt, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hjson = json.dumps(header, separators=(",", ":"), ensure_ascii=False,
                       sort_keys=sort_keys).encode("utf-8")
    pad = (-(8 + len(hjson))) % 8
    hjson += b" " * pad
    _write_atomically(path, [struct.pack("<Q", len(hjson)), hjson] + chunks)
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
            n = save_safetensors(t, p, meta, dtype=dt)
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
