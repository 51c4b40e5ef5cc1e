#!/usr/bin/python3
"""Writes tests/data/numpy_reference.safetensors, a small safetensors file
produced outside libtransformer, for the cross-check in
tests/test_safetensors.c.

The format is written by hand here (struct + json + numpy's own float16
conversion), independently of the C writer and of tools/export_safetensors.py:

    [8 bytes]  N, little-endian uint64: length of the JSON header
    [N bytes]  UTF-8 JSON header (json.dumps with its default ", " / ": "
               separators and raw non-ASCII characters)
    [...]      raw little-endian tensor bytes

The header is deliberately NOT padded to a multiple of 8 (N is odd), so the
data section starts at an odd file offset, and the tensors are stored in an
order that is not their name order.  The C test asserts the exact values
listed in VALUES below; keep the two in step.

    /usr/bin/python3 tools/make_safetensors_testdata.py [output path]
"""

import argparse
import json
import os
import struct
import sys

import numpy as np

# name -> (dtype, shape, values).  Every value is exactly representable in
# its dtype, except F64 which tests rounding to float32:
#   F16  0.5, -1.25, 65504 (largest), 2^-24 (smallest subnormal),
#        2^-14 (smallest normal), 3 * 2^-24 (subnormal), -0.0, +inf
#   BF16 1.0, 3.140625, -2.5, 0.0078125 (= 2^-7)
#   F64  0.1 -> 0.1f, -1e300 -> -inf, 1 + 2^-30 -> 1.0f
VALUES = {
    "f64": ("F64", [3], [0.1, -1e300, 1.0 + 2.0 ** -30]),
    "f16": ("F16", [2, 4], [0.5, -1.25, 65504.0, 2.0 ** -24, 2.0 ** -14,
                            3 * 2.0 ** -24, -0.0, float("inf")]),
    "scalar": ("F32", [], [42.0]),
    "bf16": ("BF16", [2, 2], [1.0, 3.140625, -2.5, 0.0078125]),
    "f32": ("F32", [2, 3], [-0.5, -0.25, 0.0, 0.25, 1e-3, 3.4028234663852886e38]),
    "i32": ("I32", [2], [7, -7]),
}


def encode(dtype, shape, values):
    if dtype == "F32":
        arr = np.array(values, dtype="<f4")
    elif dtype == "F64":
        arr = np.array(values, dtype="<f8")
    elif dtype == "F16":
        arr = np.array(values, dtype="<f2")
        assert np.array_equal(arr.astype(np.float64), np.array(values)), values
    elif dtype == "BF16":
        bits = np.array(values, dtype="<f4").view("<u4")
        assert not (bits & 0xFFFF).any(), "BF16 values must be exact"
        arr = (bits >> 16).astype("<u2")
    elif dtype == "I32":
        arr = np.array(values, dtype="<i4")
    else:
        raise ValueError(dtype)
    count = int(np.prod(shape)) if shape else 1
    assert arr.size == count, (shape, values)
    return arr.tobytes()


def build():
    header = {"__metadata__": {"producer": "numpy",
                               "text": "caf\u00e9 \"quoted\"\ttab"}}
    blobs = []
    offset = 0
    for name, (dtype, shape, values) in VALUES.items():
        raw = encode(dtype, shape, values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    if len(text) % 2 == 0:
        text += b" "  # keep N odd: the data then starts at an odd offset
    assert (8 + len(text)) % 8 != 0
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default = os.path.join(here, "..", "tests", "data",
                           "numpy_reference.safetensors")
    ap = argparse.ArgumentParser(
        description="Write the numpy-made safetensors test file.")
    ap.add_argument("path", nargs="?", default=default,
                    help="output file (default: %(default)s)")
    path = ap.parse_args().path
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    blob = build()
    with open(path, "wb") as f:
        f.write(blob)
    print("wrote %s (%d bytes)" % (path, len(blob)))


if __name__ == "__main__":
    main()
