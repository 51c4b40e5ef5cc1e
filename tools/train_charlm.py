#!/usr/bin/python3
"""Train the default libtransformer model: a character-level decoder-only
Transformer on the King James Bible, exported to models/kjv-char.safetensors.

Architecture (the C library re-implements exactly this forward pass):

    x      = token_embedding(idx) + position_embedding(arange(L))   # no scaling
    for layer in layers:                 # nn.TransformerEncoderLayer, norm_first,
        x  = layer(x, src_mask=causal)   # exact (erf) GELU, batch_first
    logits = norm(x) @ token_embedding.weight.T                      # tied, no bias

where causal[i, j] = -inf for j > i and 0 otherwise.  Each pre-norm layer is

    x = x + out_proj(MHA(norm1(x)))      # in_proj_weight rows: [Wq; Wk; Wv]
    x = x + linear2(gelu(linear1(norm2(x))))

Run:  /usr/bin/python3 tools/train_charlm.py        (defaults = shipped model)
"""

import argparse
import math
import os
import sys
import time

# Keep every BLAS/OpenMP pool to one thread *before* torch is imported.
_threads_env = "1"
for _i, _a in enumerate(sys.argv):
    if _a == "--threads" and _i + 1 < len(sys.argv):
        _threads_env = sys.argv[_i + 1]
    elif _a.startswith("--threads="):
        _threads_env = _a.split("=", 1)[1]
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = _threads_env

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import save_safetensors, state_dict_to_numpy, load_safetensors  # noqa: E402
import kjv_text  # noqa: E402

LN2 = math.log(2.0)


