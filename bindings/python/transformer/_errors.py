"""The exception hierarchy: one class per libtransformer status code.

Every class derives from :class:`TransformerError` *and* from the builtin
exception a Python programmer would expect, so both of these work::

    try:
        mha(query, key, value)
    except transformer.ShapeError as e:   # or: except ValueError
        print(e)                          # "key has 5 columns, expected 8"

The message is the library's own (``tfm_last_error()``); ``e.status`` is the
numeric status code (``tfm_status``).
"""

from . import _lowlevel as _ll

__all__ = [
    "TransformerError", "NullArgumentError", "InvalidArgumentError",
    "ShapeError", "TransformerOverflowError", "OutOfMemoryError",
    "NotFoundError", "WrongKindError", "TransformerIOError", "FormatError",
    "UnsupportedError", "CapacityError", "NonFiniteError", "BusyError",
    "ClosedError",
    "StateDictError", "StateDictShapeError",
]


class TransformerError(Exception):
    """Base class of every error raised by libtransformer.

    ``str(error)`` is the library's message; ``error.status`` the status
    code (an int, ``transformer.TFM_ERR_*``)."""

    status = None

    def __init__(self, message="", status=None):
        super().__init__(message)
        if status is not None:
            self.status = status

    def __str__(self):
        # KeyError would otherwise quote the message.
        return str(self.args[0]) if self.args else ""


class NullArgumentError(TransformerError, TypeError):
    """A required argument was missing (NULL / None)."""
    status = _ll.TFM_ERR_NULL_ARGUMENT


class InvalidArgumentError(TransformerError, ValueError):
    """A value outside its allowed range (e.g. num_heads not dividing
    embed_dim, a size below 1, an unknown option)."""
    status = _ll.TFM_ERR_INVALID_ARGUMENT


class ShapeError(TransformerError, ValueError):
    """Array shapes that do not fit together."""
    status = _ll.TFM_ERR_SHAPE


class TransformerOverflowError(TransformerError, OverflowError):
    """A size computation would overflow (sizes far too large)."""
    status = _ll.TFM_ERR_OVERFLOW


class OutOfMemoryError(TransformerError, MemoryError):
    """An allocation failed."""
    status = _ll.TFM_ERR_OUT_OF_MEMORY


class NotFoundError(TransformerError, KeyError):
    """No parameter, tensor or key of that name."""
    status = _ll.TFM_ERR_NOT_FOUND


class WrongKindError(TransformerError, TypeError):
    """A handle of another kind of module was given."""
    status = _ll.TFM_ERR_WRONG_KIND


class TransformerIOError(TransformerError, OSError):
    """A file could not be opened, read or written."""
    status = _ll.TFM_ERR_IO


class FormatError(TransformerError, ValueError):
    """A malformed file (safetensors or model file)."""
    status = _ll.TFM_ERR_FORMAT


class UnsupportedError(TransformerError, NotImplementedError):
    """Valid, but not supported by libtransformer (a dtype, a rank, an
    activation it does not have)."""
    status = _ll.TFM_ERR_UNSUPPORTED


class CapacityError(TransformerError, ValueError, IndexError):
    """A cache or context length is exceeded."""
    status = _ll.TFM_ERR_CAPACITY


class NonFiniteError(TransformerError, ValueError):
    """NaN or infinity where finite values are required (parameters)."""
    status = _ll.TFM_ERR_NON_FINITE


class BusyError(TransformerError, RuntimeError):
    """The handle is in use by another thread: a training-mode forward or
    backward pass of the same module is running (one at a time)."""
    status = _ll.TFM_ERR_BUSY


class ClosedError(TransformerError, ValueError):
    """The object was closed; its handle is gone."""
    status = None


class StateDictError(NotFoundError, RuntimeError):
    """load_state_dict(strict=True) found missing or unexpected keys.  A
    RuntimeError, as PyTorch's load_state_dict raises, and a NotFoundError
    (KeyError)."""


class StateDictShapeError(ShapeError, RuntimeError):
    """load_state_dict was given a tensor of the wrong shape (PyTorch:
    "size mismatch", a RuntimeError); also a ShapeError (ValueError)."""


_BY_STATUS = {cls.status: cls for cls in (
    NullArgumentError, InvalidArgumentError, ShapeError,
    TransformerOverflowError, OutOfMemoryError, NotFoundError,
    WrongKindError, TransformerIOError, FormatError, UnsupportedError,
    CapacityError, NonFiniteError, BusyError)}

for _status, _cls in _BY_STATUS.items():
    _ll.tfmpy_register_error(_status, _cls)
del _status, _cls

# Shown as transformer.ShapeError, where people import them from.
for _cls in (TransformerError, ClosedError, StateDictError,
             StateDictShapeError, *_BY_STATUS.values()):
    _cls.__module__ = "transformer"
del _cls
