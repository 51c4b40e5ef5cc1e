#!/usr/bin/env python3
"""Reference cases for whole models: tiny models with random weights, their
logits computed by PyTorch in float64.

For each case NAME this writes into --out (default tests/models):
  NAME.safetensors      a libtransformer model file (weights + configuration)
  NAME.ref.safetensors  "ids" (or "src_ids"/"tgt_ids") as F32 values and the
                        expected "logits" [B, L, vocab_size]

The PyTorch side is built from nn.TransformerEncoderLayer /
nn.Transformer exactly as model.h describes the architectures, so the C
test (tests/test_model.c) checks the loader, the name mapping, the causal
full forward pass and the KV-cache decoding against an outside reference.

    /usr/bin/python3 tools/make_model_fixtures.py --out tests/models
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_safetensors import save_safetensors  # noqa: E402


def sinusoidal(L, d, base=10000.0):
    pos = torch.arange(L, dtype=torch.float64)[:, None]
    dim = torch.arange(d, dtype=torch.float64)[None, :]
    angle = pos / torch.pow(base, (dim // 2 * 2) / d)
    return torch.where(dim.long() % 2 == 0, torch.sin(angle), torch.cos(angle))


class LM(nn.Module):
    """Decoder-only (causal) or encoder-only (bidirectional) model."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg["d_model"]
        self.token_embedding = nn.Embedding(cfg["vocab_size"], d)
        if cfg["positional"] == "learned":
            self.position_embedding = nn.Embedding(cfg["context_length"], d)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(
                d, cfg["n_heads"], cfg["d_ff"], dropout=0.0,
                activation=cfg["activation"], batch_first=True,
                norm_first=cfg["norm_first"], layer_norm_eps=cfg["eps"])
            for _ in range(cfg["n_layers"])])
        self.norm = nn.LayerNorm(d, eps=cfg["eps"])
        if not cfg["tied"]:
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)

    def embed(self, ids):
        cfg = self.cfg
        x = self.token_embedding(ids)
        if cfg["scale"]:
            x = x * math.sqrt(cfg["d_model"])
        L = ids.shape[1]
        if cfg["positional"] == "learned":
            x = x + self.position_embedding(torch.arange(L))
        elif cfg["positional"] == "sinusoidal":
            x = x + sinusoidal(L, cfg["d_model"]).to(x.dtype)
        return x

    def head(self, h):
        w = (self.token_embedding.weight if self.cfg["tied"]
             else self.lm_head.weight)
        return h @ w.T

    def forward(self, ids):
        x = self.embed(ids)
        L = ids.shape[1]
        mask = None
        if self.cfg["arch"] == "decoder_only":
            mask = torch.triu(torch.full((L, L), float("-inf"),
                                         dtype=x.dtype), 1)
        for layer in self.layers:
            x = layer(x, src_mask=mask)
        return self.head(self.norm(x))


class Seq2Seq(LM):
    def __init__(self, cfg):
        nn.Module.__init__(self)
        self.cfg = cfg
        d = cfg["d_model"]
        self.token_embedding = nn.Embedding(cfg["vocab_size"], d)
        if cfg["positional"] == "learned":
            self.position_embedding = nn.Embedding(cfg["context_length"], d)
        self.transformer = nn.Transformer(
            d, cfg["n_heads"], cfg["n_encoder_layers"], cfg["n_decoder_layers"],
            cfg["d_ff"], dropout=0.0, activation=cfg["activation"],
            batch_first=True, norm_first=cfg["norm_first"],
            layer_norm_eps=cfg["eps"])
        if not cfg["tied"]:
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)

    def forward(self, src, tgt):
        L = tgt.shape[1]
        mask = torch.triu(torch.full((L, L), float("-inf"),
                                     dtype=torch.float64), 1)
        h = self.transformer(self.embed(src), self.embed(tgt), tgt_mask=mask)
        return self.head(h)


