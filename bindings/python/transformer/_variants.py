"""Attention variants (include/transformer/variants.h) as keyword arguments.

The same keywords configure MultiheadAttention, TransformerEncoderLayer,
Attention, functional.attention and (as a dict under "attention") Model:

    score            "scaled_dot" (default), "dot", "general", "additive",
                     "learned_temperature"
    scale            logit scale; None or 0: the score's own (1/sqrt(d_k)
                     for scaled_dot, 1 otherwise)
    additive_dim     d_a of the additive score (None: d_k)
    n_kv_heads       key/value heads (grouped-query; 1 = multi-query)
    rope             "none", "adjacent" (GPT-J, LLaMA), "half" (GPT-NeoX)
    rope_base        RoPE base (None: 10000)
    rope_dims        leading dims of each head rotated (None: all)
    relative         "none", "shaw", "t5", "alibi"
    max_distance     Shaw: clipping distance (required); T5: 128
    relative_values  Shaw: relative vectors on the values too
    num_buckets      T5: buckets (None: 32)
    bidirectional    T5: buckets for both signs (default True)
    sparsity         "none", "sliding_window", "dilated", "bigbird"
    window           positions (BigBird: blocks) each side
    dilation         dilated window step (default 1)
    n_global         global positions (BigBird: blocks)
    block_size       BigBird block size
    n_random_blocks  BigBird random blocks per query block
    seed             BigBird random blocks' seed

Option strings are case-insensitive; an unknown one raises
InvalidArgumentError (a ValueError) naming the allowed values.  Sizes and
combinations are checked by the library when the module is created
(InvalidArgumentError with its message).  (Model files are stricter: their
"tfm.attention.*" values are exact lowercase names.)

``attention_config`` reports the variant as the library holds it, so a
field left at its default reads 0 there: rope_base 0 means 10000,
num_buckets 0 means 32, max_distance 0 means 128 (T5), scale 0 means the
score's own, n_kv_heads 0 means num_heads, rope_dims 0 means all of d_k.
"""

import math
import numbers

import numpy as np

from . import _lowlevel as _ll
from ._core import as_float, as_int, as_seed, enum_names
from ._errors import InvalidArgumentError

_FLOAT32_MAX = 3.4028234663852886e38

# Option strings -> C enum values: the library's tables (names.h).
SCORES = enum_names(_ll.TFM_ENUM_SCORE)
ROPES = enum_names(_ll.TFM_ENUM_ROPE)
RELATIVES = enum_names(_ll.TFM_ENUM_RELATIVE)
SPARSITIES = enum_names(_ll.TFM_ENUM_SPARSITY)
SINUSOIDAL_LAYOUTS = enum_names(_ll.TFM_ENUM_SINUSOIDAL_LAYOUT)

_ENUMS = {"score": SCORES, "rope": ROPES, "relative": RELATIVES,
          "sparsity": SPARSITIES}
_FLOATS = ("scale", "rope_base")
_FLAGS = ("relative_values", "bidirectional")

# The keywords, in the struct's order.
VARIANT_KEYS = ("score", "scale", "additive_dim", "n_kv_heads", "rope",
                "rope_base", "rope_dims", "relative", "max_distance",
                "relative_values", "num_buckets", "bidirectional",
                "sparsity", "window", "dilation", "n_global", "block_size",
                "n_random_blocks", "seed")


def option(table, value, name):
    """An option string (case-insensitive) -> its C enum value."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str (one of "
                        f"{', '.join(map(repr, table))}), not "
                        f"{type(value).__name__}")
    key = value.lower()
    if key not in table:
        raise InvalidArgumentError(f"{name} must be one of "
                                   f"{', '.join(map(repr, table))}; got "
                                   f"{value!r}")
    return table[key]


def normalize(variant, who):
    """Checks variant keyword arguments (who: "Class()", for messages) and
    returns them with canonical values (lowercase option strings, ints,
    floats, bools); None values are dropped (they mean the default)."""
    out = {}
    for key, value in variant.items():
        if key not in VARIANT_KEYS:
            raise TypeError(f"{who} got an unexpected keyword argument "
                            f"{key!r}")
        if value is None:
            continue
        if key in _ENUMS:
            option(_ENUMS[key], value, key)
            out[key] = value.lower()
        elif key in _FLOATS:
            if isinstance(value, (str, bytes, bool, np.bool_)):
                raise TypeError(f"{key} must be a real number, not "
                                f"{type(value).__name__}")
            out[key] = as_float(value, key)
            # scale is a C float: a finite value beyond its range would
            # reach SWIG's setter as a bare OverflowError naming the setter.
            if (key == "scale" and math.isfinite(out[key])
                    and abs(out[key]) > _FLOAT32_MAX):
                raise InvalidArgumentError(f"scale = {out[key]!r} is out of "
                                           f"the float range")
        elif key in _FLAGS:
            # A bool, or the ints 0 and 1: bool("no") would be True.
            if isinstance(value, (bool, np.bool_)):
                out[key] = bool(value)
            elif (isinstance(value, numbers.Integral)
                    and int(value) in (0, 1)):
                out[key] = bool(int(value))
            else:
                raise TypeError(f"{key} must be a bool, not "
                                f"{type(value).__name__} {value!r}")
        elif isinstance(value, (bool, np.bool_)):
            # True is an int to operator.index, but never a size.
            raise TypeError(f"{key} must be an int, not bool")
        elif key == "seed":
            out[key] = as_seed(value)
        else:
            out[key] = as_int(value, key)
    return out


def to_config(variant):
    """A normalized variant dict -> a tfm_attention_config (defaults for
    the keys it lacks)."""
    c = _ll.tfm_attention_config()
    for key, value in variant.items():
        if key in _ENUMS:
            value = _ENUMS[key][value]
        elif key in _FLAGS:
            value = int(value)
        setattr(c, key, value)
    return c


def _name(table, value):
    for k, v in table.items():
        if v == value:
            return k
    return int(value)


def to_dict(c):
    """A tfm_attention_config -> {keyword: value} with every field."""
    out = {}
    for key in VARIANT_KEYS:
        value = getattr(c, key)
        if key in _ENUMS:
            value = _name(_ENUMS[key], value)
        elif key in _FLAGS:
            value = bool(value)
        elif key in _FLOATS:
            value = float(value)
        else:
            value = int(value)
        out[key] = value
    return out


def default_dict():
    """The defaults (tfm_attention_config_init) as a dict."""
    return to_dict(_ll.tfm_attention_config())


def variant_repr(variant):
    """', key=value' for each given keyword (for reprs)."""
    return "".join(f", {k}={variant[k]!r}" for k in VARIANT_KEYS
                   if k in variant)


class HasAttentionVariant:
    """Modules created with variant keywords: they keep the normalized
    keywords in ``self._variant`` (so that pickling rebuilds them) and
    report the library's view with ``attention_config``."""

    _variant = {}

    @property
    def attention_config(self):
        """The attention variant as the library holds it
        (tfm_attention_get_config): a dict with every keyword (option
        strings for the enums), suitable as keyword arguments again."""
        c = _ll.tfm_attention_config()
        self._call(_ll.tfm_attention_get_config, c)
        return to_dict(c)
