"""Weights kept in 16, 8 and 4 bits (transformer/weights.h): dtype names,
and the Module methods quantize, parameter_dtype, num_parameter_bytes and
get_memory_footprint (the StoredWeights mixin of Module)."""

from . import _lowlevel as _ll
from ._errors import InvalidArgumentError, NotFoundError

# The names quantize() and from_pretrained(dtype=) take, as torch and
# llama.cpp spell them (case-insensitive).
_DTYPES = {
    "float32": _ll.TFM_DTYPE_F32, "f32": _ll.TFM_DTYPE_F32,
    "float": _ll.TFM_DTYPE_F32,
    "bfloat16": _ll.TFM_DTYPE_BF16, "bf16": _ll.TFM_DTYPE_BF16,
    "float16": _ll.TFM_DTYPE_F16, "f16": _ll.TFM_DTYPE_F16,
    "half": _ll.TFM_DTYPE_F16,
    "q8_0": _ll.TFM_DTYPE_Q8_0, "q4_0": _ll.TFM_DTYPE_Q4_0,
}
DTYPE_NAMES = ("float32", "f32", "bfloat16", "bf16", "float16", "f16",
               "q8_0", "q4_0")


def dtype_value(dtype, who, auto=False):
    """The TFM_DTYPE_* of a dtype name ("q8_0", "bf16", ...) or of a torch
    dtype (torch.float32, torch.bfloat16, torch.float16); with auto=True
    also "auto" (TFM_LOAD_DTYPE_AUTO).  InvalidArgumentError (a
    ValueError) for any other name, TypeError for what is not a name."""
    if not isinstance(dtype, str):
        text = str(dtype)
        if type(dtype).__module__ == "torch" and text.startswith("torch."):
            dtype = text[len("torch."):]   # torch.bfloat16 -> "bfloat16"
        else:
            raise TypeError(f"{who}: dtype must be a name such as 'q8_0' or "
                            f"a torch dtype, not {type(dtype).__name__}")
    key = dtype.lower()
    if auto and key == "auto":
        return _ll.TFM_LOAD_DTYPE_AUTO
    if key not in _DTYPES:
        names = (("auto", ) if auto else ()) + DTYPE_NAMES
        raise InvalidArgumentError(f"{who}: unknown dtype {dtype!r}; "
                                   f"expected one of {', '.join(names)}")
    return _DTYPES[key]


def dtype_name(value):
    """The library's name of a TFM_DTYPE_* ("F32", "BF16", "Q8_0", ...)."""
    return _ll.tfm_enum_name(_ll.TFM_ENUM_DTYPE, value)


class StoredWeights:
    """Module methods for weights stored in 16, 8 and 4 bits."""

    def quantize(self, dtype):
        """Stores every weight of the matrix products and every embedding
        table in dtype: "bfloat16"/"bf16", "float16"/"f16", "q8_0",
        "q4_0" (llama.cpp's blocks of 32), or "float32"/"f32" back to
        float32 (widened exactly); torch.bfloat16 / torch.float16 /
        torch.float32 work too.  Everything else stays float32 (biases,
        norms); every computation is float32 on the widened weights
        (tfm_module_quantize in weights.h).  Returns self, as torch's
        ``.to()``.  A quantised module computes and generates but does
        not train (``train()`` raises InvalidArgumentError), and its
        state_dict() holds the widened values.  Errors:
        InvalidArgumentError (an unknown name; training mode; for q8_0 and
        q4_0, a weight whose rows are not a multiple of 32 values, named),
        NonFiniteError; nothing changes on error."""
        value = dtype_value(dtype, "quantize")
        for _, mod in self._components():
            mod._call(_ll.tfm_module_quantize, value)
        return self

    def parameter_dtype(self, name):
        """How parameter ``name`` (a state_dict name) is stored: "F32",
        "BF16", "F16", "Q8_0" or "Q4_0".  NotFoundError (a KeyError) for
        a name the module does not have."""
        entry = self._table().get(name)
        if entry is None:
            raise NotFoundError(f"{type(self).__name__} has no parameter "
                                f"{name!r}")
        mod, c_name = entry[0], entry[1]
        return dtype_name(mod._call(_ll.tfm_module_parameter_dtype, c_name))

    def num_parameter_bytes(self):
        """Bytes the parameters occupy: 4 per float32 value, 2 per
        bfloat16 / float16 value, 34 per 32 Q8_0 values, 18 per 32 Q4_0
        values (tfm_module_parameter_bytes)."""
        return sum(mod._call(_ll.tfm_module_parameter_bytes)
                   for _, mod in self._components())

    def get_memory_footprint(self, return_buffers=True):
        """Hugging Face's name for :meth:`num_parameter_bytes`: bytes of
        the parameters (modules have no buffers besides them, so
        return_buffers changes nothing)."""
        del return_buffers
        return self.num_parameter_bytes()
