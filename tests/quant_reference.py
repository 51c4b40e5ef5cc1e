"""Our Q8_0 / Q4_0 / F16 / BF16 bytes against gguf-py's numpy reference
(llama.cpp's gguf-py/gguf/quants.py, "bit-exact with ggml-quants.c"), and
our widening against its dequantisation, bit for bit, on random rows.

    quant_reference.py QUANT_DUMP LLAMA_CPP_DIR

QUANT_DUMP: tests/quant_dump.c's program; LLAMA_CPP_DIR: a llama.cpp tree
(tools/fetch-llama-cpp.sh), whose gguf-py/ is imported.  The rows: normal
values at scales 1e-6 .. 1e4, values on Q8_0 / Q4_0 rounding ties, blocks
of equal values, zeros, a huge value among small ones, a few exact
multiples.  One case is left out on purpose: a Q4_0 block whose values are
all zeros and whose first is -0.0 (ggml's C gives d = -0.0, gguf-py
+0.0; tests/test_quant.c checks ggml's)."""
import os
import subprocess
import sys
import tempfile

import numpy as np

np.seterr(all="ignore")  # the huge value overflows binary16 on purpose

dump, llama = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(llama, "gguf-py"))
from gguf import quants  # noqa: E402
from gguf.constants import GGMLQuantizationType as T  # noqa: E402

ROW = 256
rng = np.random.default_rng(45)


def rows():
    out = []
    for scale in 10.0 ** np.arange(-6, 5):
        out.append(rng.standard_normal((8, ROW)) * scale)
    # ties: d = 1 for Q8_0 (a 127 per block), halves in between
    t = rng.integers(-254, 255, (8, ROW)) / 2.0
    t[:, ::32] = 127.0
    out.append(t)
    # ties for Q4_0: m = -8 first, x + 8.5 on integers and halves
    t = rng.integers(-16, 17, (8, ROW)) / 2.0
    t[:, ::32] = -8.0
    out.append(t)
    out.append(np.full((2, ROW), -3.0))
    out.append(np.zeros((2, ROW)))
    h = rng.standard_normal((4, ROW))
    h[:, 5] = 1e30
    h[:, 40] = -3e5
    out.append(h)
    out.append(rng.integers(-100, 100, (4, ROW)) * 0.125)
    return np.concatenate(out).astype(np.float32)


def run(mode, name, data, row):
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in"), os.path.join(d, "out")
        data.tofile(src)
        subprocess.run([dump, mode, name, str(row), src, dst], check=True)
        return np.fromfile(dst, dtype=np.uint8)


x = rows()
failures = 0
for name, qtype in (("q8_0", T.Q8_0), ("q4_0", T.Q4_0), ("bf16", T.BF16),
                    ("f16", T.F16)):
    ours = run("quantize", name, x, ROW)
    ref = quants.quantize(x, qtype)
    ref = np.ascontiguousarray(ref).view(np.uint8).reshape(-1)
    # Where gguf-py (as ggml) stores an infinite binary16 -- a value for
    # F16, a block's scale for Q8_0 / Q4_0 -- we refuse the row
    # (TFM_ERR_OVERFLOW; quant_dump writes it as 0xFF bytes).
    per_row = ref.size // x.shape[0]
    step = {"q8_0": 34, "q4_0": 18, "f16": 2}.get(name)
    refused = np.zeros(x.shape[0], dtype=bool)
    if step:
        r2 = ref.reshape(x.shape[0], -1, step)
        half = r2[:, :, 0].astype(np.uint16) | (r2[:, :, 1].astype(np.uint16) << 8)
        refused = ((half & 0x7C00) == 0x7C00).any(axis=1)
    o2 = ours.reshape(x.shape[0], per_row)
    if not np.all(o2[refused] == 0xFF):
        print(f"{name}: rows with an infinite binary16 were not refused")
        failures += 1
        continue
    if name in ("q8_0", "q4_0", "f16") and not refused.any():
        print(f"{name}: the huge-value rows should overflow binary16")
        failures += 1
        continue
    keep = np.repeat(~refused, per_row)
    ours, ref_all = ours[keep], ref
    ref = ref[keep]
    if ours.shape != ref.shape or not np.array_equal(ours, ref):
        bad = np.flatnonzero(ours != ref) if ours.shape == ref.shape else []
        print(f"{name}: bytes differ from gguf-py ({len(bad)} bytes, first "
              f"at {bad[:5]})")
        failures += 1
        continue
    wide = run("widen", name, ref_all, ROW).view(np.float32)
    back = quants.dequantize(ref_all.reshape(x.shape[0], -1), qtype)
    back = np.asarray(back, dtype=np.float32).reshape(-1)
    same = wide.view(np.uint32) == back.view(np.uint32)
    both_nan = np.isnan(wide) & np.isnan(back)
    if not np.all(same | both_nan):
        print(f"{name}: widening differs from gguf-py's dequantize at "
              f"{np.flatnonzero(~(same | both_nan))[:5]}")
        failures += 1
        continue
    print(f"{name}: {x.shape[0]} rows of {ROW}: bytes and widening equal "
          f"to gguf-py")
sys.exit(1 if failures else 0)
