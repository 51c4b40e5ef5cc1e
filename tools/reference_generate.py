#!/usr/bin/python3
"""Reference (PyTorch) greedy generation from models/kjv-char.safetensors.

Rebuilds the module from the file's metadata, loads the weights with a strict
load_state_dict, and generates greedily: argmax of the last position's logits
(ties -> lowest id); once the sequence is longer than context_length only the
last context_length tokens are fed.  The whole window is recomputed at every
step (no KV cache), so the output is the ground truth for the C library.

    /usr/bin/python3 tools/reference_generate.py --prompt "In the beginning" \
        --max-tokens 200 [--dump-logits out.npy]

--dump-logits FILE saves a float32 array [N, V] (the last position's logits at
each step) to FILE, and the generated token ids (int32 [N]) to FILE with
".npy" replaced by ".ids.npy"; prompt ids go to ".prompt_ids.npy".
"""

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import load_safetensors  # noqa: E402
from train_charlm import CharTransformer  # noqa: E402

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                             "models", "kjv-char.safetensors")


def load_model(path):
    tensors, meta = load_safetensors(path)
    if meta.get("format") != "libtransformer" or meta.get("tfm.architecture") != "decoder_only":
        raise ValueError("not a libtransformer decoder_only model")
    expect = {"tfm.norm_first": "true", "tfm.activation": "gelu",
              "tfm.positional": "learned",
              "tfm.tied_embeddings": "true", "tfm.embedding_scale": "false",
              "tfm.tokenizer": "char"}
    for k, v in expect.items():
        if meta.get(k) != v:
            raise ValueError("unsupported %s=%r (expected %r)" % (k, meta.get(k), v))
    # nn.LayerNorm's eps 1e-5 as the float32 the model holds: PyTorch's
    # writer prints "1e-05", transformer-train "9.99999975e-06".
    eps = meta.get("tfm.layer_norm_eps")
    try:
        ok = np.float32(float(eps)) == np.float32(1e-5)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError("unsupported tfm.layer_norm_eps=%r (expected 1e-5)"
                         % (eps,))
    vocab = meta["tfm.vocab"]
    V = int(meta["tfm.vocab_size"])
    assert len(vocab) == V
    model = CharTransformer(V, int(meta["tfm.d_model"]), int(meta["tfm.n_heads"]),
                            int(meta["tfm.n_layers"]), int(meta["tfm.d_ff"]),
                            int(meta["tfm.context_length"]), dropout=0.0)
    model.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32))
                           for k, v in tensors.items()}, strict=True)
    model.eval()
    return model, vocab, meta


@torch.no_grad()
def generate(model, ids, n):
    """Greedy: returns (new_ids list, logits float32 [n, V])."""
    ctx = model.context_length
    seq = list(ids)
    out, all_logits = [], []
    for _ in range(n):
        window = torch.tensor([seq[-ctx:]], dtype=torch.long)
        last = model(window)[0, -1].float()
        all_logits.append(last.numpy().copy())
        nxt = int(torch.argmax(last).item())  # first maximal index = lowest id
        assert last[nxt] == last.max() and not (last[:nxt] == last[nxt]).any()
        seq.append(nxt)
        out.append(nxt)
    logits = np.stack(all_logits).astype(np.float32) if all_logits else \
        np.zeros((0, len(model.token_embedding.weight)), np.float32)
    return out, logits


def main():
    ap = argparse.ArgumentParser(description="greedy generation (PyTorch reference)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--prompt", default="In the beginning")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--dump-logits", metavar="FILE")
    args = ap.parse_args()

    torch.set_num_threads(1)
    model, vocab, _ = load_model(args.model)
    stoi = {c: i for i, c in enumerate(vocab)}
    bad = sorted(set(c for c in args.prompt if c not in stoi))
    if bad:
        sys.exit("prompt has characters outside the vocabulary: %r" % "".join(bad))
    if not args.prompt:
        sys.exit("prompt must not be empty")
    prompt_ids = [stoi[c] for c in args.prompt]
    new_ids, logits = generate(model, prompt_ids, args.max_tokens)
    print(args.prompt + "".join(vocab[i] for i in new_ids))
    if args.dump_logits:
        base = args.dump_logits[:-4] if args.dump_logits.endswith(".npy") else args.dump_logits
        np.save(args.dump_logits, logits)
        np.save(base + ".ids.npy", np.asarray(new_ids, dtype=np.int32))
        np.save(base + ".prompt_ids.npy", np.asarray(prompt_ids, dtype=np.int32))
        print("saved logits %s %s to %s (+ .ids.npy, .prompt_ids.npy)"
              % (logits.shape, logits.dtype, args.dump_logits), file=sys.stderr)


if __name__ == "__main__":
    main()
