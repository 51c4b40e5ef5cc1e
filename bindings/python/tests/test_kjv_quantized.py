"""Issue 45's quality bound on the shipped model: the KJV model quantised
with model.quantize("q8_0") keeps its validation bits per character within
0.5 % of float32's, quantised to "q4_0" within 3 %.  The float32 number is
measured here from the same file (not copied from the model card), with the
card's protocol (tools/kjv_quantized_bpc.py: 200 evenly spaced windows of
128 predicted characters of the validation text, cross-entropy in float64
numpy from the logits).  The card's table (models/README.md, "Weights in
16, 8 and 4 bits") is the same script's output, train split included."""

import json
import shutil
import struct
import sys

import pytest

from conftest import REPO, model_path_or_skip

sys.path.insert(0, str(REPO / "tools"))
import kjv_quantized_bpc as kq  # noqa: E402

sys.path.pop(0)

BOUNDS = {"q8_0": 0.005, "q4_0": 0.03}


def file_metadata(path):
    """The safetensors header's "__metadata__", read with json (an 8-byte
    little-endian length, then the JSON header)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)).get("__metadata__", {})


@pytest.fixture(scope="module")
def val_bpc():
    path = model_path_or_skip()
    if shutil.which("bible", path="/usr/bin:/bin") is None:
        pytest.skip("Debian's bible-kjv (the validation text) is absent")
    rows = kq.measure(path, 200, ["float32", "q8_0", "q4_0"], train=False)
    got = {dtype: va for dtype, _, _, va in rows}
    got["recorded"] = float(file_metadata(path)["tfm.val_loss_bpc"])
    return got


def test_float32_is_the_trainers_measurement(val_bpc):
    # The file's own record of its validation loss (tfm.val_loss_bpc,
    # written by the trainer with the same protocol, 4 decimals): the
    # evaluation here is that protocol.
    assert abs(val_bpc["float32"] - val_bpc["recorded"]) < 1.5e-4


@pytest.mark.parametrize("dtype", sorted(BOUNDS))
def test_quantised_validation_bpc_within_bound(val_bpc, dtype):
    base = val_bpc["float32"]
    change = (val_bpc[dtype] - base) / base
    # Quantisation costs something (rounding can help by chance, but not
    # by more than a trace on 25,600 characters), and within the issue's
    # bound.
    assert -0.001 < change <= BOUNDS[dtype], (dtype, val_bpc[dtype], base)

