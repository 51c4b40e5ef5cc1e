"""Reading and writing safetensors files (Hugging Face's format), with the
library's validating reader and its writer.

    tensors = load_safetensors("weights.safetensors")   # {name: ndarray}
    save_safetensors(tensors, "copy.safetensors", metadata={"note": "x"})
"""

import collections
import collections.abc

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


def save_safetensors(tensors, path, metadata=None):
    """Writes {name: array} (numpy arrays or torch tensors, rank 0 to 4) as
    F32 to a safetensors file, with optional {str: str} metadata.  The file
    is written to a temporary name and renamed: a failure leaves no partial
    file.  Rank-0 arrays are stored as shape [1]."""
    path = fspath(path)
    if not isinstance(tensors, collections.abc.Mapping):
        raise TypeError("tensors must be a mapping of names to arrays")
    staged = []
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, not "
                            f"{type(name).__name__}")
        a = as_float32(value, name)
        if a.ndim == 0:
            a = a.reshape(1)
        if a.ndim > 4:
            raise UnsupportedError(f"{name} has rank {a.ndim}; the writer "
                                   "takes rank 1 to 4")
        staged.append((name, a))
    meta = {}
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError("metadata keys and values must be str")
        meta[k] = v
    w = _ll.tfm_safetensors_writer_create()
    try:
        for name, a in staged:
            _ll.tfm_safetensors_writer_add(w, name, a)
        for k, v in meta.items():
            _ll.tfm_safetensors_writer_set_metadata(w, k, v)
        _ll.tfm_safetensors_writer_save(w, path)
    finally:
        _ll.tfm_safetensors_writer_free(w)
