#!/usr/bin/python3
"""Bits per character of the shipped KJV model with its weights in 32, 16, 8
and 4 bits (models/README.md, "Weights in 16, 8 and 4 bits").

The model card's evaluation protocol (tools/train_charlm.py's evaluate,
transformer-train's): ``windows`` fixed windows of context + 1 characters
starting at ``numpy.linspace(0, n - context - 1, windows)`` (truncated) of
the split, every one of the context predicted positions counted; the mean
cross-entropy in nats divided by ln 2.  The cross-entropy is computed here in
float64 numpy from the model's float32 logits (log-sum-exp), not by the
library.  Each quantised model is the float32 file loaded and then
``model.quantize(dtype)`` (tfm_module_quantize).

Usage:  PYTHONPATH=<build>/bindings/python /usr/bin/python3 \\
            tools/kjv_quantized_bpc.py [--model FILE] [--windows 200]
prints a Markdown table (dtype, parameter bytes, train and validation bpc,
relative change of the validation bpc against float32).
"""

import argparse
import math
import os
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
DTYPES = ["float32", "bf16", "f16", "q8_0", "q4_0"]
NAMES = {"float32": "F32", "bf16": "BF16", "f16": "F16", "q8_0": "Q8_0",
         "q4_0": "Q4_0"}


def kjv_splits():
    """(train, validation) text of tools/kjv_text.py (needs Debian's
    bible-kjv)."""
    sys.path.insert(0, str(HERE))
    try:
        import kjv_text
    finally:
        sys.path.pop(0)
    return kjv_text.split_text(kjv_text.kjv_text())


def window_starts(n, context, windows):
    """numpy.linspace(0, n - context - 1, windows), truncated: the card's."""
    return np.linspace(0, n - context - 1, windows).astype(np.int64)


def bits_per_char(model, ids, context, windows, batch=50):
    """Mean cross-entropy (bits) of the next character over the windows of
    ids (int array of a split) at window_starts; float64 log-softmax."""
    starts = window_starts(len(ids), context, windows)
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        w = np.stack([ids[s:s + context + 1] for s in starts[i:i + batch]])
        logits = np.asarray(model.logits(w[:, :-1].astype(np.int32)),
                            np.float64)
        m = logits.max(axis=-1, keepdims=True)
        lse = m[..., 0] + np.log(np.exp(logits - m).sum(axis=-1))
        picked = np.take_along_axis(logits, w[:, 1:, None], axis=-1)[..., 0]
        total += float((lse - picked).sum())
        count += picked.size
    return total / count / math.log(2)


def encode(text, vocab):
    table = {c: i for i, c in enumerate(vocab)}
    return np.array([table[c] for c in text], np.int64)


def measure(path, windows, dtypes=DTYPES, splits=None, train=True):
    """[(dtype, parameter bytes, train bpc or None, validation bpc)]."""
    import transformer
    train_text, val_text = kjv_splits() if splits is None else splits
    # The card's vocabulary: the sorted unique characters of the whole text.
    vocab = "".join(sorted(set(train_text + val_text)))
    train_ids, val_ids = encode(train_text, vocab), encode(val_text, vocab)
    rows = []
    for dtype in dtypes:
        model = transformer.Model.load(path)
        model.eval()
        if dtype != "float32":
            model.quantize(dtype)
        context = model.config["context_length"]
        tr = (bits_per_char(model, train_ids, context, windows)
              if train else None)
        va = bits_per_char(model, val_ids, context, windows)
        rows.append((dtype, model.get_memory_footprint(), tr, va))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get(
        "TRANSFORMER_MODEL", str(HERE.parent / "models" /
                                 "kjv-char.safetensors")))
    ap.add_argument("--windows", type=int, default=200)
    args = ap.parse_args()
    rows = measure(args.model, args.windows)
    base = rows[0][3]
    print("| Weights | Parameter bytes | Train bpc | Validation bpc "
          "| Validation vs float32 |")
    print("|---|---:|---:|---:|---:|")
    for dtype, nbytes, tr, va in rows:
        print("| %s | %s | %.4f | %.4f | %+.3f %% |"
              % (NAMES[dtype], format(nbytes, ","), tr, va,
                 100 * (va - base) / base))


if __name__ == "__main__":
    main()
