"""Reading and writing safetensors files (Hugging Face's format), with the
library's validating reader and its writer.

    tensors = load_safetensors("weights.safetensors")   # {name: ndarray}
    save_safetensors(tensors, "copy.safetensors", metadata={"note": "x"})
    save_safetensors(tensors, "half.safetensors", dtype="BF16")
"""

import collections
import collections.abc
import os

import numpy as np

from . import _lowlevel as _ll
from ._core import as_float32, fspath
from ._errors import UnsupportedError

__all__ = ["load_safetensors", "load_safetensors_metadata",
           "save_safetensors"]


def load_safetensors(path):
    """Reads every tensor of a safetensors file into float32 numpy arrays:
    {name: array}, in the file's order.  F32 is copied, F16 / BF16 converted
    exactly, F64 rounded.  A malformed file raises FormatError, an integer
    dtype UnsupportedError, a missing file TransformerIOError."""
    path = fspath(path)
    f = _ll.tfm_safetensors_open(path)
    try:
        out = collections.OrderedDict()
        for i in range(_ll.tfm_safetensors_count(f)):
            name = _ll.tfm_safetensors_name(f, i)
            out[name] = _ll.tfm_safetensors_read(f, name)
        return out
    finally:
        _ll.tfm_safetensors_close(f)


def load_safetensors_metadata(path):
    """The file's "__metadata__" as a dict of str to str."""
    path = fspath(path)
    f = _ll.tfm_safetensors_open(path)
    try:
        keys = [_ll.tfm_safetensors_metadata_key(f, i)
                for i in range(_ll.tfm_safetensors_metadata_count(f))]
        return {k: _ll.tfm_safetensors_metadata(f, k) for k in keys}
    finally:
        _ll.tfm_safetensors_close(f)


_DTYPE_NAMES = {
    # every spelling of the three stored dtypes -> the file's name
    "f32": "F32", "float32": "F32", "float": "F32",
    "f16": "F16", "float16": "F16", "half": "F16",
    "bf16": "BF16", "bfloat16": "BF16",
}
_DTYPE_CODES = {"F32": _ll.TFM_DTYPE_F32, "F16": _ll.TFM_DTYPE_F16,
                "BF16": _ll.TFM_DTYPE_BF16}


def _dtype_name(dtype):
    """"F32" / "F16" / "BF16" from a name (any case: "F16", "float16",
    "half", "bfloat16", ...), a numpy dtype or a torch dtype."""
    key = dtype if isinstance(dtype, str) else str(dtype)
    if key.startswith("torch."):            # torch.float16, torch.bfloat16
        key = key[len("torch."):]
    elif not isinstance(dtype, str):        # np.float16, np.dtype("<f2")
        try:
            key = np.dtype(dtype).name
        except TypeError:
            pass
    name = _DTYPE_NAMES.get(key.lower())
    if name is None:
        raise UnsupportedError(f"dtype {dtype!r}: the writer stores F32, F16 "
                               "or BF16")
    return name


def _as_float32(value, name):
    # torch's bfloat16 has no numpy twin: widen it (exactly) first.
    if getattr(value, "dtype", None) is not None and \
            str(value.dtype) == "torch.bfloat16":
        value = value.float()
    return as_float32(value, name)


def save_safetensors(tensors, path, metadata=None, dtype="F32"):
    """Writes {name: array} to a safetensors file (the argument order of
    Hugging Face's safetensors.numpy.save_file / safetensors.torch.save_file).

    Args:
        tensors: a mapping of str names to numpy arrays or torch tensors
            (any real dtype, bfloat16 included), rank 0 to 4; rank-0
            arrays are stored as shape [1].  Tensors are stored in name
            order.
        path: the file (str or os.PathLike).
        metadata: optional {str: str}, stored as "__metadata__".
        dtype: how the values are stored: "F32" (default, exact), "F16"
            (IEEE half) or "BF16" (bfloat16), rounded to nearest even as
            torch's ``.to(torch.float16)`` / ``.to(torch.bfloat16)`` (NaN
            stays NaN; F16 overflows to inf from 65520).  Also accepts
            numpy and torch dtypes (``np.float16``, ``torch.bfloat16``)
            and the names "float32", "float16", "half", "bfloat16"; or a
            dict {name: dtype} (names not in it are stored as F32).

    Returns:
        the number of bytes written.

    The file is written under a temporary name in the same directory,
    flushed to disk (fsync), renamed over path and the directory flushed
    (tfm_safetensors_writer_save): a failure or crash leaves the old file
    or the whole new one, never a partial file.  load_safetensors reads
    F16 and BF16 back exactly as float32.  tools/export_safetensors.py
    (numpy only, for the reference generators) has the same signature and
    writes the same bytes."""
    path = fspath(path)
    if not isinstance(tensors, collections.abc.Mapping):
        raise TypeError("tensors must be a mapping of names to arrays")
    if isinstance(dtype, collections.abc.Mapping):
        per_name = {k: _dtype_name(v) for k, v in dtype.items()}
        unknown = sorted(set(per_name) - set(tensors))
        if unknown:
            raise KeyError(f"dtype names tensors that are not given: "
                           f"{', '.join(map(repr, unknown))}")
        default = "F32"
    else:
        per_name, default = {}, _dtype_name(dtype)
    staged = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, not "
                            f"{type(name).__name__}")
        a = _as_float32(value, name)
        if a.ndim == 0:
            a = a.reshape(1)
        if a.ndim > 4:
            raise UnsupportedError(f"{name} has rank {a.ndim}; the writer "
                                   "takes rank 1 to 4")
        staged.append((name, a, _DTYPE_CODES[per_name.get(name, default)]))
    meta = {}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata keys and values must be str")
        meta[k] = v
    w = _ll.tfm_safetensors_writer_create()
    try:
        for name, a, code in staged:
            _ll.tfm_safetensors_writer_add_as(w, name, a, code)
        for k, v in meta.items():
            _ll.tfm_safetensors_writer_set_metadata(w, k, v)
        _ll.tfm_safetensors_writer_save(w, path)
    finally:
        _ll.tfm_safetensors_writer_free(w)
    return os.path.getsize(path)