class CharTransformer(nn.Module):
    def __init__(self, vocab_size, d_model=128, n_heads=4, n_layers=4, d_ff=512,
                 context_length=128, dropout=0.0):
        super().__init__()
        self.context_length = context_length
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(context_length, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=dropout,
                                       activation="gelu", batch_first=True,
                                       norm_first=True)
            for _ in range(n_layers)])
        self.norm = nn.LayerNorm(d_model)  # eps 1e-5

    @staticmethod
    def causal_mask(L, device=None):
        return torch.triu(torch.full((L, L), float("-inf"), device=device), diagonal=1)

    def forward(self, idx):
        B, L = idx.shape
        assert L <= self.context_length
        pos = torch.arange(L, device=idx.device)
        x = self.token_embedding(idx) + self.position_embedding(pos)
        mask = self.causal_mask(L, idx.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        x = self.norm(x)
        return x @ self.token_embedding.weight.t()


def init_weights(model, n_layers):
    """GPT-2 style init: N(0, 0.02), residual output projections scaled by
    1/sqrt(2 n_layers); biases 0; LayerNorm 1/0."""
    std = 0.02
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif "norm" in name:
            nn.init.ones_(p)
        elif name.endswith("out_proj.weight") or name.endswith("linear2.weight"):
            nn.init.normal_(p, 0.0, std / math.sqrt(2 * n_layers))
        else:
            nn.init.normal_(p, 0.0, std)


class SplitMix64:
    """Steele, Lea and Flood 2014 (Vigna's splitmix64.c constants): the
    generator of libtransformer's tfm_rng, which transformer-train draws its
    batch offsets from."""

    M = (1 << 64) - 1

    def __init__(self, seed):
        self.state = seed & self.M

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & self.M
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self.M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self.M
        return z ^ (z >> 31)


def lr_at(step, steps, lr, warmup, min_ratio=0.1):
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def evaluate(model, data, n_windows, L):
    """Mean loss in bits/char over ``n_windows`` fixed, evenly spaced windows
    of L+1 characters (all L predicted positions of every window count)."""
    model.eval()
    starts = np.linspace(0, len(data) - L - 1, n_windows).astype(np.int64)
    total, count = 0.0, 0
    for i in range(0, n_windows, 50):
        s = starts[i:i + 50]
        w = torch.stack([data[j:j + L + 1] for j in s]).long()
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), w[:, 1:].reshape(-1),
                               reduction="sum")
        total += loss.item()
        count += w[:, 1:].numel()
    model.train()
    return total / count / LN2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--out", default="models/kjv-char.safetensors")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--n-layers", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--context-length", type=int, default=128)
    ap.add_argument("--eval-windows", type=int, default=200)
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--text", help="train on this UTF-8 file instead of the "
                    "King James text")
    ap.add_argument("--init", help="start from these weights (a model file, "
                    "e.g. the init.safetensors transformer-train writes)")
    ap.add_argument("--sampler", choices=("torch", "splitmix"), default="torch",
                    help="batch offsets from torch.randint (default) or, as "
                    "transformer-train draws them, floor(r * (n - L) / 2^64) "
                    "for SplitMix64 outputs r seeded with seed + 1")
    ap.add_argument("--log-file", help="append step,loss,lr of every step")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    t_start = time.time()

    if args.text:
        with open(args.text, encoding="utf-8") as f:
            text = f.read()
    else:
        text = kjv_text.kjv_text()
    train_text, val_text = kjv_text.split_text(text)
    vocab = kjv_text.vocabulary(text)
    stoi = {c: i for i, c in enumerate(vocab)}
    enc = lambda s: torch.tensor(np.array([stoi[c] for c in s], dtype=np.int64))
    train_data, val_data = enc(train_text), enc(val_text)
    V, L = len(vocab), args.context_length
    print("text %d chars (train %d, val %d), vocab %d: %r"
          % (len(text), len(train_data), len(val_data), V, "".join(vocab)), flush=True)

    model = CharTransformer(V, args.d_model, args.n_heads, args.n_layers, args.d_ff,
                            L, args.dropout)
    init_weights(model, args.n_layers)
    if args.init:
        tensors, _ = load_safetensors(args.init)
        model.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32))
                               for k, v in tensors.items()})
    n_params = sum(p.numel() for p in model.parameters())
    print("parameters: %d" % n_params, flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    splitmix = SplitMix64(args.seed + 1)
    log = open(args.log_file, "a") if args.log_file else None

    model.train()
    t_train = time.time()
    run_loss, run_n = 0.0, 0
    for step in range(args.steps):
        lr = lr_at(step, args.steps, args.lr, args.warmup)
        for g in opt.param_groups:
            g["lr"] = lr
        if args.sampler == "splitmix":
            ix = torch.tensor([(splitmix.next() * (len(train_data) - L)) >> 64
                               for _ in range(args.batch_size)])
        else:
            ix = torch.randint(0, len(train_data) - L - 1, (args.batch_size,),
                               generator=gen)
        w = torch.stack([train_data[i:i + L + 1] for i in ix.tolist()]).long()
        logits = model(w[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item()
        run_n += 1
        if log:
            log.write("%d,%.9g,%.9g\n" % (step + 1, loss.item(), lr))
            log.flush()
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            el = time.time() - t_train
            print("step %5d/%d  lr %.2e  train %.4f bpc  %.3f s/step  elapsed %.0f s"
                  % (step + 1, args.steps, lr, run_loss / run_n / LN2, el / (step + 1), el),
                  flush=True)
            run_loss, run_n = 0.0, 0
    train_secs = time.time() - t_train

    train_bpc = evaluate(model, train_data, args.eval_windows, L)
    val_bpc = evaluate(model, val_data, args.eval_windows, L)
    total_secs = time.time() - t_start
    print("final: train %.4f bpc, val %.4f bpc (%d windows of %d); training %.0f s, total %.0f s"
          % (train_bpc, val_bpc, args.eval_windows, L, train_secs, total_secs), flush=True)

    model.eval()
    tensors = state_dict_to_numpy(model)
    meta = {
        "format": "libtransformer",
        "tfm.architecture": "decoder_only",
        "tfm.vocab_size": str(V),
        "tfm.d_model": str(args.d_model),
        "tfm.n_heads": str(args.n_heads),
        "tfm.n_layers": str(args.n_layers),
        "tfm.d_ff": str(args.d_ff),
        "tfm.context_length": str(L),
        "tfm.norm_first": "true",
        "tfm.activation": "gelu",
        "tfm.layer_norm_eps": "1e-05",
        "tfm.positional": "learned",
        "tfm.tied_embeddings": "true",
        "tfm.embedding_scale": "false",
        "tfm.tokenizer": "char",
        "tfm.vocab": "".join(vocab),
        "tfm.train_steps": str(args.steps),
        "tfm.train_loss_bpc": "%.4f" % train_bpc,
        "tfm.val_loss_bpc": "%.4f" % val_bpc,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    nbytes = save_safetensors(tensors, args.out, meta, dtype="F32")
    back, bmeta = load_safetensors(args.out)
    assert bmeta == meta and sorted(back) == sorted(tensors)
    assert all(np.array_equal(back[k], tensors[k]) for k in tensors)
    print("wrote %s: %d bytes, %d tensors" % (args.out, nbytes, len(tensors)), flush=True)


if __name__ == "__main__":
    main()