def metadata(cfg):
    m = {
        "format": "libtransformer", "tfm.architecture": cfg["arch"],
        "tfm.vocab_size": str(cfg["vocab_size"]),
        "tfm.d_model": str(cfg["d_model"]), "tfm.n_heads": str(cfg["n_heads"]),
        "tfm.d_ff": str(cfg["d_ff"]),
        "tfm.context_length": str(cfg["context_length"]),
        "tfm.norm_first": "true" if cfg["norm_first"] else "false",
        "tfm.activation": cfg["activation"],
        "tfm.layer_norm_eps": repr(cfg["eps"]),
        "tfm.positional": cfg["positional"],
        "tfm.tied_embeddings": "true" if cfg["tied"] else "false",
        "tfm.embedding_scale": "true" if cfg["scale"] else "false",
    }
    if cfg["arch"] == "encoder_decoder":
        m["tfm.n_encoder_layers"] = str(cfg["n_encoder_layers"])
        m["tfm.n_decoder_layers"] = str(cfg["n_decoder_layers"])
    else:
        m["tfm.n_layers"] = str(cfg["n_layers"])
    return m


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


CASES = {
    "decoder_learned_prenorm_gelu": dict(
        arch="decoder_only", vocab_size=23, d_model=16, n_heads=4, d_ff=32,
        n_layers=2, context_length=12, norm_first=True, activation="gelu",
        eps=1e-5, positional="learned", tied=True, scale=False, B=2, L=12),
    "decoder_sinusoidal_postnorm_relu_untied": dict(
        arch="decoder_only", vocab_size=19, d_model=12, n_heads=3, d_ff=24,
        n_layers=3, context_length=16, norm_first=False, activation="relu",
        eps=1e-6, positional="sinusoidal", tied=False, scale=True, B=1, L=10),
    "encoder_only_learned": dict(
        arch="encoder_only", vocab_size=17, d_model=8, n_heads=2, d_ff=16,
        n_layers=2, context_length=9, norm_first=True, activation="gelu",
        eps=1e-5, positional="learned", tied=True, scale=False, B=2, L=9),
    "encoder_decoder_sinusoidal": dict(
        arch="encoder_decoder", vocab_size=21, d_model=8, n_heads=2, d_ff=16,
        n_encoder_layers=2, n_decoder_layers=2, context_length=10,
        norm_first=False, activation="relu", eps=1e-5, positional="sinusoidal",
        tied=False, scale=True, B=2, L=6, S=8),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for i, (name, cfg) in enumerate(sorted(CASES.items())):
        torch.manual_seed(1000 + i)
        enc_dec = cfg["arch"] == "encoder_decoder"
        model = Seq2Seq(cfg) if enc_dec else LM(cfg)
        randomize(model, 2000 + i)
        model.train()  # no fast paths; dropout is 0
        weights = {k: v.detach().numpy().astype(np.float32)
                   for k, v in model.state_dict().items()}
        save_safetensors(weights,
                         os.path.join(args.out, name + ".safetensors"),
                         metadata(cfg))
        model = model.double()
        g = torch.Generator().manual_seed(3000 + i)
        V, B, L = cfg["vocab_size"], cfg["B"], cfg["L"]
        ref = {}
        with torch.no_grad():
            if enc_dec:
                src = torch.randint(0, V, (B, cfg["S"]), generator=g)
                tgt = torch.randint(0, V, (B, L), generator=g)
                logits = model(src, tgt)
                ref["src_ids"] = src.numpy().astype(np.float32)
                ref["tgt_ids"] = tgt.numpy().astype(np.float32)
            else:
                ids = torch.randint(0, V, (B, L), generator=g)
                logits = model(ids)
                ref["ids"] = ids.numpy().astype(np.float32)
        ref["logits"] = logits.numpy().astype(np.float32)
        save_safetensors(ref,
                         os.path.join(args.out, name + ".ref.safetensors"),
                         {"case": name})
        print("wrote", name)


if __name__ == "__main__":
    main()
