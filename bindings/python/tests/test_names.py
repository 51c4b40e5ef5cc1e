"""Enum names come from the C library's one table per enum (names.h): the
Python options are exactly the strings model files use, and the low-level
lookups refuse unknown names with InvalidArgumentError."""
import pytest

import transformer
from transformer import _lowlevel as ll
from transformer._core import enum_names
from transformer._variants import RELATIVES, ROPES, SCORES, SPARSITIES


def test_variant_options_are_the_c_tables():
    # The strings of model.h's "tfm.attention.*" documentation.
    assert list(SCORES) == ["scaled_dot", "dot", "general", "additive",
                            "learned_temperature"]
    assert list(ROPES) == ["none", "adjacent", "half"]
    assert list(RELATIVES) == ["none", "shaw", "t5", "alibi"]
    assert list(SPARSITIES) == ["none", "sliding_window", "dilated",
                                "bigbird"]
    assert SCORES["learned_temperature"] == ll.TFM_SCORE_LEARNED_TEMPERATURE
    assert SPARSITIES["bigbird"] == ll.TFM_SPARSE_BIGBIRD


def test_every_name_round_trips():
    for kind in range(ll.TFM_ENUM_COUNT):
        names = enum_names(kind)
        assert names, kind
        for name, value in names.items():
            assert ll.tfm_enum_from_name(kind, name) == value
            assert ll.tfm_enum_name(kind, value) == name
    assert enum_names(ll.TFM_ENUM_ARCHITECTURE) == {
        "decoder_only": 1, "encoder_only": 2, "encoder_decoder": 3}
    assert enum_names(ll.TFM_ENUM_DTYPE)["BF16"] == ll.TFM_DTYPE_BF16


def test_unknown_name_is_invalid_argument():
    with pytest.raises(transformer.InvalidArgumentError,
                       match='unknown activation "swish"'):
        ll.tfm_enum_from_name(ll.TFM_ENUM_ACTIVATION, "swish")
    assert ll.tfm_enum_name(ll.TFM_ENUM_ACTIVATION, 99) is None
