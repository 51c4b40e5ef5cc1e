#!/usr/bin/env python3
"""PyTorch (float64) greedy generation with the shipped model, as a
reference for tests/test_model.c.

Writes --out (default tests/models/kjv_greedy.ref.safetensors) holding
"prompt_ids" [P], "ids" [N] (the greedy continuation) and "logits" [N, V]
(the last position's logits before each choice), all as F32.  Generation
feeds the last context_length tokens once the sequence is longer, as
tools/reference_generate.py does; float64 keeps the reference's own rounding
far below the 1e-5 tolerance.

    /usr/bin/python3 tools/make_generation_reference.py
"""
import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import save_safetensors  # noqa: E402
from reference_generate import DEFAULT_MODEL, generate, load_model  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompt", default="In the beginning")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--out", default=os.path.join(
        HERE, "..", "tests", "models", "kjv_greedy.ref.safetensors"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, vocab, _ = load_model(args.model)
    model = model.double()
    stoi = {c: i for i, c in enumerate(vocab)}
    prompt_ids = [stoi[c] for c in args.prompt]
    ids, logits = generate(model, prompt_ids, args.max_tokens)
    save_safetensors({
        "prompt_ids": np.asarray(prompt_ids, np.float32),
        "ids": np.asarray(ids, np.float32),
        "logits": np.asarray(logits, np.float32),
    }, args.out, {"prompt": args.prompt,
                  "text": "".join(vocab[i] for i in ids)})
    print(args.prompt + "".join(vocab[i] for i in ids))


if __name__ == "__main__":
    main()
